//! `ci`: the checks `.ci/run` makes once its packages are installed.

use std::path::Path;
use std::process::Command;

use crate::error::{Error, Result};

/// Environment `.ci/run` exports: fixtures and Vulkan are required, so a
/// missing one fails instead of skipping; lavapipe counts as a device.
const ENV: &[(&str, &str)] = &[
    ("REQUIRE_FIXTURES", "1"),
    ("GGML_VK_ALLOW_CPU_DEVICES", "1"),
    ("CARGO_TERM_COLOR", "never"),
];

/// The steps, in order.
const STEPS: &[&[&str]] = &[
    &["fmt", "--all", "--", "--check"],
    &[
        "clippy",
        "--workspace",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ],
    &["test", "--workspace"],
];

/// The command lines `run` executes, with the environment it sets.
pub fn plan() -> Vec<String> {
    let env: Vec<String> = ENV.iter().map(|(k, v)| format!("{k}={v}")).collect();
    STEPS
        .iter()
        .map(|step| format!("{} cargo {}", env.join(" "), step.join(" ")))
        .collect()
}

/// Runs every step from the workspace root, stopping at the first failure.
pub fn run(root: &Path) -> Result<()> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    for step in STEPS {
        let line = format!("cargo {}", step.join(" "));
        eprintln!("==> {line}");
        let status = Command::new(&cargo)
            .args(*step)
            .envs(ENV.iter().copied())
            .current_dir(root)
            .status()
            .map_err(|e| Error::Command {
                command: line.clone(),
                reason: format!("could not start: {e}"),
            })?;
        if !status.success() {
            return Err(Error::Command {
                command: line,
                reason: format!("failed ({status})"),
            });
        }
    }
    eprintln!("==> ci: all steps passed");
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn steps_match_the_ci_script() {
        let p = super::plan();
        assert_eq!(p.len(), 3);
        assert!(p[0].ends_with("cargo fmt --all -- --check"));
        assert!(p[1].ends_with("cargo clippy --workspace --all-targets -- -D warnings"));
        assert!(p[2].ends_with("cargo test --workspace"));
        assert!(p.iter().all(|l| l.starts_with("REQUIRE_FIXTURES=1 ")));
    }
}
