//! `fuzz`: builds the libFuzzer targets of `fuzz/` with `cargo fuzz` on the
//! nightly toolchain and runs each for a bounded time, from its committed
//! seeds (`fuzz/corpus/<target>`, read only) and a working corpus kept
//! between runs (`fuzz/target/corpus/<target>`), then prints per target the
//! executions, libFuzzer's coverage (`cov`: edges, `ft`: features), the
//! corpus size and the time. A crash, hang or out-of-memory leaves its
//! input in `fuzz/artifacts/<target>/` and fails the task.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// How a run is made.
#[derive(Clone, Debug)]
pub struct Options {
    /// Targets to run (all when empty).
    pub targets: Vec<String>,
    /// Time per target.
    pub per_target: Duration,
    /// Install the nightly toolchain and cargo-fuzz when missing.
    pub install: bool,
    /// libFuzzer's `-timeout`: seconds one input may take.
    pub input_timeout_s: u64,
    /// libFuzzer's `-rss_limit_mb`.
    pub rss_limit_mb: u64,
}

/// What one target's run did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stats {
    /// Inputs executed.
    pub execs: u64,
    /// Edges covered (`cov`).
    pub cov: u64,
    /// Features covered (`ft`).
    pub ft: u64,
    /// Inputs in the corpus at the end.
    pub corpus: u64,
    /// Peak resident memory (MiB).
    pub peak_rss_mb: u64,
}

/// Reads libFuzzer's output: the counts of the last status line
/// (`#N ... cov: C ft: F corp: K/...`) and the final statistics
/// (`stat::number_of_executed_units: N`, `stat::peak_rss_mb: M`).
pub fn parse_stats(output: &str) -> Stats {
    let mut s = Stats::default();
    let field = |line: &str, key: &str| -> Option<u64> {
        let mut words = line.split_whitespace();
        words.find(|w| *w == key)?;
        let v = words.next()?;
        v.split('/').next()?.parse().ok()
    };
    for line in output.lines() {
        if line.starts_with('#') && line.contains(" cov: ") {
            s.cov = field(line, "cov:").unwrap_or(s.cov);
            s.ft = field(line, "ft:").unwrap_or(s.ft);
            s.corpus = field(line, "corp:").unwrap_or(s.corpus);
            if let Some(n) = line
                .strip_prefix('#')
                .and_then(|l| l.split_whitespace().next())
                .and_then(|n| n.parse().ok())
            {
                s.execs = n;
            }
        }
        if let Some(v) = line.strip_prefix("stat::number_of_executed_units:") {
            s.execs = v.trim().parse().unwrap_or(s.execs);
        }
        if let Some(v) = line.strip_prefix("stat::peak_rss_mb:") {
            s.peak_rss_mb = v.trim().parse().unwrap_or(0);
        }
    }
    s
}

/// The targets of `fuzz/Cargo.toml`, in its order.
pub fn list_targets(fuzz_dir: &Path) -> Result<Vec<String>> {
    let manifest = fuzz_dir.join("Cargo.toml");
    let text = std::fs::read_to_string(&manifest).map_err(|e| Error::io(&manifest, e))?;
    let mut out = Vec::new();
    let mut in_bin = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            in_bin = line == "[[bin]]";
        } else if in_bin {
            if let Some(v) = line.strip_prefix("name = ") {
                out.push(v.trim_matches('"').to_string());
            }
        }
    }
    Ok(out)
}

fn run_quiet(cmd: &mut Command) -> bool {
    cmd.stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `rustup`'s cargo with the nightly toolchain.
fn nightly_cargo() -> Command {
    let mut c = Command::new("cargo");
    c.arg("+nightly");
    // The outer cargo's choice of toolchain must not leak into the inner one.
    c.env_remove("RUSTUP_TOOLCHAIN");
    c.env_remove("CARGO");
    c
}

fn run_checked(cmd: &mut Command, line: &str) -> Result<()> {
    let status = cmd.status().map_err(|e| Error::not_started(line, e))?;
    crate::exited_ok(line.to_string(), status)
}

/// Makes sure the nightly toolchain and cargo-fuzz are there (installing
/// them when `install`), else says how to get them.
fn ensure_tools(install: bool) -> Result<()> {
    if !run_quiet(nightly_cargo().arg("--version")) {
        if !install {
            return Err(Error::Usage(
                "the fuzz targets need the nightly toolchain: rustup toolchain install nightly \
                 --profile minimal (or pass --install)"
                    .into(),
            ));
        }
        let line = "rustup toolchain install nightly --profile minimal";
        run_checked(
            Command::new("rustup").args([
                "toolchain",
                "install",
                "nightly",
                "--profile",
                "minimal",
            ]),
            line,
        )?;
    }
    if !run_quiet(nightly_cargo().args(["fuzz", "--version"])) {
        if !install {
            return Err(Error::Usage(
                "the fuzz targets need cargo-fuzz: cargo install cargo-fuzz --locked (or pass \
                 --install)"
                    .into(),
            ));
        }
        let line = "cargo install cargo-fuzz --locked";
        run_checked(
            Command::new("cargo").args(["install", "cargo-fuzz", "--locked"]),
            line,
        )?;
    }
    Ok(())
}

/// The host triple of the nightly compiler (where cargo fuzz puts the
/// executables).
fn host_triple() -> Result<String> {
    let line = "rustc +nightly -vV";
    let out = Command::new("rustc")
        .args(["+nightly", "-vV"])
        .env_remove("RUSTUP_TOOLCHAIN")
        .output()
        .map_err(|e| Error::not_started(line, e))?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_string))
        .ok_or_else(|| Error::Command {
            command: line.into(),
            reason: "printed no host triple".into(),
        })
}

