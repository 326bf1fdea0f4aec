//! `--fit`: changing the parameters the user left at their defaults so
//! that the model and its context fit the free memory of every device,
//! less a margin, in llama.cpp's order: the context first (down to a
//! minimum), then the number of offloaded layers; for a mixture-of-experts
//! model, the layers with their expert tensors in CPU memory first, then
//! the expert tensors back on the GPU from the first layer on (see
//! [`fit_moe`]).
//!
//! llama.cpp measures each candidate by loading the model and a context
//! in a no-allocation mode and adds a fixed margin for what it cannot
//! see. Here each candidate is the exact [`MemoryPlan`] (weights, KV cache
//! and compute buffers after the worst-case reservation), so the searches
//! are exact: the context is the largest multiple of 256 that fits and the
//! layer count the largest that fits. The margin stays, for memory outside
//! the plan (a backend's scratch and staging buffers, the driver's own).
//!
//! Out of scope for now, with a warning and the parameters left as given:
//! several GPUs (llama.cpp then fills layers from the last device back
//! through the tensor split, and lets a layer's expert tensors overflow to
//! the next device).

use std::path::Path;

use crate::context::ContextParams;
use crate::devices::{cpu_device, select_devices};
use crate::error::{LlamaError, Result};
use crate::memory_plan::MemoryPlan;
use crate::model::Model;
use crate::params::{ModelParams, TensorBuftOverride, FFN_EXPS_PATTERN};

const MIB: usize = 1 << 20;

/// Granularity of a fitted context, as llama.cpp rounds it.
pub const FIT_CTX_STEP: usize = 256;

/// Settings of `--fit`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FitOptions {
    /// `--fit on|off`.
    pub enabled: bool,
    /// `-fitt/--fit-target`: bytes to leave free on every device.
    pub margin: usize,
    /// `-fitc/--fit-ctx`: the smallest context the fit may choose.
    pub min_ctx: usize,
    /// The user set the context size (`-c`): the fit keeps it.
    pub ctx_set: bool,
    /// The user set the offloaded layers (`-ngl`): the fit keeps them.
    pub ngl_set: bool,
}

impl Default for FitOptions {
    fn default() -> FitOptions {
        FitOptions {
            enabled: true,
            margin: 1024 * MIB,
            min_ctx: 4096,
            ctx_set: false,
            ngl_set: false,
        }
    }
}

/// Free bytes of the devices that must fit: every GPU of the model, or the
/// CPU (host memory) when there is none; `free` overrides what a device
/// reports.
fn budgets(mp: &ModelParams, free: &Free) -> Result<Vec<(String, usize)>> {
    let gpus = select_devices(mp)?;
    let devs = if gpus.is_empty() || mp.n_gpu_layers == 0 {
        vec![cpu_device()?]
    } else {
        gpus
    };
    Ok(devs.iter().filter_map(|d| known_free(d, free)).collect())
}

/// [`Model::plan`] without the loading summaries of each candidate (kept
/// at debug verbosity).
fn plan_quiet(path: &Path, mp: &ModelParams, cp: &ContextParams) -> Result<MemoryPlan> {
    use crate::log::{level, set_level, Level};
    let prev = level();
    if prev == Level::Info {
        set_level(Level::Warn);
    }
    let r = Model::plan(path, mp, cp);
    set_level(prev);
    r
}

/// Free bytes per device name, instead of what the devices report.
pub type Free = std::collections::BTreeMap<String, usize>;

/// A device's free memory, unless it reports none at all (unknown: it is
/// not fitted, as llama.cpp skips such devices).
fn known_free(d: &std::sync::Arc<dyn ggml_core::Device>, free: &Free) -> Option<(String, usize)> {
    if let Some(&f) = free.get(d.name()) {
        return Some((d.name().to_string(), f));
    }
    let p = d.props();
    (p.memory_total > 0).then(|| (d.name().to_string(), p.memory_free))
}

/// The devices of `plan` over their budget less `margin`, with the bytes
/// they lack.
fn overflow(plan: &MemoryPlan, budgets: &[(String, usize)], margin: usize) -> Vec<(String, usize)> {
    budgets
        .iter()
        .filter_map(|(d, free)| {
            let need = plan.device_total(d).saturating_add(margin);
            (need > *free).then(|| (d.clone(), need - free))
        })
        .collect()
}

