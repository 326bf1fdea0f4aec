//! The decoder graphs against a naive f64 forward pass on tiny random
//! models: qwen2 (q/k/v biases, NeoX rope, tied output) and llama (normal
//! rope, separate output, rope_freqs absent). This checks the architectures
//! that have no llama.cpp fixture, independently of ggml's kernels.

mod common;
mod f64_ref;

use f64_ref::{attend, matvec, rms_norm, rope, set_spm_vocab, tensor, write_f32, Tensors};
use gguf::Metadata;
use llama::{Batch, Context, ContextParams};

struct Shape {
    arch: &'static str,
    n_vocab: usize,
    n_embd: usize,
    n_layer: usize,
    n_head: usize,
    n_head_kv: usize,
    n_ff: usize,
    n_rot: usize,
    biases: bool,
    tied: bool,
    neox: bool,
}

fn make_model(s: &Shape, path: &std::path::Path) -> Tensors {
    let mut rng = test_support::Rng(0x9E37_79B9_7F4A_7C15);
    let mut tensors: Tensors = Vec::new();
    let mut add = |name: String, dims: Vec<usize>, scale: f32, offset: f32| {
        let n: usize = dims.iter().product();
        let v = (0..n).map(|_| offset + scale * rng.f()).collect();
        tensors.push((name, dims, v));
    };
    let hd = s.n_embd / s.n_head;
    let kv = hd * s.n_head_kv;
    add(
        "token_embd.weight".into(),
        vec![s.n_embd, s.n_vocab],
        1.0,
        0.0,
    );
    for il in 0..s.n_layer {
        let p = |n: &str| format!("blk.{il}.{n}");
        add(p("attn_norm.weight"), vec![s.n_embd], 0.1, 1.0);
        add(p("attn_q.weight"), vec![s.n_embd, s.n_embd], 0.3, 0.0);
        add(p("attn_k.weight"), vec![s.n_embd, kv], 0.3, 0.0);
        add(p("attn_v.weight"), vec![s.n_embd, kv], 0.3, 0.0);
        if s.biases {
            add(p("attn_q.bias"), vec![s.n_embd], 0.5, 0.0);
            add(p("attn_k.bias"), vec![kv], 0.5, 0.0);
            add(p("attn_v.bias"), vec![kv], 0.5, 0.0);
        }
        add(p("attn_output.weight"), vec![s.n_embd, s.n_embd], 0.3, 0.0);
        add(p("ffn_norm.weight"), vec![s.n_embd], 0.1, 1.0);
        add(p("ffn_gate.weight"), vec![s.n_embd, s.n_ff], 0.3, 0.0);
        add(p("ffn_up.weight"), vec![s.n_embd, s.n_ff], 0.3, 0.0);
        add(p("ffn_down.weight"), vec![s.n_ff, s.n_embd], 0.2, 0.0);
    }
    add("output_norm.weight".into(), vec![s.n_embd], 0.1, 1.0);
    if !s.tied {
        add("output.weight".into(), vec![s.n_embd, s.n_vocab], 0.5, 0.0);
    }
    let a = s.arch;
    let mut md = Metadata::new();
    md.set("general.architecture", a);
    md.set(format!("{a}.context_length"), 256u32);
    md.set(format!("{a}.embedding_length"), s.n_embd as u32);
    md.set(format!("{a}.block_count"), s.n_layer as u32);
    md.set(format!("{a}.feed_forward_length"), s.n_ff as u32);
    md.set(format!("{a}.attention.head_count"), s.n_head as u32);
    md.set(format!("{a}.attention.head_count_kv"), s.n_head_kv as u32);
    md.set(format!("{a}.attention.layer_norm_rms_epsilon"), 1e-6f32);
    md.set(format!("{a}.rope.dimension_count"), s.n_rot as u32);
    md.set(format!("{a}.rope.freq_base"), 10000f32);
    set_spm_vocab(&mut md, s.n_vocab);
    write_f32(path, &md, &tensors);
    tensors
}

