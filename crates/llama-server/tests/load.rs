//! A bounded loopback load test: 32 clients send 200 requests (streaming,
//! non-streaming, cancelled and malformed) to 4 slots. Every valid request
//! gets its complete answer, equal to the same request run alone (so none
//! is lost or mixed with another's tokens), and memory returns to its level
//! before the load.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::{get, post, request, start};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const PROMPTS: [&str; 6] = [
    "Once upon a time",
    "The cat",
    "Lily wanted to",
    "One day, Tom",
    "The sun was",
    "A big red ball",
];
const N_REQUESTS: usize = 200;
const N_CLIENTS: usize = 32;

fn completion(i: usize) -> Value {
    json!({"prompt": PROMPTS[i % PROMPTS.len()], "n_predict": 12 + (i % 3) as i64 * 4, "temperature": 0})
}

fn chat(i: usize) -> Value {
    json!({
        "messages": [{"role": "user", "content": PROMPTS[i % PROMPTS.len()]}],
        "max_tokens": 12 + (i % 3) as i64 * 4,
        "temperature": 0,
    })
}

fn stream_text(r: &common::Reply, field: &str) -> Option<String> {
    let ev = r.events();
    if ev.last().map(String::as_str) != Some("[DONE]") {
        return None;
    }
    let mut out = String::new();
    for e in &ev[..ev.len() - 1] {
        let v: Value = serde_json::from_str(e).ok()?;
        if let Some(t) = v["choices"]
            .get(0)
            .and_then(|c| c.pointer(field))
            .and_then(Value::as_str)
        {
            out.push_str(t);
        }
    }
    Some(out)
}

async fn run_one(
    addr: std::net::SocketAddr,
    i: usize,
    refs: &[(String, String)],
) -> Result<(), String> {
    let (want_completion, want_chat) = &refs[i % refs.len()];
    match i % 5 {
        0 => {
            let v = post(addr, "/completion", &completion(i)).await.json();
            (v["content"].as_str() == Some(want_completion))
                .then_some(())
                .ok_or(format!("{i}: {v}"))
        }
        1 => {
            let mut b = chat(i);
            b["stream"] = json!(true);
            let r = post(addr, "/v1/chat/completions", &b).await;
            let got = stream_text(&r, "/delta/content").ok_or(format!("{i}: incomplete stream"))?;
            (&got == want_chat)
                .then_some(())
                .ok_or(format!("{i}: {got:?} != {want_chat:?}"))
        }
        2 => {
            // Cancelled: read the first bytes of a stream, then hang up.
            let mut b = completion(i);
            b["stream"] = json!(true);
            b["n_predict"] = json!(200);
            let body = b.to_string();
            let mut s = tokio::net::TcpStream::connect(addr)
                .await
                .map_err(|e| e.to_string())?;
            let head = format!(
                "POST /completion HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            s.write_all(head.as_bytes())
                .await
                .map_err(|e| e.to_string())?;
            let mut buf = [0u8; 64];
            s.read(&mut buf).await.map_err(|e| e.to_string())?;
            Ok(())
        }
        3 => {
            let bodies: [&[u8]; 3] = [
                b"{\"prompt\": ",
                b"{\"messages\": [{\"role\": 1}]}",
                b"\xff\xfe",
            ];
            let path = if i % 2 == 0 {
                "/v1/chat/completions"
            } else {
                "/completion"
            };
            let r = request(addr, "POST", path, bodies[i % 3], "").await;
            (r.status == 400 && r.json()["error"]["code"] == 400)
                .then_some(())
                .ok_or(format!("{i}: {}", r.text()))
        }
        _ => {
            let mut b = completion(i);
            b["stream"] = json!(true);
            b["max_tokens"] = b["n_predict"].take();
            let r = post(addr, "/v1/completions", &b).await;
            let got = stream_text(&r, "/text").ok_or(format!("{i}: incomplete stream"))?;
            (&got == want_completion)
                .then_some(())
                .ok_or(format!("{i}: {got:?} != {want_completion:?}"))
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thirty_two_clients_two_hundred_requests() {
    let Some(srv) = start("stories260K.gguf", "-c 1024 -np 4 --metrics").await else {
        return;
    };
    let addr = srv.addr;
    // References, one request at a time; the lengths vary with i % 3, so
    // keep one per (prompt, length) pair by using i itself below.
    let mut refs = Vec::new();
    for i in 0..30 {
        let c = post(addr, "/completion", &completion(i)).await.json();
        let h = post(addr, "/v1/chat/completions", &chat(i)).await.json();
        refs.push((
            c["content"].as_str().unwrap().to_string(),
            h["choices"][0]["message"]["content"]
                .as_str()
                .unwrap()
                .to_string(),
        ));
    }
    let rss0 = common::rss_bytes();
    let refs = Arc::new(refs);
    let next = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = (0..N_CLIENTS)
        .map(|_| {
            let (next, refs) = (next.clone(), refs.clone());
            tokio::spawn(async move {
                let mut errors = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= N_REQUESTS {
                        return errors;
                    }
                    // refs has 30 entries: i % 30 has the same prompt (i % 6)
                    // and length (i % 3) as i.
                    if let Err(e) = run_one(addr, i, &refs).await {
                        errors.push(e);
                    }
                }
            })
        })
        .collect();
    let mut errors = Vec::new();
    for c in clients {
        errors.extend(c.await.unwrap());
    }
    assert!(
        errors.is_empty(),
        "{} failed:\n{}",
        errors.len(),
        errors.join("\n")
    );
    // Every slot is free again, nothing waits.
    let mut idle = false;
    for _ in 0..200 {
        let s = get(addr, "/slots").await.json();
        if s.as_array()
            .unwrap()
            .iter()
            .all(|s| s["is_processing"] == false)
        {
            idle = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(idle, "slots still busy after the load");
    let m = get(addr, "/metrics").await.text();
    assert!(m.contains("llamacpp:requests_deferred 0"), "{m}");
    // A fresh request runs as before.
    let v = post(addr, "/completion", &completion(0)).await.json();
    assert_eq!(v["content"].as_str().unwrap(), refs[0].0);
    if let (Some(a), Some(b)) = (rss0, common::rss_bytes()) {
        let grown = b.saturating_sub(a);
        assert!(
            grown < 32 << 20,
            "resident memory grew by {} KiB",
            grown >> 10
        );
    }
    srv.stop().await.unwrap();
}