/// The largest `x` in `lo..=hi` with `ok(x)`, given `ok(lo)`; `ok` must
/// be monotone (true up to some point, false after).
fn largest(lo: usize, hi: usize, mut ok: impl FnMut(usize) -> Result<bool>) -> Result<usize> {
    let (mut lo, mut hi) = (lo, hi);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if ok(mid)? {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    Ok(lo)
}

/// Fits `mp` and `cp` for `path` (see the module notes); returns the plan
/// of the parameters it settled on. A model that cannot fit is
/// [`LlamaError::DoesNotFit`] with the plan's numbers.
pub fn fit_params(
    path: &Path,
    mp: &mut ModelParams,
    cp: &mut ContextParams,
    opts: &FitOptions,
) -> Result<MemoryPlan> {
    fit_params_for(path, mp, cp, opts, &Free::new())
}

/// [`fit_params`] with the free memory of the devices named in `free`
/// given instead of read from them (what-if planning, tests).
pub fn fit_params_for(
    path: &Path,
    mp: &mut ModelParams,
    cp: &mut ContextParams,
    opts: &FitOptions,
    free: &Free,
) -> Result<MemoryPlan> {
    let plan = plan_quiet(path, mp, cp)?;
    if !opts.enabled {
        return Ok(plan);
    }
    let budgets = budgets(mp, free)?;
    let margin = opts.margin;
    if overflow(&plan, &budgets, margin).is_empty() {
        crate::info!(
            "fit_params: the plan fits with a margin of {} MiB: no changes",
            margin / MIB
        );
        return Ok(plan);
    }
    // Step 1: the context, down to the minimum.
    let n_ctx = plan.n_ctx;
    if !opts.ctx_set && n_ctx > opts.min_ctx {
        let at = |mp: &ModelParams, n: usize| {
            plan_quiet(
                path,
                mp,
                &ContextParams {
                    n_ctx: n,
                    ..cp.clone()
                },
            )
        };
        let steps = (n_ctx - opts.min_ctx) / FIT_CTX_STEP;
        let n_of = |k: usize| opts.min_ctx + k * FIT_CTX_STEP;
        let min_plan = at(mp, opts.min_ctx)?;
        if overflow(&min_plan, &budgets, margin).is_empty() {
            let k = largest(0, steps, |k| {
                Ok(overflow(&at(mp, n_of(k))?, &budgets, margin).is_empty())
            })?;
            cp.n_ctx = n_of(k);
            crate::info!(
                "fit_params: context size reduced from {n_ctx} to {}",
                cp.n_ctx
            );
            return plan_quiet(path, mp, cp);
        }
        cp.n_ctx = opts.min_ctx;
        crate::info!(
            "fit_params: context size reduced from {n_ctx} to the minimum {}",
            cp.n_ctx
        );
    }
    // Step 2: the layers, when there is a GPU to take fewer of them.
    let gpus = select_devices(mp)?;
    let fits_with_ngl = !gpus.is_empty() && mp.n_gpu_layers != 0;
    if fits_with_ngl && opts.ngl_set {
        crate::warn!(
            "fit_params: n_gpu_layers = {} was set by the user: not changed",
            mp.n_gpu_layers
        );
    } else if fits_with_ngl && gpus.len() > 1 {
        crate::warn!(
            "fit_params: fitting layers over {} GPUs is not implemented yet: parameters left as given",
            gpus.len()
        );
    } else if fits_with_ngl && plan.n_expert > 0 && mp.tensor_buft_overrides.is_empty() {
        let n_max = plan_quiet(path, mp, cp)?.n_layer;
        fit_moe(path, mp, cp, &budgets, margin, n_max)?;
    } else if fits_with_ngl {
        let n_max = plan_quiet(path, mp, cp)?.n_layer;
        let mut at = |n: usize| {
            let p = ModelParams {
                n_gpu_layers: n as i32,
                ..mp.clone()
            };
            Ok(overflow(&plan_quiet(path, &p, cp)?, &budgets, margin).is_empty())
        };
        let n = if at(n_max)? {
            n_max
        } else {
            largest(0, n_max, &mut at)?
        };
        mp.n_gpu_layers = n as i32;
        crate::info!("fit_params: offloading {n}/{n_max} layers to fit");
    }
    let plan = plan_quiet(path, mp, cp)?;
    // Whatever stays on the CPU must fit in host memory; a GPU that cannot
    // keep the margin (its compute buffer alone, with no layer) is a
    // warning, and an error only when the plan itself passes its memory.
    let cpu: Vec<(String, usize)> = known_free(&cpu_device()?, free).into_iter().collect();
    let all: Vec<(String, usize)> = budgets.iter().chain(&cpu).cloned().collect();
    let hard: Vec<(String, usize)> = overflow(&plan, &budgets, 0)
        .into_iter()
        .chain(overflow(&plan, &cpu, 0))
        .collect();
    let lacks = |over: &[(String, usize)], margin: usize| -> Vec<String> {
        over.iter()
            .map(|(d, n)| {
                let free = all.iter().find(|(b, _)| b == d).map_or(0, |b| b.1);
                format!(
                    "{d} needs {:.2} MiB more ({:.2} MiB planned, {:.2} MiB free, a margin of {} MiB)",
                    *n as f64 / MIB as f64,
                    plan.device_total(d) as f64 / MIB as f64,
                    free as f64 / MIB as f64,
                    margin / MIB
                )
            })
            .collect()
    };
    if hard.is_empty() {
        let soft = overflow(&plan, &budgets, margin);
        if !soft.is_empty() {
            crate::warn!(
                "warning: fit_params: the margin cannot be kept: {}",
                lacks(&soft, margin).join("; ")
            );
        }
        return Ok(plan);
    }
    Err(LlamaError::DoesNotFit(format!(
        "{} with n_ctx = {} and {}/{} layers offloaded\n{plan}",
        lacks(&hard, 0).join("; "),
        plan.n_ctx,
        plan.n_offloaded,
        plan.n_layer
    )))
}

/// The parameters a fit settled on (`plan` and `mp`) as flags of the
/// tools, as llama.cpp's `llama-fit-params` prints them: `-c N -ngl N`,
/// then `-ts LIST` and `-ot "PATTERN=BUFFER_TYPE,..."` where there are
/// any.
pub fn fitted_flags(plan: &MemoryPlan, mp: &ModelParams) -> String {
    let mut out = format!("-c {} -ngl {}", plan.n_ctx, mp.n_gpu_layers);
    if !mp.tensor_split.is_empty() {
        let ts: Vec<String> = mp.tensor_split.iter().map(|f| f.to_string()).collect();
        out += &format!(" -ts {}", ts.join(","));
    }
    if !mp.tensor_buft_overrides.is_empty() {
        let ot: Vec<String> = mp
            .tensor_buft_overrides
            .iter()
            .map(|o| format!("{}={}", o.pattern.as_str(), o.buft))
            .collect();
        out += &format!(" -ot \"{}\"", ot.join(","));
    }
    out
}

/// What of the first layer whose expert tensors are not all on the GPU
/// goes to CPU memory (llama.cpp's layer fractions).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MoeSplit {
    /// The expert tensors.
    Experts,
    /// The gate and down projections (expert and shared): the up
    /// projections stay on the GPU.
    GateDown,
    /// The down projections: the up and gate projections stay.
    Down,
}

