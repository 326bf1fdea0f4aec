//! Prompt cache, slot save/restore, context shift, `/infill` and the
//! `timings` object on the fixture models.

mod common;

use common::{get, post, start};
use serde_json::{json, Value};

/// A prompt of a few hundred tokens.
fn long_text() -> String {
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "
        .repeat(8)
}

fn completion(prompt: Value, n: i64, cache: bool) -> Value {
    json!({"prompt": prompt, "n_predict": n, "temperature": 0, "cache_prompt": cache})
}

/// A second request sharing a long prefix with the first reuses it
/// (`cache_n`) and answers what it answers without the cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_prefix_is_reused_with_the_same_reply() {
    let Some(srv) = start("stories260K.gguf", "-c 1024 -np 2 --metrics").await else {
        return;
    };
    let a = srv.addr;
    let base = long_text();
    let first = format!("{base}One day, she saw a cat.");
    let second = format!("{base}One day, she saw a big dog.");
    let r1 = post(a, "/completion", &completion(json!(first), 16, true)).await;
    assert_eq!(r1.status, 200, "{}", r1.text());
    let v1 = r1.json();
    assert_eq!(v1["timings"]["cache_n"], 0);
    let n1 = v1["tokens_evaluated"].as_u64().unwrap();
    assert!(n1 > 150, "{n1}");
    assert_eq!(v1["timings"]["prompt_n"], n1);

    let v2 = post(a, "/completion", &completion(json!(second), 16, true))
        .await
        .json();
    let cache_n = v2["timings"]["cache_n"].as_u64().unwrap();
    let n2 = v2["tokens_evaluated"].as_u64().unwrap();
    assert!(cache_n > 150, "cache_n {cache_n}");
    assert_eq!(v2["timings"]["prompt_n"].as_u64().unwrap(), n2 - cache_n);
    // The slot that held the prefix took the request.
    assert_eq!(v2["id_slot"], v1["id_slot"]);
    let fresh = post(a, "/completion", &completion(json!(second), 16, false))
        .await
        .json();
    assert_eq!(fresh["timings"]["cache_n"], 0);
    assert_eq!(v2["content"], fresh["content"]);
    assert_eq!(v2["tokens"], fresh["tokens"]);

    // The same prompt again: everything but its last token is reused.
    let again = post(a, "/completion", &completion(json!(second), 16, true))
        .await
        .json();
    assert_eq!(again["timings"]["cache_n"].as_u64().unwrap(), n2 - 1);
    assert_eq!(again["content"], fresh["content"]);

    let s = get(a, "/slots").await.json();
    let held: u64 = s
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["n_cached"].as_u64().unwrap())
        .max()
        .unwrap();
    assert!(held >= n2, "{s}");
    let m = get(a, "/metrics").await.text();
    assert!(m.contains("llamacpp:prompt_tokens_cached_total"), "{m}");
    assert!(
        m.contains("# TYPE llamacpp:prompt_tokens_seconds gauge"),
        "{m}"
    );
    assert!(m.contains("llamacpp:n_tokens_max"), "{m}");
    srv.stop().await.unwrap();
}

/// `--cache-reuse`: a chunk of the cache after a part the new prompt
/// leaves out is shifted into place (llama.cpp's walk), and the reply is
/// the one without the cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_reuse_shifts_chunks_after_a_difference() {
    let Some(srv) = start("stories260K.gguf", "-c 1024 -np 1 --cache-reuse 8").await else {
        return;
    };
    let a = srv.addr;
    let tail = long_text();
    let first = format!("Tom had a red ball. {tail}");
    let second = tail;
    post(a, "/completion", &completion(json!(first), 4, true)).await;
    let v = post(a, "/completion", &completion(json!(second), 12, true))
        .await
        .json();
    let cache_n = v["timings"]["cache_n"].as_u64().unwrap();
    assert!(cache_n > 100, "cache_n {cache_n}");
    let fresh = post(a, "/completion", &completion(json!(second), 12, false))
        .await
        .json();
    assert_eq!(v["content"], fresh["content"]);
    srv.stop().await.unwrap();
}

