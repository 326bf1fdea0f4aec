//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::PathBuf;

use xtask::gen_model::shape::{Preset, Shape, ShapeOverrides};
use xtask::gen_model::vocab::Vocab;
use xtask::gen_model::ModelSpec;

/// The spec of a preset with overrides, synthetic vocabulary.
pub fn spec(preset: Preset, o: ShapeOverrides, ty: &str, seed: u64) -> ModelSpec {
    let shape = Shape::resolve(preset, &o).expect("valid shape");
    ModelSpec {
        vocab: Vocab::synthetic_spm(shape.n_vocab).expect("vocabulary"),
        shape,
        ty: ty.parse().expect("known type"),
        seed,
        name: "test".into(),
        alignment: None,
    }
}

/// The fixtures folder (`$LLAMA_FIXTURES`, else `../shared/fixtures` from
/// the workspace root); `None`, with a message, when it is not there,
/// unless `REQUIRE_FIXTURES=1`.
pub fn fixtures() -> Option<PathBuf> {
    let dir = match std::env::var_os("LLAMA_FIXTURES") {
        Some(d) => PathBuf::from(d),
        None => xtask::workspace_root().join("../shared/fixtures"),
    };
    if dir.join("models").is_dir() {
        return Some(dir);
    }
    if std::env::var("REQUIRE_FIXTURES").as_deref() == Ok("1") {
        panic!("REQUIRE_FIXTURES=1 but no fixtures at '{}'", dir.display());
    }
    eprintln!("skipped: no fixtures");
    None
}

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
    let dir = std::env::temp_dir().join(format!("xtask-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create temp dir");
    dir
}
