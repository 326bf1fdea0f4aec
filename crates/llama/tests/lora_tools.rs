//! The adapter flags of llama-cli and llama-perplexity on the LoRA fixture:
//! the greedy text and perplexity llama.cpp's tools gave with the same
//! flags, and clear errors for bad flags and files.

use std::process::Command;

use serde_json::Value;

fn expected() -> Option<(std::path::PathBuf, Value)> {
    let fx = test_support::fixtures()?;
    let text = std::fs::read_to_string(fx.join("expected/tiny-lora-stories260K.json")).unwrap();
    Some((fx, serde_json::from_str(&text).unwrap()))
}

/// llama.cpp's flags of a fixture run with the adapter path made absolute.
fn flags(fx: &std::path::Path, rec: &Value) -> Vec<String> {
    rec["extra_args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            let s = v.as_str().unwrap();
            if s.starts_with("adapters/") {
                fx.join(s).display().to_string()
            } else {
                s.to_string()
            }
        })
        .collect()
}

#[test]
fn llama_cli_takes_the_adapter_flags() {
    let Some((fx, exp)) = expected() else { return };
    let model = fx.join("models/stories260K.gguf");
    for rec in exp["greedy"].as_array().unwrap() {
        let out = Command::new(env!("CARGO_BIN_EXE_llama-cli"))
            .args([
                "-m",
                model.to_str().unwrap(),
                "-p",
                "Once upon a time",
                "-n",
                "32",
            ])
            .args(["--temp", "0", "-t", "2", "-no-cnv", "--log-disable"])
            .args(flags(&fx, rec))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        let want = rec["generated_text"].as_str().unwrap();
        assert!(
            text.contains(want),
            "{}: {text:?} does not hold {want:?}",
            rec["run"]
        );
    }
}

#[test]
fn llama_perplexity_takes_the_adapter_flags() {
    let Some((fx, exp)) = expected() else { return };
    let model = fx.join("models/stories260K.gguf");
    let story = fx.join("texts/story.txt");
    let rec = exp["perplexity"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["run"] == "lora_scaled_0.5")
        .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_llama-perplexity"))
        .args(["-m", model.to_str().unwrap(), "-f", story.to_str().unwrap()])
        .args(["-c", "64", "-b", "64", "-t", "2", "--log-disable"])
        .args(flags(&fx, rec))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("Final estimate: PPL = "))
        .unwrap_or_else(|| panic!("no final estimate in {text}"));
    let ppl: f64 = line["Final estimate: PPL = ".len()..]
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let want = rec["final_ppl"].as_f64().unwrap();
    assert!(
        (ppl - want).abs() / want < 5e-4,
        "PPL {ppl} vs llama.cpp {want}"
    );
}

#[test]
fn bad_adapter_flags_and_files_are_errors() {
    let Some((fx, _)) = expected() else { return };
    let model = fx.join("models/stories260K.gguf");
    let other = fx.join("models/tiny-f32.gguf");
    let adapter = fx.join("adapters/tiny-lora-stories260K.gguf");
    let cases: Vec<(&std::path::Path, Vec<String>, &str)> = vec![
        (
            &model,
            vec!["--lora-scaled".into(), adapter.display().to_string()],
            "--lora-scaled",
        ),
        (
            &model,
            vec!["--lora".into(), "no-such-adapter.gguf".into()],
            "no-such-adapter.gguf",
        ),
        (
            &other,
            vec!["--lora".into(), adapter.display().to_string()],
            "tiny-lora-stories260K.gguf",
        ),
        (
            &model,
            vec!["--control-vector".into(), adapter.display().to_string()],
            "tiny-lora-stories260K.gguf",
        ),
        (
            &model,
            vec!["--control-vector-layer-range".into(), "1".into()],
            "--control-vector-layer-range",
        ),
    ];
    for (m, extra, needle) in cases {
        let out = Command::new(env!("CARGO_BIN_EXE_llama-cli"))
            .args([
                "-m",
                m.to_str().unwrap(),
                "-p",
                "Once",
                "-n",
                "4",
                "-no-cnv",
                "--log-disable",
            ])
            .args(&extra)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{extra:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{extra:?}: {err}");
        assert!(!err.contains("panicked"), "{extra:?}: {err}");
    }
}
