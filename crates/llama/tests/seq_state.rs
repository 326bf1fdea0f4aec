//! Saving and restoring one sequence's state: the continuation after a
//! restore equals the one without (attention, sliding-window, recurrent and
//! hybrid memories, with and without flash attention), into another
//! sequence or another context; states of another model, damaged states and
//! states larger than the cache are refused with the sequence left empty.

mod common;

use common::{fixtures, load_on_cpu, scratch};
use llama::context::FlashAttnType;
use llama::{Batch, Context, ContextParams, LlamaError, Model};

fn params(n_seq: usize, fa: FlashAttnType) -> ContextParams {
    ContextParams {
        n_ctx: 256,
        n_seq_max: n_seq,
        n_threads: 2,
        n_threads_batch: 2,
        flash_attn_type: fa,
        ..ContextParams::default()
    }
}

fn prompt(model: &Model, n: usize) -> Vec<i32> {
    let n_vocab = model.hparams.n_vocab as i32;
    (0..n as i32).map(|i| (i * 7 + 3) % n_vocab).collect()
}

/// Decodes `toks` into `seq` from position `pos0`; the logits of the last.
fn decode(ctx: &mut Context<'_>, seq: i32, pos0: i32, toks: &[i32]) -> Vec<f32> {
    let mut b = Batch::new();
    for (i, &t) in toks.iter().enumerate() {
        b.add(t, pos0 + i as i32, &[seq], i + 1 == toks.len());
    }
    ctx.decode(&b).unwrap();
    ctx.logits_ith(-1).unwrap().to_vec()
}

/// Largest difference relative to the largest logit (at least 1).
fn assert_close(a: &[f32], b: &[f32], tol: f32, what: &str) {
    assert_eq!(a.len(), b.len());
    let d = a
        .iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max);
    let scale = a.iter().map(|x| x.abs()).fold(1f32, f32::max);
    assert!(
        d / scale < tol,
        "{what}: max difference {d} (scale {scale})"
    );
}

/// Decodes a prompt, saves the state, decodes 3 more tokens; restores the
/// state into another sequence of the same context and decodes the same 3
/// tokens: the logits agree. Then saves the longer state to a file, loads
/// it into a fresh context (with `fa_restore`'s attention path) and
/// compares the next token's logits.
fn round_trip(file: &str, fa: FlashAttnType, fa_restore: FlashAttnType) {
    let Some(fx) = fixtures() else { return };
    let model = load_on_cpu(&fx.join("models").join(file));
    let toks = prompt(&model, 40);
    let next = [5, 9, 11];
    let mut ctx = Context::new(&model, params(2, fa)).unwrap();
    decode(&mut ctx, 0, 0, &toks);
    let state = ctx.state_seq_get_data(0, &toks).unwrap();
    let want = decode(&mut ctx, 0, 40, &next);

    let got_toks = ctx.state_seq_set_data(1, &state).unwrap();
    assert_eq!(got_toks, toks);
    assert_eq!(ctx.seq_pos_max(1), 39);
    let got = decode(&mut ctx, 1, 40, &next);
    assert_close(&want, &got, 1e-5, &format!("{file}: same context"));

    let mut all = toks.clone();
    all.extend(next);
    let dir = scratch(&format!("seq_state_{file}"));
    let path = dir.join("slot.bin");
    let n = ctx.state_seq_save_file(&path, 0, &all).unwrap();
    let want2 = decode(&mut ctx, 0, 43, &[17]);
    drop(ctx);
    let mut ctx2 = Context::new(&model, params(1, fa_restore)).unwrap();
    let (back, read) = ctx2.state_seq_load_file(&path, 0).unwrap();
    assert_eq!(back, all);
    assert_eq!(read, n);
    assert_eq!(ctx2.seq_pos_max(0), 42);
    let got2 = decode(&mut ctx2, 0, 43, &[17]);
    if fa == fa_restore {
        // Same numbers up to the summation over a different number of
        // (masked) cells.
        assert_close(
            &want2,
            &got2,
            1e-4,
            &format!("{file}: fresh context from a file"),
        );
    } else {
        // The keys and values were computed on the other attention path:
        // compare with this path decoding everything itself. Values read
        // back in the wrong layout would be off by the logits' own scale.
        let mut ctx3 = Context::new(&model, params(1, fa_restore)).unwrap();
        decode(&mut ctx3, 0, 0, &all);
        let want3 = decode(&mut ctx3, 0, 43, &[17]);
        assert_close(
            &want3,
            &got2,
            2e-2,
            &format!("{file}: other attention path"),
        );
    }
}

