//! Graph reuse changes no number, on every device and placement: greedy
//! generation with reuse on and off gives the same tokens and bit-identical
//! logits at every step, on the CPU and, when a Vulkan device is present,
//! with every layer offloaded and with part of them (several scheduler
//! splits), for stories260K (also against llama.cpp's greedy tokens), a
//! generated model with grouped-query attention and the sliding-window
//! gemma3 fixture; and reuse really happens: every decode step whose shape
//! did not change runs the previous graph.
//!
//! Vulkan: see `vulkan.rs` (lavapipe needs `GGML_VK_ALLOW_CPU_DEVICES=1`;
//! without a device the Vulkan cases print "skipped: no Vulkan device").

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ggml_core::Device;
use llama::context::FlashAttnType;
use llama::{Batch, Context, ContextParams, Model, ModelParams, Perf};
use tests::{
    argmax, cpu_params, expected, fixtures, ids, reference_ctx, scratch_dir, vulkan_device,
};
use xtask::gen_model::shape::{parse_arch, Preset, ShapeOverrides};
use xtask::gen_model::types::OutType;
use xtask::gen_model::{generate_file, ModelSpec, WriteSettings};

/// What one generation saw.
struct Gen {
    tokens: Vec<i32>,
    /// The last row of logits of every decode.
    logits: Vec<Vec<f32>>,
    perf: Perf,
    n_splits: usize,
}

/// Greedy generation of `n` tokens after `prompt`.
fn generate(model: &Model, cp: &ContextParams, prompt: &[i32], n: usize) -> Gen {
    let mut ctx = Context::new(model, cp.clone()).expect("context");
    ctx.decode(&Batch::get_one(prompt)).expect("prompt");
    let mut logits = vec![ctx.logits_ith(-1).expect("logits").to_vec()];
    let mut tokens = Vec::with_capacity(n);
    let mut n_splits = 0;
    while tokens.len() < n {
        let tok = argmax(logits.last().expect("a row")) as i32;
        tokens.push(tok);
        if tokens.len() == n {
            break;
        }
        ctx.decode(&Batch::get_one(&[tok])).expect("decode");
        n_splits = n_splits.max(ctx.n_splits());
        logits.push(ctx.logits_ith(-1).expect("logits").to_vec());
    }
    Gen {
        tokens,
        logits,
        perf: ctx.perf,
        n_splits,
    }
}

/// Decodes of a greedy run whose graph is new: the prompt, then each
/// single-token step whose attended cells (the cells used, padded to 32)
/// differ from the step before.
fn expected_builds(n_prompt: usize, n_steps: usize) -> usize {
    let n_kv = |cells: usize| cells.div_ceil(32) * 32;
    let mut builds = 1;
    let mut last = None;
    for k in 0..n_steps {
        let cur = n_kv(n_prompt + k + 1);
        if last != Some(cur) {
            builds += 1;
        }
        last = Some(cur);
    }
    builds
}

/// Generation with reuse on equals generation with reuse off, bit for bit;
/// with reuse on, exactly the steps of unchanged shape reuse. Returns the
/// tokens.
fn check(what: &str, model: &Model, cp: ContextParams, prompt: &[i32], n: usize) -> Vec<i32> {
    let off = generate(
        model,
        &ContextParams {
            graph_reuse: false,
            ..cp.clone()
        },
        prompt,
        n,
    );
    let on = generate(
        model,
        &ContextParams {
            graph_reuse: true,
            ..cp
        },
        prompt,
        n,
    );
    assert_eq!(
        on.tokens, off.tokens,
        "{what}: tokens with and without reuse"
    );
    for (i, (a, b)) in on.logits.iter().zip(&off.logits).enumerate() {
        assert!(a == b, "{what}: logits of decode {i} differ with reuse");
    }
    let steps = n - 1;
    assert_eq!(
        (off.perf.n_graph_builds, off.perf.n_graph_reuses),
        (1 + steps, 0),
        "{what}: reuse off"
    );
    let builds = expected_builds(prompt.len(), steps);
    assert_eq!(
        (on.perf.n_graph_builds, on.perf.n_graph_reuses),
        (builds, 1 + steps - builds),
        "{what}: builds and reuses"
    );
    eprintln!(
        "{what}: {} decodes, {} graphs built, {} reused, {} splits",
        1 + steps,
        on.perf.n_graph_builds,
        on.perf.n_graph_reuses,
        on.n_splits
    );
    on.tokens
}

fn ctx_params(flash: FlashAttnType) -> ContextParams {
    ContextParams {
        flash_attn_type: flash,
        ..reference_ctx(256)
    }
}

fn on_gpu(gpu: &Arc<dyn Device>, ngl: i32) -> ModelParams {
    ModelParams {
        devices: Some(vec![gpu.clone()]),
        n_gpu_layers: ngl,
        ..ModelParams::default()
    }
}

// ------------------------------------------------------------ stories260K

/// stories260K, 64 greedy tokens: llama.cpp's (made with flash attention
/// off) with reuse on and off; with flash attention, on equals off.
fn stories(mp: &ModelParams, what: &str) {
    let Some(fx) = fixtures() else { return };
    let exp = expected(&fx, "stories260K");
    let model = Model::load(fx.join("models/stories260K.gguf"), mp).expect("load");
    let prompt = ids(&exp["prompt_tokens"]);
    let want = ids(&exp["greedy_tokens"]);
    let got = check(
        &format!("stories260K {what}"),
        &model,
        ctx_params(FlashAttnType::Disabled),
        &prompt,
        want.len(),
    );
    assert_eq!(got, want, "stories260K {what}: llama.cpp's greedy tokens");
    check(
        &format!("stories260K {what} flash attention"),
        &model,
        ctx_params(FlashAttnType::Enabled),
        &prompt,
        want.len(),
    );
}