/// The overrides that keep the expert tensors of layers `full..n_layer` in
/// CPU memory, and of layer `full` (when it is one) what `split` says.
pub fn moe_overrides(full: usize, n_layer: usize, split: MoeSplit) -> Vec<TensorBuftOverride> {
    let cpu = |pattern: String| TensorBuftOverride {
        pattern: regex::Regex::new(&pattern).expect("constant pattern"),
        buft: "CPU".into(),
    };
    (full..n_layer)
        .map(|il| match (il == full, split) {
            (true, MoeSplit::GateDown) => cpu(format!(r"blk\.{il}\.ffn_(gate|gate_up|down)")),
            (true, MoeSplit::Down) => cpu(format!(r"blk\.{il}\.ffn_down")),
            _ => cpu(format!(r"blk\.{il}{FFN_EXPS_PATTERN}")),
        })
        .collect()
}

/// llama.cpp's steps for a mixture-of-experts model on one GPU, each
/// candidate measured by its exact plan: first the layers offloaded
/// without their expert tensors (which stay in CPU memory), as many as
/// fit from the last one back; when all of them fit so, the expert tensors
/// come back to the GPU from the first layer on, as many layers as fit;
/// then, of the next layer, its up projections, and then its gate
/// projections too, when they fit. (llama.cpp's last resort of moving a
/// layer's whole FFN to the CPU only serves a layer moved to another
/// device; with one GPU it would only move more to the CPU.)
fn fit_moe(
    path: &Path,
    mp: &mut ModelParams,
    cp: &ContextParams,
    budgets: &[(String, usize)],
    margin: usize,
    n_max: usize,
) -> Result<()> {
    let n_layer = n_max.saturating_sub(1);
    let fits = |p: &ModelParams| -> Result<bool> {
        Ok(overflow(&plan_quiet(path, p, cp)?, budgets, margin).is_empty())
    };
    let with = |ngl: usize, overrides: Vec<TensorBuftOverride>| ModelParams {
        n_gpu_layers: ngl as i32,
        tensor_buft_overrides: overrides,
        ..mp.clone()
    };
    let dense_only = |ngl: usize| with(ngl, moe_overrides(0, n_layer, MoeSplit::Experts));
    if !fits(&dense_only(n_max))? {
        let n = largest(0, n_max, |n| fits(&dense_only(n)))?;
        *mp = dense_only(n);
        crate::info!(
            "fit_params: offloading {n}/{n_max} layers to fit, their expert tensors in CPU memory"
        );
        return Ok(());
    }
    let full = |f: usize, split: MoeSplit| with(n_max, moe_overrides(f, n_layer, split));
    let f = if fits(&full(n_layer, MoeSplit::Experts))? {
        n_layer
    } else {
        largest(0, n_layer, |f| fits(&full(f, MoeSplit::Experts)))?
    };
    let mut best = full(f, MoeSplit::Experts);
    let mut part = "";
    if f < n_layer {
        for (split, what) in [
            (MoeSplit::GateDown, ", and the up projections of layer"),
            (MoeSplit::Down, ", and the up and gate projections of layer"),
        ] {
            let p = full(f, split);
            if !fits(&p)? {
                break;
            }
            best = p;
            part = what;
        }
    }
    *mp = best;
    let part = if part.is_empty() {
        String::new()
    } else {
        format!("{part} {f}")
    };
    crate::info!(
        "fit_params: offloading {n_max}/{n_max} layers to fit, the expert tensors of {f}/{n_layer} \
         layers on the GPU{part}; the others in CPU memory"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn largest_finds_the_last_true() {
        for edge in 0..=20 {
            let got = largest(0, 20, |x| Ok(x <= edge)).unwrap();
            assert_eq!(got, edge);
        }
        assert_eq!(largest(5, 5, |_| Ok(false)).unwrap(), 5);
    }

    #[test]
    fn moe_overrides_cover_the_layers_after_the_full_ones() {
        let names = |il: usize| {
            [
                "ffn_gate_exps",
                "ffn_up_exps",
                "ffn_down_exps",
                "ffn_gate_inp",
                "ffn_up_shexp",
                "ffn_down_shexp",
                "attn_q",
            ]
            .map(|t| format!("blk.{il}.{t}.weight"))
        };
        let on_cpu =
            |o: &[TensorBuftOverride], name: &str| o.iter().any(|o| o.pattern.is_match(name));
        let o = moe_overrides(2, 12, MoeSplit::Experts);
        assert_eq!(o.len(), 10);
        for il in 0..12 {
            let n = names(il);
            let experts = il >= 2;
            for e in &n[..3] {
                assert_eq!(on_cpu(&o, e), experts, "{e}");
            }
            for e in &n[3..] {
                assert!(!on_cpu(&o, e), "{e}");
            }
        }
        // Layer 2 in part: its up projections stay, then its gate ones too.
        let o = moe_overrides(2, 12, MoeSplit::GateDown);
        let n = names(2);
        let got: Vec<bool> = n.iter().map(|e| on_cpu(&o, e)).collect();
        assert_eq!(got, [true, false, true, true, false, true, false]);
        let o = moe_overrides(2, 12, MoeSplit::Down);
        let got: Vec<bool> = n.iter().map(|e| on_cpu(&o, e)).collect();
        assert_eq!(got, [false, false, true, false, false, true, false]);
        assert!(on_cpu(&o, "blk.3.ffn_up_exps.weight"));
        assert!(!on_cpu(&o, "blk.12.ffn_up_exps.weight"));
        assert!(moe_overrides(12, 12, MoeSplit::GateDown).is_empty());
    }
}
