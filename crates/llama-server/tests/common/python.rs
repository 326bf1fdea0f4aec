//! Python checks of the server: a script under `tests/` run on the server
//! binary and the stories260K fixture, skipped when what it needs is
//! missing (a failure instead when the environment requires it).

use std::path::Path;
use std::process::{Command, Stdio};

use test_support::required;

/// Whether `cmd args` runs and succeeds (its output discarded).
pub fn runs(cmd: &str, args: &[&str]) -> bool {
    Command::new(cmd)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// False after printing `skip` when `have` is false; fails with `need`
/// instead when the variable `require` is 1.
pub fn available(have: bool, require: &str, need: &str, skip: &str) -> bool {
    if !have {
        assert!(!required(require), "{need}");
        eprintln!("skipped: {skip}");
    }
    have
}

/// Runs `tests/<script>` with python3 on the server and the stories260K
/// model of the fixtures folder `fx`; fails when the script does.
pub fn run_script(script: &str, fx: &Path) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(script);
    let status = Command::new("python3")
        .arg(path)
        .arg(env!("CARGO_BIN_EXE_llama-server"))
        .arg(fx.join("models").join("stories260K.gguf"))
        .status()
        .expect("python3 runs");
    assert!(status.success(), "{script} failed: {status}");
}