/// A recurrent memory reuses a cache that is an exact prefix of the new
/// prompt and decodes again otherwise (when no context checkpoint fits);
/// replies equal those without cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recurrent_memory_reuses_exact_prefixes_only() {
    let Some(srv) = start("tiny-mamba-f32.gguf", "-c 512 -np 1").await else {
        return;
    };
    let a = srv.addr;
    let p: Vec<i32> = (0..60).map(|i| (i * 7 + 3) % 200).collect();
    let v1 = post(a, "/completion", &completion(json!(p), 6, true))
        .await
        .json();
    let mut longer = p.clone();
    longer.extend(
        v1["tokens"].as_array().unwrap()[..5]
            .iter()
            .map(|t| t.as_i64().unwrap() as i32),
    );
    longer.extend([11, 12, 13]);
    let v2 = post(a, "/completion", &completion(json!(longer), 6, true))
        .await
        .json();
    assert_eq!(v2["timings"]["cache_n"].as_u64().unwrap(), 65, "{v2}");
    let fresh = post(a, "/completion", &completion(json!(longer), 6, false))
        .await
        .json();
    assert_eq!(v2["tokens"], fresh["tokens"]);
    // Not a prefix of what the state holds: decoded again.
    let v3 = post(a, "/completion", &completion(json!(p[..30]), 6, true))
        .await
        .json();
    assert_eq!(v3["timings"]["cache_n"], 0);
    srv.stop().await.unwrap();
}

/// A recurrent memory that cannot drop the tail of its state restores the
/// context checkpoint taken 4 tokens before the end of an earlier prompt:
/// a prompt that differs in its last tokens, and the same prompt again,
/// decode only from there and answer as without the cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recurrent_memory_restores_its_context_checkpoint() {
    for model in ["tiny-mamba-f32.gguf", "tiny-rwkv6-f32.gguf"] {
        let Some(srv) = start(model, "-c 512 -np 1").await else {
            return;
        };
        let a = srv.addr;
        let p: Vec<i32> = (0..60).map(|i| (i * 7 + 3) % 200).collect();
        let v1 = post(a, "/completion", &completion(json!(p), 6, true))
            .await
            .json();
        assert_eq!(v1["timings"]["cache_n"], 0);
        let mut other = p[..58].to_vec();
        other.extend([1, 2, 3]);
        for (prompt, what) in [(other, "another ending"), (p.clone(), "the same prompt")] {
            let v = post(a, "/completion", &completion(json!(prompt), 6, true))
                .await
                .json();
            // 56: the first prompt's checkpoint; 57: the second's.
            let n = v["timings"]["cache_n"].as_u64().unwrap();
            assert!((56..=57).contains(&n), "{model}, {what}: {v}");
            let fresh = post(a, "/completion", &completion(json!(prompt), 6, false))
                .await
                .json();
            assert_eq!(v["tokens"], fresh["tokens"], "{model}, {what}");
            // The fresh request left its own checkpoint (same tokens).
            post(a, "/completion", &completion(json!(p), 6, false)).await;
        }
        srv.stop().await.unwrap();
    }
}

/// On `model`: a second prompt sharing a long prefix with the first
/// answers what it answers without the cache, whatever part of the cache
/// the memory could keep; returns the second reply's `cache_n`.
async fn same_reply_with_the_cache(model: &str) -> Option<u64> {
    let srv = start(model, "-c 1024 -np 1").await?;
    let a = srv.addr;
    let base: Vec<i32> = (0..120).map(|i| (i * 7 + 3) % 200).collect();
    let mut first = base.clone();
    first.extend([5, 6, 7, 8]);
    let mut second = base;
    second.extend([9, 10, 11]);
    post(a, "/completion", &completion(json!(first), 4, true)).await;
    let v = post(a, "/completion", &completion(json!(second), 8, true))
        .await
        .json();
    let fresh = post(a, "/completion", &completion(json!(second), 8, false))
        .await
        .json();
    assert_eq!(v["tokens"], fresh["tokens"], "{model}");
    srv.stop().await.unwrap();
    v["timings"]["cache_n"].as_u64()
}

