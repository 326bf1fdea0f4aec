//! Greedy generation under a grammar gives llama.cpp's bytes: every case of
//! `tests/data/grammar/reference.json` (llama-completion's output, see
//! `generate.py` there) is run through llama-cli with the same flags.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/grammar")
}

/// A model or grammar named `kind:file` in the reference file; `None` when
/// it lives in the fixtures and there are none.
fn resolve(name: &str, sub: &str) -> Option<PathBuf> {
    let (kind, file) = name.split_once(':').expect("kind:file");
    match kind {
        "repo" => Some(test_support::workspace_root().join("models").join(file)),
        "fixtures" => Some(test_support::fixtures_with(sub)?.join(sub).join(file)),
        "data" => Some(data_dir().join(file)),
        _ => panic!("unknown location {kind}"),
    }
}

/// What llama-completion generated: its stdout without the two final line
/// breaks and the end-of-text mark.
fn reference_text(stdout: &str) -> &str {
    let s = stdout.strip_suffix("\n\n").expect("complete output");
    s.strip_suffix(" [end of text]\n").unwrap_or(s)
}

#[test]
fn greedy_output_under_grammars_equals_llama_cpp() {
    let text = std::fs::read_to_string(data_dir().join("reference.json")).unwrap();
    let doc: Value = serde_json::from_str(&text).unwrap();
    let cases = doc["cases"].as_array().unwrap();
    assert!(cases.len() >= 10);
    let mut ran = 0;
    let mut failures = Vec::new();
    for case in cases {
        let (Some(model), Some(grammar)) = (
            resolve(case["model"].as_str().unwrap(), "models"),
            resolve(case["grammar"].as_str().unwrap(), "grammars"),
        ) else {
            continue;
        };
        let prompt = case["prompt"].as_str().unwrap();
        let n = case["n_predict"].as_u64().unwrap().to_string();
        let out = Command::new(env!("CARGO_BIN_EXE_llama-cli"))
            .args(["-m", model.to_str().unwrap(), "-p", prompt, "-n", &n])
            .args(["--temp", "0", "-t", "2", "-no-cnv", "--log-disable"])
            .arg("--grammar-file")
            .arg(&grammar)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{case}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let ours = out.stdout.strip_suffix(b"\n").unwrap_or(&out.stdout);
        let want = reference_text(case["stdout"].as_str().unwrap());
        if ours != want.as_bytes() {
            failures.push(format!(
                "{} {}: ours {:?}\n want {:?}",
                case["model"],
                case["grammar"],
                String::from_utf8_lossy(ours),
                want
            ));
        }
        ran += 1;
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(ran > 0);
}

#[test]
fn a_bad_grammar_is_an_error_with_line_and_column() {
    let model = test_support::workspace_root().join("models/stories260K.gguf");
    let out = Command::new(env!("CARGO_BIN_EXE_llama-cli"))
        .args(["-m", model.to_str().unwrap(), "-p", "Once", "-n", "4"])
        .args(["-no-cnv", "--log-disable"])
        .args(["--grammar", "root ::= \"a\"\nitem ::= [a-z\n"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("line 2, column 10"), "{err}");
    assert!(err.contains("character class"), "{err}");
    assert!(!err.contains("panicked"), "{err}");

    let missing = test_support::workspace_root().join("no-such-grammar.gbnf");
    let out = Command::new(env!("CARGO_BIN_EXE_llama-cli"))
        .args(["-m", model.to_str().unwrap(), "-p", "Once", "-no-cnv"])
        .arg("--grammar-file")
        .arg(&missing)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no-such-grammar.gbnf"), "{err}");
}
