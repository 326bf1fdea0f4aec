//! llama.cpp's outputs on the RWKV-6 and RWKV-7 fixtures (greedy bytes and
//! perplexity) on the CPU, on Vulkan with every layer and with a part of
//! them, and the recurrent memory's sequence semantics with RWKV's two
//! states (token shifts and WKV states) through a context.

use llama::{Batch, Context, ContextParams, Model};
use tests::fixture_check::{check_greedy, check_ppl, ctx_params};
use tests::{argmax, cpu_params, expected, fixtures};

fn load_with(name: &str, mp: &llama::ModelParams) -> Option<(Model, serde_json::Value)> {
    let fx = fixtures()?;
    let exp = expected(&fx, name);
    let m = Model::load(fx.join("models").join(format!("{name}.gguf")), mp)
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    Some((m, exp))
}

fn load(name: &str) -> Option<(Model, serde_json::Value)> {
    load_with(name, &cpu_params())
}

fn tol(name: &str) -> f64 {
    if name.ends_with("f32") {
        1e-3
    } else {
        1e-2
    }
}

fn fixture(name: &str) {
    let Some((model, exp)) = load(name) else {
        return;
    };
    check_greedy(&model, &exp, 512, name);
    // One token per ubatch: every prompt token goes through the state.
    check_greedy(&model, &exp, 1, &format!("{name}, n_ubatch 1"));
    check_ppl(&model, &exp, tol(name), name);
}

#[test]
fn rwkv6_f32() {
    fixture("tiny-rwkv6-f32");
}

#[test]
fn rwkv6_q8_0() {
    fixture("tiny-rwkv6-q8_0");
}

#[test]
fn rwkv7_f32() {
    fixture("tiny-rwkv7-f32");
}

#[test]
fn rwkv7_q8_0() {
    fixture("tiny-rwkv7-q8_0");
}

fn close(a: &[f32], b: &[f32], what: &str) {
    let d = a
        .iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0f32, f32::max);
    assert!(d < 1e-4, "{what}: logits differ by {d}");
}

/// A copied sequence continues as its source; a fresh sequence starts
/// from zero states whatever cell it gets.
fn sequence_operations(name: &str) {
    let Some((model, _)) = load(name) else { return };
    let mut ctx = Context::new(&model, ctx_params(128, 64, 2)).expect("context");
    let prompt = [1, 403, 407, 261, 378];
    let next = 300;
    ctx.decode(&Batch::get_one(&prompt)).expect("prompt");
    ctx.decode(&Batch::get_one(&[next])).expect("next");
    let want = ctx.logits_ith(-1).expect("logits").to_vec();

    let _ = ctx.seq_rm(0, -1, -1);
    let mut b = Batch::new();
    for (i, &t) in prompt.iter().enumerate() {
        b.add(t, i as i32, &[0], i + 1 == prompt.len());
    }
    ctx.decode(&b).expect("prompt");
    assert!(!ctx.seq_rm(0, 2, -1), "a recurrent tail cannot be removed");
    ctx.seq_cp(0, 1, -1, -1);
    let mut b = Batch::new();
    b.add(next, 5, &[0], true);
    b.add(next, 5, &[1], true);
    ctx.decode(&b).expect("both");
    close(ctx.logits_ith(0).expect("seq 0"), &want, "sequence 0");
    close(
        ctx.logits_ith(1).expect("seq 1"),
        &want,
        "copy of sequence 0",
    );
    assert!(ctx.seq_rm(0, -1, -1));
    assert!(ctx.seq_rm(1, -1, -1));
    let mut b = Batch::new();
    for (i, &t) in prompt.iter().enumerate() {
        b.add(t, i as i32, &[1], false);
    }
    b.add(next, prompt.len() as i32, &[1], true);
    ctx.decode(&b).expect("again");
    close(
        ctx.logits_ith(-1).expect("logits"),
        &want,
        "a fresh sequence",
    );
}