#[test]
fn attention_state_round_trip() {
    round_trip(
        "tiny-f32.gguf",
        FlashAttnType::Disabled,
        FlashAttnType::Enabled,
    );
}

#[test]
fn attention_state_round_trip_flash() {
    round_trip(
        "tiny-q8_0.gguf",
        FlashAttnType::Enabled,
        FlashAttnType::Disabled,
    );
}

#[test]
fn sliding_window_state_round_trip() {
    round_trip(
        "tiny-gemma3-f32.gguf",
        FlashAttnType::Disabled,
        FlashAttnType::Disabled,
    );
}

#[test]
fn recurrent_state_round_trip() {
    round_trip(
        "tiny-mamba-f32.gguf",
        FlashAttnType::Auto,
        FlashAttnType::Auto,
    );
}

#[test]
fn hybrid_state_round_trip() {
    round_trip(
        "tiny-granitehybrid-f32.gguf",
        FlashAttnType::Disabled,
        FlashAttnType::Disabled,
    );
}

fn state_err(r: llama::Result<Vec<i32>>) -> String {
    match r {
        Err(e @ LlamaError::State(_)) => e.to_string(),
        other => panic!("expected a state error, got {other:?}"),
    }
}

#[test]
fn foreign_and_damaged_states_are_refused() {
    let Some(fx) = fixtures() else { return };
    let a = load_on_cpu(&fx.join("models/tiny-f32.gguf"));
    let b = load_on_cpu(&fx.join("models/stories260K.gguf"));
    let c = load_on_cpu(&fx.join("models/tiny-f16.gguf"));
    let mut ca = Context::new(&a, params(1, FlashAttnType::Disabled)).unwrap();
    let toks = prompt(&a, 20);
    decode(&mut ca, 0, 0, &toks);
    let state = ca.state_seq_get_data(0, &toks).unwrap();

    for other in [&b, &c] {
        let mut cb = Context::new(other, params(1, FlashAttnType::Disabled)).unwrap();
        decode(&mut cb, 0, 0, &[1, 2, 3]);
        let e = state_err(cb.state_seq_set_data(0, &state));
        assert!(e.contains("another model"), "{e}");
        // Refused before anything changed.
        assert_eq!(cb.seq_pos_max(0), 2);
    }

    // Damaged: truncated, bad magic, trailing bytes.
    let mut ca2 = Context::new(&a, params(1, FlashAttnType::Disabled)).unwrap();
    for cut in [3, 20, state.len() / 2, state.len() - 1] {
        let e = state_err(ca2.state_seq_set_data(0, &state[..cut]));
        assert!(e.contains("truncated") || e.contains("magic"), "{cut}: {e}");
        assert_eq!(ca2.seq_pos_max(0), -1);
    }
    let mut bad = state.clone();
    bad[0] = b'X';
    assert!(state_err(ca2.state_seq_set_data(0, &bad)).contains("magic"));
    let mut long = state.clone();
    long.push(0);
    assert!(state_err(ca2.state_seq_set_data(0, &long)).contains("left"));
    // Out-of-range sequence.
    assert!(ca2.state_seq_set_data(3, &state).is_err());
    // A missing file names the file.
    let e = ca2
        .state_seq_load_file("/nonexistent/slot.bin", 0)
        .unwrap_err();
    assert!(e.to_string().contains("slot.bin"), "{e}");
}

/// Random damage anywhere in a state (flipped, dropped or added bytes):
/// every load is refused with a state error or succeeds, never panics, and
/// the context still decodes afterwards.
#[test]
fn randomly_damaged_states_never_panic() {
    let Some(fx) = fixtures() else { return };
    for file in ["tiny-f32.gguf", "tiny-mamba-f32.gguf"] {
        let m = load_on_cpu(&fx.join("models").join(file));
        let mut ctx = Context::new(&m, params(1, FlashAttnType::Disabled)).unwrap();
        let toks = prompt(&m, 12);
        decode(&mut ctx, 0, 0, &toks);
        let state = ctx.state_seq_get_data(0, &toks).unwrap();
        let mut rng = test_support::Rng(41);
        for _ in 0..500 {
            let mut bad = state.clone();
            for _ in 0..rng.range(1, 5) {
                let at = rng.below(bad.len());
                match rng.below(4) {
                    0 => bad[at] ^= 1 << rng.below(8),
                    1 => bad[at] = 0xff,
                    2 => {
                        bad.remove(at);
                    }
                    _ => bad.insert(at, rng.next_u32() as u8),
                }
            }
            match ctx.state_seq_set_data(0, &bad) {
                Ok(_) | Err(LlamaError::State(_)) => {}
                Err(e) => panic!("{file}: not a state error: {e}"),
            }
        }
        let _ = ctx.seq_rm(0, -1, -1);
        decode(&mut ctx, 0, 0, &toks);
    }
}

