//! The upload paths of the weight loader, on the first Vulkan device:
//! every tensor of the model sent to the device by
//! [`llama::loader::load_weights_with`] synchronously (`set_tensor` per
//! tensor) and through the asynchronous pinned staging ring, with mmap on
//! and off, next to a whole `Model::load` with every layer offloaded.
//! `ModelParams` has no switch for synchronous uploads, so the comparison
//! calls the loader directly. Without a device the suite is skipped (an
//! error with `--vulkan`).

use std::path::Path;
use std::time::{Duration, Instant};

use ggml_core::{registry, DeviceKind};
use gguf::GgufModel;
use llama::loader::{load_weights_with, LoadOptions, WeightRequest};
use llama::{LoadMode, Model, ModelParams};

use super::report::Row;
use super::{load, BenchOptions, Suite};
use crate::error::{Error, Result};

/// How the weights reach the device in one configuration.
#[derive(Clone, Copy)]
enum Route {
    /// `load_weights_with`, one synchronous `set_tensor` per tensor.
    Sync,
    /// `load_weights_with` through the staging ring.
    Async,
    /// `Model::load` with every layer offloaded (metadata, vocabulary and
    /// placement included).
    Model,
}

impl Route {
    fn label(self) -> &'static str {
        match self {
            Route::Sync => "all tensors to the device, sync",
            Route::Async => "all tensors to the device, async",
            Route::Model => "Model::load ngl 999",
        }
    }
}

/// User and system CPU time of the process so far, in seconds (0 where
/// the platform does not say).
fn cpu_seconds() -> f64 {
    #[cfg(unix)]
    {
        // SAFETY: getrusage only writes into the zeroed struct it is given.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: as above; RUSAGE_SELF is always a valid target.
        unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
        let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
        tv(ru.ru_utime) + tv(ru.ru_stime)
    }
    #[cfg(not(unix))]
    {
        0.0
    }
}

/// Times one load of `route`; returns the wall time and the CPU seconds. What was
/// loaded is dropped outside the timed part.
fn time_once(
    path: &Path,
    files: &GgufModel,
    reqs: &[WeightRequest],
    route: Route,
    mode: LoadMode,
) -> Result<(Duration, f64)> {
    let params = ModelParams {
        n_gpu_layers: 999,
        load_mode: mode,
        ..ModelParams::default()
    };
    let c0 = cpu_seconds();
    let t = Instant::now();
    let loaded: Box<dyn std::any::Any> = match route {
        Route::Sync | Route::Async => {
            let opts = LoadOptions {
                async_upload: matches!(route, Route::Async),
                ..LoadOptions::default()
            };
            Box::new(load_weights_with(files, reqs, &params, &opts)?)
        }
        Route::Model => Box::new(Model::load(path, &params)?),
    };
    let times = (t.elapsed(), cpu_seconds() - c0);
    drop(loaded);
    Ok(times)
}

/// Synchronous and asynchronous uploads, and `Model::load`, mmap on and off.
pub struct UploadPaths;

impl Suite for UploadPaths {
    fn name(&self) -> &'static str {
        "upload"
    }

    fn run(&self, opts: &BenchOptions, _prior: &[Row]) -> Result<Vec<Row>> {
        if !load::vulkan_present(opts, "the upload paths")? {
            return Ok(Vec::new());
        }
        let dev = registry::devices()
            .into_iter()
            .find(|d| matches!(d.kind(), DeviceKind::Gpu | DeviceKind::IGpu))
            .ok_or_else(|| Error::Unavailable("no Vulkan device registered".into()))?;
        llama::log::set_level(llama::log::Level::Warn);
        let path = load::model_path(opts)?;
        let files = GgufModel::open(&path)?;
        let reqs = WeightRequest::all_to(&dev, &files);
        let total: u64 = reqs.iter().map(|r| r.size as u64).sum();
        let configs: Vec<(LoadMode, Route)> = [LoadMode::Mmap, LoadMode::None]
            .into_iter()
            .flat_map(|m| [(m, Route::Sync), (m, Route::Async), (m, Route::Model)])
            .collect();
        // Configurations take turns, so that a busy machine slows all alike.
        let n = load::n_loads(opts);
        let mut wall = vec![Vec::with_capacity(n); configs.len()];
        let mut cpu = vec![Vec::with_capacity(n); configs.len()];
        for _ in 0..n {
            for (c, &(mode, route)) in configs.iter().enumerate() {
                let (w, u) = time_once(&path, &files, &reqs, route, mode)?;
                wall[c].push(w);
                cpu[c].push(u);
            }
        }
        let mut rows = Vec::new();
        for (((mode, route), mut w), mut u) in configs.into_iter().zip(wall).zip(cpu) {
            w.sort();
            u.sort_by(f64::total_cmp);
            let mmap = if mode.use_mmap() { "on" } else { "off" };
            rows.push(Row::new(
                self.name(),
                format!("{}, mmap {mmap}", route.label()),
                None,
                load::gbs(total, w[0]),
                "GB/s",
                format!(
                    "{} tensors, {:.0} MiB to {}; best of {n} {:.1} ms, median {:.2} GB/s, \
                     CPU time {:.1} ms (least)",
                    reqs.len(),
                    total as f64 / (1u64 << 20) as f64,
                    dev.name(),
                    w[0].as_secs_f64() * 1e3,
                    load::gbs(total, w[n / 2]),
                    u[0] * 1e3
                ),
            ));
        }
        Ok(rows)
    }
}
