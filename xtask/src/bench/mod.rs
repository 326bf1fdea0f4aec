//! `bench`: measurements of this machine and of the engine.
//!
//! Each group (`kernels`, `load`, `e2e`) is a list of [`Suite`]s whose rows
//! go into one report, printed as a markdown table and written as JSON to
//! `<out_dir>/<group>.json`. A new measurement is a new module with a
//! `Suite` added to its group. Suites see the rows measured before them in
//! the same run: the MUL_MAT kernels (`kernels`) and pp512/tg128 (`e2e`)
//! are compared with the STREAM bandwidth and the peak FMA rate measured
//! just before them, on the same machine under the same load.

pub mod e2e;
pub mod fma;
pub mod host;
pub mod load;
pub mod matmul;
pub mod memory;
pub mod mul_mat_id;
pub mod report;
pub mod upload;

use std::path::PathBuf;

use crate::error::{Error, Result};
use crate::gen_model::types::OutType;
use report::{Report, Row};

/// Bench groups.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Which {
    /// Memory bandwidth (STREAM copy/triad), peak FMA rate, and MUL_MAT
    /// per weight type (matvec and matmul) on the CPU backend.
    Kernels,
    /// Sequential file read, GGUF open + parse, and `Model::load` with mmap
    /// on and off (CPU; every layer on a Vulkan device when there is one,
    /// and the loader's synchronous and asynchronous upload paths).
    Load,
    /// Prompt processing and generation through the llama context.
    E2e,
    /// All of the above.
    All,
}

/// Settings shared by every suite.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    /// Folder of the JSON reports (and of the generated load model).
    pub out_dir: PathBuf,
    /// Model for the load and e2e benches (instead of generated ones).
    pub model: Option<PathBuf>,
    /// Thread counts; empty for the default list.
    pub threads: Vec<usize>,
    /// Quick run: fewer repetitions, smaller sizes.
    pub quick: bool,
    /// Every shape (kernels: the feed-forward shapes too).
    pub full: bool,
    /// Weight types (kernels) or model types (e2e); empty for the defaults.
    pub types: Vec<OutType>,
    /// Repetitions of each e2e test.
    pub reps: usize,
    /// Also run the e2e tests on the Vulkan devices; load: fail instead of
    /// skipping the offloaded loads when there is no Vulkan device.
    pub vulkan: bool,
}

impl Default for BenchOptions {
    fn default() -> BenchOptions {
        BenchOptions {
            out_dir: default_out_dir(),
            model: None,
            threads: Vec::new(),
            quick: false,
            full: false,
            types: Vec::new(),
            reps: e2e::DEFAULT_REPS,
            vulkan: false,
        }
    }
}

impl BenchOptions {
    /// The thread counts to measure: as given, or 1, 2, 4, ... and the
    /// number of cores.
    pub fn thread_counts(&self) -> Result<Vec<usize>> {
        if self.threads.contains(&0) {
            return Err(Error::Usage(
                "--threads: thread counts must be at least 1".into(),
            ));
        }
        if !self.threads.is_empty() {
            return Ok(self.threads.clone());
        }
        let cores = host::logical_cores();
        let mut v: Vec<usize> = std::iter::successors(Some(1usize), |n| n.checked_mul(2))
            .take_while(|&n| n <= cores)
            .collect();
        if v.last() != Some(&cores) {
            v.push(cores);
        }
        Ok(v)
    }
}

/// One measurement that adds rows to a report.
pub trait Suite {
    /// Short name, the first column of its rows.
    fn name(&self) -> &'static str;
    /// Runs the measurement; `prior` holds the rows of the suites that ran
    /// before it in the same group.
    fn run(&self, opts: &BenchOptions, prior: &[Row]) -> Result<Vec<Row>>;
}

