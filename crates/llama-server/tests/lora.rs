//! LoRA adapters in the server: `/lora-adapters`, a request's `lora` field
//! and parallel slots with different adapters, against llama.cpp's
//! outputs for the adapter fixture over stories260K.

mod common;

use common::{get, post, start};
use serde_json::{json, Value};

/// The fixture runs' generated text by run name (base, lora,
/// lora_scaled_0.5).
fn want(dir: &std::path::Path, run: &str) -> String {
    let text = std::fs::read_to_string(dir.join("expected/tiny-lora-stories260K.json")).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    let rec = v["greedy"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["run"] == run)
        .unwrap_or_else(|| panic!("no run {run}"));
    rec["generated_text"].as_str().unwrap().to_string()
}

fn body(lora: Option<Value>) -> Value {
    let mut b = json!({"prompt": "Once upon a time", "n_predict": 32, "temperature": 0});
    if let Some(l) = lora {
        b["lora"] = l;
    }
    b
}

fn error_param(r: &common::Reply) -> String {
    let v = r.json();
    assert!(v["error"]["message"].is_string(), "{v}");
    v["error"]["param"].as_str().unwrap_or_default().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_choose_their_adapters() {
    let Some(dir) = common::fixtures() else {
        return;
    };
    let adapter = dir.join("adapters/tiny-lora-stories260K.gguf");
    let flags = format!(
        "-c 1024 -np 2 --lora {} --lora-init-without-apply",
        adapter.display()
    );
    let Some(srv) = start("stories260K.gguf", &flags).await else {
        return;
    };
    let a = srv.addr;
    let list = get(a, "/lora-adapters").await;
    assert_eq!(list.status, 200, "{}", list.text());
    let list = list.json();
    assert_eq!(list[0]["id"], 0);
    assert_eq!(list[0]["scale"], 0.0);
    assert!(list[0]["path"]
        .as_str()
        .unwrap()
        .ends_with("tiny-lora-stories260K.gguf"));

    // Two requests at once, one with the adapter and one without: each
    // gets what llama.cpp gives with and without --lora.
    let with = body(Some(json!([{"id": 0, "scale": 1}])));
    let without = body(None);
    for _ in 0..2 {
        let h1 = tokio::spawn({
            let b = with.clone();
            async move { post(a, "/completion", &b).await }
        });
        let h2 = tokio::spawn({
            let b = without.clone();
            async move { post(a, "/completion", &b).await }
        });
        let (r1, r2) = (h1.await.unwrap(), h2.await.unwrap());
        assert_eq!(r1.status, 200, "{}", r1.text());
        assert_eq!(r2.status, 200, "{}", r2.text());
        assert_eq!(r1.json()["content"], want(&dir, "lora"), "with the adapter");
        assert_eq!(r2.json()["content"], want(&dir, "base"), "without it");
    }
    let r = post(
        a,
        "/completion",
        &body(Some(json!([{"id": 0, "scale": 0.5}]))),
    )
    .await;
    assert_eq!(r.json()["content"], want(&dir, "lora_scaled_0.5"));

    // Bad `lora` fields are 400s naming the field; the server goes on.
    for bad in [
        json!([{"id": 1, "scale": 1}]),
        json!([{"id": 0, "scale": "high"}]),
        json!([{"id": -1, "scale": 1}]),
        json!({"id": 0, "scale": 1}),
        json!("all"),
    ] {
        let r = post(a, "/completion", &body(Some(bad.clone()))).await;
        assert_eq!(r.status, 400, "{bad}: {}", r.text());
        assert_eq!(error_param(&r), "lora", "{bad}");
    }

    // Global scales: POST sets them, requests without `lora` take them.
    let r = post(a, "/lora-adapters", &json!([{"id": 0, "scale": 0.5}])).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(get(a, "/lora-adapters").await.json()[0]["scale"], 0.5);
    let r = post(a, "/completion", &body(None)).await;
    assert_eq!(r.json()["content"], want(&dir, "lora_scaled_0.5"));
    for bad in [
        json!({"id": 0}),
        json!([{"id": 3, "scale": 1}]),
        json!([{"id": 0}]),
    ] {
        let r = post(a, "/lora-adapters", &bad).await;
        assert_eq!(r.status, 400, "{bad}: {}", r.text());
    }
    // Left out: back to 0.
    let r = post(a, "/lora-adapters", &json!([])).await;
    assert_eq!(r.json()[0]["scale"], 0.0);
    let r = post(a, "/completion", &body(None)).await;
    assert_eq!(r.json()["content"], want(&dir, "base"));
    srv.stop().await.unwrap();
}

/// An adapter that does not fit the model stops the server from starting
/// with an error that names the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adapter_of_another_model_is_refused() {
    let Some(dir) = common::fixtures() else {
        return;
    };
    let adapter = dir.join("adapters/tiny-lora-stories260K.gguf");
    let argv = vec![
        "-m".to_string(),
        dir.join("models/tiny-f32.gguf").display().to_string(),
        "--log-disable".into(),
        "--lora".into(),
        adapter.display().to_string(),
    ];
    let args = llama_server::args::ServerArgs::parse(argv).expect("flags");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = llama_server::Server::start(&args, listener).unwrap();
    let err = server
        .wait_ready()
        .await
        .expect_err("the adapter does not fit");
    assert!(
        err.to_string().contains("tiny-lora-stories260K.gguf"),
        "{err}"
    );
    server.stop().await.ok();
}
