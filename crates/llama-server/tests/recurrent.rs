//! Recurrent (Mamba-2, RWKV-6, RWKV-7) and hybrid (Granite 4, LFM2,
//! Qwen3.5) models behind 4 slots: 8 greedy requests sent at once each get
//! the answer they get alone, and a slot that finished leaves no state
//! behind for the next request.

mod common;

use common::{post, start};
use serde_json::{json, Value};

const PROMPTS: [&str; 8] = [
    "Once upon a time",
    "The cat",
    "Lily wanted to",
    "One day, Tom",
    "The sun was",
    "A big red ball",
    "She",
    "They went to the park and",
];

fn body(i: usize) -> Value {
    json!({"prompt": PROMPTS[i], "n_predict": 10 + (i % 3) as i64 * 3, "temperature": 0})
}

async fn parallel_equals_solo(model: &str) {
    let Some(srv) = start(model, "-c 1024 -np 4").await else {
        return;
    };
    let addr = srv.addr;
    let mut solo = Vec::new();
    for i in 0..PROMPTS.len() {
        let v = post(addr, "/completion", &body(i)).await.json();
        let text = v["content"].as_str().expect("content").to_string();
        assert!(!text.is_empty(), "{model}: request {i} generated nothing");
        solo.push(text);
    }
    let tasks: Vec<_> = (0..PROMPTS.len())
        .map(|i| tokio::spawn(async move { post(addr, "/completion", &body(i)).await.json() }))
        .collect();
    for (i, t) in tasks.into_iter().enumerate() {
        let v = t.await.expect("task");
        assert_eq!(
            v["content"].as_str(),
            Some(solo[i].as_str()),
            "{model}: request {i} in parallel differs from its solo run"
        );
    }
    // Every slot has served a request; a new one starts from nothing.
    for i in [0, 5] {
        let v = post(addr, "/completion", &body(i)).await.json();
        assert_eq!(
            v["content"].as_str(),
            Some(solo[i].as_str()),
            "{model}: again {i}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mamba2_parallel_requests() {
    parallel_equals_solo("tiny-mamba2-f32.gguf").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn granitehybrid_parallel_requests() {
    parallel_equals_solo("tiny-granitehybrid-f32.gguf").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lfm2_parallel_requests() {
    parallel_equals_solo("tiny-lfm2-f32.gguf").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rwkv7_parallel_requests() {
    parallel_equals_solo("tiny-rwkv7-f32.gguf").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rwkv6_parallel_requests() {
    parallel_equals_solo("tiny-rwkv6-f32.gguf").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn qwen35_parallel_requests() {
    parallel_equals_solo("tiny-qwen35-f32.gguf").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn qwen35moe_parallel_requests() {
    parallel_equals_solo("tiny-qwen35moe-f32.gguf").await;
}
