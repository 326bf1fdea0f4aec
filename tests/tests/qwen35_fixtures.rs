//! llama.cpp's outputs on the Qwen3.5 fixtures (gated DeltaNet and gated
//! attention, dense and with experts): greedy bytes and perplexity on the
//! CPU, prompts decoded one token per ubatch (the delta rule's
//! single-token steps), sequences decoded together equal to their solo
//! runs, and on Vulkan with every layer and with partial offload.

use llama::{Batch, Context, ContextParams, Model, ModelParams};
use tests::fixture_check::{check_greedy, check_ppl, ctx_params};
use tests::{argmax, cpu_params, expected, fixtures};

fn load_with(name: &str, mp: &ModelParams) -> Option<(Model, serde_json::Value)> {
    let fx = fixtures()?;
    let exp = expected(&fx, name);
    let m = Model::load(fx.join("models").join(format!("{name}.gguf")), mp)
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    Some((m, exp))
}

fn tol(name: &str) -> f64 {
    if name.ends_with("f32") {
        1e-3
    } else {
        1e-2
    }
}

fn fixture(name: &str) {
    let Some((model, exp)) = load_with(name, &cpu_params()) else {
        return;
    };
    check_greedy(&model, &exp, 512, name);
    check_greedy(&model, &exp, 1, &format!("{name} (one token per ubatch)"));
    check_ppl(&model, &exp, tol(name), name);
}

#[test]
fn qwen35_f32() {
    fixture("tiny-qwen35-f32");
}

#[test]
fn qwen35_q8_0() {
    fixture("tiny-qwen35-q8_0");
}

#[test]
fn qwen35moe_f32() {
    fixture("tiny-qwen35moe-f32");
}

#[test]
fn qwen35moe_q8_0() {
    fixture("tiny-qwen35moe-q8_0");
}

fn close(a: &[f32], b: &[f32], what: &str) {
    let d = a
        .iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0f32, f32::max);
    assert!(d < 1e-3, "{what}: logits differ by {d}");
}

/// Prompts of different lengths decoded in one batch (whole, and in
/// ubatches of 5 that cut them), then generated together, give each
/// sequence its solo logits.
fn batch_equals_solo(name: &str) {
    let Some((model, _)) = load_with(name, &cpu_params()) else {
        return;
    };
    let prompts: [&[i32]; 3] = [
        &[1925, 346, 705, 263, 264, 882],
        &[50, 60, 70],
        &[7, 8, 9, 10, 11, 12, 13, 14, 15],
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
    for n_ubatch in [64, 5] {
        let p = ContextParams {
            n_ubatch,
            ..ctx_params(128, 64, 3)
        };
        let mut ctx = Context::new(&model, p).expect("context");
        let mut b = Batch::new();
        let mut last = Vec::new();
        let longest = prompts.iter().map(|p| p.len()).max().unwrap_or(0);
        for i in 0..longest {
            for (s, pr) in prompts.iter().enumerate() {
                if let Some(&t) = pr.get(i) {
                    let is_last = i + 1 == pr.len();
                    if is_last {
                        last.push((s, b.n_tokens(0)));
                    }
                    b.add(t, i as i32, &[s as i32], is_last);
                }
            }
        }
        ctx.decode(&b).expect("prompts");
        let mut pos: Vec<i32> = prompts.iter().map(|p| p.len() as i32).collect();
        let mut rows: Vec<usize> = vec![0; prompts.len()];
        for &(s, i) in &last {
            rows[s] = i;
        }
        for step in 0..n_gen {
            let mut b = Batch::new();
            for s in 0..prompts.len() {
                let got = ctx.logits_ith(rows[s] as i32).expect("row").to_vec();
                close(
                    &got,
                    &solo[s][step],
                    &format!("{name}: ubatch {n_ubatch}, sequence {s}, step {step}"),
                );
                let t = argmax(&got) as i32;
                rows[s] = s;
                b.add(t, pos[s], &[s as i32], true);
                pos[s] += 1;
            }
            if step + 1 < n_gen {
                ctx.decode(&b).expect("tokens");
            }
        }
    }
}

#[test]
fn qwen35_batch_equals_solo() {
    batch_equals_solo("tiny-qwen35-f32");
}

#[test]
fn qwen35moe_batch_equals_solo() {
    batch_equals_solo("tiny-qwen35moe-f32");
}

/// On Vulkan with every layer and with one layer offloaded (a DeltaNet
/// layer of qwen35, an attention layer of qwen35moe).
#[test]
fn vulkan_and_partial_offload() {
    let Some(gpu) = tests::vulkan_device() else {
        return;
    };
    for name in [
        "tiny-qwen35-f32",
        "tiny-qwen35-q8_0",
        "tiny-qwen35moe-f32",
        "tiny-qwen35moe-q8_0",
    ] {
        for ngl in [99, 1] {
            let mp = ModelParams {
                devices: Some(vec![gpu.clone()]),
                n_gpu_layers: ngl,
                ..ModelParams::default()
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
