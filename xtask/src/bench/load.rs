//! Model loading, measured in one run on one file:
//!
//! * `read`: a plain sequential read of the file, cold (after asking the OS
//!   to drop it from the page cache) and warm: the bound of any load that
//!   reads the weights;
//! * `gguf`: [`gguf::GgufFile::open`] (map, parse, validate): the metadata
//!   part of a load;
//! * `model`: [`llama::Model::load`] on the CPU with mmap on (the weights are
//!   used in place, so the load should cost little more than the metadata),
//!   off (the weights are read into host buffers) and with direct I/O
//!   (`-lm dio`: read past the page cache, so its warm load reads the disk
//!   again), cold and warm, in GB/s against the sequential read of the same
//!   cache state;
//! * `vulkan`: `Model::load` with every layer offloaded to the first Vulkan
//!   device, mmap on and off and direct I/O, when there is one (software devices such as
//!   lavapipe need `GGML_VK_ALLOW_CPU_DEVICES=1`; `--vulkan` makes a
//!   missing device an error instead of a skipped suite).

use std::fs::File;
use std::hint::black_box;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use llama::{LoadMode, Model, ModelParams};

use super::e2e;
use super::report::Row;
use super::{BenchOptions, Suite};
use crate::error::{Error, Result};

/// Type of the generated model (tinyllama-1.1b in q8_0 is about 1.1 GB).
const DEFAULT_TYPE: &str = "q8_0";
/// Read buffer of the sequential read.
const READ_BUF: usize = 8 << 20;
/// Warm reads; the best counts.
const WARM_READS: usize = 3;
/// GGUF opens; best and median are reported.
const OPENS: usize = 20;
const QUICK_OPENS: usize = 5;
/// Warm model loads per configuration; best and median are reported.
const LOADS: usize = 3;
const QUICK_LOADS: usize = 1;

/// The model to load: `--model`, or the generated tinyllama-1.1b model in
/// q8_0 (about 1.1 GB; two layers for `--quick`) that `bench e2e` uses too,
/// made once in the output folder.
pub(super) fn model_path(opts: &BenchOptions) -> Result<PathBuf> {
    if let Some(p) = &opts.model {
        if !p.is_file() {
            return Err(Error::Usage(format!(
                "--model '{}' is not a file",
                p.display()
            )));
        }
        return Ok(p.clone());
    }
    let n_layer = opts.quick.then_some(e2e::QUICK_N_LAYER);
    e2e::generated_model(&opts.out_dir, DEFAULT_TYPE.parse()?, n_layer)
}

/// Asks the OS to drop the file's pages from the page cache (written back
/// first, since only clean pages can be dropped). Returns false when the
/// platform has no way to ask.
fn drop_from_page_cache(file: &File) -> bool {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        if file.sync_data().is_err() {
            return false;
        }
        // SAFETY: posix_fadvise only reads its integer arguments; the
        // descriptor is open for the duration of the call.
        let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        rc == 0
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = file;
        false
    }
}

/// Reads the whole file sequentially; returns (bytes, time).
fn read_all(path: &Path, cold: bool) -> Result<(u64, Duration, bool)> {
    let mut file = File::open(path).map_err(|e| Error::io(path, e))?;
    let dropped = cold && drop_from_page_cache(&file);
    let mut buf = vec![0u8; READ_BUF];
    let mut total = 0u64;
    let start = Instant::now();
    loop {
        let n = file.read(&mut buf).map_err(|e| Error::io(path, e))?;
        if n == 0 {
            break;
        }
        black_box(&buf[..n]);
        total += n as u64;
    }
    Ok((total, start.elapsed(), dropped))
}

/// Reads the whole (cached) file into one freshly allocated buffer of its
/// size, 8 MiB at a time: what a load with mmap off does, page faults of
/// the new memory included. Returns the time.
fn read_into_fresh_memory(path: &Path) -> Result<Duration> {
    let mut file = File::open(path).map_err(|e| Error::io(path, e))?;
    let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
    let len = usize::try_from(len)
        .map_err(|_| Error::Usage(format!("'{}' does not fit in memory", path.display())))?;
    let start = Instant::now();
    // Zeroed memory of this size comes straight from the OS: its pages are
    // faulted in by the reads, as a loader's new host buffer's are.
    let mut buf = vec![0u8; len];
    for chunk in buf.chunks_mut(READ_BUF) {
        file.read_exact(chunk).map_err(|e| Error::io(path, e))?;
    }
    black_box(&buf);
    let t = start.elapsed();
    drop(buf);
    Ok(t)
}

