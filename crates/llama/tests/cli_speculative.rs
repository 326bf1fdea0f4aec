//! llama-cli with a draft model or prompt lookup: greedy output identical
//! to decoding without them; a draft of another vocabulary, a recurrent
//! target and bad settings are refused with clear errors.

mod common;

use std::process::{Command, Output};

use common::fixtures;

fn run(model: &str, extra: &[&str]) -> Output {
    let fx = fixtures().expect("fixtures");
    let m = fx.join("models").join(model);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_llama-cli"));
    cmd.args(["-m", m.to_str().unwrap(), "-p", "Once upon a time"])
        .args(["-n", "80", "-c", "256", "--temp", "0", "-t", "2", "-no-cnv"]);
    for a in extra {
        if let Some(name) = a.strip_prefix("model:") {
            cmd.arg(fx.join("models").join(name));
        } else {
            cmd.arg(a);
        }
    }
    cmd.output().unwrap()
}

#[test]
fn greedy_output_is_the_same_with_a_draft() {
    if fixtures().is_none() {
        return;
    }
    let plain = run("stories260K.gguf", &["--log-disable"]);
    assert!(plain.status.success());
    for (draft, n) in [("stories260K-q4_k_m.gguf", "4"), ("stories260K.gguf", "8")] {
        let spec = run(
            "stories260K.gguf",
            &["-md", &format!("model:{draft}"), "--draft-max", n],
        );
        assert!(
            spec.status.success(),
            "{}",
            String::from_utf8_lossy(&spec.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&spec.stdout),
            String::from_utf8_lossy(&plain.stdout),
            "draft {draft}"
        );
        let log = String::from_utf8_lossy(&spec.stderr);
        let line = log
            .lines()
            .find(|l| l.contains("speculative:"))
            .unwrap_or_else(|| panic!("{log}"));
        // The model drafting for itself agrees with every draft.
        if draft == "stories260K.gguf" {
            assert!(line.contains("(100.0%)"), "{line}");
        }
    }
}

#[test]
fn greedy_output_is_the_same_with_prompt_lookup() {
    if fixtures().is_none() {
        return;
    }
    let plain = run("stories260K.gguf", &["--log-disable"]);
    assert!(plain.status.success());
    for (n, m) in [("2", "8"), ("3", "4"), ("12", "48")] {
        let spec = run(
            "stories260K.gguf",
            &[
                "--spec-type",
                "ngram-simple",
                "--spec-ngram-simple-size-n",
                n,
                "--spec-ngram-simple-size-m",
                m,
            ],
        );
        assert!(
            spec.status.success(),
            "{}",
            String::from_utf8_lossy(&spec.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&spec.stdout),
            String::from_utf8_lossy(&plain.stdout),
            "n {n} m {m}"
        );
        let log = String::from_utf8_lossy(&spec.stderr);
        let line = log
            .lines()
            .find(|l| l.contains("speculative:"))
            .unwrap_or_else(|| panic!("{log}"));
        // The tiny model repeats itself: short n-grams find matches.
        if n == "2" {
            assert!(!line.contains(" 0 tokens drafted"), "{line}");
        }
    }
}

#[test]
fn incompatible_drafts_and_recurrent_targets_are_refused() {
    if fixtures().is_none() {
        return;
    }
    let r = run("stories260K.gguf", &["-md", "model:tiny-qwen3-f32.gguf"]);
    assert!(!r.status.success());
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(err.contains("draft model"), "{err}");
    let r = run("tiny-mamba-f32.gguf", &["-md", "model:tiny-mamba-f32.gguf"]);
    assert!(!r.status.success());
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(err.contains("recurrent"), "{err}");
    let r = run(
        "stories260K.gguf",
        &["-md", "model:stories260K.gguf", "--draft-p-min", "2"],
    );
    assert!(!r.status.success());
    let r = run("tiny-mamba-f32.gguf", &["--spec-type", "ngram-simple"]);
    assert!(!r.status.success());
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(err.contains("recurrent"), "{err}");
    for bad in [
        &["--spec-type", "ngram-mod"][..],
        &["--spec-type", "draft-simple"],
        &[
            "--spec-type",
            "ngram-simple",
            "--spec-ngram-simple-size-n",
            "0",
        ],
    ] {
        let r = run("stories260K.gguf", bad);
        assert!(!r.status.success(), "{bad:?}");
        let err = String::from_utf8_lossy(&r.stderr);
        assert!(err.contains("ngram") || err.contains("draft"), "{err}");
    }
}

/// llama.cpp's rule: the same type, near sizes and the same token text
/// from id 5 on. Phi-3 extends LLaMA's vocabulary (compatible); Baichuan's
/// is far larger; GPT-2's is another type than LLaMA's; Refact's and
/// StarCoder's are of one type and near sizes but differ in their tokens.
#[test]
fn vocab_check_follows_llama_cpp() {
    let Some(dir) = test_support::fixtures_with("vocab") else {
        return;
    };
    let open = |name: &str| {
        let f = gguf::GgufFile::open(dir.join("vocab").join(name)).unwrap();
        llama::vocab::Vocab::from_gguf(&f).unwrap()
    };
    let check = llama::speculative::check_vocab_compatible;
    let spm = open("ggml-vocab-llama-spm.gguf");
    assert!(check(&spm, &spm).is_ok());
    assert!(check(&spm, &open("ggml-vocab-phi-3.gguf")).is_ok());
    let e = |a: &llama::vocab::Vocab, b: &str| check(a, &open(b)).unwrap_err().to_string();
    assert!(e(&spm, "ggml-vocab-baichuan.gguf").contains("too far"));
    assert!(e(&spm, "ggml-vocab-gpt-2.gguf").contains("vocabulary type"));
    let starcoder = open("ggml-vocab-starcoder.gguf");
    let m = e(&starcoder, "ggml-vocab-refact.gguf");
    assert!(m.contains("token "), "{m}");
}
