//! Developer tasks of the workspace: `gen-model`, `bench` and `ci`.
//!
//! ```text
//! cargo xtask gen-model --preset tinyllama-1.1b --type q4_0 --out model.gguf
//! cargo xtask gen-model --n-embd 256 --n-layer 4 --n-ff 768 --type q8_0 --seed 21 --out tiny.gguf
//! cargo xtask gen-model --vocab-from some-model.gguf --type f16 --out model.gguf
//! cargo xtask bench kernels        # STREAM, peak FMA, MUL_MAT per weight type
//! cargo xtask bench load --model model.gguf
//! cargo xtask bench e2e            # pp512/tg128 on generated tinyllama-1.1b models
//! cargo xtask ci                   # fmt, clippy, tests, as CI runs them
//! ```
//!
//! The binary is a thin command-line layer over this library, so that the
//! tasks can be tested and reused.

pub mod bench;
pub mod ci;
pub mod cli;
pub mod error;
pub mod gen_model;

pub use error::{Error, Result};

use std::path::PathBuf;

/// The workspace root (the parent of this crate's folder).
pub fn workspace_root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map(PathBuf::from).unwrap_or(manifest)
}