pub(super) fn gbs(bytes: u64, t: Duration) -> f64 {
    bytes as f64 / t.as_secs_f64().max(1e-9) / 1e9
}

/// Sequential read, cold and warm.
pub struct SequentialRead;

impl Suite for SequentialRead {
    fn name(&self) -> &'static str {
        "read"
    }

    fn run(&self, opts: &BenchOptions, _prior: &[Row]) -> Result<Vec<Row>> {
        let path = model_path(opts)?;
        let (bytes, cold, dropped) = read_all(&path, true)?;
        let mib = bytes >> 20;
        let name = path
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let cold_note = if dropped {
            format!("{name}, {mib} MiB, 8 MiB reads after posix_fadvise(DONTNEED)")
        } else {
            format!("{name}, {mib} MiB, 8 MiB reads; page cache could not be dropped")
        };
        let mut warm = Duration::MAX;
        let mut fresh = Duration::MAX;
        for _ in 0..WARM_READS {
            warm = warm.min(read_all(&path, false)?.1);
            fresh = fresh.min(read_into_fresh_memory(&path)?);
        }
        Ok(vec![
            Row::new(
                self.name(),
                "sequential cold",
                Some(1),
                gbs(bytes, cold),
                "GB/s",
                cold_note,
            ),
            Row::new(
                self.name(),
                "sequential warm",
                Some(1),
                gbs(bytes, warm),
                "GB/s",
                format!("{name}, {mib} MiB from the page cache, best of {WARM_READS}"),
            ),
            Row::new(
                self.name(),
                "sequential warm, fresh memory",
                Some(1),
                gbs(bytes, fresh),
                "GB/s",
                format!(
                    "into one new {mib} MiB buffer (its page faults included), best of {WARM_READS}"
                ),
            ),
        ])
    }
}

/// `GgufFile::open`: map, parse, validate.
pub struct GgufOpen;

impl Suite for GgufOpen {
    fn name(&self) -> &'static str {
        "gguf"
    }

    fn run(&self, opts: &BenchOptions, _prior: &[Row]) -> Result<Vec<Row>> {
        let path = model_path(opts)?;
        let n = if opts.quick { QUICK_OPENS } else { OPENS };
        let mut times = Vec::with_capacity(n);
        let mut info = (0, 0);
        for _ in 0..n {
            let start = Instant::now();
            let f = gguf::GgufFile::open(&path)?;
            times.push(start.elapsed());
            info = (f.tensors().len(), f.metadata().len());
        }
        times.sort();
        let ms = |t: Duration| t.as_secs_f64() * 1e3;
        let note = format!(
            "{} tensors, {} keys, {n} opens (warm cache)",
            info.0, info.1
        );
        Ok(vec![
            Row::new(
                self.name(),
                "GgufFile::open best",
                None,
                ms(times[0]),
                "ms",
                note.clone(),
            ),
            Row::new(
                self.name(),
                "GgufFile::open median",
                None,
                ms(times[n / 2]),
                "ms",
                note,
            ),
        ])
    }
}

/// Asks the OS to drop `path` from the page cache; false when it could not.
fn drop_path_from_page_cache(path: &Path) -> Result<bool> {
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    Ok(drop_from_page_cache(&file))
}

/// The timings of one load configuration.
struct LoadTimes {
    /// The cold load, and whether the page cache could be dropped before it.
    cold: (Duration, bool),
    /// A cold sequential read of the file just before the cold load: the
    /// disk's speed of the moment, which on a shared machine varies from one
    /// minute to the next.
    cold_read: Duration,
    /// The warm loads, fastest first.
    warm: Vec<Duration>,
    /// What the loader did (of the last load).
    stats: llama::loader::LoadStats,
    /// Devices of the offloaded layers (`CPU` when none).
    devices: String,
    /// Layers offloaded, of the model's.
    offloaded: (usize, usize),
}

impl LoadTimes {
    fn best(&self) -> Duration {
        self.warm[0]
    }

    fn median(&self) -> Duration {
        self.warm[self.warm.len() / 2]
    }
}

