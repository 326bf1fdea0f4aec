//! Helpers shared by the llama crate's integration tests.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// The fixtures folder, or `None` after printing "skipped: no fixtures"
/// (a failure instead with `REQUIRE_FIXTURES=1`).
pub fn fixtures() -> Option<PathBuf> {
    let dir = match std::env::var_os("LLAMA_FIXTURES") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures"),
    };
    if dir.join("models").is_dir() {
        return Some(dir);
    }
    if std::env::var("REQUIRE_FIXTURES").is_ok_and(|v| v == "1") {
        panic!(
            "fixtures not found at {} (REQUIRE_FIXTURES=1)",
            dir.display()
        );
    }
    eprintln!("skipped: no fixtures");
    None
}

/// A fresh scratch directory for one test.
pub fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("llama-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("scratch dir");
    d
}
