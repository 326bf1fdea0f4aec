//! `ci`: the checks `.ci/run` makes once its packages are installed.

use std::path::Path;

use crate::error::Result;

/// Environment of every step: fixtures and glslc are required, so a
/// missing one fails instead of skipping.
const ENV: &[(&str, &str)] = &[
    ("REQUIRE_FIXTURES", "1"),
    ("REQUIRE_GLSLC", "1"),
    ("CARGO_TERM_COLOR", "never"),
    ("CARGO_INCREMENTAL", "0"),
    ("REQUIRE_REAL_MODELS", "1"),
    ("REQUIRE_OPENAI_CLIENT", "1"),
    ("REQUIRE_CHROMIUM", "1"),
];

/// Variables removed from every step's environment: without
/// `GGML_VK_ALLOW_CPU_DEVICES` a machine with no GPU has no Vulkan device,
/// and the steps that want one, or another ISA, set them themselves.
const UNSET: &[&str] = &[
    "GGML_VK_ALLOW_CPU_DEVICES",
    "REQUIRE_VULKAN",
    "GGML_CPU_ISA",
];

/// One cargo command with the variables it adds to [`ENV`].
struct Step {
    env: &'static [(&'static str, &'static str)],
    args: &'static [&'static str],
}

/// The steps, in order: rustfmt, clippy, the real models the tests compare
/// with llama.cpp, the README's test command with no
/// Vulkan device, the ISA-dependent crates with the AVX2 kernels, and the
/// Vulkan and placement tests on lavapipe, then every fuzz target for a
/// bounded time.
const STEPS: &[Step] = &[
    Step {
        env: &[],
        args: &["fmt", "--all", "--", "--check"],
    },
    Step {
        env: &[],
        args: &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ],
    },
    Step {
        env: &[],
        args: &["xtask", "fetch-model", "gemma-3-270m"],
    },
    Step {
        env: &[],
        args: &["test", "--workspace"],
    },
    Step {
        env: &[("GGML_CPU_ISA", "avx2")],
        args: &["test", "-p", "ggml-cpu", "-p", "llama", "-p", "tests"],
    },
    Step {
        env: &[("GGML_VK_ALLOW_CPU_DEVICES", "1"), ("REQUIRE_VULKAN", "1")],
        args: &[
            "test",
            "-p",
            "ggml-vulkan",
            "-p",
            "llama",
            "-p",
            "tests",
            "-p",
            "xtask",
        ],
    },
    Step {
        env: &[],
        args: &["xtask", "fuzz", "--install", "--seconds", "10"],
    },
];

impl Step {
    /// The step as `.ci/run` writes it: `K=V ... cargo ARGS`.
    fn line(&self) -> String {
        let mut words: Vec<String> = self.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        words.push("cargo".into());
        words.extend(self.args.iter().map(|a| a.to_string()));
        words.join(" ")
    }
}

/// The command lines `run` executes, with the environment it sets.
pub fn plan() -> Vec<String> {
    let env: Vec<String> = ENV.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let unset: Vec<String> = UNSET.iter().map(|k| format!("-u {k}")).collect();
    STEPS
        .iter()
        .map(|step| format!("env {} {} {}", unset.join(" "), env.join(" "), step.line()))
        .collect()
}

/// Runs every step from the workspace root, stopping at the first failure.
pub fn run(root: &Path) -> Result<()> {
    for step in STEPS {
        eprintln!("==> {}", step.line());
        let env: Vec<(&str, &str)> = ENV.iter().chain(step.env).copied().collect();
        crate::cargo_env(root, step.args, &env, UNSET)?;
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
        assert_eq!(p.len(), 7);
        assert!(p[0].ends_with(" cargo fmt --all -- --check"));
        assert!(p[1].ends_with(" cargo clippy --workspace --all-targets -- -D warnings"));
        assert!(p[2].ends_with(" cargo xtask fetch-model gemma-3-270m"));
        // The README's command, with no Vulkan device allowed.
        assert!(p[3].ends_with("REQUIRE_CHROMIUM=1 cargo test --workspace"));
        assert!(p[4].contains(" GGML_CPU_ISA=avx2 cargo test "));
        assert!(p[5].contains(" GGML_VK_ALLOW_CPU_DEVICES=1 REQUIRE_VULKAN=1 cargo test "));
        assert!(p[6].ends_with(" cargo xtask fuzz --install --seconds 10"));
        assert!(p
            .iter()
            .all(|l| l.starts_with("env -u GGML_VK_ALLOW_CPU_DEVICES ")
                && l.contains(" REQUIRE_FIXTURES=1 ")));
    }

    /// `.ci/run` itself: the variables it exports and unsets, and the cargo
    /// commands it runs with their variables, in order, are the ones `ci`
    /// uses.
    #[test]
    fn mirrors_the_ci_script_file() {
        let path = crate::workspace_root().join(".ci").join("run");
        let Ok(text) = std::fs::read_to_string(&path) else {
            eprintln!("skipped: no {}", path.display());
            return;
        };
        let mut exports: Vec<(String, String)> = Vec::new();
        let mut unset: Vec<String> = Vec::new();
        let mut cargo: Vec<String> = Vec::new();
        for line in text.lines().map(str::trim) {
            if let Some(kv) = line.strip_prefix("export ") {
                let (k, v) = kv.split_once('=').expect("export KEY=VALUE");
                exports.push((k.to_string(), v.to_string()));
            } else if let Some(vars) = line.strip_prefix("unset ") {
                unset.extend(vars.split_whitespace().map(String::from));
            } else if line.contains("cargo ") && !line.starts_with('#') {
                cargo.push(line.to_string());
            }
        }
        let mut want: Vec<(String, String)> = ENV
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        exports.sort();
        want.sort();
        assert_eq!(exports, want, "exports of {}", path.display());
        assert_eq!(unset, UNSET, "unset of {}", path.display());
        let steps: Vec<String> = STEPS.iter().map(Step::line).collect();
        assert_eq!(cargo, steps, "cargo commands of {}", path.display());
    }
}
