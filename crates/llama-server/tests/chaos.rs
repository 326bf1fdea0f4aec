//! llama-server used as a hostile crowd would (loopback, bounded): 200
//! connections at once that send slowly, read slowly, vanish mid-stream
//! or send garbage; clients gone mid-stream (their slot is free at once);
//! bodies of 10 MiB and more (413); invalid UTF-8 (400); `max_tokens` far
//! past the context; thousands of requests in a row with the resident
//! memory flat. The tests run one at a time (the memory one measures this
//! process, which holds the server).

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::{get, parse_reply, post, request, rss_bytes, start, Reply};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Mutex;
use tokio::time::{sleep, timeout};

/// One test at a time.
static SERIAL: Mutex<()> = Mutex::const_new(());

const MODEL: &str = "stories260K.gguf";

/// A request head for `body_len` bytes (`None`: chunked).
fn head(path: &str, body_len: Option<usize>) -> String {
    let length = match body_len {
        Some(n) => format!("Content-Length: {n}\r\n"),
        None => "Transfer-Encoding: chunked\r\n".into(),
    };
    format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n{length}\r\n"
    )
}

/// Sends `parts` (written with `gap` between them, errors ignored: the
/// server may answer and close first) while reading the reply.
async fn send_parts(addr: SocketAddr, parts: Vec<Vec<u8>>, gap: Duration) -> Option<Reply> {
    let s = TcpStream::connect(addr).await.ok()?;
    let (mut r, mut w) = s.into_split();
    let writer = tokio::spawn(async move {
        for p in parts {
            if w.write_all(&p).await.is_err() {
                return;
            }
            if !gap.is_zero() {
                sleep(gap).await;
            }
        }
        // Keep the write half open until the reader is done.
        sleep(Duration::from_secs(30)).await;
    });
    let mut raw = Vec::new();
    let _ = timeout(Duration::from_secs(60), r.read_to_end(&mut raw)).await;
    writer.abort();
    (raw.windows(4).any(|w| w == b"\r\n\r\n")).then(|| parse_reply(&raw))
}

fn body(v: &Value) -> Vec<u8> {
    v.to_string().into_bytes()
}

/// Waits until no slot is processing.
async fn slots_idle(addr: SocketAddr, within: Duration) {
    let t0 = Instant::now();
    loop {
        let slots = get(addr, "/slots").await.json();
        if slots
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["is_processing"] == false)
        {
            return;
        }
        assert!(t0.elapsed() < within, "slots still busy: {slots}");
        sleep(Duration::from_millis(20)).await;
    }
}

