//! llama.cpp's outputs on the Mamba, Mamba-2, Granite 4 hybrid and LFM2
//! fixtures (greedy bytes and perplexity on the CPU, on Vulkan and with
//! partial offload), and the recurrent memory's
//! sequence semantics through a context: a tail that cannot be removed
//! answers false and changes nothing, a copied sequence continues as its
//! source, and sequences decoded together equal their solo runs.

use llama::{Batch, Context, ContextParams, Model};
use tests::fixture_check::{check_greedy, check_ppl, ctx_params};
use tests::{argmax, cpu_params, expected, fixtures};

fn load(name: &str) -> Option<(Model, serde_json::Value)> {
    let fx = fixtures()?;
    let exp = expected(&fx, name);
    let m = Model::load(
        fx.join("models").join(format!("{name}.gguf")),
        &cpu_params(),
    )
    .unwrap_or_else(|e| panic!("{name}: {e}"));
    Some((m, exp))
}

fn fixture(name: &str) {
    let Some((model, exp)) = load(name) else {
        return;
    };
    check_greedy(&model, &exp, 512, name);
    let tol = if name.ends_with("f32") { 1e-3 } else { 1e-2 };
    check_ppl(&model, &exp, tol, name);
}

#[test]
fn mamba_f32() {
    fixture("tiny-mamba-f32");
}

#[test]
fn mamba_q8_0() {
    fixture("tiny-mamba-q8_0");
}

#[test]
fn mamba2_f32() {
    fixture("tiny-mamba2-f32");
}

#[test]
fn mamba2_q8_0() {
    fixture("tiny-mamba2-q8_0");
}

#[test]
fn granitehybrid_f32() {
    fixture("tiny-granitehybrid-f32");
}

#[test]
fn granitehybrid_q8_0() {
    fixture("tiny-granitehybrid-q8_0");
}

#[test]
fn lfm2_f32() {
    fixture("tiny-lfm2-f32");
}

#[test]
fn lfm2_q8_0() {
    fixture("tiny-lfm2-q8_0");
}

fn close(a: &[f32], b: &[f32], what: &str) {
    let d = a
        .iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0f32, f32::max);
    assert!(d < 1e-4, "{what}: logits differ by {d}");
}

