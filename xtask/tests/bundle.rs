//! `bundle`: the folder's assembly and its checks (bad --out, size limit,
//! strip on the copies), and `run.sh` end to end on stand-in executables
//! (shell scripts that answer as the real tools do), so that its steps,
//! failure handling, report and exit status are tested without a release
//! build or a GPU.

#![cfg(unix)]

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use test_support::scratch_dir;
use xtask::bundle::assemble::{assemble, check_out_dir, survey, Contents, Entry, Settings};
use xtask::bundle::{SUITES, TOOLS};

fn script(path: &Path, body: &str) {
    fs::write(path, format!("#!/bin/sh\n{body}")).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(0o755)).unwrap();
}

const LLAMA_CLI: &str = r#"
case " $* " in
*" --list-devices "*)
    echo "Available devices:"
    if [ "${FAKE_NO_GPU:-0}" = 1 ]; then
        echo "ggml_vulkan: no Vulkan device: the Vulkan loader found no driver or device" >&2
        exit 0
    fi
    echo "  Vulkan0: Fake GPU (8192 MiB, 8000 MiB free)"
    echo "ggml_vulkan: Vulkan0 = Fake GPU | Gpu | subgroup size 32 | driver: fakedrv 1.2.3" >&2
    exit 0 ;;
esac
printf 'Once upon a time, there was a fake.'
case " $* " in
*" -ngl 99 "*) [ "${FAKE_GPU_DIFFERS:-0}" = 1 ] && printf ' Different.' ;;
esac
echo
case " $* " in
*" -ngl 99 "*) echo "load_tensors: offloaded ${FAKE_OFFLOADED:-6/6} layers to GPU" >&2 ;;
esac
echo "llama_perf_context_print: eval time = 1 ms" >&2
"#;

const LLAMA_PERPLEXITY: &str = r#"
[ -n "${FAKE_SNAPSHOT:-}" ] && cp "$FAKE_SNAPSHOT" "$FAKE_SNAPSHOT.mid"
echo "[1]12.0000,[2]12.3000,"
case " $* " in
*" -ngl 99 "*) echo "Final estimate: PPL = 12.3460 +/- 0.10000" ;;
*) echo "Final estimate: PPL = 12.3456 +/- 0.10000" ;;
esac
"#;

const LLAMA_BENCH: &str = r#"
echo "| model                          |       size |     params | backend    | threads | ngl |          test |                  t/s |"
echo "| ------------------------------ | ---------: | ---------: | ---------- | ------: | --: | ------------: | -------------------: |"
echo "| llama 1B Q4_0                  |  10.00 MiB |     1.10 B | Vulkan     |       4 |  99 |         pp512 |      1000.00 ± 10.00 |"
echo "| llama 1B Q4_0                  |  10.00 MiB |     1.10 B | Vulkan     |       4 |  99 |         tg128 |         50.00 ± 1.00 |"
"#;