#[test]
fn a_state_larger_than_the_cache_is_refused() {
    let Some(fx) = fixtures() else { return };
    let model = load_on_cpu(&fx.join("models/tiny-f32.gguf"));
    let mut big = Context::new(
        &model,
        ContextParams {
            n_ctx: 512,
            ..params(1, FlashAttnType::Disabled)
        },
    )
    .unwrap();
    let toks = prompt(&model, 300);
    decode(&mut big, 0, 0, &toks);
    let state = big.state_seq_get_data(0, &toks).unwrap();
    let mut small = Context::new(&model, params(1, FlashAttnType::Disabled)).unwrap();
    let e = state_err(small.state_seq_set_data(0, &state));
    assert!(e.contains("300"), "{e}");
    assert_eq!(small.seq_pos_max(0), -1);
}

/// A partial state (a context checkpoint) of `file` taken after `n`
/// prompt tokens: the sequence then moves on by `more` tokens (in chunks of
/// 64); restoring the partial state and dropping the full-attention cells
/// past `n` continues as a context that decoded only the `n` tokens. The
/// partial state is smaller than the whole one, and the two never load as
/// each other. Returns whether the memory could drop the positions past
/// `n` without the checkpoint.
fn partial_state_restores(file: &str, n: usize, more: usize) -> Option<bool> {
    let fx = fixtures()?;
    let model = load_on_cpu(&fx.join("models").join(file));
    let p = ContextParams {
        n_ctx: 2048,
        ..params(1, FlashAttnType::Disabled)
    };
    let toks = prompt(&model, n + more);
    let next = [5, 9, 11];
    let mut ctx = Context::new(&model, p.clone()).unwrap();
    decode(&mut ctx, 0, 0, &toks[..n]);
    let parts = llama::memory::StateParts::RollbackOnly;
    let ck = ctx.state_seq_get_data_parts(0, &toks[..n], parts).unwrap();
    let whole = ctx.state_seq_get_data(0, &toks[..n]).unwrap();
    if ctx.mem.kv().is_some() {
        assert!(
            ck.len() < whole.len(),
            "{file}: {} >= {}",
            ck.len(),
            whole.len()
        );
    }
    for c in toks[n..].chunks(64) {
        let pos = ctx.seq_pos_max(0) + 1;
        decode(&mut ctx, 0, pos, c);
    }
    // Neither kind of state loads as the other.
    let e = state_err(ctx.state_seq_set_data(0, &ck));
    assert!(e.contains("partial"), "{e}");
    let e = state_err(ctx.state_seq_set_data_parts(0, &whole, parts));
    assert!(e.contains("partial"), "{e}");
    // Refused before anything changed.
    assert_eq!(ctx.seq_pos_max(0), (n + more) as i32 - 1);
    let mut probe = Context::new(&model, p.clone()).unwrap();
    decode(&mut probe, 0, 0, &toks);
    let could_drop = probe.seq_rm(0, n as i32, -1);

    let back = ctx.state_seq_set_data_parts(0, &ck, parts).unwrap();
    assert_eq!(back, toks[..n]);
    assert!(
        ctx.seq_rm(0, n as i32, -1),
        "{file}: cells past the checkpoint"
    );
    assert_eq!(ctx.seq_pos_max(0), n as i32 - 1);
    let got = decode(&mut ctx, 0, n as i32, &next);
    let mut fresh = Context::new(&model, p).unwrap();
    decode(&mut fresh, 0, 0, &toks[..n]);
    let want = decode(&mut fresh, 0, n as i32, &next);
    assert_close(&want, &got, 1e-4, &format!("{file}: after the checkpoint"));
    Some(could_drop)
}

#[test]
fn sliding_window_checkpoint_restores_the_window() {
    // Window 16, a sliding-window cache of 768 cells: 1000 more tokens
    // reuse the cells of the first 300's window, which only the checkpoint
    // still holds.
    if let Some(could_drop) = partial_state_restores("tiny-gemma3-f32.gguf", 300, 1000) {
        assert!(!could_drop, "the window should have been given up");
    }
}

#[test]
fn recurrent_checkpoints_restore_the_state() {
    for file in ["tiny-granitehybrid-f32.gguf", "tiny-mamba-f32.gguf"] {
        if let Some(could_drop) = partial_state_restores(file, 40, 10) {
            assert!(!could_drop, "{file}: a recurrent state cannot go back");
        }
    }
}
