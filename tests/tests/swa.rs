//! Sliding-window attention with its own, smaller KV cache: sequence edits
//! on a model with sliding-window layers (tiny-gemma3: window 16, layers 0-4
//! local) keep generation equal to a fresh decode of the same tokens, with
//! the small cache (whose cells are reused past the window) and with
//! full-size caches (`swa_full`); a removal the small cache can no longer
//! honour is refused and changes nothing.

use llama::context::FlashAttnType;
use llama::{Batch, Context, ContextParams, Model};
use tests::{argmax, cpu_params, fixtures, max_abs_diff};

fn model() -> Option<Model> {
    let fx = fixtures()?;
    Some(Model::load(fx.join("models/tiny-gemma3-f32.gguf"), &cpu_params()).expect("load"))
}

/// A context of 1024 cells whose sliding-window cache has 256 (window 16
/// plus a ubatch of 64, padded), unless `swa_full`. F32 caches: the
/// caches' cells come in different orders, which F16 rounding inside
/// attention would turn into differences that hide what is tested.
fn params(swa_full: bool) -> ContextParams {
    ContextParams {
        type_k: ggml_core::Type::F32,
        type_v: ggml_core::Type::F32,
        n_ctx: 1024,
        n_batch: 64,
        n_ubatch: 64,
        n_threads: 2,
        n_threads_batch: 2,
        flash_attn_type: FlashAttnType::Enabled,
        swa_full,
        ..ContextParams::default()
    }
}

fn context(m: &Model, swa_full: bool) -> Context<'_> {
    let ctx = Context::new(m, params(swa_full)).expect("context");
    let swa = ctx
        .kv()
        .expect("a KV cache")
        .swa
        .as_ref()
        .expect("a sliding-window cache")
        .size;
    assert_eq!(swa, if swa_full { 1024 } else { 256 });
    assert_eq!(ctx.can_shift(), swa_full);
    ctx
}

/// Story-like token ids of the 512-token vocabulary.
fn tokens(n: usize) -> Vec<i32> {
    (0..n).map(|i| 3 + ((i * 37 + 11) % 500) as i32).collect()
}

/// Decodes `toks` at `pos0..` in batches of 64; logits for the last.
fn decode_at(ctx: &mut Context<'_>, toks: &[i32], pos0: i32) {
    for (k, chunk) in toks.chunks(64).enumerate() {
        let mut b = Batch::new();
        let base = pos0 + 64 * k as i32;
        for (i, &t) in chunk.iter().enumerate() {
            let last = k * 64 + i + 1 == toks.len();
            b.add(t, base + i as i32, &[0], last);
        }
        ctx.decode(&b).expect("decode");
    }
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
    let t = tokens(400);
    let mut want_toks = t[..300].to_vec();
    want_toks.extend_from_slice(&t[345..355]);
    for swa_full in [false, true] {
        let mut fresh = context(&m, swa_full);
        decode_at(&mut fresh, &want_toks, 0);
        let (want, want_l) = continue_greedy(&mut fresh, 310, 12);

        let mut edited = context(&m, swa_full);
        decode_at(&mut edited, &t[..300], 0);
        // A branch that is then removed; its cells (and, in the small
        // cache, cells of positions that left the window) are reused.
        decode_at(&mut edited, &t[300..350], 300);
        if !swa_full {
            assert!(edited.seq_pos_min(0) > 0, "no cell was reused");
        }
        assert!(
            edited.seq_rm(0, 300, -1),
            "swa_full {swa_full}: seq_rm refused"
        );
        assert_eq!(edited.seq_pos_max(0), 299);
        decode_at(&mut edited, &t[345..355], 300);
        let (got, got_l) = continue_greedy(&mut edited, 310, 12);
        assert_eq!(got, want, "swa_full {swa_full}: generation after seq_rm");
        let d = max_abs_diff(&got_l, &want_l);
        assert!(d < 1e-3, "swa_full {swa_full}: logits differ by {d}");
    }
}

