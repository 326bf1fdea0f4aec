//! `llama-tokenize`: any GGUF with a vocabulary, whatever its architecture;
//! escapes processed by default as llama.cpp does; bad input is a clear
//! error with a failing exit status.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use llama::vocab::Vocab;

fn tool(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_llama-tokenize"))
        .args(args)
        .output()
        .expect("llama-tokenize runs")
}

/// The ids `--ids` printed.
fn ids(out: &Output) -> Vec<i32> {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout.clone()).unwrap();
    let line = text.trim().trim_start_matches('[').trim_end_matches(']');
    line.split(", ")
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect()
}

fn gpt2_vocab() -> Option<PathBuf> {
    Some(test_support::fixtures_with("vocab")?.join("vocab/ggml-vocab-gpt-2.gguf"))
}

fn open(path: &Path) -> Vocab {
    Vocab::from_gguf(&gguf::GgufFile::open(path).unwrap()).unwrap()
}

#[test]
fn tokenizes_a_vocabulary_of_any_architecture_with_escapes() {
    let Some(path) = gpt2_vocab() else { return };
    let p = path.to_str().unwrap();
    let vocab = open(&path);
    let want = |t: &str| vocab.tokenize(t, vocab.add_bos(), true);
    // The file says `gpt2`, an architecture no model here runs.
    let out = tool(&[
        "-m",
        p,
        "-p",
        "Hello\\nworld\\x21",
        "--ids",
        "--log-disable",
    ]);
    assert_eq!(ids(&out), want("Hello\nworld!"));
    let out = tool(&["-m", p, "-p", "Hello\\nworld", "--ids", "--no-escape"]);
    assert_eq!(ids(&out), want("Hello\\nworld"));

    // A file is read whole: its last newline is a token too.
    let dir = test_support::scratch_dir("tokenize", "file");
    let file = dir.join("text.txt");
    std::fs::write(&file, "a\\tb\n").unwrap();
    let out = tool(&["-m", p, "-f", file.to_str().unwrap(), "--ids"]);
    assert_eq!(ids(&out), want("a\tb\n"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_input_is_a_clear_error() {
    let Some(path) = gpt2_vocab() else { return };
    let dir = test_support::scratch_dir("tokenize", "bad");

    let missing = dir.join("missing.gguf");
    let out = tool(&["-m", missing.to_str().unwrap(), "-p", "x"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("missing.gguf"),
        "{err}"
    );

    // A pre-tokenizer llama.cpp has and this crate lacks.
    let mut meta = gguf::GgufFile::open(&path).unwrap().metadata().clone();
    meta.set("tokenizer.ggml.pre", "kimi-k2".to_string());
    let kimi = dir.join("kimi.gguf");
    let f = std::fs::File::create(&kimi).unwrap();
    gguf::GgufWriter::new(std::io::BufWriter::new(f), &meta, &[])
        .unwrap()
        .finish()
        .unwrap();
    let out = tool(&["-m", kimi.to_str().unwrap(), "-p", "x"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("'kimi-k2'") && err.contains("not supported"),
        "{err}"
    );

    let out = tool(&["-m", path.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("no text"), "{err}");
    let out = tool(&["-m", path.to_str().unwrap(), "-p", "x", "--bogus"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("--bogus"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