/// Sliding-window and hybrid memories: the reply is the one without the
/// cache. A sliding-window cache that still holds the window of the common
/// prefix keeps it; a hybrid memory cannot drop its recurrent state's last
/// positions and decodes the prompt again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_memories_answer_the_same_with_the_cache() {
    if let Some(n) = same_reply_with_the_cache("tiny-gemma3-f32.gguf").await {
        assert_eq!(n, 120);
    }
    // The hybrid memory cannot drop the first prompt's last tokens: it
    // restores the checkpoint taken 4 tokens before that prompt's end.
    if let Some(n) = same_reply_with_the_cache("tiny-granitehybrid-f32.gguf").await {
        assert_eq!(n, 120);
    }
    if let Some(n) = same_reply_with_the_cache("tiny-f32.gguf").await {
        assert_eq!(n, 120);
    }
}

fn tokens_of(v: &Value) -> Vec<i32> {
    v["tokens"]
        .as_array()
        .expect("tokens")
        .iter()
        .map(|t| t.as_i64().unwrap() as i32)
        .collect()
}

/// A chat on `model` whose memory cannot drop a suffix (`flags` set the
/// batch): the first turn reads a 100-token prompt and generates `n_gen`
/// tokens; the turn is then asked again with another last message (the
/// prompt differs from token 100 on), which restores the checkpoint taken
/// 4 tokens before the first prompt's end; then the chat goes on with the
/// reply and a new message, which reuses everything. Each reply equals the
/// one without the cache. Returns the three `cache_n`.
async fn chat_turns_with_checkpoints(model: &str, flags: &str, n_gen: i64) -> Option<[u64; 3]> {
    let srv = start(model, flags).await?;
    let a = srv.addr;
    let p: Vec<i32> = (0..100).map(|i| (i * 7 + 3) % 200).collect();
    let ask = |prompt: Vec<i32>, n: i64, cache: bool| async move {
        let mut body = completion(json!(prompt), n, cache);
        body["ignore_eos"] = json!(true);
        post(a, "/completion", &body).await
    };
    let v1 = ask(p.clone(), n_gen, true).await.json();
    let mut again = p.clone();
    again.extend([9, 10, 11]);
    let v2 = ask(again.clone(), 8, true).await.json();
    let fresh = ask(again.clone(), 8, false).await.json();
    assert_eq!(
        v2["tokens"], fresh["tokens"],
        "{model}: the turn asked again"
    );
    // The fresh request left its own cache: read the edited turn again
    // with the cache, then go on with its reply and a new message.
    ask(again.clone(), 8, true).await;
    let mut next = again;
    next.extend(tokens_of(&v2));
    next.extend([12, 13]);
    let v3 = ask(next.clone(), 8, true).await.json();
    let fresh = ask(next, 8, false).await.json();
    assert_eq!(v3["tokens"], fresh["tokens"], "{model}: the next turn");
    srv.stop().await.unwrap();
    let n = |v: &Value| v["timings"]["cache_n"].as_u64().unwrap();
    Some([n(&v1), n(&v2), n(&v3)])
}

/// Sliding-window (window 16, a cache of 256 cells with ubatches of 16)
/// and recurrent memories keep context checkpoints: a turn asked again
/// after a long reply restores the one 4 tokens before the prompt's end,
/// where without checkpoints it decodes everything again; the next turn
/// reuses the whole conversation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chats_reuse_their_prefix_through_checkpoints() {
    let swa = "-c 1024 -np 1 -b 16 -ub 16";
    for (model, flags, n_gen) in [
        ("tiny-gemma3-f32.gguf", swa, 300),
        ("tiny-mamba-f32.gguf", "-c 1024 -np 1", 20),
        ("tiny-granitehybrid-f32.gguf", "-c 1024 -np 1", 20),
    ] {
        let Some([n1, n2, n3]) = chat_turns_with_checkpoints(model, flags, n_gen).await else {
            return;
        };
        assert_eq!((n1, n2), (0, 96), "{model}");
        // The edited turn (103 tokens) and 7 of its 8 reply tokens.
        assert_eq!(n3, 103 + 7, "{model}");
    }
    // Without checkpoints the sliding-window cache has given up the
    // window of the first prompt's end: the turn is read again.
    let off = format!("{swa} --ctx-checkpoints 0");
    if let Some([_, n2, n3]) = chat_turns_with_checkpoints("tiny-gemma3-f32.gguf", &off, 300).await
    {
        assert_eq!(n2, 0);
        assert_eq!(n3, 103 + 7);
    }
}

