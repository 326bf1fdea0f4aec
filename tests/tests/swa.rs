//! Sliding-window attention: sequence edits on a model with sliding-window
//! layers (tiny-gemma3: window 16, layers 0-4 local) keep generation equal to
//! a fresh decode of the same tokens.

use llama::context::FlashAttnType;
use llama::{Batch, Context, ContextParams, Model};
use tests::{argmax, cpu_params, fixtures, max_abs_diff};

fn model() -> Option<Model> {
    let fx = fixtures()?;
    Some(Model::load(fx.join("models/tiny-gemma3-f32.gguf"), &cpu_params()).expect("load"))
}

fn params() -> ContextParams {
    ContextParams {
        n_ctx: 256,
        n_batch: 64,
        n_ubatch: 64,
        n_threads: 2,
        n_threads_batch: 2,
        flash_attn_type: FlashAttnType::Enabled,
        ..ContextParams::default()
    }
}

/// Story-like token ids of the 512-token vocabulary.
fn tokens(n: usize) -> Vec<i32> {
    (0..n).map(|i| 3 + ((i * 37 + 11) % 500) as i32).collect()
}

fn decode_at(ctx: &mut Context<'_>, toks: &[i32], pos0: i32) {
    let mut b = Batch::new();
    for (i, &t) in toks.iter().enumerate() {
        b.add(t, pos0 + i as i32, &[0], i + 1 == toks.len());
    }
    ctx.decode(&b).expect("decode");
}

/// Greedy continuation of what the context holds; returns ids and the
/// logits of the first step.
fn continue_greedy(ctx: &mut Context<'_>, mut pos: i32, n: usize) -> (Vec<i32>, Vec<f32>) {
    let first = ctx.logits_ith(-1).expect("logits").to_vec();
    let mut out = Vec::new();
    for _ in 0..n {
        let t = argmax(ctx.logits_ith(-1).expect("logits")) as i32;
        out.push(t);
        decode_at(ctx, &[t], pos);
        pos += 1;
    }
    (out, first)
}

#[test]
fn seq_rm_keeps_generation_equal_to_a_fresh_decode() {
    let Some(m) = model() else { return };
    {
        let t = tokens(60);
        let mut fresh = Context::new(&m, params()).expect("context");
        let mut want_toks = t[..30].to_vec();
        want_toks.extend_from_slice(&t[45..55]);
        decode_at(&mut fresh, &want_toks, 0);
        let (want, want_l) = continue_greedy(&mut fresh, 40, 12);

        let mut edited = Context::new(&m, params()).expect("context");
        decode_at(&mut edited, &t[..30], 0);
        // Decode a branch that is then removed; positions 30.. are reused.
        decode_at(&mut edited, &t[30..50], 30);
        edited.seq_rm(0, 30, -1);
        decode_at(&mut edited, &t[45..55], 30);
        let (got, got_l) = continue_greedy(&mut edited, 40, 12);
        assert_eq!(got, want, "generation after seq_rm");
        let d = max_abs_diff(&got_l, &want_l);
        assert!(d < 1e-3, "logits differ by {d}");
    }
}

#[test]
fn seq_add_keeps_generation_equal_to_a_fresh_decode() {
    let Some(m) = model() else { return };
    // Attention sees only position differences (rope is relative, the
    // window is a difference), so a sequence decoded at positions 50.. and
    // shifted back to 0.. must continue exactly like one decoded at 0..
    // (up to the F16 rounding of the re-rotated keys).
    let t = tokens(40);
    let mut fresh = Context::new(&m, params()).expect("context");
    decode_at(&mut fresh, &t, 0);
    let (want, want_l) = continue_greedy(&mut fresh, 40, 12);

    let mut shifted = Context::new(&m, params()).expect("context");
    decode_at(&mut shifted, &t, 50);
    shifted.seq_add(0, 50, -1, -50);
    assert_eq!(shifted.seq_pos_max(0), 39);
    // The K shift runs with the next decode; the logits before it are the
    // pre-shift ones, so compare from the first token decoded after it.
    let next = want[0];
    decode_at(&mut shifted, &[next], 40);
    let first = shifted.logits_ith(-1).expect("logits").to_vec();
    let (rest, _) = continue_greedy(&mut shifted, 41, 11);
    let mut got = vec![next];
    got.extend(rest);
    assert_eq!(got, want, "generation after seq_add");
    let mut fresh2 = Context::new(&m, params()).expect("context");
    decode_at(&mut fresh2, &t, 0);
    decode_at(&mut fresh2, &[next], 40);
    let d = max_abs_diff(&first, fresh2.logits_ith(-1).expect("logits"));
    let _ = want_l;
    assert!(d < 0.05, "logits after the shift differ by {d}");
}
