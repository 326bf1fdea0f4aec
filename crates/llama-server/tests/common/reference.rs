//! llama-completion's recorded runs (the reference files of llama's test
//! data) turned into what a server request must reply, and the text of a
//! streamed reply.

use serde_json::{json, Value};

use super::post;

/// One recorded greedy run: the prompt, the token budget, the text
/// generated after the echoed prompt, and whether an end-of-generation
/// token ended it.
pub struct Recorded {
    pub prompt: String,
    pub n_predict: u64,
    pub generated: String,
    pub eog: bool,
}

/// Reads a case of a reference file (`prompt`, `n_predict`, `stdout`).
pub fn recorded(case: &Value) -> Recorded {
    let stdout = case["stdout"].as_str().unwrap();
    let s = stdout.strip_suffix("\n\n").unwrap();
    let (text, eog) = match s.strip_suffix(" [end of text]\n") {
        Some(t) => (t, true),
        None => (s, false),
    };
    let prompt = case["prompt"].as_str().unwrap().to_string();
    // llama-completion echoes the prompt (SPM adds a space before it).
    let generated = text
        .strip_prefix(&format!(" {prompt}"))
        .expect("the prompt echoed first")
        .to_string();
    Recorded {
        prompt,
        n_predict: case["n_predict"].as_u64().unwrap(),
        generated,
        eog,
    }
}

/// The text of a streamed reply: `pick` applied to every event before the
/// final `[DONE]`, which must be there.
pub fn streamed_text(events: &[String], pick: impl Fn(&Value) -> Option<String>) -> String {
    assert_eq!(events.last().unwrap(), "[DONE]");
    events[..events.len() - 1]
        .iter()
        .filter_map(|e| pick(&serde_json::from_str(e).unwrap()))
        .collect()
}

/// Sends a recorded run's prompt with `field: value` (a grammar, a schema)
/// to `/completion` and, streamed, to `/v1/completions`: both must give
/// the recorded text, and the first the recorded stop.
pub async fn assert_recorded_reply(
    addr: std::net::SocketAddr,
    field: &str,
    value: &Value,
    run: (&str, u64, &str, bool),
) {
    let (prompt, n, want, eog) = run;
    let mut body = json!({"prompt": prompt, "n_predict": n, "temperature": 0});
    body[field] = value.clone();
    let r = post(addr, "/completion", &body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["content"].as_str().unwrap(), want, "{value}");
    assert_eq!(v["stop_type"], if eog { "eos" } else { "limit" }, "{value}");

    let mut body = json!({"prompt": prompt, "max_tokens": n, "temperature": 0, "stream": true});
    body[field] = value.clone();
    let ev = post(addr, "/v1/completions", &body).await.events();
    let text = streamed_text(&ev, |c| {
        c["choices"].get(0)?["text"].as_str().map(String::from)
    });
    assert_eq!(text, want, "{value}");
}