#[test]
fn rwkv6_sequence_operations() {
    sequence_operations("tiny-rwkv6-f32");
}

#[test]
fn rwkv7_sequence_operations() {
    sequence_operations("tiny-rwkv7-f32");
}

/// Prompts of different lengths decoded in one batch (whole, and cut by a
/// small ubatch into several equal splits), then generated together, give
/// each sequence its solo logits.
fn batch_equals_solo(name: &str) {
    let Some((model, _)) = load(name) else { return };
    let prompts: [&[i32]; 3] = [
        &[1, 403, 407, 261, 378],
        &[1, 50, 60],
        &[1, 7, 8, 9, 10, 11, 12, 13],
    ];
    let n_gen = 4;
    let solo: Vec<Vec<Vec<f32>>> = prompts
        .iter()
        .map(|p| {
            let mut ctx = Context::new(&model, ctx_params(128, 64, 1)).expect("context");
            ctx.decode(&Batch::get_one(p)).expect("prompt");
            let mut out = vec![ctx.logits_ith(-1).expect("logits").to_vec()];
            for _ in 1..n_gen {
                let t = argmax(out.last().expect("row")) as i32;
                ctx.decode(&Batch::get_one(&[t])).expect("token");
                out.push(ctx.logits_ith(-1).expect("logits").to_vec());
            }
            out
        })
        .collect();
    for n_ubatch in [64, 6] {
        let p = ContextParams {
            n_ubatch,
            ..ctx_params(128, 64, 3)
        };
        let mut ctx = Context::new(&model, p).expect("context");
        let mut b = Batch::new();
        let mut rows = vec![0usize; prompts.len()];
        let longest = prompts.iter().map(|p| p.len()).max().unwrap_or(0);
        for i in 0..longest {
            for (s, pr) in prompts.iter().enumerate() {
                if let Some(&t) = pr.get(i) {
                    let is_last = i + 1 == pr.len();
                    if is_last {
                        rows[s] = b.n_tokens(0);
                    }
                    b.add(t, i as i32, &[s as i32], is_last);
                }
            }
        }
        ctx.decode(&b).expect("prompts");
        let mut pos: Vec<i32> = prompts.iter().map(|p| p.len() as i32).collect();
        for step in 0..n_gen {
            let mut b = Batch::new();
            for s in 0..prompts.len() {
                let got = ctx.logits_ith(rows[s] as i32).expect("row").to_vec();
                let what = format!("{name}: ubatch {n_ubatch}, sequence {s}, step {step}");
                close(&got, &solo[s][step], &what);
                rows[s] = s;
                b.add(argmax(&got) as i32, pos[s], &[s as i32], true);
                pos[s] += 1;
            }
            if step + 1 < n_gen {
                ctx.decode(&b).expect("tokens");
            }
        }
    }
}

#[test]
fn rwkv6_batch_equals_solo() {
    batch_equals_solo("tiny-rwkv6-f32");
}

#[test]
fn rwkv7_batch_equals_solo() {
    batch_equals_solo("tiny-rwkv7-f32");
}

/// On Vulkan with every layer and with one layer offloaded: greedy bytes
/// and perplexity stay llama.cpp's.
#[test]
fn vulkan_and_partial_offload() {
    let Some(gpu) = tests::vulkan_device() else {
        return;
    };
    for name in [
        "tiny-rwkv6-f32",
        "tiny-rwkv6-q8_0",
        "tiny-rwkv7-f32",
        "tiny-rwkv7-q8_0",
    ] {
        for ngl in [99, 1] {
            let mp = llama::ModelParams {
                devices: Some(vec![gpu.clone()]),
                n_gpu_layers: ngl,
                ..llama::ModelParams::default()
            };
            let Some((model, exp)) = load_with(name, &mp) else {
                return;
            };
            let what = format!("{name} (Vulkan, n_gpu_layers {ngl})");
            check_greedy(&model, &exp, 512, &what);
            check_ppl(&model, &exp, tol(name), &what);
        }
    }
}