/// Builds every target once: optimised, with debug assertions and
/// overflow checks, under AddressSanitizer (libFuzzer's usual build).
fn build(root: &Path) -> Result<Duration> {
    let line = "cargo +nightly fuzz build --debug-assertions";
    let t = Instant::now();
    run_checked(
        nightly_cargo()
            .args(["fuzz", "build", "--debug-assertions"])
            .current_dir(root),
        line,
    )?;
    Ok(t.elapsed())
}

/// One target's run: its stats and whether it ended without a finding.
fn run_target(root: &Path, exe: &Path, target: &str, opts: &Options) -> Result<(Stats, bool)> {
    let fuzz = root.join("fuzz");
    let work = fuzz.join("target/corpus").join(target);
    let seeds = fuzz.join("corpus").join(target);
    let artifacts = fuzz.join("artifacts").join(target);
    for d in [&work, &artifacts] {
        std::fs::create_dir_all(d).map_err(|e| Error::io(d, e))?;
    }
    let mut cmd = Command::new(exe);
    cmd.arg(format!(
        "-max_total_time={}",
        opts.per_target.as_secs().max(1)
    ))
    .arg(format!("-timeout={}", opts.input_timeout_s))
    .arg(format!("-rss_limit_mb={}", opts.rss_limit_mb))
    .arg("-print_final_stats=1")
    .arg(format!("-artifact_prefix={}/", artifacts.display()))
    .arg(&work);
    if seeds.is_dir() {
        cmd.arg(&seeds);
    }
    // libFuzzer prints its status on stderr.
    let line = format!("{} ({target})", exe.display());
    let out = cmd
        .current_dir(root)
        .stdout(Stdio::null())
        .output()
        .map_err(|e| Error::not_started(&line, e))?;
    let text = String::from_utf8_lossy(&out.stderr);
    let stats = parse_stats(&text);
    if !out.status.success() {
        // The tail says what was found and where the input was saved.
        let tail: Vec<&str> = text.lines().rev().take(40).collect();
        for l in tail.into_iter().rev() {
            eprintln!("  {l}");
        }
    }
    Ok((stats, out.status.success()))
}

/// Builds the targets and runs each selected one for `opts.per_target`.
pub fn run(root: &Path, opts: &Options) -> Result<()> {
    let fuzz_dir = root.join("fuzz");
    let all = list_targets(&fuzz_dir)?;
    for t in &opts.targets {
        if !all.contains(t) {
            return Err(Error::Usage(format!(
                "unknown fuzz target '{t}': the targets are {}",
                all.join(", ")
            )));
        }
    }
    let targets: Vec<String> = if opts.targets.is_empty() {
        all
    } else {
        opts.targets.clone()
    };
    ensure_tools(opts.install)?;
    let built = build(root)?;
    println!(
        "built {} fuzz targets in {:.0} s",
        targets.len(),
        built.as_secs_f64()
    );
    let exe_dir: PathBuf = fuzz_dir.join("target").join(host_triple()?).join("release");
    println!(
        "| target | executions | exec/s | cov | ft | corpus | peak RSS MiB | seconds | result |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let mut failed = Vec::new();
    for t in &targets {
        let start = Instant::now();
        let (s, ok) = run_target(root, &exe_dir.join(t), t, opts)?;
        let secs = start.elapsed().as_secs_f64();
        println!(
            "| {t} | {} | {:.0} | {} | {} | {} | {} | {secs:.0} | {} |",
            s.execs,
            s.execs as f64 / secs.max(1e-3),
            s.cov,
            s.ft,
            s.corpus,
            s.peak_rss_mb,
            if ok {
                "ok"
            } else {
                "FOUND (see fuzz/artifacts)"
            }
        );
        if !ok {
            failed.push(t.clone());
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(Error::Command {
            command: "cargo xtask fuzz".into(),
            reason: format!(
                "found a crash, hang or out-of-memory in: {} (inputs in fuzz/artifacts/)",
                failed.join(", ")
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_libfuzzer_status_and_final_stats() {
        let out = "INFO: Seed: 1\n\
                   #2\tINITED cov: 10 ft: 11 corp: 1/1b exec/s: 0 rss: 30Mb\n\
                   #4096\tpulse  cov: 120 ft: 300 corp: 17/2kb lim: 4 exec/s: 2048 rss: 40Mb\n\
                   #8000\tDONE   cov: 125 ft: 320 corp: 18/2Kb lim: 4 exec/s: 2000 rss: 41Mb\n\
                   Done 8000 runs in 4 second(s)\n\
                   stat::number_of_executed_units: 8001\n\
                   stat::average_exec_per_sec:     2000\n\
                   stat::new_units_added:          17\n\
                   stat::slowest_unit_time_sec:    0\n\
                   stat::peak_rss_mb:              41\n";
        let s = parse_stats(out);
        assert_eq!(
            s,
            Stats {
                execs: 8001,
                cov: 125,
                ft: 320,
                corpus: 18,
                peak_rss_mb: 41
            }
        );
        assert_eq!(parse_stats("no fuzzer here"), Stats::default());
    }

    #[test]
    fn lists_the_targets_of_the_fuzz_crate() {
        let dir = crate::workspace_root().join("fuzz");
        let targets = list_targets(&dir).unwrap();
        assert!(targets.len() >= 10, "{targets:?}");
        for t in &targets {
            assert!(
                dir.join("fuzz_targets").join(format!("{t}.rs")).is_file(),
                "{t} has no source"
            );
            assert!(
                dir.join("corpus").join(t).is_dir(),
                "{t} has no committed seeds"
            );
        }
    }
}