/// The suites of a group. The bounds come first: the suites after them
/// compare their figures with the bandwidth and FMA rate of the same run.
fn suites(which: Which) -> Vec<Box<dyn Suite>> {
    match which {
        Which::Kernels => vec![
            Box::new(memory::Stream),
            Box::new(fma::PeakFma),
            Box::new(matmul::MulMatSuite),
            Box::new(mul_mat_id::MulMatIdSuite),
        ],
        Which::Load => vec![
            Box::new(load::SequentialRead),
            Box::new(load::GgufOpen),
            Box::new(load::CpuLoad),
            Box::new(load::VulkanLoad),
            Box::new(upload::UploadPaths),
        ],
        Which::E2e => vec![
            Box::new(memory::Stream),
            Box::new(fma::PeakFma),
            Box::new(e2e::Generation::new()),
        ],
        Which::All => Vec::new(),
    }
}

/// The read bandwidth (GB/s) at `threads` among `rows`: STREAM's read-only
/// case, the access pattern of weights streamed through a matrix x vector
/// product, else triad.
pub fn read_bandwidth(rows: &[Row], threads: usize) -> Option<f64> {
    let case = |name: &str| {
        rows.iter()
            .find(|r| r.suite == "stream" && r.case == name && r.threads == Some(threads))
            .map(|r| r.value)
    };
    case("read").or_else(|| case("triad"))
}

/// The peak FMA rate (GFLOP/s, best instruction set) at `threads` among `rows`.
pub fn peak_fma(rows: &[Row], threads: usize) -> Option<f64> {
    rows.iter()
        .filter(|r| r.suite == "fma" && r.case != fma::INT8_CASE && r.threads == Some(threads))
        .map(|r| r.value)
        .reduce(f64::max)
}

/// The peak 8-bit integer multiply-add rate (GOP/s) measured at `threads`,
/// where the CPU has such instructions.
pub fn peak_int8(rows: &[Row], threads: usize) -> Option<f64> {
    rows.iter()
        .filter(|r| r.suite == "fma" && r.case == fma::INT8_CASE && r.threads == Some(threads))
        .map(|r| r.value)
        .reduce(f64::max)
}

/// The default output folder: `$CARGO_TARGET_DIR/bench`, or `target/bench`
/// in the workspace.
pub fn default_out_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => PathBuf::from(dir).join("bench"),
        None => crate::workspace_root().join("target").join("bench"),
    }
}

/// Runs a group (or all of them), printing and saving each report.
pub fn run(which: Which, opts: &BenchOptions) -> Result<()> {
    validate(which, opts)?;
    if which != Which::All {
        return run_group(which, opts);
    }
    for w in [Which::Kernels, Which::Load, Which::E2e] {
        match run_group(w, opts) {
            Err(Error::Unavailable(why)) => eprintln!("skipping {}: {why}\n", group_name(w)),
            r => r?,
        }
    }
    Ok(())
}

/// Checks the options before anything runs, so that a bad flag fails at
/// once rather than after minutes of measurements.
fn validate(which: Which, opts: &BenchOptions) -> Result<()> {
    opts.thread_counts()?;
    if opts.reps == 0 {
        return Err(Error::Usage("--reps must be at least 1".into()));
    }
    if let Some(m) = &opts.model {
        if !m.is_file() {
            return Err(Error::Usage(format!(
                "--model '{}' is not a file",
                m.display()
            )));
        }
    }
    if matches!(which, Which::Kernels | Which::All) {
        matmul::Config::from_options(opts)?;
    }
    if opts.vulkan && matches!(which, Which::E2e | Which::Load | Which::All) {
        e2e::vulkan_available()?;
    }
    Ok(())
}

fn group_name(which: Which) -> &'static str {
    match which {
        Which::Kernels => "kernels",
        Which::Load => "load",
        Which::E2e => "e2e",
        Which::All => "all",
    }
}

fn run_group(which: Which, opts: &BenchOptions) -> Result<()> {
    let name = group_name(which);
    let mut report = Report::new(name);
    for suite in suites(which) {
        eprintln!("{name}: running {} ...", suite.name());
        let rows = suite.run(opts, &report.rows)?;
        report.rows.extend(rows);
    }
    println!("{}", report.markdown());
    let path = report.save(&opts.out_dir)?;
    println!("wrote {}\n", path.display());
    Ok(())
}
