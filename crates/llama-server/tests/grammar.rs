//! The `grammar` field: greedy output under a grammar equals llama.cpp's
//! (the cases of llama's `tests/data/grammar/reference.json` on
//! stories260K), streamed and not, on every generation endpoint; a grammar
//! that does not parse is a 400 naming the field, and the server goes on.

mod common;

use common::reference::{assert_recorded_reply, recorded, streamed_text};
use common::{post, start};
use serde_json::{json, Value};

/// The reference cases on stories260K whose grammar is in llama's test data
/// (those of the fixtures are read from there), as (grammar text, prompt,
/// n_predict, generated text, whether an end-of-generation token ended it).
fn cases() -> Vec<(String, String, u64, String, bool)> {
    let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../llama/tests/data/grammar");
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(data.join("reference.json")).unwrap())
            .unwrap();
    let fixtures = common::fixtures();
    let mut out = Vec::new();
    for c in doc["cases"].as_array().unwrap() {
        if c["model"] != "repo:stories260K.gguf" {
            continue;
        }
        let (kind, file) = c["grammar"].as_str().unwrap().split_once(':').unwrap();
        let path = match (kind, &fixtures) {
            ("data", _) => data.join(file),
            ("fixtures", Some(f)) => f.join("grammars").join(file),
            _ => continue,
        };
        let grammar = std::fs::read_to_string(path).unwrap();
        let r = recorded(c);
        out.push((grammar, r.prompt, r.n_predict, r.generated, r.eog));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_under_a_grammar_equal_llama_cpp() {
    let Some(srv) = start("stories260K.gguf", "-c 512").await else {
        return;
    };
    let a = srv.addr;
    let cases = cases();
    assert!(cases.len() >= 5);
    for (grammar, prompt, n, want, eog) in &cases {
        assert_recorded_reply(a, "grammar", &json!(grammar), (prompt, *n, want, *eog)).await;
    }
    srv.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_replies_follow_the_grammar_and_bad_grammars_are_400() {
    let Some(srv) = start("stories260K.gguf", "-c 512 -np 2").await else {
        return;
    };
    let a = srv.addr;
    let grammar = "root ::= (\"yes\" | \"no\") \", \" [a-z]{3,12} \".\"";
    let body = json!({"messages": [{"role": "user", "content": "Is the sky blue?"}],
                      "max_tokens": 40, "temperature": 0, "grammar": grammar});
    let v = post(a, "/v1/chat/completions", &body).await.json();
    let content = v["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string();
    let (head, rest) = content.split_once(", ").expect("a reply of the grammar");
    assert!(head == "yes" || head == "no", "{content}");
    let word = rest.strip_suffix('.').expect("ends with a period");
    assert!((3..=12).contains(&word.len()), "{content}");
    assert!(word.bytes().all(|b| b.is_ascii_lowercase()), "{content}");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");

    let mut sbody = body.clone();
    sbody["stream"] = json!(true);
    let ev = post(a, "/v1/chat/completions", &sbody).await.events();
    let text = streamed_text(&ev, |c| {
        c["choices"].get(0)?["delta"]["content"]
            .as_str()
            .map(String::from)
    });
    assert_eq!(text, content);

    // A grammar that does not parse: 400 naming the field, with the
    // parser's line and column; the server goes on serving.
    for (path, body) in [
        (
            "/completion",
            json!({"prompt": "x", "grammar": "root ::= \"a\"\nx ::= [b"}),
        ),
        (
            "/v1/completions",
            json!({"prompt": "x", "grammar": "root ::= \"a\"\nx ::= [b"}),
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "x"}], "grammar": "root ::= \"a\"\nx ::= [b", "stream": true}),
        ),
    ] {
        let r = post(a, path, &body).await;
        assert_eq!(r.status, 400, "{path}: {}", r.text());
        let e = r.json();
        assert_eq!(e["error"]["param"], "grammar", "{e}");
        let msg = e["error"]["message"].as_str().unwrap();
        assert!(msg.contains("line 2, column 7"), "{msg}");
    }
    for g in ["root ::= missing", "item ::= \"a\"", "root ::= root \"a\""] {
        let r = post(a, "/completion", &json!({"prompt": "x", "grammar": g})).await;
        assert_eq!(r.status, 400, "{g}: {}", r.text());
    }
    let r = post(
        a,
        "/completion",
        &json!({"prompt": "Once", "n_predict": 4, "temperature": 0}),
    )
    .await;
    assert_eq!(r.status, 200);
    srv.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_servers_grammar_is_the_default() {
    let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../llama/tests/data/grammar");
    let file = data.join("repeat.gbnf");
    let flags = format!("-c 512 --grammar-file {}", file.display());
    let Some(srv) = start("stories260K.gguf", &flags).await else {
        return;
    };
    let text = std::fs::read_to_string(&file).unwrap();
    let (_, _, _, want, _) = cases()
        .into_iter()
        .find(|c| c.0 == text && c.1 == "Once upon a time")
        .expect("the repeat case");
    let body = json!({"prompt": "Once upon a time", "n_predict": 48, "temperature": 0});
    let v = post(srv.addr, "/completion", &body).await.json();
    assert_eq!(v["content"].as_str().unwrap(), want);
    // An empty grammar in the request turns it off.
    let mut body = body;
    body["grammar"] = json!("");
    let v = post(srv.addr, "/completion", &body).await.json();
    assert_ne!(v["content"].as_str().unwrap(), want);
    srv.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lazy_grammars_start_at_their_trigger() {
    let Some(srv) = start("stories260K.gguf", "-c 512").await else {
        return;
    };
    let a = srv.addr;
    let plain = post(
        a,
        "/completion",
        &json!({"prompt": "Once upon a time", "n_predict": 40, "temperature": 0}),
    )
    .await
    .json()["content"]
        .as_str()
        .unwrap()
        .to_string();
    let at = plain.find("Lily").expect("the story names Lily") + "Lily".len();
    assert!(plain[at..].starts_with('.'), "{plain}");
    // Free text until "Lily", then the grammar: letters and one period,
    // then nothing more.
    for trigger in [
        json!({"type": 1, "value": "Lily"}),
        json!({"type": 2, "value": "named (Lily)"}),
        json!({"type": 3, "value": "[\\s\\S]*?(Lily)[\\s\\S]*"}),
    ] {
        let body = json!({"prompt": "Once upon a time", "n_predict": 40, "temperature": 0,
                          "grammar": "root ::= \"Lily\" [a-z ]* \".\"", "grammar_lazy": true,
                          "grammar_triggers": [trigger]});
        let v = post(a, "/completion", &body).await.json();
        assert_eq!(v["content"].as_str().unwrap(), &plain[..=at], "{trigger}");
        assert_eq!(v["stop_type"], "eos", "{trigger}");
    }
    for (triggers, lazy) in [
        (json!([]), true),
        (json!([{"type": 7, "value": "x"}]), true),
        (json!([{"type": 0, "value": "x"}]), true),
        (json!([{"type": 2, "value": "("}]), true),
        (json!("Lily"), false),
    ] {
        let body = json!({"prompt": "x", "grammar": "root ::= \"a\"", "grammar_lazy": lazy,
                          "grammar_triggers": triggers});
        let r = post(a, "/completion", &body).await;
        assert_eq!(r.status, 400, "{triggers}: {}", r.text());
        assert_eq!(r.json()["error"]["param"], "grammar_triggers", "{triggers}");
    }
    srv.stop().await.unwrap();
}
