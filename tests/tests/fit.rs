//! `--fit` against Vulkan devices with a memory budget
//! (`GGML_VK_MAX_MEMORY_MIB`, here `Options::max_memory` of a registry of
//! the test's own): for every budget the fitted parameters load and run
//! without running out of memory, and the fit is the largest that fits
//! (one more layer would pass the budget); without the fit, offloading
//! everything is the device's clear out-of-memory error.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ggml_core::Device;
use ggml_vulkan::{Options, VulkanReg};
use llama::fit::{fit_params, FitOptions};
use llama::{Context, ContextParams, MemoryPlan, Model, ModelParams};
use tests::{greedy, scratch_dir};
use xtask::gen_model::shape::{Preset, ShapeOverrides};
use xtask::gen_model::types::OutType;
use xtask::gen_model::{generate_file, ModelSpec, WriteSettings};

const MIB: usize = 1 << 20;
const MARGIN: usize = 16 * MIB;

/// TinyLlama's shape (n_embd 2048, n_ff 5632, 32 heads over 4 kv heads)
/// in Q4_0 with 6 layers and a 4096-token vocabulary: about 25 MiB a layer.
fn tinyllama_q4_0(dir: &Path) -> PathBuf {
    let overrides = ShapeOverrides {
        n_layer: Some(6),
        n_vocab: Some(4096),
        ..ShapeOverrides::default()
    };
    let ty = "q4_0".parse::<OutType>().expect("type");
    let spec = ModelSpec::synthetic(
        Preset::Tinyllama1_1b,
        &overrides,
        ty,
        7,
        "tinyllama-shaped q4_0",
    )
    .expect("spec");
    let path = dir.join("tinyllama-6l-q4_0.gguf");
    generate_file(&spec, &WriteSettings::default(), &path).expect("gen-model");
    path
}

/// A Vulkan device of a registry of its own with a budget of `mib` MiB.
fn budgeted(mib: usize) -> Option<(VulkanReg, Arc<dyn Device>)> {
    llama::backend_init();
    let reg = VulkanReg::new(&Options {
        max_memory: Some(mib * MIB),
        ..Options::from_env()
    });
    let dev: Arc<dyn Device> = reg.vulkan_devices().first()?.clone();
    Some((reg, dev))
}

/// The model `make` writes in a scratch folder `name`, when a Vulkan
/// device is there; without one the test is skipped (an error under
/// `REQUIRE_VULKAN=1`).
fn vulkan_model(name: &str, make: fn(&Path) -> PathBuf) -> Option<PathBuf> {
    if budgeted(64).is_none() {
        let required = std::env::var("REQUIRE_VULKAN").is_ok_and(|v| v == "1");
        assert!(!required, "REQUIRE_VULKAN=1 but there is no Vulkan device");
        eprintln!("skipped: no Vulkan device");
        return None;
    }
    Some(make(&scratch_dir(name)))
}

/// `--fit` of one model to a device of one budget.
struct Fit {
    dev: Arc<dyn Device>,
    /// The fitted plan.
    plan: MemoryPlan,
    /// The parameters the fit set.
    mp: ModelParams,
    cp: ContextParams,
    /// The device's free bytes before loading.
    free: usize,
    /// The bytes the plan puts on the device.
    used: usize,
    /// The registry that owns the device.
    _reg: VulkanReg,
}

/// Fits `path` to a device with `mib` MiB (every layer asked for, the
/// context size free to shrink), and checks the plan leaves the margin
/// free.
fn fit_to(path: &Path, mib: usize) -> Fit {
    let (reg, dev) = budgeted(mib).unwrap();
    let free = dev.props().memory_free;
    let mut mp = ModelParams {
        devices: Some(vec![dev.clone()]),
        n_gpu_layers: -1,
        ..ModelParams::default()
    };
    let mut cp = cparams();
    let opts = FitOptions {
        margin: MARGIN,
        ctx_set: true,
        ..FitOptions::default()
    };
    let plan =
        fit_params(path, &mut mp, &mut cp, &opts).unwrap_or_else(|e| panic!("{mib} MiB: {e}"));
    let used = plan.device_total(dev.name());
    assert!(
        used + MARGIN <= free,
        "{mib} MiB: {used} bytes planned\n{plan}"
    );
    Fit {
        dev,
        plan,
        mp,
        cp,
        free,
        used,
        _reg: reg,
    }
}