/// A server of 1 slot of 512 tokens takes a 201-token state; one of 2
/// slots of 128 refuses it.
async fn srv_restart_refuses(flags: &str, body: &Value) {
    let Some(one) = start("stories260K.gguf", flags).await else {
        return;
    };
    let r = post(one.addr, "/slots/0?action=restore", body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    one.stop().await.unwrap();
    let dir = flags.rsplit(' ').next().unwrap();
    let Some(four) = start(
        "stories260K.gguf",
        &format!("-c 512 -np 4 --slot-save-path {dir}"),
    )
    .await
    else {
        return;
    };
    let r = post(four.addr, "/slots/0?action=restore", body).await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(
        r.text().contains("slot's context holds 128"),
        "{}",
        r.text()
    );
    assert_eq!(get(four.addr, "/slots").await.json()[0]["n_cached"], 0);
    four.stop().await.unwrap();
}

fn scratch(name: &str) -> std::path::PathBuf {
    test_support::scratch_dir("llama-server", name)
}

/// Save, erase, restore: the restored slot continues as the original did;
/// bad file names, a missing directory and another model's file are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slot_save_restore_round_trip() {
    let dir = scratch("slot_save");
    let flags = format!("-c 512 -np 1 --slot-save-path {}", dir.display());
    let Some(srv) = start("stories260K.gguf", &flags).await else {
        return;
    };
    let a = srv.addr;
    let v = post(
        a,
        "/completion",
        &completion(json!("Once upon a time"), 8, true),
    )
    .await
    .json();
    let mut cont: Vec<i64> = post(
        a,
        "/tokenize",
        &json!({"content": "Once upon a time", "add_special": true}),
    )
    .await
    .json()["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_i64().unwrap())
        .collect();
    cont.extend(
        v["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_i64().unwrap()),
    );
    let n_held = cont.len() - 1;

    let save = |name: &str| json!({"filename": name});
    let r = post(a, "/slots/0?action=save", &save("s0.bin")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let sv = r.json();
    assert_eq!(sv["id_slot"], 0);
    assert_eq!(sv["filename"], "s0.bin");
    assert_eq!(sv["n_saved"].as_u64().unwrap() as usize, n_held);
    assert!(sv["n_written"].as_u64().unwrap() > 0);
    assert!(dir.join("s0.bin").is_file());

    let e = post(a, "/slots/0?action=erase", &json!({})).await.json();
    assert_eq!(e["n_erased"].as_u64().unwrap() as usize, n_held);
    assert_eq!(get(a, "/slots").await.json()[0]["n_cached"], 0);

    let want = post(a, "/completion", &completion(json!(cont), 8, false))
        .await
        .json();
    post(a, "/slots/0?action=erase", &json!({})).await;
    let r = post(a, "/slots/0?action=restore", &save("s0.bin")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let rv = r.json();
    assert_eq!(rv["n_restored"].as_u64().unwrap() as usize, n_held);
    assert_eq!(rv["n_read"], sv["n_written"]);
    let got = post(a, "/completion", &completion(json!(cont), 8, true))
        .await
        .json();
    assert_eq!(got["timings"]["cache_n"].as_u64().unwrap() as usize, n_held);
    assert_eq!(got["tokens"], want["tokens"]);

    // Names that leave the directory, and other mistakes.
    for bad in ["../s0.bin", "/tmp/s0.bin", "a/b.bin", ".hidden", ""] {
        let r = post(a, "/slots/0?action=save", &save(bad)).await;
        assert_eq!(r.status, 400, "{bad}: {}", r.text());
        assert!(r.text().contains("filename"), "{}", r.text());
    }
    assert!(!dir.parent().unwrap().join("s0.bin").exists());
    let r = post(a, "/slots/0?action=restore", &save("missing.bin")).await;
    assert_eq!(r.status, 400);
    let r = post(a, "/slots/0?action=fly", &save("s0.bin")).await;
    assert_eq!(r.status, 400);
    assert!(r.text().contains("action"));
    let r = post(a, "/slots/7?action=save", &save("s0.bin")).await;
    assert_eq!(r.status, 400);
    let r = post(a, "/slots/0?action=save", &json!({})).await;
    assert_eq!(r.status, 400);

    // A damaged file is refused and leaves the slot empty.
    std::fs::write(dir.join("junk.bin"), b"LRSQ\x01\x00").unwrap();
    let r = post(a, "/slots/0?action=restore", &save("junk.bin")).await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(get(a, "/slots").await.json()[0]["n_cached"], 0);
    srv.stop().await.unwrap();

    // Another model refuses the file.
    let Some(other) = start("tiny-f32.gguf", &flags).await else {
        return;
    };
    let r = post(other.addr, "/slots/0?action=restore", &save("s0.bin")).await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("another model"), "{}", r.text());
    other.stop().await.unwrap();

    // A slot smaller than the saved state refuses it.
    let Some(small) = start(
        "stories260K.gguf",
        &format!("-c 512 -np 2 --slot-save-path {}", dir.display()),
    )
    .await
    else {
        return;
    };
    let long: Vec<i64> = (0..300).map(|i| 1 + i % 50).collect();
    let r = post(
        small.addr,
        "/completion",
        &completion(json!(long[..200]), 2, true),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let slot = r.json()["id_slot"].as_u64().unwrap();
    let r = post(
        small.addr,
        &format!("/slots/{slot}?action=save"),
        &save("s1.bin"),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    srv_restart_refuses(&flags, &save("s1.bin")).await;
    small.stop().await.unwrap();

    // Without --slot-save-path the actions that need files are refused.
    let Some(plain) = start("stories260K.gguf", "-c 256").await else {
        return;
    };
    let r = post(plain.addr, "/slots/0?action=save", &save("s0.bin")).await;
    assert_eq!(r.status, 501, "{}", r.text());
    plain.stop().await.unwrap();
}

/// `--context-shift`: generation goes on past the slot's context and
/// equals llama.cpp's llama-completion for the same settings
/// (`-c 256 -n 400 --context-shift --temp 0 --ignore-eos`, tests/data).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn context_shift_goes_on_like_llama_cpp() {
    let want = include_str!("data/context_shift_stories260K.txt");
    let Some(srv) = start("stories260K.gguf", "-c 256 -np 1 --context-shift").await else {
        return;
    };
    let body = json!({"prompt": "Once upon a time", "n_predict": 400, "temperature": 0, "ignore_eos": true});
    let v = post(srv.addr, "/completion", &body).await.json();
    assert_eq!(v["tokens_predicted"], 400);
    assert_eq!(v["truncated"], true);
    assert_eq!(v["content"].as_str().unwrap(), want);
    srv.stop().await.unwrap();

    // Without it generation stops when the slot is full.
    let Some(srv) = start("stories260K.gguf", "-c 256 -np 1").await else {
        return;
    };
    let v = post(srv.addr, "/completion", &body).await.json();
    assert!(v["tokens_predicted"].as_u64().unwrap() < 256);
    assert_eq!(v["truncated"], false);
    assert_eq!(v["stop_type"], "limit");
    assert!(want.starts_with(v["content"].as_str().unwrap()));
    // Bad n_keep / n_discard.
    let r = post(
        srv.addr,
        "/completion",
        &json!({"prompt": "a", "n_keep": -2}),
    )
    .await;
    assert_eq!(r.status, 400);
    let r = post(
        srv.addr,
        "/completion",
        &json!({"prompt": "a", "n_discard": -1}),
    )
    .await;
    assert_eq!(r.status, 400);
    srv.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infill_without_fim_tokens_is_refused() {
    let Some(srv) = start("stories260K.gguf", "-c 256").await else {
        return;
    };
    let r = post(
        srv.addr,
        "/infill",
        &json!({"input_prefix": "def f(", "input_suffix": "):\n"}),
    )
    .await;
    assert_eq!(r.status, 501, "{}", r.text());
    assert!(r.text().contains("prefix token is missing"), "{}", r.text());
    srv.stop().await.unwrap();
}

/// The FIM layout on a vocabulary that has the tokens (StarCoder's).
#[test]
fn infill_layout_with_fim_tokens() {
    use llama_server::infill::{extra_chunks, format_infill, ExtraChunk, InfillLimits};
    let Some(dir) = test_support::fixtures_with("vocab") else {
        return;
    };
    let file = gguf::GgufFile::open(dir.join("vocab/ggml-vocab-starcoder.gguf")).unwrap();
    let vocab = llama::vocab::Vocab::from_gguf(&file).unwrap();
    let sp = *vocab.special();
    let (pre, suf, mid) = (
        sp.fim_pre.unwrap(),
        sp.fim_suf.unwrap(),
        sp.fim_mid.unwrap(),
    );
    let lim = InfillLimits {
        n_batch: 64,
        n_predict: -1,
        n_ctx: 256,
        spm: false,
    };
    let extra = vec![ExtraChunk {
        filename: "a.py".into(),
        text: "x = 1\n".into(),
    }];
    let t = format_infill(&vocab, "def f(", "):\n", &extra, &[], lim).unwrap();
    let tok = |s: &str| vocab.tokenize(s, false, false);
    let mut want = Vec::new();
    if let Some(rep) = sp.fim_rep {
        want.push(rep);
        want.extend(tok("myproject\n"));
    }
    match sp.fim_sep {
        Some(sep) => {
            want.push(sep);
            want.extend(tok("a.py\n"));
            want.extend(tok("x = 1\n"));
            want.push(sep);
            want.extend(tok("filename\n"));
        }
        None => {
            want.extend(tok("\n\n--- snippet ---\n\n"));
            want.extend(tok("x = 1\n"));
        }
    }
    want.push(pre);
    want.extend(tok("def f("));
    want.push(suf);
    want.extend(tok("):\n"));
    want.push(mid);
    assert_eq!(t, want);
    // Suffix first with --spm-infill; a long prefix keeps its end.
    let spm = format_infill(
        &vocab,
        "a",
        "b",
        &[],
        &[],
        InfillLimits { spm: true, ..lim },
    )
    .unwrap();
    let i_suf = spm.iter().position(|&x| x == suf).unwrap();
    let i_pre = spm.iter().position(|&x| x == pre).unwrap();
    assert!(i_suf < i_pre);
    let long = "y = 2\n".repeat(100);
    let t = format_infill(&vocab, &long, "", &[], &[], lim).unwrap();
    let i_pre = t.iter().position(|&x| x == pre).unwrap();
    let i_suf = t.iter().position(|&x| x == suf).unwrap();
    assert_eq!(i_suf - i_pre - 1, 48);
    // input_extra is checked.
    let body = |v: Value| llama_server::request::parse(v.to_string().as_bytes()).unwrap();
    assert!(extra_chunks(&body(json!({"input_extra": "x"}))).is_err());
    assert!(extra_chunks(&body(json!({"input_extra": [{"filename": "a"}]}))).is_err());
    assert!(extra_chunks(&body(
        json!({"input_extra": [{"text": "a", "filename": 3}]})
    ))
    .is_err());
    assert_eq!(
        extra_chunks(&body(json!({"input_extra": [{"text": "a"}]}))).unwrap()[0].filename,
        "tmp"
    );
}
