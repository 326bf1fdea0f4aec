//! JSON-schema output: `json_schema` on the completion endpoints gives
//! llama.cpp's greedy output (the cases of llama's
//! `tests/data/json_schema/outputs.json` on stories260K), streamed and not;
//! chat's `response_format` constrains replies to JSON that fits the
//! schema; a schema the converter cannot honour is a 400 naming the field
//! and the keyword, and the server goes on.

mod common;

use common::reference::{assert_recorded_reply, recorded, streamed_text};
use common::{post, start};
use serde_json::{json, Value};

/// (schema, prompt, n_predict, generated text, whether an end-of-generation
/// token ended it) for the reference cases.
fn cases() -> Vec<(Value, String, u64, String, bool)> {
    let data =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../llama/tests/data/json_schema");
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(data.join("outputs.json")).unwrap()).unwrap();
    let mut out = Vec::new();
    for c in doc["cases"].as_array().unwrap() {
        assert_eq!(c["model"], "repo:stories260K.gguf");
        let schema: Value = serde_json::from_str(
            &std::fs::read_to_string(data.join(c["schema"].as_str().unwrap())).unwrap(),
        )
        .unwrap();
        let r = recorded(c);
        out.push((schema, r.prompt, r.n_predict, r.generated, r.eog));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_under_a_schema_equal_llama_cpp() {
    let Some(srv) = start("stories260K.gguf", "-c 512").await else {
        return;
    };
    let a = srv.addr;
    let cases = cases();
    assert!(cases.len() >= 10);
    for (schema, prompt, n, want, eog) in &cases {
        assert_recorded_reply(a, "json_schema", schema, (prompt, *n, want, *eog)).await;
    }
    srv.stop().await.unwrap();
}

/// A schema whose every value is short, so that a greedy reply ends.
fn answer_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "mood": {"enum": ["happy", "sad"]},
            "name": {"type": "string", "maxLength": 12},
            "age": {"type": "integer", "minimum": 1, "maximum": 99},
            "pets": {"type": "array", "items": {"type": "boolean"}, "maxItems": 2}
        },
        "required": ["mood", "name", "age", "pets"],
        "additionalProperties": false
    })
}

fn check_answer(content: &str) {
    let v: Value = serde_json::from_str(content).unwrap_or_else(|e| panic!("{e}: {content:?}"));
    let o = v.as_object().expect("an object");
    assert_eq!(o.len(), 4, "{content}");
    assert!(
        ["happy", "sad"].contains(&o["mood"].as_str().unwrap()),
        "{content}"
    );
    assert!(
        o["name"].as_str().unwrap().chars().count() <= 12,
        "{content}"
    );
    assert!((1..=99).contains(&o["age"].as_i64().unwrap()), "{content}");
    let pets = o["pets"].as_array().unwrap();
    assert!(
        pets.len() <= 2 && pets.iter().all(Value::is_boolean),
        "{content}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_response_formats_give_json_that_fits_the_schema() {
    let Some(srv) = start("stories260K.gguf", "-c 1024 -np 2").await else {
        return;
    };
    let a = srv.addr;
    let messages = json!([{"role": "user", "content": "Tell me about the little dog."}]);
    for format in [
        json!({"type": "json_schema", "json_schema": {"name": "answer", "strict": true, "schema": answer_schema()}}),
        json!({"type": "json_object", "schema": answer_schema()}),
    ] {
        let body = json!({"messages": messages, "max_tokens": 400, "temperature": 0,
                          "response_format": format});
        let r = post(a, "/v1/chat/completions", &body).await;
        assert_eq!(r.status, 200, "{}", r.text());
        let v = r.json();
        let content = v["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .to_string();
        check_answer(&content);
        assert_eq!(v["choices"][0]["finish_reason"], "stop", "{content}");

        let mut sbody = body.clone();
        sbody["stream"] = json!(true);
        let ev = post(a, "/v1/chat/completions", &sbody).await.events();
        let text = streamed_text(&ev, |c| {
            c["choices"].get(0)?["delta"]["content"]
                .as_str()
                .map(String::from)
        });
        assert_eq!(text, content);
    }
    // `json_schema` on chat, and `text` asking for nothing.
    let body = json!({"messages": messages, "max_tokens": 400, "temperature": 0,
                      "json_schema": answer_schema(), "response_format": {"type": "text"}});
    let v = post(a, "/v1/chat/completions", &body).await.json();
    check_answer(v["choices"][0]["message"]["content"].as_str().unwrap());
    // An empty schema is any object: the reply starts as one.
    let body = json!({"messages": messages, "max_tokens": 8, "temperature": 0,
                      "response_format": {"type": "json_object"}});
    let v = post(a, "/v1/chat/completions", &body).await.json();
    let content = v["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(content.starts_with('{'), "{content:?}");
    srv.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemas_that_cannot_be_honoured_are_400_and_the_server_goes_on() {
    let Some(srv) = start("stories260K.gguf", "-c 512").await else {
        return;
    };
    let a = srv.addr;
    let user = json!([{"role": "user", "content": "x"}]);
    for (path, body, field, keyword) in [
        (
            "/completion",
            json!({"prompt": "x", "json_schema": {"type": "number", "multipleOf": 3}}),
            "json_schema",
            "multipleOf",
        ),
        (
            "/v1/completions",
            json!({"prompt": "x", "stream": true, "json_schema": {"type": "string", "format": "email"}}),
            "json_schema",
            "format",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": user, "stream": true, "response_format": {"type": "json_schema",
                   "json_schema": {"name": "x", "schema": {"type": "object", "properties": {
                       "a": {"type": "array", "uniqueItems": true}}}}}}),
            "response_format",
            "uniqueItems",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": user, "response_format": {"type": "json_object",
                   "schema": {"type": "string", "pattern": "^\\d+$"}}}),
            "response_format",
            "pattern",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": user, "json_schema": {"$ref": "#/$defs/Nope"}}),
            "json_schema",
            "$ref",
        ),
    ] {
        let r = post(a, path, &body).await;
        assert_eq!(r.status, 400, "{path} {body}: {}", r.text());
        let e = r.json();
        assert_eq!(e["error"]["param"], field, "{e}");
        let msg = e["error"]["message"].as_str().unwrap();
        assert!(msg.contains(keyword), "{msg}");
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
