//! Where the test inputs are: the reference fixtures and real models.

use std::path::{Path, PathBuf};

/// The workspace root (the folder holding the top `Cargo.toml`).
pub fn workspace_root() -> PathBuf {
    // This crate lives at `crates/test-support`.
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// True when the environment variable `var` is `1`: what a test would
/// skip without must then be there.
pub fn required(var: &str) -> bool {
    std::env::var(var).is_ok_and(|v| v == "1")
}

/// The fixtures folder: `$LLAMA_FIXTURES`, else `../shared/fixtures` next
/// to the workspace. `None` (after printing "skipped: no fixtures") when it
/// has no `models` folder, unless `REQUIRE_FIXTURES=1`, which turns absence
/// into a failure.
pub fn fixtures() -> Option<PathBuf> {
    fixtures_with("models")
}

/// [`fixtures`], for tests that need the fixtures' `sub` folder (such as
/// `vocab`) rather than `models`.
pub fn fixtures_with(sub: &str) -> Option<PathBuf> {
    let dir = match std::env::var_os("LLAMA_FIXTURES") {
        Some(d) => PathBuf::from(d),
        None => workspace_root().join("../shared/fixtures"),
    };
    found_or_skip(
        dir.join(sub).is_dir().then_some(dir.clone()),
        "REQUIRE_FIXTURES",
        &format!("fixtures ({} has no {sub} folder)", dir.display()),
    )
}

/// A real model file named `name` (a downloaded GGUF such as
/// `tinyllama-1.1b-q4_0.gguf`) in `$LLAMA_MODELS`, else in `target/models`
/// of the workspace. `None` (after printing why) when it is not there,
/// unless `REQUIRE_REAL_MODELS=1`, which turns absence into a failure.
pub fn real_model(name: &str) -> Option<PathBuf> {
    let dir = match std::env::var_os("LLAMA_MODELS") {
        Some(d) => PathBuf::from(d),
        None => workspace_root().join("target/models"),
    };
    let path = dir.join(name);
    found_or_skip(
        path.is_file().then_some(path.clone()),
        "REQUIRE_REAL_MODELS",
        &format!("real model {}", path.display()),
    )
}

/// `found`, or `None` after printing "skipped: no {what}"; a failure
/// instead when `require_var` is `1`.
fn found_or_skip(found: Option<PathBuf>, require_var: &str, what: &str) -> Option<PathBuf> {
    if found.is_some() {
        return found;
    }
    assert!(
        !required(require_var),
        "{require_var}=1 but there is no {what}"
    );
    eprintln!("skipped: no {what}");
    None
}

/// A fresh, empty temporary folder for one test of one process: `prefix`
/// names the test binary's crate, `name` the test. The folders of test
/// processes that have ended (with `prefix`) are removed first, so that
/// runs do not pile them up.
pub fn scratch_dir(prefix: &str, name: &str) -> PathBuf {
    let tmp = std::env::temp_dir();
    remove_stale(&tmp, &format!("{prefix}-test-"));
    let d = tmp.join(format!("{prefix}-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
    d
}

/// Removes the folders `{stem}{pid}-...` in `tmp` whose process is gone
/// (where `/proc` says so; elsewhere nothing is removed).
fn remove_stale(tmp: &Path, stem: &str) {
    if !Path::new("/proc/self").exists() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(stem)) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            // Another process's leftovers may vanish meanwhile: ignore.
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// Held by the tests that make scratch directories: each one sweeps
    /// the stale directories, which would race with the sweep test setting
    /// its stale directory up.
    static SCRATCH: Mutex<()> = Mutex::new(());

    #[test]
    fn the_root_holds_the_workspace_manifest() {
        let text = std::fs::read_to_string(workspace_root().join("Cargo.toml")).unwrap();
        assert!(text.contains("[workspace]"));
    }

    #[test]
    fn a_missing_thing_skips_unless_required() {
        let missing = Some(PathBuf::from("/no/such/place"));
        assert_eq!(
            found_or_skip(missing.clone(), "TEST_SUPPORT_UNSET_VAR", "x"),
            missing
        );
        assert_eq!(found_or_skip(None, "TEST_SUPPORT_UNSET_VAR", "x"), None);
    }

    #[test]
    fn scratch_dirs_of_ended_processes_are_removed() {
        let _one = SCRATCH.lock().unwrap_or_else(|e| e.into_inner());
        // No process has this id (above the kernel's pid_max).
        let stale = std::env::temp_dir().join("test-support-test-4294967295-old");
        std::fs::create_dir_all(&stale).unwrap();
        std::fs::write(stale.join("f"), b"x").unwrap();
        let d = scratch_dir("test-support", "sweep");
        assert!(!stale.exists(), "{} left behind", stale.display());
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn scratch_dirs_start_empty() {
        let _one = SCRATCH.lock().unwrap_or_else(|e| e.into_inner());
        let d = scratch_dir("test-support", "empty");
        std::fs::write(d.join("f"), b"x").unwrap();
        let d = scratch_dir("test-support", "empty");
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 0);
        std::fs::remove_dir_all(d).unwrap();
    }
}
