//! `bench`: measurements of this machine and of the engine.
//!
//! Each group (`kernels`, `load`, `e2e`) is a list of [`Suite`]s whose rows
//! go into one report, printed as a markdown table and written as JSON to
//! `<out_dir>/<group>.json`. A new measurement is a new module with a
//! `Suite` added to its group: the CPU backend's matvec/matmul kernels go
//! into `kernels`, prompt processing and generation (pp512/tg128) through
//! the llama context into `e2e`.

pub mod e2e;
pub mod fma;
pub mod host;
pub mod load;
pub mod memory;
pub mod report;

use std::path::PathBuf;

use crate::error::{Error, Result};
use report::{Report, Row};

/// Bench groups.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Which {
    /// Memory bandwidth (STREAM copy/triad) and peak FMA rate.
    Kernels,
    /// Sequential file read and GGUF open + parse.
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
    /// Model for the load bench.
    pub model: Option<PathBuf>,
    /// Thread counts; empty for the default list.
    pub threads: Vec<usize>,
    /// Quick run: fewer repetitions, smaller sizes.
    pub quick: bool,
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
    /// Runs the measurement.
    fn run(&self, opts: &BenchOptions) -> Result<Vec<Row>>;
}

/// The suites of a group.
fn suites(which: Which) -> Vec<Box<dyn Suite>> {
    match which {
        Which::Kernels => vec![Box::new(memory::Stream), Box::new(fma::PeakFma)],
        Which::Load => vec![Box::new(load::SequentialRead), Box::new(load::GgufOpen)],
        Which::E2e => vec![Box::new(e2e::Generation)],
        Which::All => Vec::new(),
    }
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
    opts.thread_counts()?;
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
        report.rows.extend(suite.run(opts)?);
    }
    println!("{}", report.markdown());
    let path = report.save(&opts.out_dir)?;
    println!("wrote {}\n", path.display());
    Ok(())
}
