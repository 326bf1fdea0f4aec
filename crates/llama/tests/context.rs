//! Context behaviour: batch validation, sequences, context shift, and no
//! allocation after the reservation.

mod common;

use common::fixtures;
use llama::{Batch, Context, ContextParams, LlamaError, Model, ModelParams};
use test_support::greedy_token;

fn load(fx: &std::path::Path) -> Model {
    Model::load(fx.join("models/stories260K.gguf"), &ModelParams::default()).expect("load")
}

fn params() -> ContextParams {
    ContextParams {
        n_ctx: 256,
        n_threads: 2,
        n_threads_batch: 2,
        ..ContextParams::default()
    }
}

#[test]
fn bad_batches_are_clear_errors() {
    let Some(fx) = fixtures() else { return };
    let model = load(&fx);
    let mut ctx = Context::new(
        &model,
        ContextParams {
            n_batch: 16,
            ..params()
        },
    )
    .unwrap();
    let err = |ctx: &mut Context<'_>, b: &Batch| match ctx.decode(b) {
        Err(e @ LlamaError::Batch(_)) => e.to_string(),
        other => panic!("expected a batch error, got {other:?}"),
    };
    assert!(err(&mut ctx, &Batch::new()).contains("empty"));
    assert!(err(&mut ctx, &Batch::get_one(&[1, 9999])).contains("outside the vocabulary"));
    assert!(err(&mut ctx, &Batch::get_one(&[1; 17])).contains("n_batch"));
    let mut b = Batch::new();
    b.add(1, 0, &[1], true);
    assert!(err(&mut ctx, &b).contains("n_seq_max"));
    let mut b = Batch::new();
    b.add(1, 5, &[0], false);
    b.add(2, 5, &[0], true);
    assert!(err(&mut ctx, &b).contains("must increase"));
    // A failed decode leaves the cache untouched.
    assert_eq!(ctx.kv().expect("a KV cache").used(), 0);
    ctx.decode(&Batch::get_one(&[1, 403])).unwrap();
    assert_eq!(ctx.seq_pos_max(0), 1);
    let mut b = Batch::new();
    b.add(5, 1, &[0], true);
    assert!(err(&mut ctx, &b).contains("already reaches position 1"));
}

#[test]
fn context_full_is_an_error_not_a_panic() {
    let Some(fx) = fixtures() else { return };
    let model = load(&fx);
    let mut ctx = Context::new(
        &model,
        ContextParams {
            n_ctx: 32,
            // Flash attention would pad the context to 256 cells.
            flash_attn_type: llama::context::FlashAttnType::Disabled,
            ..params()
        },
    )
    .unwrap();
    ctx.decode(&Batch::get_one(&[1; 30])).unwrap();
    let e = ctx.decode(&Batch::get_one(&[1; 5])).unwrap_err();
    assert!(e.to_string().contains("no room in the KV cache"), "{e}");
}

#[test]
fn decoding_allocates_nothing_after_reservation() {
    let Some(fx) = fixtures() else { return };
    let model = load(&fx);
    let mut ctx = Context::new(
        &model,
        ContextParams {
            n_ctx: 512,
            ..params()
        },
    )
    .unwrap();
    let before = ctx.scheduler().n_buffer_allocs();
    let prompt = model.vocab.tokenize("Once upon a time", true, true);
    ctx.decode(&Batch::get_one(&prompt)).unwrap();
    let mut tok = greedy_token(ctx.logits_ith(-1).unwrap());
    for _ in 0..200 {
        ctx.decode(&Batch::get_one(&[tok])).unwrap();
        tok = greedy_token(ctx.logits_ith(-1).unwrap());
    }
    assert_eq!(
        ctx.scheduler().n_buffer_allocs(),
        before,
        "decoding reallocated compute buffers"
    );
}

#[test]
fn sequences_are_independent() {
    let Some(fx) = fixtures() else { return };
    let model = load(&fx);
    let toks_a = model.vocab.tokenize("Once upon a time", true, true);
    let toks_b = model.vocab.tokenize("The dog ran to the park", true, true);
    let solo = |toks: &[i32]| {
        let mut ctx = Context::new(&model, params()).unwrap();
        ctx.decode(&Batch::get_one(toks)).unwrap();
        ctx.logits_ith(-1).unwrap().to_vec()
    };
    let (la, lb) = (solo(&toks_a), solo(&toks_b));
    let mut ctx = Context::new(
        &model,
        ContextParams {
            n_seq_max: 2,
            ..params()
        },
    )
    .unwrap();
    let mut b = Batch::new();
    for (i, &t) in toks_a.iter().enumerate() {
        b.add(t, i as i32, &[0], i + 1 == toks_a.len());
    }
    for (i, &t) in toks_b.iter().enumerate() {
        b.add(t, i as i32, &[1], i + 1 == toks_b.len());
    }
    ctx.decode(&b).unwrap();
    let ga = ctx.logits_ith(toks_a.len() as i32 - 1).unwrap();
    let gb = ctx.logits_ith(-1).unwrap();
    let diff = |x: &[f32], y: &[f32]| {
        x.iter()
            .zip(y)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max)
    };
    assert!(
        diff(ga, &la) < 1e-3,
        "sequence 0 differs: {}",
        diff(ga, &la)
    );
    assert!(
        diff(gb, &lb) < 1e-3,
        "sequence 1 differs: {}",
        diff(gb, &lb)
    );
    // Removing sequence 1 and keeping 0 leaves sequence 0's continuation intact.
    assert!(ctx.seq_rm(1, -1, -1));
    assert_eq!(ctx.seq_pos_max(1), -1);
    ctx.seq_cp(0, 1, -1, -1);
    ctx.seq_keep(1);
    assert_eq!(ctx.seq_pos_max(0), -1);
    assert_eq!(ctx.seq_pos_max(1), toks_a.len() as i32 - 1);
}

