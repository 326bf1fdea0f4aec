//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use gguf::{Array, GgmlType, GgufWriter, Metadata, StringArray, TensorInfo, Value};

// Each test binary uses a part of these.
#[allow(unused_imports)]
pub use test_support::{fixtures, Rng};

/// Evaluates to the fixtures folder or returns from the test.
#[macro_export]
macro_rules! fixtures_or_skip {
    () => {
        match common::fixtures() {
            Some(d) => d,
            None => return,
        }
    };
}

/// Every GGUF file of the fixtures (models and vocabularies), sorted.
pub fn all_ggufs(dir: &Path) -> Vec<PathBuf> {
    let mut v = Vec::new();
    for sub in ["models", "vocab"] {
        if let Ok(rd) = std::fs::read_dir(dir.join(sub)) {
            for e in rd.flatten() {
                let p = e.path();
                if p.extension().is_some_and(|x| x == "gguf") {
                    v.push(p);
                }
            }
        }
    }
    v.sort();
    assert!(!v.is_empty(), "no .gguf files under {}", dir.display());
    v
}

/// A fresh empty temporary folder for one test.
pub fn temp_dir(name: &str) -> PathBuf {
    test_support::scratch_dir("gguf", name)
}

/// Metadata with a value and an array of every type (the values the
/// gguf-py comparison writes too).
pub fn scalar_and_array_metadata() -> Metadata {
    let mut md = Metadata::new();
    md.set("general.architecture", "llama");
    md.set("t.u8", 200u8);
    md.set("t.i8", -100i8);
    md.set("t.u16", 60000u16);
    md.set("t.i16", -30000i16);
    md.set("t.u32", 512u32);
    md.set("t.i32", -7i32);
    md.set("t.f32", 1.5f32);
    md.set("t.bool", true);
    md.set("t.str", "héllo");
    md.set("t.u64", u64::MAX - 1);
    md.set("t.i64", i64::MIN + 1);
    md.set("t.f64", -2.25f64);
    md.set("t.arr.u8", vec![1u8, 2, 3]);
    md.set("t.arr.i8", vec![-1i8, 2]);
    md.set("t.arr.u16", vec![1u16, 65535]);
    md.set("t.arr.i16", vec![-1i16, 7]);
    md.set("t.arr.u32", (1..=10).collect::<Vec<u32>>());
    md.set("t.arr.i32", vec![-1i32, 1]);
    md.set("t.arr.f32", vec![0.5f32, -0.25]);
    md.set("t.arr.bool", vec![true, false, true]);
    md.set(
        "t.arr.str",
        ["a", "", "ccc"].into_iter().collect::<StringArray>(),
    );
    md.set("t.arr.u64", vec![u64::MAX]);
    md.set("t.arr.i64", vec![i64::MIN]);
    md.set("t.arr.f64", vec![1e300f64]);
    md
}

/// Metadata using every value type, nested arrays and string arrays.
pub fn sample_metadata() -> Metadata {
    let mut md = scalar_and_array_metadata();
    md.set("t.arr.empty", Array::U32(vec![]));
    md.set(
        "t.arr.nested",
        Value::Array(Array::Array(vec![
            Array::U32(vec![1, 2]),
            Array::String(["x"].into_iter().collect()),
            Array::Array(vec![Array::I8(vec![-1])]),
        ])),
    );
    md
}

/// Tensors of several types, including a scalar.
pub fn sample_tensors() -> Vec<TensorInfo> {
    vec![
        TensorInfo::new("a.f32", GgmlType::F32, &[4, 2]).expect("valid"),
        TensorInfo::new("b.q8_0", GgmlType::Q8_0, &[32, 2]).expect("valid"),
        TensorInfo::new("c.f16", GgmlType::F16, &[3]).expect("valid"),
        TensorInfo::new("d.scalar", GgmlType::F32, &[]).expect("valid"),
        TensorInfo::new("e.q4_k", GgmlType::Q4_K, &[256, 1, 1, 1]).expect("valid"),
    ]
}

/// Deterministic bytes for a tensor.
pub fn tensor_bytes(t: &TensorInfo) -> Vec<u8> {
    (0..t.size)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(t.name.len() as u8))
        .collect()
}

/// A small valid file made with the writer.
pub fn sample_file() -> Vec<u8> {
    let md = sample_metadata();
    let ts = sample_tensors();
    let mut w = GgufWriter::new(Vec::new(), &md, &ts).expect("writer");
    for t in &ts {
        w.write_tensor(&t.name, &tensor_bytes(t)).expect("tensor");
    }
    w.finish().expect("finish")
}
