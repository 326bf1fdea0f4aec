//! Files of a known architecture that are wrong: a missing or misshaped
//! tensor, a bad sliding-window setting, hyperparameters whose products
//! overflow. Each must be a clear error naming the key or tensor, never a
//! panic.

use std::path::{Path, PathBuf};

use gguf::{GgufFile, GgufWriter, Metadata, TensorInfo, Value};
use llama::Model;
use tests::{cpu_params, fixtures, scratch_dir};

/// A tensor to write: name, dims, raw bytes.
type Tensor = (String, Vec<u64>, gguf::GgmlType, Vec<u8>);

/// Copies `src` to a scratch file after `edit` changes its metadata and
/// tensors; returns the new path.
fn rewrite(src: &Path, name: &str, edit: impl FnOnce(&mut Metadata, &mut Vec<Tensor>)) -> PathBuf {
    let f = GgufFile::open(src).expect("open");
    let mut meta = f.metadata().clone();
    let mut tensors: Vec<Tensor> = f
        .tensors()
        .iter()
        .map(|t| {
            let d = f.tensor_data(t).expect("data").to_vec();
            (t.name.clone(), t.dims.to_vec(), t.ty, d)
        })
        .collect();
    edit(&mut meta, &mut tensors);
    let dst = scratch_dir(name).join("model.gguf");
    let infos: Vec<TensorInfo> = tensors
        .iter()
        .map(|(n, dims, ty, _)| TensorInfo::new(n.clone(), *ty, dims).expect("info"))
        .collect();
    let file = std::fs::File::create(&dst).expect("create");
    let mut w = GgufWriter::new(file, &meta, &infos).expect("writer");
    for (n, _, _, d) in &tensors {
        w.write_tensor(n, d).expect("write");
    }
    w.finish().expect("finish");
    dst
}

fn load_err(path: &Path) -> String {
    match Model::load(path, &cpu_params()) {
        Ok(_) => panic!("{} loaded", path.display()),
        Err(e) => e.to_string(),
    }
}

fn gemma3() -> Option<PathBuf> {
    Some(fixtures()?.join("models/tiny-gemma3-f32.gguf"))
}

#[test]
fn missing_tensor_is_named() {
    let Some(src) = gemma3() else { return };
    let p = rewrite(&src, "missing", |_, t| {
        t.retain(|x| x.0 != "blk.2.attn_q_norm.weight")
    });
    let e = load_err(&p);
    assert!(e.contains("blk.2.attn_q_norm.weight"), "{e}");
}

#[test]
fn misshaped_tensor_is_named() {
    let Some(src) = gemma3() else { return };
    let p = rewrite(&src, "misshaped", |_, t| {
        let x = t
            .iter_mut()
            .find(|x| x.0 == "blk.1.post_ffw_norm.weight")
            .expect("tensor");
        let half = x.1[0] / 2;
        x.1 = vec![half];
        x.3.truncate(half as usize * 4);
    });
    let e = load_err(&p);
    assert!(
        e.contains("blk.1.post_ffw_norm.weight") && e.contains("shape"),
        "{e}"
    );
}

#[test]
fn swa_pattern_of_wrong_length_is_named() {
    let Some(src) = gemma3() else { return };
    let p = rewrite(&src, "pattern", |m, _| {
        m.set(
            "gemma3.attention.sliding_window_pattern",
            vec![true, false, true],
        );
    });
    let e = load_err(&p);
    assert!(
        e.contains("gemma3.attention.sliding_window_pattern") && e.contains("per layer"),
        "{e}"
    );
}

#[test]
fn zero_window_is_named() {
    let Some(src) = gemma3() else { return };
    let p = rewrite(&src, "window0", |m, _| {
        m.set("gemma3.attention.sliding_window", Value::U32(0));
    });
    let e = load_err(&p);
    assert!(e.contains("gemma3.attention.sliding_window"), "{e}");
}

#[test]
fn overflowing_head_width_is_an_error() {
    let Some(src) = gemma3() else { return };
    let p = rewrite(&src, "overflow", |m, _| {
        m.set("gemma3.attention.key_length", Value::U64(u64::MAX / 2));
        m.set("gemma3.attention.value_length", Value::U64(u64::MAX / 2));
    });
    let e = load_err(&p);
    assert!(e.contains("too large") || e.contains("head"), "{e}");
}
