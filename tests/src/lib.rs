//! Shared helpers for the end-to-end tests: finding the fixtures, reading
//! llama.cpp's expected outputs.

use std::path::{Path, PathBuf};

/// The fixtures folder: `$LLAMA_FIXTURES`, else `../shared/fixtures` next to
/// the workspace. `None` (after printing "skipped: no fixtures") when absent,
/// unless `REQUIRE_FIXTURES=1`, which turns absence into a failure.
pub fn fixtures() -> Option<PathBuf> {
    let dir = match std::env::var_os("LLAMA_FIXTURES") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures"),
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

/// The parsed `expected/<name>.json`.
pub fn expected(fx: &Path, name: &str) -> serde_json::Value {
    let p = fx.join("expected").join(format!("{name}.json"));
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// A JSON array of integers as i32s.
pub fn ids(v: &serde_json::Value) -> Vec<i32> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|x| x.as_i64().unwrap_or_else(|| panic!("not an integer: {x}")) as i32)
        .collect()
}

/// Little-endian f32s of a file.
pub fn read_f32(path: &Path) -> Vec<f32> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}
