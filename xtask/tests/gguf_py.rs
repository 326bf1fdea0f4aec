//! gguf-py, the Python reader of the GGUF project, reads the generated
//! files the same way: tensor names, types, shapes, metadata, and values
//! (dequantized by its numpy reference) that match the f32 model of the
//! same seed. Skipped when python3 with `gguf` and `numpy` is not there.

mod common;

use std::process::Command;

use gguf::GgufFile;
use serde_json::Value;
use xtask::gen_model::shape::{Preset, ShapeOverrides};
use xtask::gen_model::{generate_file, WriteSettings};

const SCRIPT: &str = r#"
import json, sys
import numpy as np
import gguf
ref = gguf.GGUFReader(sys.argv[1])
ref_t = {t.name: t for t in ref.tensors}
out = []
for path in sys.argv[2:]:
    r = gguf.GGUFReader(path)
    tensors = []
    for t in r.tensors:
        got = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32).reshape(-1)
        want = np.asarray(ref_t[t.name].data, dtype=np.float32).reshape(-1)
        amax = float(np.abs(want).max())
        err = float(np.abs(got - want).max())
        tensors.append({"name": t.name, "type": t.tensor_type.name,
                        "shape": [int(x) for x in t.shape], "rel_err": err / amax})
    fields = {k: r.fields[k].contents() for k in
              ("general.architecture", "general.file_type", "llama.block_count",
               "llama.attention.head_count_kv", "tokenizer.ggml.bos_token_id")}
    fields["n_tokens"] = len(r.fields["tokenizer.ggml.tokens"].data)
    out.append({"path": path, "tensors": tensors, "fields": fields})
print(json.dumps(out))
"#;

fn python_with_gguf() -> Result<(), String> {
    let probe = Command::new("python3")
        .args(["-c", "import gguf, numpy"])
        .output();
    match probe {
        Err(e) => Err(format!("python3 not runnable: {e}")),
        Ok(o) if !o.status.success() => Err(format!(
            "python3 cannot import gguf and numpy (pip install gguf): {}",
            String::from_utf8_lossy(&o.stderr)
                .lines()
                .last()
                .unwrap_or("")
        )),
        Ok(_) => Ok(()),
    }
}

#[test]
fn gguf_py_reads_generated_files() {
    if let Err(why) = python_with_gguf() {
        eprintln!("skipped: {why}");
        return;
    }
    let dir = common::temp_dir("gguf-py");
    // The first file (f32) is the reference the others are compared with.
    let types = [
        ("f32", 0.0),
        ("f16", 1e-3),
        ("q8_0", 0.01),
        ("q4_k", 0.15),
        ("q6_k", 0.05),
    ];
    let mut paths = Vec::new();
    for (ty, _) in types {
        // 256-wide rows: the K-quants are used as asked.
        let o = ShapeOverrides {
            n_embd: Some(256),
            n_ff: Some(512),
            n_layer: Some(2),
            ..Default::default()
        };
        let spec = common::spec(Preset::Stories260k, o, ty, 21);
        let path = dir.join(format!("{ty}.gguf"));
        generate_file(&spec, &WriteSettings::default(), &path).unwrap();
        paths.push(path);
    }
    let out = Command::new("python3")
        .arg("-c")
        .arg(SCRIPT)
        .arg(&paths[0])
        .args(&paths)
        .output()
        .expect("run python3");
    assert!(
        out.status.success(),
        "gguf-py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON from the script");
    for ((ty, tol), (path, r)) in types
        .iter()
        .zip(paths.iter().zip(report.as_array().unwrap()))
    {
        let f = GgufFile::open(path).unwrap();
        let tensors = r["tensors"].as_array().unwrap();
        assert_eq!(tensors.len(), f.tensors().len(), "{ty}");
        for (py, t) in tensors.iter().zip(f.tensors()) {
            assert_eq!(py["name"], t.name.as_str(), "{ty}");
            assert_eq!(
                py["type"].as_str().unwrap(),
                t.ty.to_string(),
                "{ty} {}",
                t.name
            );
            let shape: Vec<u64> = py["shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap())
                .collect();
            assert_eq!(shape, t.dims, "{ty} {}", t.name);
            let err = py["rel_err"].as_f64().unwrap();
            assert!(err <= *tol, "{ty} {}: relative error {err} > {tol}", t.name);
        }
        let fields = &r["fields"];
        assert_eq!(fields["general.architecture"], "llama");
        assert_eq!(
            fields["general.file_type"],
            f.get_u32("general.file_type").unwrap()
        );
        assert_eq!(fields["llama.block_count"], 2);
        assert_eq!(fields["llama.attention.head_count_kv"], 4);
        assert_eq!(fields["tokenizer.ggml.bos_token_id"], 1);
        assert_eq!(fields["n_tokens"], 512);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
