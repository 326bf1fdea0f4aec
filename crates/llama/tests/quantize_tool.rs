//! `llama-quantize`: the files llama.cpp's llama-quantize writes, byte for
//! byte, and clear errors for bad input with no output file left behind.
//!
//! `data/quantize-expected.tsv` holds the sha256 of llama.cpp's outputs
//! (see `data/quantize.md`); each row is rerun here with the same flags.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use sha2::{Digest, Sha256};

fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data")
}

/// Runs the tool in `cwd`.
fn tool(cwd: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_llama-quantize"))
        .current_dir(cwd)
        .args(args)
        .output()
        .expect("llama-quantize runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The sha256 of the files in `dir`, concatenated in name order.
fn hash_dir(dir: &Path) -> String {
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    let mut h = Sha256::new();
    for n in names {
        h.update(std::fs::read(n).unwrap());
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// One row of the table: the flags as `--flag=value,--flag`.
struct Row {
    model: String,
    flags: Vec<String>,
    ty: String,
    sha: String,
}

fn rows() -> Vec<Row> {
    let text = std::fs::read_to_string(data().join("quantize-expected.tsv")).unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            assert_eq!(f.len(), 4, "bad row: {l}");
            let mut flags = Vec::new();
            if f[1] != "-" {
                for p in f[1].split(',') {
                    match p.split_once('=') {
                        Some((a, b)) => flags.extend([a.to_string(), b.to_string()]),
                        None => flags.push(p.to_string()),
                    }
                }
            }
            Row {
                model: f[0].into(),
                flags,
                ty: f[2].into(),
                sha: f[3].into(),
            }
        })
        .collect()
}

/// Whether the default run checks a row: every type of tiny-f32 as a
/// mixture, every row with flags beyond --pure, and a spread of the rest;
/// `QUANTIZE_FULL_TABLE=1` checks them all.
fn selected(i: usize, r: &Row) -> bool {
    test_support::required("QUANTIZE_FULL_TABLE")
        || (r.model == "tiny-f32.gguf" && r.flags.is_empty())
        || r.flags.iter().any(|f| f != "--pure")
        || i % 5 == 0
}

#[test]
fn writes_the_bytes_llama_cpp_writes() {
    let Some(fx) = test_support::fixtures() else {
        return;
    };
    let models = fx.join("models");
    let scratch = test_support::scratch_dir("llama", "quantize-table");
    let (mut same, mut unsupported, mut failures) = (0, Vec::new(), Vec::new());
    for (i, r) in rows().iter().enumerate() {
        if !selected(i, r) {
            continue;
        }
        let out_dir = scratch.join(format!("row{i}"));
        std::fs::create_dir_all(&out_dir).unwrap();
        let model = models.join(&r.model);
        let out = out_dir.join("o.gguf");
        let mut args: Vec<&str> = r.flags.iter().map(String::as_str).collect();
        args.extend([model.to_str().unwrap(), out.to_str().unwrap(), &r.ty, "2"]);
        // The imatrix file name is recorded in the output: run where the
        // reference ran, next to it.
        let o = tool(&data(), &args);
        let what = format!("{} {} {}", r.model, r.flags.join(" "), r.ty);
        let got = if o.status.success() {
            hash_dir(&out_dir)
        } else {
            "error".to_string()
        };
        if got == r.sha {
            same += 1;
        } else if got == "error" && stderr(&o).contains("not supported") {
            // A type or mode named as missing, never different bytes.
            unsupported.push(what.clone());
        } else {
            failures.push(format!(
                "{what}: {got} != {} ({})",
                r.sha,
                stderr(&o).lines().last().unwrap_or("")
            ));
        }
        if got == "error" {
            assert!(
                files_in(&out_dir).is_empty(),
                "{what}: a failed run left {:?}",
                files_in(&out_dir)
            );
        }
        std::fs::remove_dir_all(&out_dir).unwrap();
    }
    eprintln!(
        "{same} identical, {} not supported: {unsupported:#?}",
        unsupported.len()
    );
    assert!(failures.is_empty(), "{failures:#?}");
    assert!(same > 50, "only {same} rows checked");
    let _ = std::fs::remove_dir_all(&scratch);
}

/// Runs the tool on a fixture model into a scratch folder; returns the
/// output and the folder's files after the run.
fn run_bad(name: &str, args: &[&str]) -> Option<(Output, Vec<String>, PathBuf)> {
    let fx = test_support::fixtures()?;
    let dir = test_support::scratch_dir("llama", name);
    let mut full: Vec<String> = Vec::new();
    for a in args {
        full.push(
            a.replace("{models}", fx.join("models").to_str().unwrap())
                .replace("{out}", dir.to_str().unwrap())
                .replace("{data}", data().to_str().unwrap()),
        );
    }
    let refs: Vec<&str> = full.iter().map(String::as_str).collect();
    let o = tool(&dir, &refs);
    let files = files_in(&dir);
    Some((o, files, dir))
}

fn assert_fails(o: &Output, files: &[String], needle: &str) {
    assert!(!o.status.success(), "succeeded");
    let e = stderr(o);
    assert!(e.contains(needle), "{needle:?} not in: {e}");
    assert!(
        files
            .iter()
            .all(|f| !f.ends_with(".gguf") && !f.contains("tmp")),
        "left {files:?}"
    );
}

#[test]
fn low_bit_types_need_an_importance_matrix() {
    let Some((o, files, _)) = run_bad(
        "quantize-no-imatrix",
        &["{models}/tiny-f32.gguf", "{out}/o.gguf", "IQ2_XXS", "2"],
    ) else {
        return;
    };
    assert_fails(&o, &files, "requires an importance matrix");
    // A dry run says so instead of failing.
    let (o, files, _) = run_bad(
        "quantize-no-imatrix-dry",
        &["--dry-run", "{models}/tiny-f32.gguf", "IQ1_S"],
    )
    .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("will require an imatrix"));
    assert!(files.is_empty(), "{files:?}");
}

#[test]
fn an_importance_matrix_of_another_model_is_refused() {
    // stories260K's rows are 64 wide, tiny's imatrix has 256 per weight.
    let Some((o, files, _)) = run_bad(
        "quantize-other-imatrix",
        &[
            "--imatrix",
            "{data}/tiny-f32.imatrix.gguf",
            "{models}/stories260K.gguf",
            "{out}/o.gguf",
            "Q4_K_M",
            "2",
        ],
    ) else {
        return;
    };
    assert_fails(&o, &files, "another model");
    // A file that is no imatrix at all.
    let (o, files, _) = run_bad(
        "quantize-bad-imatrix",
        &[
            "--imatrix",
            "{models}/tiny-f32.gguf",
            "{models}/tiny-f32.gguf",
            "{out}/o.gguf",
            "Q8_0",
        ],
    )
    .unwrap();
    assert_fails(&o, &files, "imatrix");
}

#[test]
fn requantizing_needs_the_flag() {
    let Some((o, files, _)) = run_bad(
        "quantize-requant",
        &["{models}/tiny-q8_0.gguf", "{out}/o.gguf", "Q4_0", "2"],
    ) else {
        return;
    };
    assert_fails(&o, &files, "requantizing from type q8_0 is disabled");
    let (o, files, _) = run_bad(
        "quantize-requant-ok",
        &[
            "--allow-requantize",
            "{models}/tiny-q8_0.gguf",
            "{out}/o.gguf",
            "Q4_0",
            "2",
        ],
    )
    .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(files, ["o.gguf"]);
}

#[test]
fn the_output_cannot_be_the_input() {
    let Some(fx) = test_support::fixtures() else {
        return;
    };
    let dir = test_support::scratch_dir("llama", "quantize-same");
    let p = dir.join("m.gguf");
    std::fs::copy(fx.join("models/stories260K.gguf"), &p).unwrap();
    let before = std::fs::read(&p).unwrap();
    let o = tool(&dir, &["m.gguf", "./m.gguf", "Q8_0"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("input and output files are the same"),
        "{}",
        stderr(&o)
    );
    assert_eq!(std::fs::read(&p).unwrap(), before);
    assert_eq!(files_in(&dir), ["m.gguf"]);
}

#[test]
fn unknown_types_missing_and_corrupt_files_are_named() {
    let Some((o, files, _)) = run_bad(
        "quantize-type",
        &["{models}/tiny-f32.gguf", "{out}/o.gguf", "Q9_K"],
    ) else {
        return;
    };
    assert_fails(&o, &files, "invalid ftype 'Q9_K'");
    let (o, files, _) = run_bad(
        "quantize-missing",
        &["{out}/nope.gguf", "{out}/o.gguf", "Q8_0"],
    )
    .unwrap();
    assert_fails(&o, &files, "nope.gguf");
    // A truncated model: its tensor data runs past the end of the file.
    let fx = test_support::fixtures().unwrap();
    let dir = test_support::scratch_dir("llama", "quantize-corrupt");
    let bytes = std::fs::read(fx.join("models/stories260K.gguf")).unwrap();
    std::fs::write(dir.join("cut.gguf"), &bytes[..bytes.len() / 2]).unwrap();
    std::fs::write(dir.join("junk.gguf"), b"GGUF\x03\0\0\0garbage").unwrap();
    for f in ["cut.gguf", "junk.gguf"] {
        let o = tool(&dir, &[f, "o.gguf", "Q8_0"]);
        assert!(!o.status.success(), "{f}");
        assert!(stderr(&o).contains(f), "{f}: {}", stderr(&o));
        assert!(!dir.join("o.gguf").exists(), "{f}");
    }
    assert_eq!(files_in(&dir), ["cut.gguf", "junk.gguf"]);
    // Flags.
    let o = tool(&dir, &["--tensor-type", "attn_v", "cut.gguf", "Q8_0"]);
    assert!(stderr(&o).contains("malformed"), "{}", stderr(&o));
    let o = tool(&dir, &["--output-tensor-type", "q9", "cut.gguf", "Q8_0"]);
    assert!(
        stderr(&o).contains("invalid ggml_type 'q9'"),
        "{}",
        stderr(&o)
    );
    let o = tool(
        &dir,
        &[
            "--include-weights",
            "a",
            "--exclude-weights",
            "b",
            "cut.gguf",
            "Q8_0",
        ],
    );
    assert!(
        stderr(&o).contains("cannot be used together"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn help_lists_the_types_by_name_and_number() {
    let dir = std::env::temp_dir();
    let o = tool(&dir, &["--help"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("  15  or  Q4_K_M  :  4.58G, +0.1754 ppl @ Llama-3-8B"),
        "{out}"
    );
    assert!(out.contains("          COPY    : only copy tensors, no quantizing"));
    assert!(out.contains("--tensor-type tensor_name=ggml_type"));
}

#[test]
fn thread_counts_give_the_same_bytes_and_progress_lines() {
    let Some(fx) = test_support::fixtures() else {
        return;
    };
    let dir = test_support::scratch_dir("llama", "quantize-threads");
    let m = fx.join("models/tiny-f32.gguf");
    let mut hashes = Vec::new();
    for n in ["1", "3", "8"] {
        let d = dir.join(n);
        std::fs::create_dir_all(&d).unwrap();
        // A 1 MiB row buffer cuts the larger tensors into several slabs.
        let o = tool(
            &d,
            &[
                "--max-buffer-size",
                "1",
                m.to_str().unwrap(),
                "o.gguf",
                "IQ4_XS",
                n,
            ],
        );
        assert!(o.status.success(), "{}", stderr(&o));
        let log = stderr(&o);
        assert!(
            log.contains("[   1/  39] output.weight                        - [   256,    512,      1,      1], type =    f32, converting to q6_K .. size =     0.50 MiB ->     0.10 MiB"),
            "{log}"
        );
        hashes.push(hash_dir(&d));
    }
    assert!(hashes.windows(2).all(|w| w[0] == w[1]), "{hashes:?}");
}
