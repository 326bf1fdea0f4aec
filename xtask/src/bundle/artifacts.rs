//! The executables a cargo build produced, read from its JSON messages
//! (`--message-format=json`), so that the bundle copies exactly what cargo
//! built wherever the target folder is and whatever hash a test executable
//! carries.

use std::ffi::OsStr;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::error::{Error, Result};

/// What kind of target an executable was built from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A `[[bin]]` target.
    Bin,
    /// An integration test (`tests/NAME.rs`), built by `cargo test --no-run`.
    Test,
}

/// One executable of a build.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Artifact {
    /// The target's name (`llama-cli`, `conformance`).
    pub name: String,
    /// Its kind.
    pub kind: Kind,
    /// Where cargo wrote it.
    pub path: PathBuf,
}

/// The executables named by cargo's JSON messages, one message a line
/// (other lines, such as a build script's output, are skipped). An error
/// when a line that is a `compiler-artifact` message is malformed, or when
/// the closing `build-finished` message says the build failed.
pub fn parse_messages(text: &str) -> Result<Vec<Artifact>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if !line.starts_with('{') {
            continue;
        }
        let msg: Value = serde_json::from_str(line).map_err(|e| {
            Error::Bundle(format!(
                "line {} of cargo's JSON messages is not JSON: {e}",
                i + 1
            ))
        })?;
        match msg.get("reason").and_then(Value::as_str) {
            Some("compiler-artifact") => {
                if let Some(a) = artifact(&msg).map_err(|e| {
                    Error::Bundle(format!("line {} of cargo's JSON messages: {e}", i + 1))
                })? {
                    out.push(a);
                }
            }
            Some("build-finished")
                if msg.get("success").and_then(Value::as_bool) == Some(false) =>
            {
                return Err(Error::Bundle("cargo reports that the build failed".into()));
            }
            _ => {}
        }
    }
    Ok(out)
}

/// The executable of one `compiler-artifact` message, if it has one
/// (libraries and build scripts have none).
fn artifact(msg: &Value) -> std::result::Result<Option<Artifact>, String> {
    let path = match msg.get("executable") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(p)) => PathBuf::from(p),
        Some(other) => return Err(format!("'executable' is not a path: {other}")),
    };
    let target = msg.get("target").ok_or("no 'target'")?;
    let name = target
        .get("name")
        .and_then(Value::as_str)
        .ok_or("no 'target.name'")?;
    let kinds: Vec<&str> = target
        .get("kind")
        .and_then(Value::as_array)
        .ok_or("no 'target.kind'")?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let is_test = msg
        .get("profile")
        .and_then(|p| p.get("test"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let kind = if kinds.contains(&"test") {
        Kind::Test
    } else if kinds.contains(&"bin") && !is_test {
        Kind::Bin
    } else {
        // A bin's unit-test harness, an example or a bench: not bundled.
        return Ok(None);
    };
    Ok(Some(Artifact {
        name: name.to_string(),
        kind,
        path,
    }))
}

/// The path of the executable `name` of `kind` among `found`; an error
/// naming what is missing (and what was built) otherwise.
pub fn pick(found: &[Artifact], kind: Kind, name: &str) -> Result<PathBuf> {
    found
        .iter()
        .find(|a| a.kind == kind && a.name == name)
        .map(|a| a.path.clone())
        .ok_or_else(|| {
            let built: Vec<&str> = found.iter().map(|a| a.name.as_str()).collect();
            Error::Bundle(format!(
                "cargo built no {kind:?} executable named '{name}' (built: {})",
                if built.is_empty() {
                    "none".to_string()
                } else {
                    built.join(", ")
                }
            ))
        })
}

/// Runs `cargo ARGS --message-format=json-render-diagnostics` in `root`
/// (diagnostics and progress go to the terminal) and returns the
/// executables it reports.
pub fn cargo_build(root: &Path, args: &[&str]) -> Result<Vec<Artifact>> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let line = format!("cargo {}", args.join(" "));
    let mut child = Command::new(&cargo)
        .args(args.iter().map(OsStr::new))
        .arg("--message-format=json-render-diagnostics")
        .current_dir(root)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| Error::not_started(&line, e))?;
    let mut text = String::new();
    if let Some(mut out) = child.stdout.take() {
        out.read_to_string(&mut text).map_err(|e| Error::Command {
            command: line.clone(),
            reason: format!("reading its output: {e}"),
        })?;
    }
    let status = child.wait().map_err(|e| Error::Command {
        command: line.clone(),
        reason: format!("waiting for it: {e}"),
    })?;
    crate::exited_ok(line, status)?;
    parse_messages(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(name: &str, kind: &str, test: bool, exe: Option<&str>) -> String {
        serde_json::json!({
            "reason": "compiler-artifact",
            "package_id": "path+file:///w/crates/x#0.1.0",
            "target": { "name": name, "kind": [kind], "src_path": "/w/x.rs" },
            "profile": { "opt_level": "3", "test": test },
            "executable": exe,
            "fresh": true,
        })
        .to_string()
    }

    #[test]
    fn binaries_and_tests_are_found_and_the_rest_skipped() {
        let text = [
            "   Compiling x v0.1.0".to_string(),
            msg("gguf", "lib", false, None),
            msg("llama-cli", "bin", false, Some("/t/release/llama-cli")),
            msg(
                "llama-cli",
                "bin",
                true,
                Some("/t/release/deps/llama_cli-1"),
            ),
            msg(
                "conformance",
                "test",
                true,
                Some("/t/release/deps/conformance-ab"),
            ),
            msg("mul_mat", "bench", true, Some("/t/release/deps/mul_mat-cd")),
            r#"{"reason":"build-finished","success":true}"#.to_string(),
        ]
        .join("\n");
        let found = parse_messages(&text).unwrap();
        assert_eq!(
            found,
            vec![
                Artifact {
                    name: "llama-cli".into(),
                    kind: Kind::Bin,
                    path: "/t/release/llama-cli".into()
                },
                Artifact {
                    name: "conformance".into(),
                    kind: Kind::Test,
                    path: "/t/release/deps/conformance-ab".into()
                },
            ]
        );
        assert_eq!(
            pick(&found, Kind::Test, "conformance").unwrap(),
            PathBuf::from("/t/release/deps/conformance-ab")
        );
        let e = pick(&found, Kind::Bin, "llama-bench")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("'llama-bench'") && e.contains("llama-cli, conformance"),
            "{e}"
        );
        assert!(pick(&[], Kind::Bin, "x")
            .unwrap_err()
            .to_string()
            .contains("none"));
    }

    #[test]
    fn malformed_messages_and_failed_builds_are_errors() {
        let e = parse_messages("{not json").unwrap_err().to_string();
        assert!(e.contains("line 1") && e.contains("not JSON"), "{e}");
        let no_target = r#"{"reason":"compiler-artifact","executable":"/x"}"#;
        let e = parse_messages(no_target).unwrap_err().to_string();
        assert!(e.contains("target"), "{e}");
        let bad_exe = msg("a", "bin", false, None).replace("null", "3");
        let e = parse_messages(&bad_exe).unwrap_err().to_string();
        assert!(e.contains("executable"), "{e}");
        let failed = r#"{"reason":"build-finished","success":false}"#;
        let e = parse_messages(failed).unwrap_err().to_string();
        assert!(e.contains("build failed"), "{e}");
    }
}
