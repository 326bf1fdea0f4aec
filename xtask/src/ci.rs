//! `ci`: the checks `.ci/run` makes once its packages are installed.

use std::path::Path;

use crate::error::Result;

/// Environment `.ci/run` exports: fixtures, a Vulkan device and glslc are
/// required, so a missing one fails instead of skipping; lavapipe counts as
/// a device.
const ENV: &[(&str, &str)] = &[
    ("REQUIRE_FIXTURES", "1"),
    ("GGML_VK_ALLOW_CPU_DEVICES", "1"),
    ("REQUIRE_VULKAN", "1"),
    ("REQUIRE_GLSLC", "1"),
    ("CARGO_TERM_COLOR", "never"),
    ("REQUIRE_REAL_MODELS", "1"),
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
    &["xtask", "fetch-model", "gemma-3-270m"],
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
    for step in STEPS {
        eprintln!("==> cargo {}", step.join(" "));
        crate::cargo(root, step, ENV)?;
    }
    eprintln!("==> ci: all steps passed");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_match_the_ci_script() {
        let p = plan();
        assert_eq!(p.len(), 4);
        assert!(p[0].ends_with("cargo fmt --all -- --check"));
        assert!(p[1].ends_with("cargo clippy --workspace --all-targets -- -D warnings"));
        assert!(p[2].ends_with("cargo xtask fetch-model gemma-3-270m"));
        assert!(p[3].ends_with("cargo test --workspace"));
        assert!(p.iter().all(|l| l.starts_with("REQUIRE_FIXTURES=1 ")));
    }

    /// `.ci/run` itself: the variables it exports and the cargo commands it
    /// runs, in order, are the ones `ci` uses.
    #[test]
    fn mirrors_the_ci_script_file() {
        let path = crate::workspace_root().join(".ci").join("run");
        let Ok(text) = std::fs::read_to_string(&path) else {
            eprintln!("skipped: no {}", path.display());
            return;
        };
        let mut exports: Vec<(String, String)> = Vec::new();
        let mut cargo: Vec<String> = Vec::new();
        for line in text.lines().map(str::trim) {
            if let Some(kv) = line.strip_prefix("export ") {
                let (k, v) = kv.split_once('=').expect("export KEY=VALUE");
                exports.push((k.to_string(), v.to_string()));
            } else if let Some(cmd) = line.strip_prefix("cargo ") {
                cargo.push(cmd.to_string());
            }
        }
        let mut want: Vec<(String, String)> = ENV
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        exports.sort();
        want.sort();
        assert_eq!(exports, want, "exports of {}", path.display());
        let steps: Vec<String> = STEPS.iter().map(|s| s.join(" ")).collect();
        assert_eq!(cargo, steps, "cargo commands of {}", path.display());
    }
}
