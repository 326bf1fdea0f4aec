//! Sliding-window attention against a naive f64 forward pass that masks by
//! hand: a tiny gemma3 model (window 4, local layers from a per-layer
//! pattern array, local rope base different from the global one) decodes a
//! context three times longer than the window; every logit row must match
//! the reference, with flash attention on and off.

mod common;
mod f64_ref;

use f64_ref::{attend, matvec, rms_norm, rope, set_spm_vocab, tensor, write_f32, Tensors};
use gguf::Metadata;
use llama::context::FlashAttnType;
use llama::{Batch, Context, ContextParams};

const N_VOCAB: usize = 40;
const N_EMBD: usize = 32;
const N_LAYER: usize = 3;
const N_HEAD: usize = 4;
const N_HEAD_KV: usize = 2;
const HEAD: usize = 16;
const N_FF: usize = 48;
const WINDOW: usize = 4;
const LOCAL: [bool; N_LAYER] = [true, false, true];
const BASE_GLOBAL: f64 = 1e6;
const BASE_LOCAL: f64 = 1e4;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        ((self.0 >> 11) as f64 / (1u64 << 53) as f64) as f32 * 2.0 - 1.0
    }
}

fn make_model(path: &std::path::Path) -> Tensors {
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    let mut t: Tensors = Vec::new();
    let mut add = |name: String, dims: Vec<usize>, scale: f32, offset: f32| {
        let n: usize = dims.iter().product();
        let v = (0..n).map(|_| offset + scale * rng.next()).collect();
        t.push((name, dims, v));
    };
    add("token_embd.weight".into(), vec![N_EMBD, N_VOCAB], 0.2, 0.0);
    for il in 0..N_LAYER {
        let p = |n: &str| format!("blk.{il}.{n}");
        add(p("attn_norm.weight"), vec![N_EMBD], 0.1, 1.0);
        add(p("attn_q.weight"), vec![N_EMBD, HEAD * N_HEAD], 0.3, 0.0);
        add(p("attn_k.weight"), vec![N_EMBD, HEAD * N_HEAD_KV], 0.3, 0.0);
        add(p("attn_v.weight"), vec![N_EMBD, HEAD * N_HEAD_KV], 0.3, 0.0);
        add(p("attn_q_norm.weight"), vec![HEAD], 0.1, 1.0);
        add(p("attn_k_norm.weight"), vec![HEAD], 0.1, 1.0);
        add(
            p("attn_output.weight"),
            vec![HEAD * N_HEAD, N_EMBD],
            0.3,
            0.0,
        );
        add(p("post_attention_norm.weight"), vec![N_EMBD], 0.1, 1.0);
        add(p("ffn_norm.weight"), vec![N_EMBD], 0.1, 1.0);
        add(p("ffn_gate.weight"), vec![N_EMBD, N_FF], 0.3, 0.0);
        add(p("ffn_up.weight"), vec![N_EMBD, N_FF], 0.3, 0.0);
        add(p("ffn_down.weight"), vec![N_FF, N_EMBD], 0.2, 0.0);
        add(p("post_ffw_norm.weight"), vec![N_EMBD], 0.1, 1.0);
    }
    add("output_norm.weight".into(), vec![N_EMBD], 0.1, 1.0);
    let a = "gemma3";
    let mut md = Metadata::new();
    md.set("general.architecture", a);
    md.set(format!("{a}.context_length"), 256u32);
    md.set(format!("{a}.embedding_length"), N_EMBD as u32);
    md.set(format!("{a}.block_count"), N_LAYER as u32);
    md.set(format!("{a}.feed_forward_length"), N_FF as u32);
    md.set(format!("{a}.attention.head_count"), N_HEAD as u32);
    md.set(format!("{a}.attention.head_count_kv"), N_HEAD_KV as u32);
    md.set(format!("{a}.attention.key_length"), HEAD as u32);
    md.set(format!("{a}.attention.value_length"), HEAD as u32);
    md.set(format!("{a}.attention.layer_norm_rms_epsilon"), 1e-6f32);
    md.set(format!("{a}.attention.sliding_window"), WINDOW as u32);
    md.set(
        format!("{a}.attention.sliding_window_pattern"),
        LOCAL.to_vec(),
    );
    md.set(format!("{a}.rope.freq_base"), BASE_GLOBAL as f32);
    md.set(format!("{a}.rope.freq_base_swa"), BASE_LOCAL as f32);
    set_spm_vocab(&mut md, N_VOCAB);
    write_f32(path, &md, &t);
    t
}

