//! `n` > 1: several choices of one prompt on the OpenAI endpoints, each
//! sampled apart (a fixed seed gives choice i the seed + i, so the first
//! choice is the reply of `n` = 1).

mod common;

use common::{post, start};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_choices_on_chat_and_completions() {
    let Some(srv) = start("stories260K.gguf", "-c 1024 -np 2").await else {
        return;
    };
    for (path, body) in [
        (
            "/v1/completions",
            json!({"prompt": "Once upon a time", "max_tokens": 12, "temperature": 1.0, "seed": 7}),
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 12, "temperature": 1.0, "seed": 7}),
        ),
    ] {
        let text = |c: &serde_json::Value| {
            if path == "/v1/completions" {
                c["text"].as_str().unwrap().to_string()
            } else {
                c["message"]["content"].as_str().unwrap().to_string()
            }
        };
        let one = post(srv.addr, path, &body).await.json();
        let mut b3 = body.clone();
        b3["n"] = json!(3);
        let r = post(srv.addr, path, &b3).await;
        assert_eq!(r.status, 200, "{}", r.text());
        let v = r.json();
        let choices = v["choices"].as_array().unwrap();
        assert_eq!(choices.len(), 3, "{v}");
        for (i, c) in choices.iter().enumerate() {
            assert_eq!(c["index"], i, "{v}");
            assert!(c["finish_reason"].is_string());
        }
        assert_eq!(text(&choices[0]), text(&one["choices"][0]), "{path}");
        assert!(
            text(&choices[0]) != text(&choices[1]) || text(&choices[1]) != text(&choices[2]),
            "{path}: three equal choices: {v}"
        );
        let total: u64 = choices.len() as u64;
        assert!(v["usage"]["completion_tokens"].as_u64().unwrap() >= total);
        assert_eq!(
            v["usage"]["total_tokens"].as_u64().unwrap(),
            v["usage"]["prompt_tokens"].as_u64().unwrap()
                + v["usage"]["completion_tokens"].as_u64().unwrap()
        );
        assert_eq!(v["usage"]["prompt_tokens"], one["usage"]["prompt_tokens"]);

        // Streamed: each choice's pieces under its index add up to it.
        let mut sb = b3.clone();
        sb["stream"] = json!(true);
        sb["stream_options"] = json!({"include_usage": true});
        let ev = post(srv.addr, path, &sb).await.events();
        assert_eq!(ev.last().unwrap(), "[DONE]");
        assert_eq!(ev.iter().filter(|e| *e == "[DONE]").count(), 1);
        let mut texts = vec![String::new(); 3];
        let mut finished = [false; 3];
        let mut usage = None;
        for e in &ev[..ev.len() - 1] {
            let c: serde_json::Value = serde_json::from_str(e).unwrap();
            if let Some(u) = c.get("usage") {
                usage = Some(u.clone());
            }
            for ch in c["choices"].as_array().unwrap() {
                let i = ch["index"].as_u64().unwrap() as usize;
                let piece = if path == "/v1/completions" {
                    &ch["text"]
                } else {
                    &ch["delta"]["content"]
                };
                texts[i] += piece.as_str().unwrap_or_default();
                finished[i] |= ch["finish_reason"].is_string();
            }
        }
        assert_eq!(finished, [true; 3]);
        for (i, c) in choices.iter().enumerate() {
            assert_eq!(texts[i], text(c), "{path} choice {i}");
        }
        assert_eq!(
            usage.unwrap()["completion_tokens"],
            v["usage"]["completion_tokens"]
        );
    }
    srv.stop().await.unwrap();
}
