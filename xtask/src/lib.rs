//! Developer tasks of the workspace: `gen-model`, `bench` and `ci`.
//!
//! The binary (`cargo xtask ...`) is a thin command-line layer over this
//! library, so that the tasks can be tested and reused.

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