const XTASK: &str = r#"
out=""
while [ $# -gt 0 ]; do
    [ "$1" = --out ] && out=$2
    shift
done
[ -n "$out" ] || { echo "error: no --out" >&2; exit 1; }
echo "GGUF fake" >"$out"
echo "wrote $out: llama fake (q4_0), 3 tensors, 0.1 M parameters"
"#;

const SUITE: &str = r#"
[ "$REQUIRE_VULKAN" = 1 ] || { echo "REQUIRE_VULKAN is not 1" >&2; exit 101; }
if [ "${FAKE_SUITE_FAILS:-0}" = 1 ]; then
    echo "test a_case ... FAILED"
    echo "test result: FAILED. 0 passed; 1 failed; 0 ignored"
    echo "thread 'a_case' panicked: mismatch" >&2
    exit 101
fi
echo "Vulkan0: 2 passed, 0 failed, 1 skipped" >&2
echo "Vulkan0: 5 passed, 0 failed, 0 skipped" >&2
echo "  ok      ADD F32 [4]: err 0" >&2
echo "  skipped CONT Q4_K: not supported" >&2
echo "test a_case ... ok"
echo "test result: ok. 1 passed; 0 failed; 0 ignored"
"#;

/// Stand-ins for every executable, in `dir`; their entries.
fn stand_ins(dir: &Path) -> Vec<Entry> {
    fs::create_dir_all(dir).unwrap();
    let mut entries = Vec::new();
    for (name, body) in [
        ("llama-cli", LLAMA_CLI),
        ("llama-bench", LLAMA_BENCH),
        ("llama-perplexity", LLAMA_PERPLEXITY),
        ("xtask", XTASK),
    ] {
        script(&dir.join(name), body);
        entries.push(Entry::new(dir.join(name), format!("bin/{name}")));
    }
    for (t, name) in SUITES {
        script(&dir.join(t), SUITE);
        entries.push(Entry::new(dir.join(t), format!("tests/{name}")));
    }
    entries
}

fn contents(dir: &Path) -> Contents {
    let model = dir.join("stories260K.gguf");
    fs::write(&model, b"GGUF model bytes").unwrap();
    Contents {
        executables: stand_ins(&dir.join("exe")),
        data: vec![Entry::new(model, "models/stories260K.gguf")],
        build_info: "commit: 0123abc\n".into(),
    }
}

fn settings() -> Settings {
    Settings {
        strip: None,
        limit_bytes: 60 << 20,
    }
}

#[test]
fn the_folder_holds_every_file_executable() {
    let dir = scratch_dir("xtask", "bundle-layout");
    let out = dir.join("bundle");
    let made = assemble(&contents(&dir), &out, &settings()).unwrap();
    let names: Vec<String> = made
        .files
        .iter()
        .map(|(p, _)| p.display().to_string())
        .collect();
    for t in TOOLS {
        assert!(names.contains(&format!("bin/{t}")), "{names:?}");
    }
    for want in [
        "bin/xtask",
        "tests/vulkan-conformance",
        "tests/vulkan-ops",
        "models/stories260K.gguf",
        "texts/story.txt",
        "run.sh",
        "README.md",
        "BUILD_INFO",
    ] {
        assert!(
            names.contains(&want.to_string()),
            "{want} missing: {names:?}"
        );
    }
    for exe in ["run.sh", "bin/llama-cli", "tests/vulkan-ops"] {
        let mode = fs::metadata(out.join(exe)).unwrap().permissions().mode();
        assert_eq!(mode & 0o111, 0o111, "{exe} is not executable");
    }
    assert_eq!(made.total_bytes, survey(&out).unwrap().total_bytes);
    assert_eq!(
        made.total_bytes,
        made.files.iter().map(|(_, b)| b).sum::<u64>()
    );
    assert!(made.listing().contains("total"));
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn out_must_be_new_or_empty() {
    let dir = scratch_dir("xtask", "bundle-out");
    let file = dir.join("a-file");
    fs::write(&file, b"x").unwrap();
    let e = check_out_dir(&file).unwrap_err().to_string();
    assert!(e.contains("a-file") && e.contains("not a folder"), "{e}");
    let full = dir.join("full");
    fs::create_dir_all(&full).unwrap();
    fs::write(full.join("old"), b"x").unwrap();
    let e = assemble(&contents(&dir), &full, &settings())
        .unwrap_err()
        .to_string();
    assert!(e.contains("full") && e.contains("not empty"), "{e}");
    let empty = dir.join("empty");
    fs::create_dir_all(&empty).unwrap();
    check_out_dir(&empty).unwrap();
    check_out_dir(&dir.join("new")).unwrap();
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn the_command_rejects_a_bad_out_before_building() {
    use clap::Parser;
    let dir = scratch_dir("xtask", "bundle-cli");
    let file = dir.join("file");
    fs::write(&file, b"x").unwrap();
    fs::write(dir.join("other"), b"x").unwrap();
    for (out, says) in [(&file, "not a folder"), (&dir, "not empty")] {
        let cli = xtask::cli::Cli::try_parse_from(
            ["xtask", "bundle", "--out"]
                .iter()
                .copied()
                .chain([out.to_str().unwrap()]),
        )
        .unwrap();
        let e = xtask::cli::run(cli).unwrap_err().to_string();
        assert!(e.contains("--out") && e.contains(says), "{e}");
    }
    assert!(xtask::cli::Cli::try_parse_from(["xtask", "bundle"]).is_err());
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn an_oversized_bundle_is_an_error_that_lists_the_files() {
    let dir = scratch_dir("xtask", "bundle-limit");
    let mut c = contents(&dir);
    let big = dir.join("big.gguf");
    fs::write(&big, vec![0u8; 3 << 20]).unwrap();
    c.data.push(Entry::new(&big, "models/big.gguf"));
    let s = Settings {
        strip: None,
        limit_bytes: 2 << 20,
    };
    let e = assemble(&c, &dir.join("out"), &s).unwrap_err().to_string();
    assert!(e.contains("over the limit of 2.00 MiB"), "{e}");
    assert!(e.contains("models/big.gguf"), "{e}");
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn bad_sources_and_paths_are_errors() {
    let dir = scratch_dir("xtask", "bundle-bad");
    let mut c = contents(&dir);
    c.data
        .push(Entry::new(dir.join("nowhere.gguf"), "models/x.gguf"));
    let e = assemble(&c, &dir.join("out1"), &settings())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("nowhere.gguf") && e.contains("not a file"),
        "{e}"
    );
    let mut c = contents(&dir);
    c.data[0].to = PathBuf::from("../escape");
    let e = assemble(&c, &dir.join("out2"), &settings())
        .unwrap_err()
        .to_string();
    assert!(e.contains("inside the bundle"), "{e}");
    let mut c = contents(&dir);
    let twice = c.executables[0].clone();
    c.executables.push(twice);
    let e = assemble(&c, &dir.join("out3"), &settings())
        .unwrap_err()
        .to_string();
    assert!(e.contains("two files go to"), "{e}");
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn strip_runs_on_the_copies_only() {
    let dir = scratch_dir("xtask", "bundle-strip");
    let c = contents(&dir);
    let strip = dir.join("fake-strip");
    script(
        &strip,
        "[ \"$1\" = --strip-all ] || exit 3\necho '# stripped' >>\"$2\"\n",
    );
    let s = Settings {
        strip: Some(strip),
        limit_bytes: 60 << 20,
    };
    let out = dir.join("out");
    assemble(&c, &out, &s).unwrap();
    for e in &c.executables {
        let copy = fs::read_to_string(out.join(&e.to)).unwrap();
        assert!(
            copy.ends_with("# stripped\n"),
            "{} not stripped",
            e.to.display()
        );
        let orig = fs::read_to_string(&e.from).unwrap();
        assert!(!orig.contains("# stripped"), "{} changed", e.from.display());
    }
    let model = fs::read(out.join("models/stories260K.gguf")).unwrap();
    assert_eq!(model, b"GGUF model bytes");

    let failing = dir.join("failing-strip");
    script(&failing, "exit 1\n");
    let s = Settings {
        strip: Some(failing),
        limit_bytes: 60 << 20,
    };
    let e = assemble(&c, &dir.join("out2"), &s).unwrap_err().to_string();
    assert!(
        e.contains("failing-strip --strip-all") && e.contains("failed"),
        "{e}"
    );
    let s = Settings {
        strip: Some(dir.join("no-such-strip")),
        limit_bytes: 60 << 20,
    };
    let e = assemble(&c, &dir.join("out3"), &s).unwrap_err().to_string();
    assert!(e.contains("could not start"), "{e}");
    let _ = fs::remove_dir_all(&dir);
}

/// Runs the bundle's run.sh with `args` and `envs`; its exit code and the
/// report.
fn run_sh(out: &Path, args: &[&str], envs: &[(&str, &str)]) -> (i32, String) {
    let report = out.join("report.md");
    let _ = fs::remove_file(&report);
    // Another test of this process may be starting a program while it
    // still holds a file it writes open (the child inherits the
    // descriptor until it execs): a script written a moment ago can then
    // be "busy" for a while. Try again, as the kernel asks.
    let mut tries = 0;
    let status = loop {
        let r = Command::new(out.join("run.sh"))
            .args(args)
            .args(["--report".as_ref(), report.as_os_str()])
            .envs(envs.iter().copied())
            .env_remove("BUNDLE_SKIP_7B")
            .output();
        match r {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy && tries < 100 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            r => break r.unwrap(),
        }
    };
    let text = fs::read_to_string(&report).unwrap_or_default();
    (status.status.code().unwrap_or(-1), text)
}

/// The step table's row of `step`.
fn row<'a>(report: &'a str, step: &str) -> &'a str {
    let prefix = format!("| {step} | ");
    report
        .lines()
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no step '{step}' in:\n{report}"))
}

/// Free MiB in `dir`, as run.sh measures it.
fn free_mib(dir: &Path) -> u64 {
    let out = Command::new("df").arg("-Pk").arg(dir).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().nth(1).unwrap();
    line.split_whitespace()
        .nth(3)
        .unwrap()
        .parse::<u64>()
        .unwrap()
        / 1024
}

#[test]
fn run_sh_passes_and_reports_every_step() {
    let dir = scratch_dir("xtask", "bundle-run-ok");
    let out = dir.join("bundle");
    assemble(&contents(&dir), &out, &settings()).unwrap();
    let args = [
        "--shapes",
        "tinyllama-1.1b,llama-7b",
        "--types",
        "q4_0",
        "--skip-7b",
        "--bandwidth",
        "2.0",
    ];
    // A model an interrupted run left half-written is removed.
    fs::create_dir_all(out.join("work")).unwrap();
    fs::write(out.join("work/tinyllama-1.1b-f16.gguf.part"), b"GG").unwrap();
    let snapshot = out.join("report.md");
    let (code, report) = run_sh(
        &out,
        &args,
        &[("FAKE_SNAPSHOT", snapshot.to_str().unwrap())],
    );
    assert!(!out.join("work/tinyllama-1.1b-f16.gguf.part").exists());
    // The report written while the run went on says so.
    let mid = fs::read_to_string(out.join("report.md.mid")).unwrap();
    assert!(
        mid.contains("Summary: INCOMPLETE: ") && mid.contains("(running)"),
        "{mid}"
    );
    assert!(mid.contains("| greedy small-f16 | PASS |"), "{mid}");
    assert!(
        row(&report, "list devices").contains("| PASS |"),
        "{report}"
    );
    assert!(report.contains("- GPU: Vulkan0: Fake GPU"), "{report}");
    assert!(
        report.contains("- driver: Vulkan0: fakedrv 1.2.3"),
        "{report}"
    );
    assert!(report.contains("- commit: 0123abc"), "{report}");
    assert!(report.contains("- nproc: "), "{report}");
    for step in [
        "greedy stories260K",
        "generate small-f16",
        "greedy small-f16",
    ] {
        assert!(row(&report, step).contains("| PASS |"), "{step}: {report}");
    }
    assert!(
        row(&report, "greedy small-f16").contains("6/6 layers offloaded"),
        "{report}"
    );
    let ppl = row(&report, "perplexity stories260K");
    assert!(
        ppl.contains("| PASS |") && ppl.contains("PPL CPU 12.3456, GPU 12.3460"),
        "{ppl}"
    );
    for (_, t) in SUITES {
        let r = row(&report, &format!("suite {t}"));
        assert!(r.contains("| PASS |") && r.contains("1 passed"), "{r}");
        assert!(
            r.contains("(cases: Vulkan0: 7 passed, 0 failed, 1 skipped)"),
            "{r}"
        );
    }
    assert!(
        report.contains("  skipped CONT Q4_K: not supported"),
        "{report}"
    );
    assert!(!report.contains("ADD F32 [4]"), "{report}");
    let skipped = row(&report, "generate llama-7b-q4_0");
    assert!(
        skipped.contains("| SKIP |") && skipped.contains("--skip-7b"),
        "{skipped}"
    );
    assert!(
        report.contains("Planned: tinyllama-1.1b-q4_0 ~6"),
        "{report}"
    );
    assert!(report.contains("one at a time"), "{report}");
    // The tinyllama Q4_0 model needs ~620 MiB plus 1 GiB spare on this disk.
    let work = out.join("work");
    let generated = row(&report, "generate tinyllama-1.1b-q4_0");
    if free_mib(&work) > 620 + 1024 + 64 {
        assert!(generated.contains("| PASS |"), "{generated}");
        assert!(generated.contains("q4_0.gguf: llama fake"), "{generated}");
        let bench = row(&report, "bench tinyllama-1.1b-q4_0");
        assert!(
            bench.contains("| PASS |") && bench.contains("tg128 50.00 ± 1.00 t/s"),
            "{bench}"
        );
        // 10 MiB read 50 times a second: 0.52 GB/s, 26 % of 2.0 GB/s.
        assert!(
            report.contains(
                "| llama 1B Q4_0 | 10.00 MiB | Vulkan | 99 | tg128 | 50.00 ± 1.00 | 0.52 | 26 % |"
            ),
            "{report}"
        );
        assert!(
            !work.join("tinyllama-1.1b-q4_0.gguf").exists(),
            "model kept"
        );
    } else {
        assert!(
            generated.contains("| SKIP |") && generated.contains("MiB free"),
            "{generated}"
        );
    }
    assert!(report.contains("Summary: PASS: "), "{report}");
    assert!(
        report.contains("0 failed") && report.contains("(complete)"),
        "{report}"
    );
    assert_eq!(code, 0, "{report}");
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn run_sh_records_failures_and_carries_on() {
    let dir = scratch_dir("xtask", "bundle-run-fail");
    let out = dir.join("bundle");
    assemble(&contents(&dir), &out, &settings()).unwrap();
    let envs = [("FAKE_GPU_DIFFERS", "1"), ("FAKE_SUITE_FAILS", "1")];
    let (code, report) = run_sh(&out, &["--shapes", "llama-7b", "--skip-7b"], &envs);
    assert_eq!(code, 1, "{report}");
    assert!(report.contains("Summary: FAIL: "), "{report}");
    let g = row(&report, "greedy stories260K");
    assert!(
        g.contains("| FAIL |") && g.contains("differs from the CPU's at byte 36"),
        "{g}"
    );
    assert!(
        row(&report, "greedy small-f16").contains("| FAIL |"),
        "{report}"
    );
    // The steps after the failures still ran.
    assert!(
        row(&report, "perplexity stories260K").contains("| PASS |"),
        "{report}"
    );
    let s = row(&report, "suite vulkan-ops");
    assert!(s.contains("| FAIL |") && s.contains("1 failed"), "{s}");
    assert!(report.contains("panicked: mismatch"), "{report}");
    assert!(
        row(&report, "generate llama-7b-f16").contains("| SKIP |"),
        "{report}"
    );
    assert!(report.contains("4 failed"), "{report}");
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn run_sh_fails_a_greedy_check_that_did_not_offload_every_layer() {
    let dir = scratch_dir("xtask", "bundle-run-partial");
    let out = dir.join("bundle");
    assemble(&contents(&dir), &out, &settings()).unwrap();
    let (code, report) = run_sh(
        &out,
        &["--shapes", "llama-7b", "--skip-7b"],
        &[("FAKE_OFFLOADED", "3/6")],
    );
    assert_eq!(code, 1, "{report}");
    let g = row(&report, "greedy stories260K");
    assert!(
        g.contains("| FAIL |") && g.contains("offloaded 3/6 layers"),
        "{g}"
    );
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn run_sh_fails_on_a_device_that_is_not_listed() {
    let dir = scratch_dir("xtask", "bundle-run-device");
    let out = dir.join("bundle");
    assemble(&contents(&dir), &out, &settings()).unwrap();
    let args = ["--shapes", "llama-7b", "--skip-7b", "--device", "Vulkan7"];
    let (code, report) = run_sh(&out, &args, &[]);
    assert_eq!(code, 1, "{report}");
    let l = row(&report, "list devices");
    assert!(
        l.contains("| FAIL |") && l.contains("'Vulkan7'") && l.contains("(Vulkan0)"),
        "{l}"
    );
    let g = row(&report, "greedy stories260K");
    assert!(
        g.contains("| FAIL |") && g.contains("no Vulkan device"),
        "{g}"
    );
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn run_sh_skips_models_larger_than_the_gpu_memory() {
    let dir = scratch_dir("xtask", "bundle-run-memory");
    let out = dir.join("bundle");
    assemble(&contents(&dir), &out, &settings()).unwrap();
    // Llama-7B F16 needs ~13 GB; the stand-in GPU has 8 GiB.
    let (code, report) = run_sh(&out, &["--shapes", "llama-7b", "--types", "f16"], &[]);
    assert_eq!(code, 0, "{report}");
    let b = row(&report, "bench llama-7b-f16");
    assert!(
        b.contains("| SKIP |") && b.contains("exceed the memory of Vulkan0 (8192 MiB)"),
        "{b}"
    );
    assert!(b.contains("not generated"), "{b}");
    assert!(!report.contains("| generate llama-7b-f16 |"), "{report}");
    assert!(!out.join("work/llama-7b-f16.gguf").exists());
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn run_sh_without_a_vulkan_device_fails_the_gpu_steps() {
    let dir = scratch_dir("xtask", "bundle-run-nogpu");
    let out = dir.join("bundle");
    assemble(&contents(&dir), &out, &settings()).unwrap();
    let (code, report) = run_sh(
        &out,
        &["--shapes", "llama-7b", "--skip-7b"],
        &[("FAKE_NO_GPU", "1")],
    );
    assert_eq!(code, 1, "{report}");
    let l = row(&report, "list devices");
    assert!(
        l.contains("| FAIL |") && l.contains("found no driver or device"),
        "{l}"
    );
    for step in [
        "greedy stories260K",
        "greedy small-f16",
        "perplexity stories260K",
    ] {
        let r = row(&report, step);
        assert!(
            r.contains("| FAIL |") && r.contains("no Vulkan device"),
            "{r}"
        );
    }
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn run_sh_rejects_bad_options() {
    let dir = scratch_dir("xtask", "bundle-run-usage");
    let out = dir.join("bundle");
    assemble(&contents(&dir), &out, &settings()).unwrap();
    for (args, says) in [
        (&["--types", "q9_9"][..], "unknown type 'q9_9'"),
        (&["--shapes", "llama-70b"][..], "unknown shape 'llama-70b'"),
        (&["--timeout", "soon"][..], "not a number"),
        (
            &["--bandwidth", "fast"][..],
            "--bandwidth 'fast' is not a number",
        ),
        (&["--bandwidth", "1.2.3"][..], "is not a number of GB/s"),
        (&["--bogus"][..], "unknown option '--bogus'"),
        (&["--types"][..], "--types needs a value"),
    ] {
        let o = Command::new(out.join("run.sh"))
            .args(args)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }
    let o = Command::new(out.join("run.sh"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).contains("--skip-7b"));
    let _ = fs::remove_dir_all(&dir);
}