fn get<'a>(t: &'a Tensors, name: &str) -> &'a [f32] {
    tensor(t, name).unwrap_or_else(|| panic!("{name}"))
}

fn rope_neox(x: &mut [f64], pos: usize, base: f64) {
    let n = x.len();
    rope(x, pos, n, true, base);
}

fn gelu(x: f64) -> f64 {
    0.5 * x * (1.0 + (0.797_884_560_802_865_4 * x * (1.0 + 0.044715 * x * x)).tanh())
}

fn add(a: &[f64], b: &[f64]) -> Vec<f64> {
    a.iter().zip(b).map(|(x, y)| x + y).collect()
}

/// The gemma3 forward pass; a local layer's token at p sees j with
/// p - j < window.
fn reference(t: &Tensors, tokens: &[i32], window: usize) -> Vec<Vec<f64>> {
    let embd = get(t, "token_embd.weight");
    let mut xs: Vec<Vec<f64>> = tokens
        .iter()
        .map(|&tk| {
            let row = &embd[tk as usize * N_EMBD..(tk as usize + 1) * N_EMBD];
            row.iter()
                .map(|&v| f64::from(v) * f64::from((N_EMBD as f32).sqrt()))
                .collect()
        })
        .collect();
    for (il, &local) in LOCAL.iter().enumerate() {
        let w = |n: &str| get(t, &format!("blk.{il}.{n}"));
        let base = if local { BASE_LOCAL } else { BASE_GLOBAL };
        let (mut qs, mut ks, mut vs) = (Vec::new(), Vec::new(), Vec::new());
        for (p, x) in xs.iter().enumerate() {
            let h = rms_norm(x, w("attn_norm.weight"));
            let mut q = matvec(w("attn_q.weight"), &h, None);
            let mut k = matvec(w("attn_k.weight"), &h, None);
            for hh in 0..N_HEAD {
                let r = &mut q[hh * HEAD..(hh + 1) * HEAD];
                let n = rms_norm(r, w("attn_q_norm.weight"));
                r.copy_from_slice(&n);
                rope_neox(r, p, base);
            }
            for hh in 0..N_HEAD_KV {
                let r = &mut k[hh * HEAD..(hh + 1) * HEAD];
                let n = rms_norm(r, w("attn_k_norm.weight"));
                r.copy_from_slice(&n);
                rope_neox(r, p, base);
            }
            qs.push(q);
            ks.push(k);
            vs.push(matvec(w("attn_v.weight"), &h, None));
        }
        for p in 0..xs.len() {
            let first = if local {
                (p + 1).saturating_sub(window)
            } else {
                0
            };
            let att = attend(&qs[p], &ks[first..=p], &vs[first..=p], N_HEAD, N_HEAD_KV);
            let o = rms_norm(
                &matvec(w("attn_output.weight"), &att, None),
                w("post_attention_norm.weight"),
            );
            let sa = add(&xs[p], &o);
            let h = rms_norm(&sa, w("ffn_norm.weight"));
            let g = matvec(w("ffn_gate.weight"), &h, None);
            let u = matvec(w("ffn_up.weight"), &h, None);
            let act: Vec<f64> = g.iter().zip(&u).map(|(g, u)| gelu(*g) * u).collect();
            let d = rms_norm(
                &matvec(w("ffn_down.weight"), &act, None),
                w("post_ffw_norm.weight"),
            );
            xs[p] = add(&sa, &d);
        }
    }
    xs.iter()
        .map(|x| matvec(embd, &rms_norm(x, get(t, "output_norm.weight")), None))
        .collect()
}

/// Decodes `n_tokens` tokens in one batch of ubatches of `n_ubatch` in a
/// context of `n_ctx`; returns the largest logit difference to the
/// reference.
fn check(fa: FlashAttnType, n_ubatch: usize) {
    run(fa, n_ubatch, 3 * WINDOW, 64, false);
}