#[test]
fn stories260k_cpu() {
    stories(&cpu_params(), "CPU");
}

#[test]
fn stories260k_vulkan_all_layers() {
    let Some(gpu) = vulkan_device() else { return };
    stories(&on_gpu(&gpu, 99), "Vulkan all layers");
}

#[test]
fn stories260k_vulkan_partial_offload() {
    let Some(gpu) = vulkan_device() else { return };
    // 2 of 5 layers: the graph is cut into CPU and GPU splits.
    stories(&on_gpu(&gpu, 2), "Vulkan 2 layers");
}

// ------------------------------------------------------------ generated GQA

/// A llama model with grouped-query attention (8 query heads over 2 kv
/// heads) in `ty`, 4 layers, 512 tokens.
fn write_gqa(dir: &Path, ty: &str) -> PathBuf {
    let overrides = ShapeOverrides {
        arch: Some(parse_arch("llama").unwrap()),
        n_vocab: Some(512),
        n_embd: Some(256),
        n_layer: Some(4),
        n_head: Some(8),
        n_head_kv: Some(2),
        n_ff: Some(512),
        n_ctx: Some(256),
        ..ShapeOverrides::default()
    };
    let ty_out = ty.parse::<OutType>().expect("type").pure();
    let spec = ModelSpec::synthetic(
        Preset::Stories260k,
        &overrides,
        ty_out,
        7,
        format!("gqa {ty}"),
    )
    .expect("spec");
    let path = dir.join(format!("gqa-{ty}.gguf"));
    generate_file(&spec, &WriteSettings::default(), &path).expect("gen-model");
    path
}

#[test]
fn generated_gqa_model() {
    let dir = scratch_dir("graph-reuse-gqa");
    let path = write_gqa(&dir, "q4_0");
    llama::log::set_level(llama::log::Level::Warn);
    let prompt = [1, 17, 250, 3, 99, 402, 61, 7];
    // 70 tokens: the attended cells cross two padding steps.
    let n = 70;
    let model = Model::load(&path, &cpu_params()).expect("load");
    let cpu = check(
        "gqa q4_0 CPU",
        &model,
        ctx_params(FlashAttnType::Disabled),
        &prompt,
        n,
    );
    check(
        "gqa q4_0 CPU flash attention",
        &model,
        ctx_params(FlashAttnType::Enabled),
        &prompt,
        n,
    );
    if let Some(gpu) = vulkan_device() {
        for ngl in [99, 2] {
            let model = Model::load(&path, &on_gpu(&gpu, ngl)).expect("load");
            let got = check(
                &format!("gqa q4_0 Vulkan ngl {ngl}"),
                &model,
                ctx_params(FlashAttnType::Disabled),
                &prompt,
                n,
            );
            // Devices differ in rounding; report rather than require.
            if got != cpu {
                eprintln!("gqa q4_0 Vulkan ngl {ngl}: tokens differ from the CPU's");
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

// ------------------------------------------------------------ sliding window

/// gemma3 has sliding-window layers with a cache of their own: two sets of
/// attended cells in the shape.
#[test]
fn gemma3_sliding_window_cpu() {
    let Some(fx) = fixtures() else { return };
    let model = Model::load(fx.join("models/tiny-gemma3-f32.gguf"), &cpu_params()).expect("load");
    let exp = expected(&fx, "tiny-gemma3-f32");
    let rec = match &exp["greedy"] {
        serde_json::Value::Array(a) => &a[0],
        r => r,
    };
    let prompt = ids(&rec["prompt_ids"]);
    let n = ids(&rec["generated_ids"]).len().max(48);
    check(
        "tiny gemma3",
        &model,
        ContextParams {
            swa_full: false,
            ..ctx_params(FlashAttnType::Enabled)
        },
        &prompt,
        n,
    );
}

// ------------------------------------------------------------ cleared cache

/// A prompt decoded again after the cache is cleared (as `llama-bench` does
/// between repetitions) runs the graph of the first time, with the same
/// logits, and generation after it equals a fresh context's. Also with
/// sliding-window layers, whose cache is cleared too.
#[test]
fn a_cleared_cache_runs_the_prompt_graph_again() {
    let Some(fx) = fixtures() else { return };
    for (name, file) in [
        ("stories260K", "models/stories260K.gguf"),
        ("tiny gemma3", "models/tiny-gemma3-f32.gguf"),
    ] {
        let model = Model::load(fx.join(file), &cpu_params()).expect("load");
        let prompt: Vec<i32> = (1..40).collect();
        let cp = ContextParams {
            swa_full: false,
            graph_reuse: true,
            ..ctx_params(FlashAttnType::Enabled)
        };
        let fresh = generate(&model, &cp, &prompt, 2);
        let mut ctx = Context::new(&model, cp).expect("context");
        let mut prompts = Vec::new();
        for _ in 0..2 {
            ctx.kv_clear();
            ctx.decode(&Batch::get_one(&prompt)).expect("prompt");
            prompts.push(ctx.logits_ith(-1).expect("logits").to_vec());
        }
        assert!(
            prompts[1] == prompts[0],
            "{name}: prompt logits after the cache was cleared"
        );
        let tok = argmax(&prompts[1]) as i32;
        ctx.decode(&Batch::get_one(&[tok])).expect("decode");
        assert!(
            [
                prompts[1].clone(),
                ctx.logits_ith(-1).expect("logits").to_vec()
            ] == fresh.logits[..],
            "{name}: logits against a fresh context"
        );
        assert_eq!(
            (ctx.perf.n_graph_builds, ctx.perf.n_graph_reuses),
            (2, 1),
            "{name}: the prompt's graph built once, the step's once"
        );
    }
}
