//! The HTTP API on the fixture models: endpoints, greedy output equal to
//! llama.cpp's llama-cli, parallel slots, streaming, and bad requests.

mod common;

use common::{get, post, request, start};
use serde_json::{json, Value};

fn expected(dir: &std::path::Path, model: &str) -> Value {
    let text = std::fs::read_to_string(dir.join("expected").join(format!("{model}.json"))).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// `/completion` with temperature 0 generates what llama.cpp's llama-cli
/// printed for the same prompt (fixtures/expected, `-c 512`, F16 KV cache).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn greedy_completion_equals_llama_cli() {
    let Some(dir) = common::fixtures() else {
        return;
    };
    let want = expected(&dir, "stories260K");
    let Some(srv) = start("stories260K.gguf", "-c 512").await else {
        return;
    };
    let r = post(
        srv.addr,
        "/completion",
        &json!({"prompt": "Once upon a time", "n_predict": 64, "temperature": 0}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["content"], want["greedy_text"]);
    assert_eq!(v["tokens"], want["greedy_tokens"]);
    assert_eq!(v["tokens_evaluated"], 5);
    assert_eq!(v["tokens_predicted"], 64);
    assert_eq!(v["stop_type"], "limit");

    // The same over /v1/completions, streamed and not.
    let body = json!({"prompt": "Once upon a time", "max_tokens": 64, "temperature": 0});
    let v = post(srv.addr, "/v1/completions", &body).await.json();
    assert_eq!(v["choices"][0]["text"], want["greedy_text"]);
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(
        v["usage"],
        json!({"prompt_tokens": 5, "completion_tokens": 64, "total_tokens": 69})
    );
    let mut body = body;
    body["stream"] = json!(true);
    let r = post(srv.addr, "/v1/completions", &body).await;
    assert!(r
        .header("content-type")
        .unwrap()
        .starts_with("text/event-stream"));
    let ev = r.events();
    assert_eq!(ev.last().unwrap(), "[DONE]");
    let text: String = ev[..ev.len() - 1]
        .iter()
        .map(|e| {
            serde_json::from_str::<Value>(e).unwrap()["choices"][0]["text"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(text, want["greedy_text"].as_str().unwrap());
    srv.stop().await.unwrap();
}

/// Four different requests at once in four slots each give what they give alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_requests_equal_their_solo_runs() {
    let Some(srv) = start("stories260K.gguf", "-c 1024 -np 4").await else {
        return;
    };
    let prompts = [
        "Once upon a time",
        "The little dog",
        "Tom and Sue went",
        "One day, a bird",
    ];
    let body = |p: &str, n: i64| json!({"prompt": p, "n_predict": n, "temperature": 0});
    let mut solo = Vec::new();
    for (i, p) in prompts.iter().enumerate() {
        let v = post(srv.addr, "/completion", &body(p, 40 + 8 * i as i64))
            .await
            .json();
        solo.push(v["content"].as_str().unwrap().to_string());
    }
    let handles: Vec<_> = prompts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let (addr, b) = (srv.addr, body(p, 40 + 8 * i as i64));
            tokio::spawn(async move { post(addr, "/completion", &b).await.json() })
        })
        .collect();
    let mut slots = std::collections::BTreeSet::new();
    for (i, h) in handles.into_iter().enumerate() {
        let v = h.await.unwrap();
        assert_eq!(v["content"].as_str().unwrap(), solo[i], "prompt {i}");
        slots.insert(v["id_slot"].as_u64().unwrap());
    }
    assert!(!slots.is_empty());
    srv.stop().await.unwrap();
}

/// More requests than slots: the ones queued behind a running request
/// start when its slot frees, with no later request to wake the engine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_requests_run_when_a_slot_frees() {
    let Some(srv) = start("stories260K.gguf", "-c 512 -np 1").await else {
        return;
    };
    let handles: Vec<_> = (0..3)
        .map(|i| {
            let addr = srv.addr;
            let b =
                json!({"prompt": "Once upon a time", "n_predict": 24 + 8 * i, "temperature": 0});
            tokio::spawn(async move { post(addr, "/completion", &b).await })
        })
        .collect();
    for (i, h) in handles.into_iter().enumerate() {
        let r = tokio::time::timeout(std::time::Duration::from_secs(120), h)
            .await
            .unwrap_or_else(|_| panic!("request {i} never ran"))
            .unwrap();
        assert_eq!(r.status, 200, "request {i}: {}", r.text());
        assert_eq!(
            r.json()["tokens_predicted"],
            24 + 8 * i as u64,
            "request {i}"
        );
    }
    srv.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_completion_streams_and_counts() {
    let Some(srv) = start("stories260K.gguf", "-c 512").await else {
        return;
    };
    let messages =
        json!([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}]);
    let t = post(srv.addr, "/apply-template", &json!({"messages": messages}))
        .await
        .json();
    // No template in the file: chatml, as llama.cpp.
    assert_eq!(
        t["prompt"],
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"
    );
    let tok = post(
        srv.addr,
        "/tokenize",
        &json!({"content": t["prompt"], "add_special": true}),
    )
    .await
    .json();
    let n_prompt = tok["tokens"].as_array().unwrap().len();
    let body = json!({"messages": messages, "max_tokens": 20, "temperature": 0, "seed": 1});
    let v = post(srv.addr, "/v1/chat/completions", &body).await.json();
    assert_eq!(v["object"], "chat.completion");
    let content = v["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert_eq!(v["usage"]["prompt_tokens"], n_prompt);
    let n_gen = v["usage"]["completion_tokens"].as_u64().unwrap();
    assert!(n_gen <= 20);

    let mut sbody = body.clone();
    sbody["stream"] = json!(true);
    sbody["stream_options"] = json!({"include_usage": true});
    let ev = post(srv.addr, "/v1/chat/completions", &sbody)
        .await
        .events();
    assert_eq!(ev.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = ev[..ev.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let streamed: String = chunks
        .iter()
        .filter_map(|c| {
            c["choices"].get(0)?["delta"]["content"]
                .as_str()
                .map(String::from)
        })
        .collect();
    assert_eq!(streamed, content);
    let usage = &chunks.last().unwrap()["usage"];
    assert_eq!(usage["completion_tokens"], n_gen);
    assert!(chunks
        .iter()
        .all(|c| c["object"] == "chat.completion.chunk"));
    srv.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_endpoints() {
    let Some(srv) = start(
        "stories260K.gguf",
        "-c 512 -np 2 --metrics --chat-template llama3",
    )
    .await
    else {
        return;
    };
    let a = srv.addr;
    assert_eq!(get(a, "/health").await.json(), json!({"status": "ok"}));
    let m = get(a, "/v1/models").await.json();
    assert_eq!(m["data"][0]["id"], "stories260K.gguf");
    let t = post(
        a,
        "/tokenize",
        &json!({"content": "Once upon a time", "add_special": true}),
    )
    .await
    .json();
    assert_eq!(t["tokens"], json!([1, 403, 407, 261, 378]));
    let p = post(
        a,
        "/tokenize",
        &json!({"content": "a time", "with_pieces": true}),
    )
    .await
    .json();
    assert_eq!(p["tokens"][1]["piece"], " time");
    let d = post(a, "/detokenize", &json!({"tokens": [403, 407, 261, 378]}))
        .await
        .json();
    assert_eq!(d["content"], " Once upon a time");
    let t = post(
        a,
        "/apply-template",
        &json!({"messages": [{"role": "user", "content": " hi "}]}),
    )
    .await
    .json();
    assert_eq!(t["prompt"], "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
    let s = get(a, "/slots").await.json();
    assert_eq!(s.as_array().unwrap().len(), 2);
    assert_eq!(s[0]["n_ctx"], 256);
    assert_eq!(s[1]["is_processing"], false);
    post(
        a,
        "/completion",
        &json!({"prompt": "Hi", "n_predict": 4, "temperature": 0}),
    )
    .await;
    let r = get(a, "/metrics").await;
    assert_eq!(r.status, 200);
    assert!(
        r.text().contains("llamacpp:tokens_predicted_total 4"),
        "{}",
        r.text()
    );
    let n_hi = post(
        a,
        "/tokenize",
        &json!({"content": "Hi", "add_special": true}),
    )
    .await
    .json()["tokens"]
        .as_array()
        .unwrap()
        .len();
    let want = format!("llamacpp:prompt_tokens_total {n_hi}\n");
    assert!(r.text().contains(&want), "{}", r.text());
    // Embeddings were not asked for.
    let e = post(a, "/v1/embeddings", &json!({"input": "hi"})).await;
    assert_eq!(e.status, 501);
    assert_eq!(get(a, "/nowhere").await.status, 404);
    srv.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probabilities_bias_and_stop_strings() {
    let Some(srv) = start("stories260K.gguf", "-c 512").await else {
        return;
    };
    let a = srv.addr;
    let base = json!({"prompt": "Once upon a time", "n_predict": 8, "temperature": 0});
    let plain = post(a, "/completion", &base).await.json();
    let first = plain["tokens"][0].as_i64().unwrap();

    let mut b = base.clone();
    b["n_probs"] = json!(3);
    let v = post(a, "/completion", &b).await.json();
    let probs = v["completion_probabilities"].as_array().unwrap();
    assert_eq!(probs.len(), 8);
    assert_eq!(probs[0]["id"], first);
    assert_eq!(probs[0]["top_logprobs"].as_array().unwrap().len(), 3);
    assert_eq!(probs[0]["top_logprobs"][0]["id"], first);
    let lp = probs[0]["logprob"].as_f64().unwrap();
    assert!(lp <= 0.0 && lp > -10.0);

    // Forbidding the greedy first token changes the first token.
    let mut b = base.clone();
    b["logit_bias"] = json!({ first.to_string(): -1000.0 });
    let v = post(a, "/completion", &b).await.json();
    assert_ne!(v["tokens"][0].as_i64().unwrap(), first);

    // A stop string cuts the text before it.
    let text = plain["content"].as_str().unwrap();
    let word: String = text.trim_start().chars().take(4).collect();
    let mut b = base.clone();
    b["stop"] = json!([word.clone()]);
    let v = post(a, "/completion", &b).await.json();
    assert_eq!(v["stop_type"], "word");
    assert_eq!(v["stopping_word"], word);
    assert_eq!(
        v["content"].as_str().unwrap(),
        &text[..text.find(&word).unwrap()]
    );

    // Chat logprobs in OpenAI's shape.
    let c = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3, "temperature": 0, "logprobs": true, "top_logprobs": 2});
    let v = post(a, "/v1/chat/completions", &c).await.json();
    let lp = &v["choices"][0]["logprobs"]["content"];
    assert_eq!(lp[0]["top_logprobs"].as_array().unwrap().len(), 2);
    assert!(lp[0]["token"].is_string());

    // Penalties take effect: a strong presence penalty changes greedy text.
    let mut b = base.clone();
    b["n_predict"] = json!(32);
    let free = post(a, "/completion", &b).await.json();
    b["presence_penalty"] = json!(2.0);
    b["repeat_penalty"] = json!(1.5);
    let pen = post(a, "/completion", &b).await.json();
    assert_ne!(free["content"], pen["content"]);
    srv.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embeddings_are_pooled_and_normalised() {
    let Some(srv) = start("stories260K.gguf", "-c 512 --embeddings --pooling mean").await else {
        return;
    };
    let v = post(
        srv.addr,
        "/v1/embeddings",
        &json!({"input": ["Once upon a time", "a dog"]}),
    )
    .await
    .json();
    let data = v["data"].as_array().unwrap();
    assert_eq!(data.len(), 2);
    let e0: Vec<f64> = data[0]["embedding"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    assert_eq!(e0.len(), 64);
    let norm: f64 = e0.iter().map(|x| x * x).sum::<f64>().sqrt();
    assert!((norm - 1.0).abs() < 1e-4, "{norm}");
    assert_ne!(data[0]["embedding"], data[1]["embedding"]);
    let n_dog = post(
        srv.addr,
        "/tokenize",
        &json!({"content": "a dog", "add_special": true}),
    )
    .await
    .json()["tokens"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(v["usage"]["prompt_tokens"], 5 + n_dog);
    // The same input gives the same vector; base64 holds the same floats.
    let again = post(
        srv.addr,
        "/v1/embeddings",
        &json!({"input": "Once upon a time"}),
    )
    .await
    .json();
    assert_eq!(again["data"][0]["embedding"], data[0]["embedding"]);
    let b = post(
        srv.addr,
        "/v1/embeddings",
        &json!({"input": "Once upon a time", "encoding_format": "base64"}),
    )
    .await
    .json();
    assert_eq!(
        b["data"][0]["embedding"].as_str().unwrap().len(),
        (64 * 4usize).div_ceil(3) * 4
    );
    // Generation still works next to embeddings.
    let c = post(
        srv.addr,
        "/completion",
        &json!({"prompt": "Hi", "n_predict": 2}),
    )
    .await;
    assert_eq!(c.status, 200);
    srv.stop().await.unwrap();
}

fn error_param(r: &common::Reply) -> String {
    let v = r.json();
    assert!(v["error"]["message"].is_string(), "{v}");
    assert_eq!(v["error"]["code"], r.status);
    v["error"]["param"].as_str().unwrap_or_default().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_4xx_naming_the_field() {
    let Some(srv) = start("stories260K.gguf", "-c 256 -np 2").await else {
        return;
    };
    let a = srv.addr;
    let cases: Vec<(&str, Vec<u8>, u16, &str)> = vec![
        ("/v1/chat/completions", b"{not json".to_vec(), 400, "body"),
        ("/v1/chat/completions", b"[1, 2]".to_vec(), 400, "body"),
        (
            "/v1/chat/completions",
            br#"{"messages": "hi"}"#.to_vec(),
            400,
            "messages",
        ),
        (
            "/v1/chat/completions",
            br#"{"messages": []}"#.to_vec(),
            400,
            "messages",
        ),
        (
            "/v1/chat/completions",
            br#"{"messages": [{"role": "wizard", "content": "x"}]}"#.to_vec(),
            400,
            "messages[0].role",
        ),
        (
            "/v1/chat/completions",
            br#"{"messages": [{"role": "user", "content": 5}]}"#.to_vec(),
            400,
            "messages[0].content",
        ),
        (
            "/v1/chat/completions",
            br#"{"messages": [{"role": "user", "content": "x"}], "max_tokens": -1}"#.to_vec(),
            400,
            "max_tokens",
        ),
        (
            "/v1/chat/completions",
            br#"{"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}"#.to_vec(),
            400,
            "temperature",
        ),
        (
            "/v1/completions",
            br#"{"prompt": "x", "top_k": 1.5}"#.to_vec(),
            400,
            "top_k",
        ),
        (
            "/v1/completions",
            br#"{"prompt": 7}"#.to_vec(),
            400,
            "prompt",
        ),
        (
            "/v1/completions",
            br#"{"max_tokens": 3}"#.to_vec(),
            400,
            "prompt",
        ),
        (
            "/v1/completions",
            br#"{"prompt": "x", "stop": 3}"#.to_vec(),
            400,
            "stop",
        ),
        (
            "/v1/completions",
            br#"{"prompt": "x", "logit_bias": {"99999": 1}}"#.to_vec(),
            400,
            "logit_bias",
        ),
        (
            "/v1/completions",
            br#"{"prompt": "x", "n": 0}"#.to_vec(),
            400,
            "n",
        ),
        (
            "/completion",
            br#"{"prompt": "x", "n": 2}"#.to_vec(),
            400,
            "n",
        ),
        (
            "/v1/completions",
            br#"{"prompt": [1, 99999]}"#.to_vec(),
            400,
            "prompt",
        ),
        (
            "/completion",
            br#"{"prompt": "x", "stream": "yes"}"#.to_vec(),
            400,
            "stream",
        ),
        (
            "/v1/chat/completions",
            br#"{"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": [1]}"#.to_vec(),
            400,
            "chat_template_kwargs",
        ),
        (
            "/apply-template",
            br#"{"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"enable_thinking": "no"}}"#.to_vec(),
            400,
            "chat_template_kwargs",
        ),
        (
            "/completion",
            br#"{"prompt": "x", "grammar": "root ::= \"a"}"#.to_vec(),
            400,
            "grammar",
        ),
        (
            "/v1/chat/completions",
            br#"{"messages": [{"role": "user", "content": "x"}], "grammar": 5}"#.to_vec(),
            400,
            "grammar",
        ),
        // Schemas the converter cannot honour are refused, naming the field.
        (
            "/completion",
            br#"{"prompt": "x", "json_schema": {"type": "array", "uniqueItems": true}}"#.to_vec(),
            400,
            "json_schema",
        ),
        (
            "/v1/chat/completions",
            br#"{"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object", "schema": {"not": {}}}}"#.to_vec(),
            400,
            "response_format",
        ),
        (
            "/v1/chat/completions",
            br#"{"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": {"$ref": "https://example.com/s.json"}}}}"#.to_vec(),
            400,
            "response_format",
        ),
        (
            "/v1/chat/completions",
            br#"{"messages": [{"role": "user", "content": "x"}], "json_schema": {"type": "object"}, "grammar": "root ::= \"a\""}"#.to_vec(),
            400,
            "json_schema",
        ),
        (
            "/completion",
            br#"{"prompt": "x", "json_schema": "{\"type\": \"object\"}"}"#.to_vec(),
            400,
            "json_schema",
        ),
        (
            "/v1/chat/completions",
            br#"{"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "yaml"}}"#.to_vec(),
            400,
            "response_format",
        ),
        (
            "/completion",
            br#"{"prompt": "x", "mirostat": 2}"#.to_vec(),
            501,
            "mirostat",
        ),
        (
            "/v1/completions",
            br#"{"prompt": "x", "dry_multiplier": 0.8}"#.to_vec(),
            501,
            "dry_multiplier",
        ),
        (
            "/v1/completions",
            br#"{"prompt": "x", "xtc_probability": 0.5}"#.to_vec(),
            501,
            "xtc_probability",
        ),
        ("/tokenize", br#"{"content": 1}"#.to_vec(), 400, "content"),
        (
            "/detokenize",
            br#"{"tokens": [-1]}"#.to_vec(),
            400,
            "tokens",
        ),
    ];
    for (path, body, status, param) in &cases {
        let r = request(a, "POST", path, body, "").await;
        assert_eq!(
            r.status,
            *status,
            "{path} {}: {}",
            String::from_utf8_lossy(body),
            r.text()
        );
        assert_eq!(
            error_param(&r),
            *param,
            "{path} {}",
            String::from_utf8_lossy(body)
        );
    }
    // A prompt longer than a slot's context (128 tokens).
    let long = "Once upon a time ".repeat(60);
    let r = post(a, "/v1/completions", &json!({"prompt": long})).await;
    assert_eq!(r.status, 400);
    assert_eq!(error_param(&r), "prompt");
    let r = post(
        a,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": long}]}),
    )
    .await;
    assert_eq!((r.status, error_param(&r)), (400, "messages".to_string()));
    // A body over the limit.
    let big = vec![b' '; llama_server::app::BODY_LIMIT + 10];
    let r = request(a, "POST", "/v1/completions", &big, "").await;
    assert_eq!(r.status, 413);
    assert_eq!(error_param(&r), "body");
    // Off at their defaults, the same fields are accepted.
    let r = post(
        a,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": 2,
                "response_format": {"type": "text"}, "grammar": "", "mirostat": 0,
                "dry_multiplier": 0.0, "xtc_probability": 0.0, "top_n_sigma": -1.0}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    // The server still serves, and every slot is free.
    let r = post(a, "/completion", &json!({"prompt": "Once", "n_predict": 3})).await;
    assert_eq!(r.status, 200);
    let slots = get(a, "/slots").await.json();
    assert!(slots
        .as_array()
        .unwrap()
        .iter()
        .all(|s| s["is_processing"] == false));
    srv.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_key_is_required_except_for_health() {
    let Some(srv) = start("stories260K.gguf", "-c 256 --api-key sekrit --metrics").await else {
        return;
    };
    let a = srv.addr;
    assert_eq!(get(a, "/health").await.status, 200);
    for path in ["/v1/models", "/slots", "/metrics"] {
        let r = get(a, path).await;
        assert_eq!(r.status, 401, "{path}");
        assert_eq!(r.json()["error"]["type"], "authentication_error");
        let r = request(a, "GET", path, b"", "Authorization: Bearer wrong\r\n").await;
        assert_eq!(r.status, 401, "{path}");
        let r = request(a, "GET", path, b"", "Authorization: Bearer sekrit\r\n").await;
        assert_eq!(r.status, 200, "{path}");
    }
    let body = br#"{"prompt": "Hi", "n_predict": 2}"#;
    assert_eq!(
        request(a, "POST", "/completion", body, "").await.status,
        401
    );
    assert_eq!(
        request(a, "POST", "/completion", body, "X-Api-Key: sekrit\r\n")
            .await
            .status,
        200
    );
    srv.stop().await.unwrap();
}

/// A slow client that never finishes its body gets 408 after `-to`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_body_times_out() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Some(srv) = start("stories260K.gguf", "-c 256 -to 1").await else {
        return;
    };
    let mut s = tokio::net::TcpStream::connect(srv.addr).await.unwrap();
    s.write_all(b"POST /completion HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\nConnection: close\r\n\r\n{\"prompt\"")
        .await
        .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await.unwrap();
    let r = common::parse_reply(&raw);
    assert_eq!(r.status, 408, "{}", r.text());
    srv.stop().await.unwrap();
}

/// A client that goes away mid-stream frees its slot and cache cells.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disconnect_frees_the_slot() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Some(srv) = start("stories260K.gguf", "-c 4096 -np 1 --metrics").await else {
        return;
    };
    let body =
        json!({"prompt": "Once upon a time", "n_predict": -1, "ignore_eos": true, "stream": true})
            .to_string();
    let mut s = tokio::net::TcpStream::connect(srv.addr).await.unwrap();
    let head = format!(
        "POST /completion HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    let mut buf = [0u8; 512];
    let n = s.read(&mut buf).await.unwrap();
    assert!(n > 0);
    drop(s);
    // With one slot, the next request can only run once the first is gone.
    let r = post(
        srv.addr,
        "/completion",
        &json!({"prompt": "Hi", "n_predict": 2}),
    )
    .await;
    assert_eq!(r.status, 200);
    let slots = get(srv.addr, "/slots").await.json();
    assert_eq!(slots[0]["is_processing"], false);
    // The first request stopped long before its 4091 tokens.
    let m = get(srv.addr, "/metrics").await.text();
    let line = m
        .lines()
        .find(|l| l.starts_with("llamacpp:tokens_predicted_total "))
        .unwrap();
    let n: f64 = line.split(' ').nth(1).unwrap().parse().unwrap();
    assert!(n < 3000.0, "{line}");
    srv.stop().await.unwrap();
}
