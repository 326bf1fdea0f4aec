//! The gguf-dump binary: text and JSON output on a real model.

mod common;

use std::process::Command;

fn dump(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_gguf-dump"))
        .args(args)
        .output()
        .expect("run gguf-dump");
    (
        out.status.success(),
        String::from_utf8(out.stdout).expect("utf-8 stdout"),
        String::from_utf8(out.stderr).expect("utf-8 stderr"),
    )
}

#[test]
fn text_output_lists_keys_and_tensors() {
    let dir = fixtures_or_skip!();
    let path = dir.join("models/stories260K.gguf");
    let (ok, out, _) = dump(&[path.to_str().unwrap()]);
    assert!(ok);
    assert!(out.contains("48 tensors"), "{out}");
    let ctx = out
        .lines()
        .find(|l| l.contains("llama.context_length"))
        .expect("context length line");
    assert!(
        ctx.contains("u32") && ctx.trim_end().ends_with("512"),
        "{ctx}"
    );
    assert!(
        out.contains(r#"["<unk>", "<s>", "</s>", ... 512 items]"#),
        "{out}"
    );
    let rows = out.lines().filter(|l| l.contains(".weight")).count();
    assert_eq!(rows, 48);
    let embd = out
        .lines()
        .find(|l| l.contains("token_embd.weight"))
        .unwrap();
    assert!(
        embd.contains("F32") && embd.contains("[64, 512]") && embd.contains("131072"),
        "{embd}"
    );
}

#[test]
fn json_output_is_complete() {
    let dir = fixtures_or_skip!();
    let path = dir.join("models/stories260K.gguf");
    let (ok, out, _) = dump(&["--json", path.to_str().unwrap()]);
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(&out).expect("valid JSON");
    assert_eq!(v["tensors"].as_array().unwrap().len(), 48);
    assert_eq!(v["version"], 3);
    let md = v["metadata"].as_array().unwrap();
    let ctx = md
        .iter()
        .find(|e| e["key"] == "llama.context_length")
        .unwrap();
    assert_eq!(
        (ctx["type"].as_str(), ctx["value"].as_u64()),
        (Some("u32"), Some(512))
    );
    let toks = md
        .iter()
        .find(|e| e["key"] == "tokenizer.ggml.tokens")
        .unwrap();
    assert_eq!(toks["value"].as_array().unwrap().len(), 512);
    assert_eq!(toks["element_type"], "str");
    let eps = md
        .iter()
        .find(|e| e["key"] == "llama.attention.layer_norm_rms_epsilon")
        .unwrap();
    assert!((eps["value"].as_f64().unwrap() - 1e-5).abs() < 1e-12);
    let t0 = &v["tensors"][0];
    assert_eq!(t0["name"], "token_embd.weight");
    assert_eq!(t0["shape"], serde_json::json!([64, 512]));
    assert_eq!(t0["bytes"], 131072);
}

#[test]
fn json_escapes_every_string() {
    // Control characters, quotes and invalid UTF-8 in keys and values.
    let mut md = gguf::Metadata::new();
    md.set("k\"\\\n\u{1}", "v\t\"\u{7f}é");
    md.set("bad", gguf::Value::String(vec![0xff, b'"']));
    md.set("floats", vec![f32::NAN, f32::INFINITY, 1e-30, 3.5]);
    let bytes = gguf::GgufWriter::new(Vec::new(), &md, &[])
        .unwrap()
        .finish()
        .unwrap();
    let tmp = common::temp_dir("dump-json");
    let p = tmp.join("odd.gguf");
    std::fs::write(&p, bytes).unwrap();
    let (ok, out, _) = dump(&["--json", p.to_str().unwrap()]);
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(&out).expect("valid JSON");
    assert_eq!(v["metadata"][0]["key"], "k\"\\\n\u{1}");
    assert_eq!(v["metadata"][0]["value"], "v\t\"\u{7f}é");
    assert_eq!(v["metadata"][1]["value"], "\u{fffd}\"");
    let floats = v["metadata"][2]["value"].as_array().unwrap();
    assert!(floats[0].is_null() && floats[1].is_null());
    assert_eq!(floats[2].as_f64().map(|x| x as f32), Some(1e-30f32));
    assert_eq!(floats[3].as_f64(), Some(3.5));
    let (ok, text, _) = dump(&[p.to_str().unwrap()]);
    assert!(ok && text.contains("0 tensors"), "{text}");
    std::fs::remove_dir_all(&tmp).ok();
}

#[test]
fn errors_and_usage() {
    let (ok, _, err) = dump(&[]);
    assert!(!ok && err.contains("usage"));
    let tmp = common::temp_dir("dump-bad");
    let p = tmp.join("bad.gguf");
    std::fs::write(&p, b"GGUF\x03\x00\x00\x00").unwrap();
    let (ok, _, err) = dump(&[p.to_str().unwrap()]);
    assert!(!ok && err.contains("truncated"), "{err}");
    std::fs::remove_dir_all(&tmp).ok();
}
