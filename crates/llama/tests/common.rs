//! Helpers shared by the llama crate's integration tests.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use llama::{Model, ModelParams};

// Each test binary uses a part of these.
#[allow(unused_imports)]
pub use test_support::fixtures;

/// A fresh scratch directory for one test.
pub fn scratch(name: &str) -> PathBuf {
    test_support::scratch_dir("llama", name)
}

/// The model at `path` loaded on the CPU alone, whatever GPU is visible
/// (the CPU's numbers are the references').
pub fn load_on_cpu(path: &Path) -> Model {
    let cpu = ModelParams {
        devices: Some(Vec::new()),
        ..ModelParams::default()
    };
    Model::load(path, &cpu).expect("load")
}