/// A short greedy completion, answered within `within`.
async fn served_at_once(addr: SocketAddr, within: Duration) {
    let t0 = Instant::now();
    let r = timeout(
        within,
        post(
            addr,
            "/completion",
            &json!({"prompt": "Once upon", "n_predict": 4, "temperature": 0}),
        ),
    )
    .await
    .expect("a request after the crowd was not served in time");
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(t0.elapsed() < within);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_slow_broken_and_hostile_connections() {
    let _serial = SERIAL.lock().await;
    let Some(srv) = start(MODEL, "-c 2048 -np 4 -to 10").await else {
        return;
    };
    let addr = srv.addr;
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..200usize {
        tasks.push(tokio::spawn(async move {
            match i % 5 {
                // A slow sender: the body in 8 pieces 25 ms apart.
                0 => {
                    let b = body(&json!({"prompt": "Once upon a time", "n_predict": 6}));
                    let mut parts = vec![head("/completion", Some(b.len())).into_bytes()];
                    parts.extend(b.chunks(b.len().div_ceil(8)).map(<[u8]>::to_vec));
                    let r = send_parts(addr, parts, Duration::from_millis(25))
                        .await
                        .expect("a reply");
                    assert_eq!(r.status, 200, "{}", r.text());
                    assert!(r.json()["content"].is_string());
                }
                // A slow reader of a stream.
                1 => {
                    let b = body(&json!({"prompt": "Once", "max_tokens": 24, "stream": true}));
                    let mut s = TcpStream::connect(addr).await.unwrap();
                    s.write_all(head("/v1/completions", Some(b.len())).as_bytes())
                        .await
                        .unwrap();
                    s.write_all(&b).await.unwrap();
                    let mut raw = Vec::new();
                    let mut buf = [0u8; 64];
                    loop {
                        let n = timeout(Duration::from_secs(60), s.read(&mut buf))
                            .await
                            .expect("stream stalled")
                            .unwrap_or(0);
                        if n == 0 {
                            break;
                        }
                        raw.extend_from_slice(&buf[..n]);
                        sleep(Duration::from_millis(5)).await;
                    }
                    let r = parse_reply(&raw);
                    assert_eq!(r.status, 200);
                    assert_eq!(r.events().last().map(String::as_str), Some("[DONE]"));
                }
                // Gone mid-stream, after the first bytes of a long reply.
                2 => {
                    let b = body(&json!({"prompt": "Once upon a time", "n_predict": 1500,
                                         "ignore_eos": true, "stream": true}));
                    let mut s = TcpStream::connect(addr).await.unwrap();
                    s.write_all(head("/completion", Some(b.len())).as_bytes())
                        .await
                        .unwrap();
                    s.write_all(&b).await.unwrap();
                    let mut buf = [0u8; 256];
                    let _ = timeout(Duration::from_secs(60), s.read(&mut buf)).await;
                }
                // A body that stops half-way: the server times it out or
                // sees the connection go.
                3 => {
                    let b = body(&json!({"prompt": "Once upon a time", "n_predict": 4}));
                    let mut parts = vec![head("/completion", Some(b.len())).into_bytes()];
                    parts.push(b[..b.len() / 2].to_vec());
                    let mut s = TcpStream::connect(addr).await.unwrap();
                    for p in parts {
                        s.write_all(&p).await.unwrap();
                    }
                    sleep(Duration::from_millis(50)).await;
                }
                // Garbage instead of HTTP.
                _ => {
                    let junk: Vec<u8> = (0..512u32)
                        .map(|k| (k.wrapping_mul(2_654_435_761).wrapping_add(i as u32) >> 13) as u8)
                        .collect();
                    if let Some(r) = send_parts(addr, vec![junk], Duration::ZERO).await {
                        assert!((400..500).contains(&r.status), "{}", r.status);
                    }
                }
            }
        }));
    }
    for t in tasks {
        timeout(Duration::from_secs(90), t)
            .await
            .expect("a connection hung")
            .expect("a connection's check failed");
    }
    assert!(t0.elapsed() < Duration::from_secs(90));
    slots_idle(addr, Duration::from_secs(10)).await;
    served_at_once(addr, Duration::from_secs(5)).await;
    srv.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_gone_mid_stream_frees_its_slot_at_once() {
    let _serial = SERIAL.lock().await;
    let Some(srv) = start(MODEL, "-c 4096 -np 1").await else {
        return;
    };
    let addr = srv.addr;
    for round in 0..5 {
        let b = body(&json!({"prompt": "Once upon a time", "n_predict": -1,
                             "ignore_eos": true, "stream": true}));
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(head("/completion", Some(b.len())).as_bytes())
            .await
            .unwrap();
        s.write_all(&b).await.unwrap();
        let mut buf = [0u8; 512];
        let n = s.read(&mut buf).await.unwrap();
        assert!(n > 0, "round {round}");
        drop(s);
        // One slot: this runs only once the stream above is gone.
        served_at_once(addr, Duration::from_secs(5)).await;
    }
    slots_idle(addr, Duration::from_secs(5)).await;
    srv.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_and_invalid_bodies_are_refused() {
    let _serial = SERIAL.lock().await;
    let Some(srv) = start(MODEL, "-c 256 -np 1").await else {
        return;
    };
    let addr = srv.addr;
    let ten_mib = 10usize << 20;
    // A declared length over the limit: refused from the head.
    for len in [ten_mib, ten_mib * 4, usize::MAX >> 1] {
        let parts = vec![
            head("/completion", Some(len)).into_bytes(),
            vec![b' '; 4096],
        ];
        let r = send_parts(addr, parts, Duration::ZERO)
            .await
            .expect("a reply");
        assert_eq!(r.status, 413, "{len}: {}", r.text());
        assert_eq!(r.json()["error"]["param"], "body");
    }
    // Chunked, without a length: refused once the limit is crossed.
    let chunk = {
        let mut c = format!("{:x}\r\n", 1 << 20).into_bytes();
        c.extend_from_slice(&vec![b' '; 1 << 20]);
        c.extend_from_slice(b"\r\n");
        c
    };
    let mut parts = vec![head("/v1/chat/completions", None).into_bytes()];
    parts.extend(vec![chunk; 12]);
    let r = send_parts(addr, parts, Duration::ZERO)
        .await
        .expect("a reply");
    assert_eq!(r.status, 413, "{}", r.text());
    // Invalid UTF-8: in a JSON string, bare, and in a chat message.
    for (path, b) in [
        ("/completion", b"{\"prompt\": \"\xff\xfe\"}".to_vec()),
        ("/v1/completions", b"\xc3\x28\xa0\xa1".to_vec()),
        (
            "/v1/chat/completions",
            b"{\"messages\": [{\"role\": \"user\", \"content\": \"a\xed\xa0\x80b\"}]}".to_vec(),
        ),
        ("/tokenize", b"{\"content\": \"\xf0\x28\x8c\x28\"}".to_vec()),
    ] {
        let r = request(addr, "POST", path, &b, "").await;
        assert_eq!(r.status, 400, "{path}: {}", r.text());
        assert_eq!(r.json()["error"]["param"], "body", "{path}");
    }
    // Still serving.
    served_at_once(addr, Duration::from_secs(5)).await;
    srv.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_tokens_far_past_the_context_stops_at_the_context() {
    let _serial = SERIAL.lock().await;
    let Some(srv) = start(MODEL, "-c 128 -np 1").await else {
        return;
    };
    let addr = srv.addr;
    // The context as the server rounds it (llama.cpp's padding).
    let n_ctx = get(addr, "/props").await.json()["n_ctx_slot"]
        .as_u64()
        .expect("n_ctx_slot");
    assert!((128..=256).contains(&n_ctx), "{n_ctx}");
    for (path, field, n) in [
        ("/completion", "n_predict", json!(1_000_000)),
        ("/completion", "n_predict", json!(i64::from(i32::MAX))),
        (
            "/v1/completions",
            "max_tokens",
            json!(9_000_000_000_000_000i64),
        ),
        ("/v1/chat/completions", "max_tokens", json!(u64::MAX)),
        ("/v1/completions", "max_tokens", json!(1e300)),
    ] {
        let mut b = json!({"temperature": 0, "ignore_eos": true});
        b[field] = n.clone();
        if path.contains("chat") {
            b["messages"] = json!([{"role": "user", "content": "Hi"}]);
        } else {
            b["prompt"] = json!("Once upon a time");
        }
        let t0 = Instant::now();
        let r = timeout(Duration::from_secs(60), post(addr, path, &b))
            .await
            .expect("a reply");
        if r.status == 400 {
            assert_eq!(r.json()["error"]["param"], field, "{path} {n}");
            continue;
        }
        assert_eq!(r.status, 200, "{path} {n}: {}", r.text());
        let v = r.json();
        let generated = v["tokens_predicted"]
            .as_u64()
            .or_else(|| v["usage"]["completion_tokens"].as_u64())
            .expect("a count of generated tokens");
        assert!(
            generated > 0 && generated < n_ctx,
            "{path} {n}: {generated}"
        );
        println!(
            "{path} {field} {n}: {generated} tokens in {:?}",
            t0.elapsed()
        );
        assert!(t0.elapsed() < Duration::from_secs(30));
    }
    slots_idle(addr, Duration::from_secs(5)).await;
    srv.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn resident_memory_stays_flat_over_thousands_of_requests() {
    let _serial = SERIAL.lock().await;
    let Some(srv) = start(MODEL, "-c 1024 -np 2").await else {
        return;
    };
    let addr = srv.addr;
    if rss_bytes().is_none() {
        eprintln!("skipped: no /proc/self/statm");
        return;
    }
    const TOTAL: usize = 5000;
    const CLIENTS: usize = 4;
    // Each client's requests in a row; a mix of every kind of reply.
    let run = |from: usize, to: usize| async move {
        for i in from..to {
            let r =
                match i % 6 {
                    0 => {
                        post(
                            addr,
                            "/completion",
                            &json!({"prompt": "Once upon a time", "n_predict": 3}),
                        )
                        .await
                    }
                    1 => post(
                        addr,
                        "/v1/chat/completions",
                        &json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3}),
                    )
                    .await,
                    2 => {
                        post(
                            addr,
                            "/v1/completions",
                            &json!({"prompt": "The cat", "max_tokens": 3, "stream": true}),
                        )
                        .await
                    }
                    3 => {
                        post(
                            addr,
                            "/tokenize",
                            &json!({"content": "Once upon a time", "with_pieces": true}),
                        )
                        .await
                    }
                    4 => request(addr, "POST", "/completion", b"{broken", "").await,
                    _ => get(addr, "/slots").await,
                };
            assert!(
                r.status == 200 || (i % 6 == 4 && r.status == 400),
                "{i}: {}",
                r.status
            );
        }
    };
    let batch = |n: usize, offset: usize| {
        let per = n / CLIENTS;
        (0..CLIENTS)
            .map(|c| tokio::spawn(run(offset + c * per, offset + (c + 1) * per)))
            .collect::<Vec<_>>()
    };
    let t0 = Instant::now();
    for t in batch(500, 0) {
        t.await.unwrap();
    }
    let at_500 = rss_bytes().unwrap();
    for t in batch(TOTAL - 500, 500) {
        t.await.unwrap();
    }
    let at_end = rss_bytes().unwrap();
    let growth = at_end as f64 / at_500 as f64 - 1.0;
    println!(
        "resident memory: {:.1} MiB after 500 requests, {:.1} MiB after {TOTAL} ({:+.1}%), {:.1} s",
        at_500 as f64 / (1 << 20) as f64,
        at_end as f64 / (1 << 20) as f64,
        growth * 100.0,
        t0.elapsed().as_secs_f64()
    );
    assert!(
        growth < 0.10,
        "resident memory grew by {:.1}%",
        growth * 100.0
    );
    slots_idle(addr, Duration::from_secs(5)).await;
    srv.stop().await.unwrap();
}