/// Reads the file cold, then loads the model once after dropping the file
/// from the page cache again, then `n` times warm. Each model is dropped
/// before the next load starts and outside the timed part.
fn time_loads(path: &Path, params: &ModelParams, n: usize) -> Result<LoadTimes> {
    llama::log::set_level(llama::log::Level::Warn);
    let cold_read = read_all(path, true)?.1;
    let dropped = drop_path_from_page_cache(path)?;
    let start = Instant::now();
    let model = Model::load(path, params)?;
    let cold = (start.elapsed(), dropped);
    drop(model);
    let mut warm = Vec::with_capacity(n);
    let mut last = None;
    for _ in 0..n.max(1) {
        drop(last.take());
        let start = Instant::now();
        let model = Model::load(path, params)?;
        warm.push(start.elapsed());
        last = Some(model);
    }
    warm.sort();
    let model = last.ok_or_else(|| Error::Usage("no load was timed".into()))?;
    let devices = if model.plan.n_offloaded > 0 {
        let names: Vec<&str> = model.devices.iter().map(|d| d.name()).collect();
        names.join(",")
    } else {
        "CPU".to_string()
    };
    Ok(LoadTimes {
        cold,
        cold_read,
        warm,
        stats: model.stats.clone(),
        devices,
        offloaded: (model.plan.n_offloaded, model.hparams.n_layer),
    })
}

/// A figure of `rows` (a prior suite's), by suite and case.
fn prior_value(rows: &[Row], suite: &str, case: &str) -> Option<f64> {
    rows.iter()
        .find(|r| r.suite == suite && r.case == case)
        .map(|r| r.value)
}

const MIB: f64 = (1u64 << 20) as f64;

/// The rows of one configuration: cold, then warm (best of the loads).
/// `bounded`: compared with the sequential read of the same cache state
/// (loads that read every weight); otherwise the note compares the time
/// with the GGUF open.
fn load_rows(
    suite: &str,
    what: &str,
    bytes: u64,
    t: &LoadTimes,
    bounded: bool,
    extra: &str,
    prior: &[Row],
) -> Vec<Row> {
    let secs = |d: Duration| d.as_secs_f64();
    let open_ms = prior_value(prior, "gguf", "GgufFile::open median");
    let context = |bound: Option<f64>, which: &str| -> String {
        match (bounded, bound, open_ms) {
            (true, Some(b), _) => format!(
                "{:.3} s at the {which}sequential read's {b:.2} GB/s",
                bytes as f64 / 1e9 / b
            ),
            (false, _, Some(ms)) => format!("GgufFile::open alone {ms:.1} ms"),
            _ => String::new(),
        }
    };
    let cold_bound = Some(gbs(bytes, t.cold_read));
    let warm_bound = prior_value(prior, "read", "sequential warm");
    let fresh = match prior_value(prior, "read", "sequential warm, fresh memory") {
        Some(f) if bounded => format!(" ({:.3} s into fresh memory)", bytes as f64 / 1e9 / f),
        _ => String::new(),
    };
    let cache = if t.cold.1 {
        "after posix_fadvise(DONTNEED)"
    } else {
        "page cache could not be dropped"
    };
    let n = t.warm.len();
    vec![
        Row::new(
            suite,
            format!("{what}, cold"),
            None,
            gbs(bytes, t.cold.0),
            "GB/s",
            format!(
                "{:.3} s, {cache}; {}; {extra}",
                secs(t.cold.0),
                context(cold_bound, "preceding cold ")
            ),
        )
        .with_bound(if bounded { cold_bound } else { None }),
        Row::new(
            suite,
            format!("{what}, warm"),
            None,
            gbs(bytes, t.best()),
            "GB/s",
            format!(
                "{:.3} s best of {n} (median {:.3} s); {}{fresh}; {extra}",
                secs(t.best()),
                secs(t.median()),
                context(warm_bound, "")
            ),
        )
        .with_bound(if bounded { warm_bound } else { None }),
    ]
}

fn file_size(path: &Path) -> Result<u64> {
    Ok(std::fs::metadata(path)
        .map_err(|e| Error::io(path, e))?
        .len())
}

pub(super) fn n_loads(opts: &BenchOptions) -> usize {
    if opts.quick {
        QUICK_LOADS
    } else {
        LOADS
    }
}

/// `Model::load` on the CPU alone, mmap on and off.
pub struct CpuLoad;