#[test]
fn seq_rm_into_a_dropped_window_is_refused() {
    let Some(m) = model() else { return };
    let t = tokens(320);
    let mut ctx = context(&m, false);
    decode_at(&mut ctx, &t[..300], 0);
    let min = ctx.seq_pos_min(0);
    assert!(min > 16, "the small cache still holds position {min}");
    // Keeping positions 0..20 would need 5..19 in the window of position
    // 20, long since overwritten: refused, nothing changes.
    assert!(!ctx.seq_rm(0, 20, -1));
    assert_eq!(ctx.seq_pos_max(0), 299);
    assert_eq!(ctx.seq_pos_min(0), min);
    // Decoding goes on as if nothing had been asked.
    decode_at(&mut ctx, &t[300..310], 300);
    let got = ctx.logits_ith(-1).expect("logits").to_vec();
    let mut fresh = context(&m, false);
    decode_at(&mut fresh, &t[..310], 0);
    let d = max_abs_diff(&got, fresh.logits_ith(-1).expect("logits"));
    assert!(d < 1e-3, "logits after a refused seq_rm differ by {d}");
    // The full-size caches honour the same removal, and removing a whole
    // sequence always works.
    let mut full = context(&m, true);
    decode_at(&mut full, &t[..300], 0);
    assert!(full.seq_rm(0, 20, -1));
    assert_eq!(full.seq_pos_max(0), 19);
    assert!(ctx.seq_rm(0, -1, -1));
    assert_eq!(ctx.seq_pos_max(0), -1);
    assert_eq!(ctx.seq_pos_min(0), -1);
}

#[test]
fn seq_add_keeps_generation_equal_to_a_fresh_decode() {
    let Some(m) = model() else { return };
    // Attention sees only position differences (rope is relative, the
    // window is a difference), so a sequence decoded at positions 50.. and
    // shifted back to 0.. must continue exactly like one decoded at 0..
    // (up to the rounding of the re-rotated keys). 300 tokens: the small
    // cache has reused cells by then.
    let t = tokens(300);
    let n = t.len() as i32;
    for swa_full in [false, true] {
        let mut fresh = context(&m, swa_full);
        decode_at(&mut fresh, &t, 0);
        let (want, _) = continue_greedy(&mut fresh, n, 12);

        let mut shifted = context(&m, swa_full);
        decode_at(&mut shifted, &t, 50);
        shifted.seq_add(0, 50, -1, -50);
        assert_eq!(shifted.seq_pos_max(0), n - 1);
        // The K shift runs with the next decode; the logits before it are
        // the pre-shift ones, so compare from the first token decoded after.
        let next = want[0];
        decode_at(&mut shifted, &[next], n);
        let first = shifted.logits_ith(-1).expect("logits").to_vec();
        let (rest, _) = continue_greedy(&mut shifted, n + 1, 11);
        let mut got = vec![next];
        got.extend(rest);
        assert_eq!(got, want, "swa_full {swa_full}: generation after seq_add");
        let mut fresh2 = context(&m, swa_full);
        decode_at(&mut fresh2, &t, 0);
        decode_at(&mut fresh2, &[next], n);
        // Within rounding of the largest logit (45 here): a wrong shift
        // moves logits by whole units.
        let d = max_abs_diff(&first, fresh2.logits_ith(-1).expect("logits"));
        let scale = first.iter().fold(0f32, |a, v| a.max(v.abs()));
        assert!(
            d < 5e-4 * scale,
            "swa_full {swa_full}: logits after the shift differ by {d} (largest {scale})"
        );
    }
}

#[test]
fn small_and_full_size_caches_give_the_same_logits() {
    let Some(m) = model() else { return };
    // Several sequences share the small cache: two prompts of 200 tokens,
    // then one token each, compared with full-size caches.
    let t = tokens(400);
    let run = |swa_full: bool| {
        let mut cp = params(swa_full);
        cp.n_seq_max = 2;
        let mut ctx = Context::new(&m, cp).expect("context");
        let mut out = Vec::new();
        for step in 0..4 {
            for s in 0..2i32 {
                let mut b = Batch::new();
                let from = step * 50;
                for i in 0..50 {
                    let tok = t[s as usize * 200 + from + i];
                    b.add(tok, (from + i) as i32, &[s], i == 49);
                }
                ctx.decode(&b).expect("decode");
                out.extend_from_slice(ctx.logits_ith(-1).expect("logits"));
            }
        }
        (ctx.kv().expect("a KV cache").size_bytes(), out)
    };
    let (small_bytes, small) = run(false);
    let (full_bytes, full) = run(true);
    assert!(small_bytes < full_bytes, "{small_bytes} >= {full_bytes}");
    let d = max_abs_diff(&small, &full);
    assert!(d < 1e-3, "small and full-size caches differ by {d}");
}
