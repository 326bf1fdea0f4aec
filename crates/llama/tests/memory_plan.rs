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
        // The CPU alone, whatever GPU is visible.
        let cpu = ModelParams {
            devices: Some(Vec::new()),
            ..ModelParams::default()
        };
        check(&path, &cpu, &format!("{name} on the CPU"));
        check(
            &path,
            &ModelParams {
                load_mode: llama::LoadMode::None,
                ..cpu.clone()
            },
            &format!("{name} on the CPU, read"),
        );
        for use_extra_bufts in [false, true] {
            check(
                &path,
                &ModelParams {
                    load_mode: llama::LoadMode::Dio,
                    use_extra_bufts,
                    ..cpu.clone()
                },
                &format!("{name} on the CPU, direct I/O, repack {use_extra_bufts}"),
            );
        }
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

/// A model that cannot fit even on the CPU (here: with one MiB of host
/// memory) is a clear error with the plan's numbers, after
/// the context was brought down to the minimum; `--fit off` changes
/// nothing.
#[test]
fn a_model_that_cannot_fit_is_a_clear_error() {
    let Some(fx) = fixtures() else { return };
    let path = fx.join("models/stories260K.gguf");
    let fit = llama::fit::FitOptions {
        margin: 0,
        min_ctx: 256,
        ..Default::default()
    };
    let mut mp = ModelParams {
        devices: Some(Vec::new()),
        ..ModelParams::default()
    };
    let mut cp = ContextParams {
        n_ctx: 2048,
        ..ContextParams::default()
    };
    // One MiB of host memory: less than the weights alone.
    let tiny = llama::fit::Free::from([("CPU".to_string(), 1 << 20)]);
    let e = llama::fit::fit_params_for(&path, &mut mp, &mut cp, &fit, &tiny)
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("the model does not fit: CPU needs"), "{e}");
    assert!(
        e.contains("MiB planned") && e.contains("n_ctx = 256"),
        "{e}"
    );
    assert!(e.contains("(total MiB)"), "the plan is printed: {e}");
    assert_eq!(cp.n_ctx, 256, "the context went down to the minimum first");
    let mut cp = ContextParams {
        n_ctx: 2048,
        ..ContextParams::default()
    };
    let off = llama::fit::FitOptions {
        enabled: false,
        ..fit
    };
    let plan = llama::fit::fit_params_for(&path, &mut mp, &mut cp, &off, &tiny).unwrap();
    assert_eq!((cp.n_ctx, plan.n_ctx), (2048, 2048));
}

/// With room to spare nothing changes; a context the user did not set is
/// brought down to the largest multiple of 256 that fits.
#[test]
fn the_fit_shrinks_the_context_only_as_far_as_needed() {
    let Some(fx) = fixtures() else { return };
    let path = fx.join("models/stories260K.gguf");
    let mp = ModelParams {
        devices: Some(Vec::new()),
        ..ModelParams::default()
    };
    let cp = ContextParams {
        n_ctx: 8192,
        ..ContextParams::default()
    };
    let full = Model::plan(&path, &mp, &cp).unwrap();
    let small = Model::plan(
        &path,
        &mp,
        &ContextParams {
            n_ctx: 2048,
            ..cp.clone()
        },
    )
    .unwrap();
    let at_2304 = Model::plan(
        &path,
        &mp,
        &ContextParams {
            n_ctx: 2304,
            ..cp.clone()
        },
    )
    .unwrap();
    assert!(at_2304.device_total("CPU") > small.device_total("CPU"));
    // Host memory with room for 2048 tokens and not for 2304.
    let margin = 100 << 20;
    let free = llama::fit::Free::from([("CPU".to_string(), small.device_total("CPU") + margin)]);
    let fit = llama::fit::FitOptions {
        margin,
        min_ctx: 256,
        ..Default::default()
    };
    let (mut mp2, mut cp2) = (mp.clone(), cp.clone());
    let plan = llama::fit::fit_params_for(&path, &mut mp2, &mut cp2, &fit, &free).unwrap();
    assert_eq!(cp2.n_ctx, 2048);
    assert_eq!(plan, small);
    // With room to spare, nothing changes.
    let roomy = llama::fit::Free::from([("CPU".to_string(), full.device_total("CPU") + margin)]);
    let (mut mp4, mut cp4) = (mp.clone(), cp.clone());
    llama::fit::fit_params_for(&path, &mut mp4, &mut cp4, &fit, &roomy).unwrap();
    assert_eq!(cp4.n_ctx, 8192);
    // Set by the user: kept (the margin is not, with a warning).
    let user = llama::fit::FitOptions {
        ctx_set: true,
        ..fit
    };
    let (mut mp3, mut cp3) = (mp.clone(), cp.clone());
    let kept = llama::fit::fit_params_for(&path, &mut mp3, &mut cp3, &user, &free).unwrap();
    assert_eq!(kept, full);
    assert_eq!(cp3.n_ctx, 8192);
    assert!(full.device_total("CPU") > small.device_total("CPU"));
}
