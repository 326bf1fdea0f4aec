//! Helpers shared by the llama crate's integration tests.

#![allow(dead_code)]

use std::path::PathBuf;

// Each test binary uses a part of these.
#[allow(unused_imports)]
pub use test_support::fixtures;

/// A fresh scratch directory for one test.
pub fn scratch(name: &str) -> PathBuf {
    test_support::scratch_dir("llama", name)
}
