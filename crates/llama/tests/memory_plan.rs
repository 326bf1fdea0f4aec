//! The memory plan is exact: planned bytes per device and buffer type
//! (weights, K, V, compute) equal what a real load and context allocate
//! after the same reservation, on the CPU and, where there is one, on a
//! Vulkan device, over contexts from 256 to 8192 tokens and ubatches from
//! 1 to 512.

mod common;

use std::sync::Arc;

use common::fixtures;
use ggml_core::{registry, Device, DeviceKind};
use llama::{Context, ContextParams, MemoryPlan, Model, ModelParams};

fn vulkan() -> Option<Arc<dyn Device>> {
    llama::backend_init();
    registry::devices()
        .into_iter()
        .find(|d| d.kind() != DeviceKind::Cpu && d.name().starts_with("Vulkan"))
}

const SHAPES: [(usize, usize); 4] = [(256, 1), (1000, 7), (4096, 512), (8192, 64)];

fn check(path: &std::path::Path, mp: &ModelParams, what: &str) {
    let model = Model::load(path, mp).unwrap_or_else(|e| panic!("{what}: {e}"));
    for (n_ctx, n_ubatch) in SHAPES {
        let cp = ContextParams {
            n_ctx,
            n_ubatch,
            n_threads: 1,
            n_threads_batch: 1,
            ..ContextParams::default()
        };
        let case = format!("{what}, n_ctx {n_ctx}, n_ubatch {n_ubatch}");
        let plan = Model::plan(path, mp, &cp).unwrap_or_else(|e| panic!("{case}: plan: {e}"));
        let ctx = Context::new(&model, cp).unwrap_or_else(|e| panic!("{case}: {e}"));
        let got = MemoryPlan::of(&model, &ctx);
        assert_eq!(plan, got, "{case}: planned\n{plan}allocated\n{got}");
        assert!(
            plan.entries.values().any(|b| b.k > 0 && b.v > 0),
            "{case}: no KV cache"
        );
        assert!(
            plan.entries.values().any(|b| b.compute > 0),
            "{case}: no compute"
        );
        assert!(
            plan.entries.values().any(|b| b.weights > 0),
            "{case}: no weights"
        );
    }
}

#[test]
fn planned_bytes_equal_allocated_bytes() {
    let Some(fx) = fixtures() else { return };
    let gpu = vulkan();
    for name in [
        "stories260K.gguf",
        "stories260K-q4_k_m.gguf",
        "tiny-q4_0.gguf",
        "tiny-gemma3-q8_0.gguf",
        "tiny-qwen3-q8_0.gguf",
        "tiny-q8_0-split-00001-of-00003.gguf",
    ] {
        let path = fx.join("models").join(name);
        check(
            &path,
            &ModelParams::default(),
            &format!("{name} on the CPU"),
        );
        check(
            &path,
            &ModelParams {
                load_mode: llama::LoadMode::None,
                ..ModelParams::default()
            },
            &format!("{name} on the CPU, read"),
        );
        if let Some(dev) = &gpu {
            for ngl in [99, 2] {
                let mp = ModelParams {
                    devices: Some(vec![dev.clone()]),
                    n_gpu_layers: ngl,
                    ..ModelParams::default()
                };
                check(
                    &path,
                    &mp,
                    &format!("{name} on {} with ngl {ngl}", dev.name()),
                );
            }
        }
    }
}

/// The plan prints a row per device and buffer type, and a total per device.
#[test]
fn the_plan_prints_per_device() {
    let Some(fx) = fixtures() else { return };
    let path = fx.join("models/stories260K.gguf");
    let cp = ContextParams {
        n_ctx: 512,
        ..ContextParams::default()
    };
    // No GPU: with one, its backend would hold a compute buffer too.
    let mp = ModelParams {
        devices: Some(Vec::new()),
        load_mode: llama::LoadMode::None,
        ..ModelParams::default()
    };
    let want = Model::plan(&path, &mp, &cp).unwrap();
    let plan_text = want.to_string();
    assert!(
        plan_text.contains("weights") && plan_text.contains("CPU"),
        "{plan_text}"
    );
    assert!(plan_text.contains("(total MiB)"), "{plan_text}");
    assert_eq!(want.devices(), vec!["CPU".to_string()]);
    let total: usize = want.entries.values().map(|b| b.total()).sum();
    assert!(total > 0);
}