fn reference(s: &Shape, t: &Tensors, tokens: &[i32]) -> Vec<Vec<f64>> {
    let hd = s.n_embd / s.n_head;
    let embd = tensor(t, "token_embd.weight").unwrap();
    let mut xs: Vec<Vec<f64>> = tokens
        .iter()
        .map(|&tk| {
            embd[tk as usize * s.n_embd..(tk as usize + 1) * s.n_embd]
                .iter()
                .map(|&v| f64::from(v))
                .collect()
        })
        .collect();
    for il in 0..s.n_layer {
        let w = |n: &str| tensor(t, &format!("blk.{il}.{n}"));
        let mut ks = Vec::new();
        let mut vs = Vec::new();
        let mut qs = Vec::new();
        for (p, x) in xs.iter().enumerate() {
            let h = rms_norm(x, w("attn_norm.weight").unwrap());
            let mut q = matvec(w("attn_q.weight").unwrap(), &h, w("attn_q.bias"));
            let mut k = matvec(w("attn_k.weight").unwrap(), &h, w("attn_k.bias"));
            let v = matvec(w("attn_v.weight").unwrap(), &h, w("attn_v.bias"));
            for hh in 0..s.n_head {
                rope(&mut q[hh * hd..(hh + 1) * hd], p, s.n_rot, s.neox, 1e4);
            }
            for hh in 0..s.n_head_kv {
                rope(&mut k[hh * hd..(hh + 1) * hd], p, s.n_rot, s.neox, 1e4);
            }
            qs.push(q);
            ks.push(k);
            vs.push(v);
        }
        for p in 0..xs.len() {
            let att = attend(&qs[p], &ks[..=p], &vs[..=p], s.n_head, s.n_head_kv);
            let o = matvec(w("attn_output.weight").unwrap(), &att, None);
            let x: Vec<f64> = xs[p].iter().zip(&o).map(|(a, b)| a + b).collect();
            let h = rms_norm(&x, w("ffn_norm.weight").unwrap());
            let g = matvec(w("ffn_gate.weight").unwrap(), &h, None);
            let u = matvec(w("ffn_up.weight").unwrap(), &h, None);
            let act: Vec<f64> = g
                .iter()
                .zip(&u)
                .map(|(g, u)| g / (1.0 + (-g).exp()) * u)
                .collect();
            let d = matvec(w("ffn_down.weight").unwrap(), &act, None);
            xs[p] = x.iter().zip(&d).map(|(a, b)| a + b).collect();
        }
    }
    let out = tensor(t, "output.weight").unwrap_or(embd);
    xs.iter()
        .map(|x| {
            matvec(
                out,
                &rms_norm(x, tensor(t, "output_norm.weight").unwrap()),
                None,
            )
        })
        .collect()
}

fn check(s: Shape) {
    let dir = common::scratch(s.arch);
    let path = dir.join("m.gguf");
    let t = make_model(&s, &path);
    let model = common::load_on_cpu(&path);
    let tokens: Vec<i32> = (0..12)
        .map(|i| 3 + (i * 7) % (s.n_vocab as i32 - 3))
        .collect();
    let want = reference(&s, &t, &tokens);
    let ty = ggml_core::Type::F32;
    let cp = ContextParams {
        n_ctx: 64,
        type_k: ty,
        type_v: ty,
        n_threads: 2,
        n_threads_batch: 2,
        // The reference computes in f64; flash attention rounds Q to F16.
        flash_attn_type: llama::context::FlashAttnType::Disabled,
        ..ContextParams::default()
    };
    let mut ctx = Context::new(&model, cp).unwrap();
    let mut b = Batch::new();
    for (i, &tk) in tokens.iter().enumerate() {
        b.add(tk, i as i32, &[0], true);
    }
    ctx.decode(&b).unwrap();
    let mut max = 0f64;
    for (i, row) in want.iter().enumerate() {
        let got = ctx.logits_ith(i as i32).unwrap();
        for (g, w) in got.iter().zip(row) {
            max = max.max((f64::from(*g) - w).abs());
        }
    }
    let scale = want.iter().flatten().map(|v| v.abs()).fold(0f64, f64::max);
    eprintln!(
        "{}: max |dlogit| {max:.3e} (max |logit| {scale:.2})",
        s.arch
    );
    assert!(
        max <= 1e-4 * scale.max(1.0),
        "{}: logits differ from the reference by {max}",
        s.arch
    );
}

#[test]
fn qwen2_matches_reference_forward() {
    check(Shape {
        arch: "qwen2",
        n_vocab: 40,
        n_embd: 32,
        n_layer: 2,
        n_head: 4,
        n_head_kv: 2,
        n_ff: 48,
        n_rot: 8,
        biases: true,
        tied: true,
        neox: true,
    });
}

#[test]
fn llama_matches_reference_forward() {
    check(Shape {
        arch: "llama",
        n_vocab: 40,
        n_embd: 32,
        n_layer: 2,
        n_head: 4,
        n_head_kv: 1,
        n_ff: 48,
        n_rot: 6,
        biases: false,
        tied: false,
        neox: false,
    });
}