fn run(
    fa: FlashAttnType,
    n_ubatch: usize,
    n_tokens: usize,
    n_ctx: usize,
    swa_full: bool,
) -> Vec<f32> {
    let dir = common::scratch(&format!("swa-{fa:?}-{n_ubatch}-{n_tokens}-{swa_full}"));
    let path = dir.join("m.gguf");
    let t = make_model(&path);
    let model = common::load_on_cpu(&path);
    assert!(model.hparams.is_swa(0) && !model.hparams.is_swa(1));
    let tokens: Vec<i32> = (0..n_tokens as i32)
        .map(|i| 3 + (i * 7 + i * i / 5) % (N_VOCAB as i32 - 3))
        .collect();
    let want = reference(&t, &tokens, WINDOW);
    let unwindowed = reference(&t, &tokens, usize::MAX);
    let ty = ggml_core::Type::F32;
    let cp = ContextParams {
        n_ctx,
        n_ubatch,
        swa_full,
        type_k: ty,
        type_v: ty,
        n_threads: 2,
        n_threads_batch: 2,
        flash_attn_type: fa,
        ..ContextParams::default()
    };
    let mut ctx = Context::new(&model, cp).unwrap();
    let swa_size = ctx
        .kv()
        .expect("a KV cache")
        .swa
        .as_ref()
        .expect("a sliding-window cache")
        .size;
    if swa_full {
        assert_eq!(swa_size, ctx.n_ctx());
    }
    let mut b = Batch::new();
    for (i, &tk) in tokens.iter().enumerate() {
        b.add(tk, i as i32, &[0], true);
    }
    ctx.decode(&b).unwrap();
    let diff = |r: &[Vec<f64>]| {
        let mut max = 0f64;
        for (i, row) in r.iter().enumerate() {
            let got = ctx.logits_ith(i as i32).unwrap();
            for (g, w) in got.iter().zip(row) {
                max = max.max((f64::from(*g) - w).abs());
            }
        }
        max
    };
    let max = diff(&want);
    let without_window = diff(&unwindowed);
    let scale = want.iter().flatten().map(|v| v.abs()).fold(0f64, f64::max);
    eprintln!("{fa:?} ubatch {n_ubatch}: max |dlogit| {max:.3e} (max |logit| {scale:.2})");
    // GELU goes through ggml's F16 table, and flash attention rounds Q to
    // F16, so the tolerance is F16-sized; ignoring the window costs far more.
    let tol = 2e-3 * scale.max(1.0);
    assert!(max <= tol, "{fa:?}: logits differ by {max}");
    assert!(
        without_window > 10.0 * tol,
        "the window changes too little to be tested ({without_window})"
    );
    // With more tokens than cells, cells were reused: the oldest positions
    // are gone from the sliding-window cache, not from the other.
    if !swa_full && n_tokens > swa_size {
        assert!(
            ctx.seq_pos_min(0) > 0,
            "no cell of the SWA cache was reused"
        );
        assert_eq!(ctx.kv().expect("a KV cache").base.cells.seq_pos_min(0), 0);
    } else {
        assert_eq!(ctx.seq_pos_min(0), 0);
    }
    ctx.logits().to_vec()
}

#[test]
fn sliding_window_matches_hand_masked_reference() {
    check(FlashAttnType::Disabled, 512);
}

#[test]
fn sliding_window_matches_hand_masked_reference_flash_attn() {
    check(FlashAttnType::Enabled, 512);
}

#[test]
fn small_swa_cache_matches_reference_and_full_size_cache() {
    // 300 tokens through a sliding-window cache of 256 cells: its cells are
    // reused (in the middle of the batch, with small ubatches) and the
    // logits equal both the reference and those of full-size caches.
    for fa in [FlashAttnType::Disabled, FlashAttnType::Enabled] {
        for n_ubatch in [7, 64] {
            let small = run(fa, n_ubatch, 300, 1024, false);
            let full = run(fa, n_ubatch, 300, 1024, true);
            let d = small
                .iter()
                .zip(&full)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(
                d < 1e-4,
                "{fa:?} ubatch {n_ubatch}: small vs full cache differ by {d}"
            );
        }
    }
}

#[test]
fn sliding_window_matches_hand_masked_reference_small_ubatches() {
    // Later ubatches see earlier ones only through the cache.
    check(FlashAttnType::Disabled, 5);
}
