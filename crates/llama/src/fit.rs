//! `--fit`: changing the parameters the user left at their defaults so
//! that the model and its context fit the free memory of every device,
//! less a margin, in llama.cpp's order: the context first (down to a
//! minimum), then the number of offloaded layers.
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
//! through the tensor split) and expert tensors of mixture-of-experts
//! models (this engine does not run those models yet).

use std::path::Path;

use crate::context::ContextParams;
use crate::devices::{cpu_device, select_devices};
use crate::error::{LlamaError, Result};
use crate::memory_plan::MemoryPlan;
use crate::model::Model;
use crate::params::ModelParams;

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
}