impl Suite for CpuLoad {
    fn name(&self) -> &'static str {
        "model"
    }

    fn run(&self, opts: &BenchOptions, prior: &[Row]) -> Result<Vec<Row>> {
        let path = model_path(opts)?;
        let bytes = file_size(&path)?;
        let mut rows = Vec::new();
        // Weights in ggml's layout (mapped in place, read, read with direct
        // I/O), then the default, with the CPU's repacked type.
        for (mode, repack) in [
            (LoadMode::Mmap, false),
            (LoadMode::None, false),
            (LoadMode::Dio, false),
            (LoadMode::Mmap, true),
        ] {
            let params = ModelParams {
                devices: Some(Vec::new()),
                n_gpu_layers: 0,
                load_mode: mode,
                use_extra_bufts: repack,
                ..ModelParams::default()
            };
            let t = time_loads(&path, &params, n_loads(opts))?;
            let (what, extra) = match (mode, repack) {
                (LoadMode::Mmap, false) => (
                    "CPU, mmap on, no repack",
                    format!(
                        "{:.0} MiB used in place from the mapping",
                        t.stats.bytes_mapped as f64 / MIB
                    ),
                ),
                (LoadMode::Dio, _) => (
                    "CPU, direct I/O, no repack",
                    format!(
                        "{:.0} MiB read with O_DIRECT into host buffers ({:.2} MiB through \
                         bounce buffers; the page cache is bypassed: warm is read from the \
                         disk again)",
                        t.stats.bytes_read as f64 / MIB,
                        t.stats.bytes_bounced as f64 / MIB
                    ),
                ),
                (_, false) => (
                    "CPU, mmap off, no repack",
                    format!(
                        "{:.0} MiB read into host buffers",
                        t.stats.bytes_read as f64 / MIB
                    ),
                ),
                (_, true) => (
                    "CPU, mmap on, repacked",
                    format!(
                        "{:.0} MiB repacked for the matrix kernels, {:.0} MiB mapped",
                        t.stats.bytes_repacked as f64 / MIB,
                        t.stats.bytes_mapped as f64 / MIB
                    ),
                ),
            };
            rows.extend(load_rows(
                self.name(),
                what,
                bytes,
                &t,
                !mode.use_mmap() || repack,
                &extra,
                prior,
            ));
        }
        Ok(rows)
    }
}

/// Whether there is a Vulkan device for `what`: false after saying why it
/// is skipped, or an error with `--vulkan`.
pub(super) fn vulkan_present(opts: &BenchOptions, what: &str) -> Result<bool> {
    if !opts.vulkan {
        if let Some(why) = e2e::vulkan_missing() {
            eprintln!("load: skipped {what}: {why}");
            return Ok(false);
        }
    }
    e2e::vulkan_available()?;
    Ok(true)
}

/// `Model::load` with every layer on the Vulkan devices, mmap on and off.
/// Without a device the suite is skipped (an error with `--vulkan`).
pub struct VulkanLoad;

impl Suite for VulkanLoad {
    fn name(&self) -> &'static str {
        "vulkan"
    }

    fn run(&self, opts: &BenchOptions, prior: &[Row]) -> Result<Vec<Row>> {
        if !vulkan_present(opts, "the offloaded loads")? {
            return Ok(Vec::new());
        }
        let path = model_path(opts)?;
        let bytes = file_size(&path)?;
        let mut rows = Vec::new();
        for mode in [LoadMode::Mmap, LoadMode::None, LoadMode::Dio] {
            let params = ModelParams {
                n_gpu_layers: 999,
                load_mode: mode,
                ..ModelParams::default()
            };
            let t = time_loads(&path, &params, n_loads(opts))?;
            let what = format!(
                "{} ngl {}/{}, {}",
                t.devices,
                t.offloaded.0,
                t.offloaded.1,
                match mode {
                    LoadMode::Mmap => "mmap on",
                    LoadMode::Dio => "direct I/O",
                    _ => "mmap off",
                }
            );
            let extra = format!(
                "{:.0} MiB uploaded ({:.0} MiB through the async staging ring), {:.0} MiB on the CPU",
                t.stats.bytes_uploaded as f64 / MIB,
                t.stats.bytes_uploaded_async as f64 / MIB,
                (t.stats.bytes_mapped + t.stats.bytes_read) as f64 / MIB
            );
            rows.extend(load_rows(
                self.name(),
                &what,
                bytes,
                &t,
                true,
                &extra,
                prior,
            ));
        }
        Ok(rows)
    }
}