#[test]
fn seq_rm_and_redecode_reproduces_logits() {
    let Some(fx) = fixtures() else { return };
    let model = load(&fx);
    let toks = model
        .vocab
        .tokenize("Once upon a time there was", true, true);
    let mut ctx = Context::new(&model, params()).unwrap();
    ctx.decode(&Batch::get_one(&toks)).unwrap();
    let first = ctx.logits_ith(-1).unwrap().to_vec();
    // Drop the last two tokens and decode them again.
    let n = toks.len() as i32;
    assert!(ctx.seq_rm(0, n - 2, -1));
    let mut b = Batch::new();
    b.add(toks[toks.len() - 2], n - 2, &[0], false);
    b.add(toks[toks.len() - 1], n - 1, &[0], true);
    ctx.decode(&b).unwrap();
    let again = ctx.logits_ith(-1).unwrap();
    let d = first
        .iter()
        .zip(again)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(d < 1e-3, "re-decoded logits differ by {d}");
}

#[test]
fn context_shift_rerotates_keys() {
    let Some(fx) = fixtures() else { return };
    let model = load(&fx);
    let toks = model
        .vocab
        .tokenize("Once upon a time there was a little girl", true, true);
    let n = toks.len() as i32 - 1;
    let delta = 37;
    let decode_at = |ctx: &mut Context<'_>, start: i32, toks: &[i32]| {
        let mut b = Batch::new();
        for (i, &t) in toks.iter().enumerate() {
            b.add(t, start + i as i32, &[0], i + 1 == toks.len());
        }
        ctx.decode(&b).unwrap();
    };
    // Reference: the whole sequence decoded at positions delta.. (rope is
    // relative, so only the absolute offset differs).
    let mut ref_ctx = Context::new(&model, params()).unwrap();
    decode_at(&mut ref_ctx, delta, &toks);
    let want = ref_ctx.logits_ith(-1).unwrap().to_vec();
    for (start, shift) in [(0, delta), (2 * delta, -delta)] {
        let mut ctx = Context::new(&model, params()).unwrap();
        decode_at(&mut ctx, start, &toks[..n as usize]);
        ctx.seq_add(0, -1, -1, shift);
        assert_eq!(ctx.seq_pos_max(0), delta + n - 1);
        decode_at(&mut ctx, delta + n, &toks[n as usize..]);
        let got = ctx.logits_ith(-1).unwrap();
        let d = want
            .iter()
            .zip(got)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        // K is stored in F16 and rotated twice: allow its rounding.
        assert!(d < 0.05, "shift {shift}: logits differ by {d}");
        assert_eq!(greedy_token(got), greedy_token(&want));
    }
}

#[test]
fn bad_context_params() {
    let Some(fx) = fixtures() else { return };
    let model = load(&fx);
    assert!(Context::new(
        &model,
        ContextParams {
            n_seq_max: 0,
            ..params()
        }
    )
    .is_err());
    assert!(Context::new(
        &model,
        ContextParams {
            n_ubatch: 0,
            ..params()
        }
    )
    .is_err());
    let e = Context::new(
        &model,
        ContextParams {
            flash_attn_type: llama::context::FlashAttnType::Enabled,
            type_k: ggml_core::Type::Q8_0,
            ..params()
        },
    )
    .err()
    .unwrap()
    .to_string();
    assert!(
        e.contains("flash attention with a quantized KV cache"),
        "{e}"
    );
    let vocab_only = Model::load(
        fx.join("models/stories260K.gguf"),
        &ModelParams {
            vocab_only: true,
            ..ModelParams::default()
        },
    )
    .unwrap();
    assert!(Context::new(&vocab_only, params()).is_err());
    // stories260K's heads are 8 wide: no block type fits.
    let e = Context::new(
        &model,
        ContextParams {
            type_v: ggml_core::Type::Q8_0,
            ..params()
        },
    )
    .err()
    .unwrap()
    .to_string();
    assert!(e.contains("V cache type Q8_0 needs head width 8"), "{e}");
}