impl Fit {
    /// Loads `path` with the fitted parameters and generates a few tokens,
    /// within the budget (`mib` MiB); `check` then sees the model and its
    /// context.
    fn load_and_run(&self, path: &Path, mib: usize, check: impl FnOnce(&Model, &Context<'_>)) {
        let model = Model::load(path, &self.mp).unwrap_or_else(|e| panic!("{mib} MiB: {e}"));
        let mut ctx =
            Context::new(&model, self.cp.clone()).unwrap_or_else(|e| panic!("{mib} MiB: {e}"));
        assert_eq!(greedy(&mut ctx, &[1, 300, 301], 3).len(), 3);
        assert!(self.dev.props().memory_free <= self.free);
        check(&model, &ctx);
    }
}

fn cparams() -> ContextParams {
    ContextParams {
        n_ctx: 256,
        n_ubatch: 64,
        n_threads: 2,
        n_threads_batch: 2,
        ..ContextParams::default()
    }
}

#[test]
fn fitted_layers_fit_every_budget_and_leave_no_layer_unused() {
    let Some(path) = vulkan_model("fit", tinyllama_q4_0) else {
        return;
    };
    let mut seen = std::collections::BTreeSet::new();
    for mib in [32, 48, 64, 96, 128, 160, 200, 320] {
        let fit = fit_to(&path, mib);
        let plan = &fit.plan;
        // -1 (all) when everything fits as asked.
        let ngl = plan.n_offloaded as i32;
        // The fit is the largest: one more layer passes the budget.
        if plan.n_offloaded < plan.n_layer {
            let more = ModelParams {
                n_gpu_layers: ngl + 1,
                ..fit.mp.clone()
            };
            let next = Model::plan(&path, &more, &fit.cp).unwrap();
            assert!(
                next.device_total(fit.dev.name()) + MARGIN > fit.free,
                "{mib} MiB: {ngl} layers fitted, but {} fit too\n{next}",
                ngl + 1
            );
        }
        seen.insert(ngl);
        fit.load_and_run(&path, mib, |model, _| {
            assert_eq!(
                model.plan.n_offloaded + usize::from(model.plan.output_offloaded),
                plan.n_offloaded
            );
        });
    }
    assert!(
        seen.len() >= 4,
        "budgets should give varied layer counts: {seen:?}"
    );
    assert!(seen.contains(&0) && seen.contains(&7), "{seen:?}");
}

#[test]
fn without_the_fit_a_small_budget_is_a_clear_out_of_memory_error() {
    let Some((_reg, dev)) = budgeted(48) else {
        return;
    };
    let dir = scratch_dir("fit-off");
    let path = tinyllama_q4_0(&dir);
    let mp = ModelParams {
        devices: Some(vec![dev.clone()]),
        n_gpu_layers: 99,
        ..ModelParams::default()
    };
    let e = Model::load(&path, &mp)
        .expect_err("past the budget")
        .to_string();
    assert!(
        e.contains(dev.name()) && e.contains("out of device memory") && e.contains("bytes"),
        "{e}"
    );
}

/// A Mixtral-layout model: 6 layers of 8 experts (n_embd 512, n_ff 1024,
/// Q8_0), about 14 MiB a layer, nearly all of it expert tensors.
fn mixtral_q8_0(dir: &Path) -> PathBuf {
    use xtask::gen_model::moe::{Layout, MoeArgs};
    let overrides = ShapeOverrides {
        n_layer: Some(6),
        n_vocab: Some(4096),
        n_embd: Some(512),
        n_head: Some(8),
        n_head_kv: Some(2),
        n_ff: Some(1024),
        n_ctx: Some(512),
        ..ShapeOverrides::default()
    };
    let args = MoeArgs {
        n_expert: Some(8),
        n_expert_used: Some(2),
        moe_layout: Some(Layout::Mixtral),
        ..MoeArgs::default()
    };
    let ty = "q8_0".parse::<OutType>().expect("type").pure();
    let mut spec = ModelSpec::synthetic(
        Preset::Tinyllama1_1b,
        &overrides,
        ty,
        7,
        "mixtral-shaped q8_0",
    )
    .expect("spec");
    spec.experts = args.resolve(&spec.shape).expect("experts");
    let path = dir.join("mixtral-6l-q8_0.gguf");
    generate_file(&spec, &WriteSettings::default(), &path).expect("gen-model");
    path
}

/// `--fit` of a mixture-of-experts model: small budgets offload layers
/// with their expert tensors in CPU memory, larger ones bring the experts
/// of the first layers back; every fit loads, runs and stays within the
/// budget, and leaves less than one layer's bytes unused on the device.
#[test]
fn fitted_moe_layers_keep_experts_in_cpu_memory_as_needed() {
    let Some(path) = vulkan_model("fit-moe", mixtral_q8_0) else {
        return;
    };
    // One layer's bytes: the most a fit may leave unused.
    let file = gguf::GgufFile::open(&path).unwrap();
    let layer: usize = file
        .tensors()
        .iter()
        .filter(|t| t.name.starts_with("blk.0."))
        .map(|t| t.size as usize)
        .sum();
    drop(file);
    let mut kinds = std::collections::BTreeSet::new();
    for mib in [24, 32, 48, 64, 80, 96, 200] {
        let fit = fit_to(&path, mib);
        let (plan, mp, free, used) = (&fit.plan, &fit.mp, fit.free, fit.used);
        let all = plan.n_offloaded == plan.n_layer;
        let experts_on_cpu = !mp.tensor_buft_overrides.is_empty();
        // Anything left in CPU memory would have taken the unused bytes.
        if experts_on_cpu {
            assert!(
                free - MARGIN - used < layer,
                "{mib} MiB: {} bytes left unused, a layer is {layer}\n{plan}",
                free - MARGIN - used
            );
        }
        // The flags llama-fit-params prints give the same plan.
        let flags = llama::fit::fitted_flags(plan, mp);
        let mut argv = vec!["-m".to_string(), path.display().to_string()];
        argv.extend(flags.split(' ').map(|a| a.trim_matches('"').to_string()));
        let mut parsed = llama::cli::CommonArgs::parse(argv).unwrap();
        parsed.model_params.devices = mp.devices.clone();
        assert_eq!(
            &Model::plan(&path, &parsed.model_params, &fit.cp).unwrap(),
            plan,
            "{mib} MiB: {flags}"
        );
        kinds.insert((all, mp.tensor_buft_overrides.len()));
        eprintln!(
            "{mib} MiB: {}/{} layers, {} layers' experts in CPU memory",
            plan.n_offloaded,
            plan.n_layer,
            mp.tensor_buft_overrides.len()
        );
        fit.load_and_run(&path, mib, |model, ctx| {
            assert_eq!(
                &llama::MemoryPlan::of(model, ctx),
                plan,
                "{mib} MiB: the fitted plan is what loads"
            );
        });
    }
    // Partial offloads with every expert in CPU memory, all layers with
    // the experts of some, and everything on the GPU.
    assert!(kinds.contains(&(true, 0)), "{kinds:?}");
    assert!(
        kinds.iter().any(|&(all, n)| all && n > 0 && n < 6),
        "{kinds:?}"
    );
    assert!(kinds.contains(&(false, 6)), "{kinds:?}");
}
