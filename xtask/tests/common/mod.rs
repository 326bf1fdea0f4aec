//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::PathBuf;

use xtask::gen_model::shape::{Preset, ShapeOverrides};
use xtask::gen_model::ModelSpec;

/// The spec of a preset with overrides, synthetic vocabulary.
pub fn spec(preset: Preset, o: ShapeOverrides, ty: &str, seed: u64) -> ModelSpec {
    ModelSpec::synthetic(preset, &o, ty.parse().expect("known type"), seed, "test")
        .expect("valid shape")
}

// Each test binary uses a part of these.
#[allow(unused_imports)]
pub use test_support::fixtures;

/// The shape of the tiny-* fixture models over the stories260k preset.
pub fn tiny_fixture_shape() -> ShapeOverrides {
    ShapeOverrides {
        n_embd: Some(256),
        n_layer: Some(4),
        n_ff: Some(768),
        n_vocab: Some(512),
        ..Default::default()
    }
}

/// A fresh temporary folder for one test.
pub fn temp_dir(test: &str) -> PathBuf {
    test_support::scratch_dir("xtask", test)
}
