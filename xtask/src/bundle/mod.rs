//! `bundle`: a self-contained folder that checks and measures the engine on
//! a machine with a Vulkan GPU, without Rust or the sources there.
//!
//! It holds the stripped release builds of `llama-cli`, `llama-bench`,
//! `llama-perplexity` and this tool (for `gen-model`), the Vulkan test
//! executables `conformance` and `ops`, the real stories260K model and
//! `run.sh`, which lists the devices, compares greedy output and perplexity
//! with every layer offloaded against the CPU's, generates TinyLlama-1.1B
//! and Llama-7B shaped models, benches them with `llama-bench -ngl 99`, runs
//! the conformance suite and writes one report (see `xtask/bundle/README.md`).

pub mod artifacts;
pub mod assemble;

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::{Error, Result};
use artifacts::{cargo_build, pick, Kind};
use assemble::{assemble, check_out_dir, mib, Assembled, Contents, Entry, Settings};

/// The tools of the llama crate that go into `bin/`.
pub const TOOLS: [&str; 3] = ["llama-cli", "llama-bench", "llama-perplexity"];

/// The ggml-vulkan test executables and their names in `tests/`.
pub const SUITES: [(&str, &str); 2] =
    [("conformance", "vulkan-conformance"), ("ops", "vulkan-ops")];

/// Flags of `cargo xtask bundle`.
#[derive(Clone, Debug)]
pub struct Options {
    /// The folder to make (new or empty).
    pub out: PathBuf,
    /// The strip program.
    pub strip: PathBuf,
    /// The size limit.
    pub limit_bytes: u64,
}

/// Builds the release executables and assembles the bundle in `opts.out`.
pub fn run(root: &Path, opts: &Options) -> Result<Assembled> {
    // Fail on a bad --out before a long build.
    check_out_dir(&opts.out)?;
    let model = root.join("models/stories260K.gguf");
    if !model.is_file() {
        return Err(Error::Bundle(format!(
            "the stories260K model is missing at '{}'",
            model.display()
        )));
    }
    let mut args = vec!["build", "--release", "-p", "llama"];
    for t in TOOLS {
        args.extend(["--bin", t]);
    }
    let tools = cargo_build(root, &args)?;
    let xtask = cargo_build(
        root,
        &["build", "--release", "-p", "xtask", "--bin", "xtask"],
    )?;
    let mut args = vec!["test", "--release", "--no-run", "-p", "ggml-vulkan"];
    for (t, _) in SUITES {
        args.extend(["--test", t]);
    }
    let suites = cargo_build(root, &args)?;

    let mut executables = Vec::new();
    for t in TOOLS {
        executables.push(Entry::new(
            pick(&tools, Kind::Bin, t)?,
            Path::new("bin").join(t),
        ));
    }
    executables.push(Entry::new(pick(&xtask, Kind::Bin, "xtask")?, "bin/xtask"));
    for (t, name) in SUITES {
        executables.push(Entry::new(
            pick(&suites, Kind::Test, t)?,
            Path::new("tests").join(name),
        ));
    }
    let contents = Contents {
        executables,
        data: vec![Entry::new(model, "models/stories260K.gguf")],
        build_info: build_info(root),
    };
    let settings = Settings {
        strip: Some(opts.strip.clone()),
        limit_bytes: opts.limit_bytes,
    };
    let made = assemble(&contents, &opts.out, &settings)?;
    eprint!("{}", made.listing());
    eprintln!(
        "bundle: '{}', {:.2} MiB (limit {:.2} MiB); run it with ./run.sh (--help for its options)",
        opts.out.display(),
        mib(made.total_bytes),
        mib(opts.limit_bytes)
    );
    Ok(made)
}

/// The facts of this build: commit (and whether the tree had changes),
/// compiler, target and date; "unknown" where a tool cannot say.
pub fn build_info(root: &Path) -> String {
    let commit = output(root, "git", &["rev-parse", "HEAD"]);
    let dirty = output(
        root,
        "git",
        &["status", "--porcelain", "--untracked-files=no"],
    );
    let commit = match (commit, dirty) {
        (Some(c), Some(d)) if !d.is_empty() => format!("{c} (with uncommitted changes)"),
        (Some(c), _) => c,
        (None, _) => "unknown".into(),
    };
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let rustc = output(root, &rustc, &["--version"]).unwrap_or_else(|| "unknown".into());
    let date =
        output(root, "date", &["-u", "+%Y-%m-%d %H:%M UTC"]).unwrap_or_else(|| "unknown".into());
    format!(
        "commit: {commit}\nbuilt: {date}, release profile, {rustc}, {}-{}\n",
        std::env::consts::ARCH,
        std::env::consts::OS
    )
}

/// The trimmed stdout of a command that succeeded.
fn output(root: &Path, program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program)
        .args(args)
        .current_dir(root)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}