/// Removing a tail answers false and leaves the state; a copied sequence
/// continues as its source; removing everything starts afresh.
fn sequence_operations(name: &str) {
    let Some((model, _)) = load(name) else { return };
    let mut ctx = Context::new(&model, ctx_params(128, 64, 2)).expect("context");
    let prompt = [1, 403, 407, 261, 378];
    let next = 300;
    // Reference: the prompt then one token.
    ctx.decode(&Batch::get_one(&prompt)).expect("prompt");
    ctx.decode(&Batch::get_one(&[next])).expect("next");
    let want = ctx.logits_ith(-1).expect("logits").to_vec();

    let mut b = Batch::new();
    let _ = ctx.seq_rm(0, -1, -1);
    for (i, &t) in prompt.iter().enumerate() {
        b.add(t, i as i32, &[0], i + 1 == prompt.len());
    }
    ctx.decode(&b).expect("prompt");
    assert_eq!(ctx.seq_pos_max(0), 4);
    assert!(!ctx.seq_rm(0, 2, -1), "a recurrent tail cannot be removed");
    assert_eq!(ctx.seq_pos_max(0), 4, "a refused seq_rm changes nothing");
    // Positions past the state: nothing to remove.
    assert!(ctx.seq_rm(0, 5, -1));
    ctx.seq_cp(0, 1, -1, -1);
    assert_eq!(ctx.seq_pos_max(1), 4);
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
    // Sequence 1 goes; sequence 0 keeps its state.
    assert!(ctx.seq_rm(1, -1, -1));
    assert_eq!(ctx.seq_pos_max(1), -1);
    ctx.seq_keep(0);
    assert_eq!(ctx.seq_pos_max(0), 5);
    // A fresh sequence starts from zeros, whatever cell it gets.
    assert!(ctx.seq_rm(0, -1, -1));
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
fn mamba2_sequence_operations() {
    sequence_operations("tiny-mamba2-f32");
}

#[test]
fn granitehybrid_sequence_operations() {
    sequence_operations("tiny-granitehybrid-f32");
}

#[test]
fn lfm2_sequence_operations() {
    sequence_operations("tiny-lfm2-f32");
}

/// Prompts of different lengths decoded in one batch, then generated
/// together, give each sequence its solo logits.
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
    // A ubatch of 6 makes the equal split cut the prompts in several steps.
    let mut ctx = Context::new(&model, ctx_params(128, 64, 3)).expect("context");
    let small = ContextParams {
        n_ubatch: 6,
        ..ctx_params(128, 64, 3)
    };
    let mut ctx2 = Context::new(&model, small).expect("context");
    for ctx in [&mut ctx, &mut ctx2] {
        let mut b = Batch::new();
        let mut last = Vec::new();
        // Interleave the prompts' tokens.
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
                    &format!("{name}: sequence {s}, step {step}"),
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
fn mamba_batch_equals_solo() {
    batch_equals_solo("tiny-mamba-f32");
}

#[test]
fn granitehybrid_batch_equals_solo() {
    batch_equals_solo("tiny-granitehybrid-f32");
}

#[test]
fn lfm2_batch_equals_solo() {
    batch_equals_solo("tiny-lfm2-f32");
}

/// On Vulkan with every layer and with one layer offloaded: the SSM ops
/// run where a backend has them, the states stay on their layer's device.
#[test]
fn vulkan_and_partial_offload() {
    let Some(gpu) = tests::vulkan_device() else {
        return;
    };
    let cases: [(&str, &[i32]); 4] = [
        ("tiny-mamba2-f32", &[99, 1]),
        ("tiny-granitehybrid-f32", &[99, 1]),
        // LFM2's layers 0, 1, 3 are convolutions, 2 and 4 attention: 2
        // offloaded layers put a convolution and an attention layer on
        // each side.
        ("tiny-lfm2-f32", &[99, 1, 2]),
        ("tiny-lfm2-q8_0", &[99, 2]),
    ];
    for (name, ngls) in cases {
        let Some(fx) = fixtures() else { return };
        let exp = expected(&fx, name);
        let tol = if name.ends_with("f32") { 1e-3 } else { 1e-2 };
        for &ngl in ngls {
            let mp = llama::ModelParams {
                devices: Some(vec![gpu.clone()]),
                n_gpu_layers: ngl,
                ..llama::ModelParams::default()
            };
            let model = Model::load(fx.join("models").join(format!("{name}.gguf")), &mp)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            let what = format!("{name} (Vulkan, n_gpu_layers {ngl})");
            check_greedy(&model, &exp, 512, &what);
            check_ppl(&model, &exp, tol, &what);
        }
    }
}

/// Two sequences taking turns one token at a time run one reused graph
/// whose state inputs change every time: the logits equal those of a
/// context that builds every graph anew.
#[test]
fn reused_graphs_read_each_sequence_state() {
    let Some((model, _)) = load("tiny-granitehybrid-f32") else {
        return;
    };
    let run = |reuse: bool| {
        let p = ContextParams {
            graph_reuse: reuse,
            ..ctx_params(128, 64, 2)
        };
        let mut ctx = Context::new(&model, p).expect("context");
        let prompts: [&[i32]; 2] = [&[1, 403, 407, 261], &[1, 60, 70]];
        let mut pos = [0i32; 2];
        let mut rows = Vec::new();
        for (s, pr) in prompts.iter().enumerate() {
            let mut b = Batch::new();
            for &t in pr.iter() {
                b.add(t, pos[s], &[s as i32], false);
                pos[s] += 1;
            }
            ctx.decode(&b).expect("prompt");
        }
        for step in 0..6 {
            let s = step % 2;
            let mut b = Batch::new();
            b.add(100 + step as i32, pos[s], &[s as i32], true);
            pos[s] += 1;
            ctx.decode(&b).expect("token");
            rows.push(ctx.logits_ith(0).expect("row").to_vec());
        }
        (rows, ctx.perf.n_graph_reuses)
    };
    let (with, n_reused) = run(true);
    let (without, _) = run(false);
    assert!(n_reused >= 4, "only {n_reused} graphs reused");
    for (i, (a, b)) in with.iter().zip(&without).enumerate() {
        close(a, b, &format!("step {i}"));
    }
}
