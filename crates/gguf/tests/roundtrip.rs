//! Read -> write -> read, byte-identical output, the editor path, byte
//! orders and versions, and a byte-for-byte cross-check against gguf-py.

mod common;

use std::process::Command;

use gguf::{Endian, GgmlType, GgufFile, GgufWriter, TensorInfo, Value, WriteOptions};

#[test]
fn every_fixture_round_trips_byte_for_byte() {
    let dir = fixtures_or_skip!();
    for path in common::all_ggufs(&dir) {
        let original = std::fs::read(&path).expect("read");
        let f = GgufFile::open(&path).expect("open");
        let written = f.write_to(Vec::new()).expect("write");
        assert!(
            written == original,
            "{} differs after a round trip",
            path.display()
        );
        let again = GgufFile::from_bytes(&written).expect("reparse");
        assert_eq!(again.metadata(), f.metadata());
        assert_eq!(again.tensors(), f.tensors());
        for t in f.tensors() {
            assert_eq!(
                again.tensor_data_in(&written, t).unwrap(),
                f.tensor_data(t).unwrap()
            );
        }
    }
}

#[test]
fn sample_round_trips() {
    let bytes = common::sample_file();
    let f = GgufFile::from_bytes(&bytes).expect("parse");
    assert_eq!(f.metadata(), &common::sample_metadata());
    let ts = common::sample_tensors();
    assert_eq!(f.tensors().len(), ts.len());
    for (a, b) in f.tensors().iter().zip(&ts) {
        assert_eq!(
            (&a.name, a.ty, &a.dims, a.size),
            (&b.name, b.ty, &b.dims, b.size)
        );
        assert_eq!(a.offset % 32, 0);
        assert_eq!(
            f.tensor_data_in(&bytes, a).unwrap(),
            common::tensor_bytes(b)
        );
    }
    assert_eq!(f.tensor("d.scalar").map(|t| t.ne()), Some([1, 1, 1, 1]));
    let mut out = Vec::new();
    let w = f.write_with_metadata(&mut out, f.metadata(), &f.write_options());
    assert!(matches!(w, Err(gguf::Error::NotMapped)));
}

#[test]
fn big_endian_and_version_2_round_trip() {
    let md = common::sample_metadata();
    let ts = common::sample_tensors();
    for opts in [
        WriteOptions {
            endian: Endian::Big,
            version: 3,
        },
        WriteOptions {
            endian: Endian::Little,
            version: 2,
        },
        WriteOptions {
            endian: Endian::Big,
            version: 2,
        },
    ] {
        let mut w = GgufWriter::with_options(Vec::new(), &md, &ts, &opts).expect("writer");
        for t in &ts {
            w.write_tensor(&t.name, &common::tensor_bytes(t))
                .expect("tensor");
        }
        let bytes = w.finish().expect("finish");
        assert_eq!(&bytes[..4], b"GGUF");
        let f = GgufFile::from_bytes(&bytes).expect("parse");
        assert_eq!((f.endian(), f.version()), (opts.endian, opts.version));
        assert_eq!(f.metadata(), &md);
        assert_eq!(f.write_options(), opts);
        for t in &ts {
            let got = f.tensor(&t.name).expect("tensor");
            assert_eq!(
                f.tensor_data_in(&bytes, got).unwrap(),
                common::tensor_bytes(t)
            );
        }
    }
    assert!(GgufWriter::with_options(
        Vec::new(),
        &md,
        &ts,
        &WriteOptions {
            endian: Endian::Little,
            version: 1
        }
    )
    .is_err());
}

/// Builds a version 1 file by hand: u32 counts, lengths and dims.
fn v1_file() -> Vec<u8> {
    let mut b = Vec::new();
    let s = |b: &mut Vec<u8>, x: &str| {
        b.extend_from_slice(&(x.len() as u32).to_le_bytes());
        b.extend_from_slice(x.as_bytes());
    };
    b.extend_from_slice(b"GGUF");
    b.extend_from_slice(&1u32.to_le_bytes());
    b.extend_from_slice(&1u32.to_le_bytes()); // tensors
    b.extend_from_slice(&3u32.to_le_bytes()); // kvs
    s(&mut b, "general.architecture");
    b.extend_from_slice(&8u32.to_le_bytes());
    s(&mut b, "llama");
    s(&mut b, "llama.context_length");
    b.extend_from_slice(&4u32.to_le_bytes());
    b.extend_from_slice(&128u32.to_le_bytes());
    s(&mut b, "tokenizer.ggml.tokens");
    b.extend_from_slice(&9u32.to_le_bytes());
    b.extend_from_slice(&8u32.to_le_bytes());
    b.extend_from_slice(&2u32.to_le_bytes());
    s(&mut b, "<s>");
    s(&mut b, "hi");
    s(&mut b, "w");
    b.extend_from_slice(&2u32.to_le_bytes()); // n_dims
    b.extend_from_slice(&2u32.to_le_bytes());
    b.extend_from_slice(&3u32.to_le_bytes());
    b.extend_from_slice(&0u32.to_le_bytes()); // f32
    b.extend_from_slice(&0u64.to_le_bytes()); // offset
    while b.len() % 32 != 0 {
        b.push(0);
    }
    for i in 0..6u32 {
        b.extend_from_slice(&(i as f32).to_le_bytes());
    }
    b
}

#[test]
fn version_1_reads_and_converts_to_3() {
    let bytes = v1_file();
    let f = GgufFile::from_bytes(&bytes).expect("v1");
    assert_eq!(f.version(), 1);
    assert_eq!(f.get_u32("llama.context_length").unwrap(), 128);
    assert_eq!(
        f.get_str_array("tokenizer.ggml.tokens").unwrap(),
        vec!["<s>", "hi"]
    );
    let t = f.tensor("w").expect("w");
    assert_eq!((t.dims.as_slice(), t.size), (&[2, 3][..], 24));
    let data = f.tensor_data_in(&bytes, t).unwrap().to_vec();
    let mut w = GgufWriter::with_options(Vec::new(), f.metadata(), f.tensors(), &f.write_options())
        .unwrap();
    w.write_tensor("w", &data).unwrap();
    let v3 = w.finish().unwrap();
    let g = GgufFile::from_bytes(&v3).expect("v3");
    assert_eq!(g.version(), 3);
    assert_eq!(g.metadata(), f.metadata());
    assert_eq!(
        g.tensor_data_in(&v3, g.tensor("w").unwrap()).unwrap(),
        data.as_slice()
    );
}

#[test]
fn editor_sets_adds_and_removes_keys() {
    let dir = fixtures_or_skip!();
    let src = dir.join("models/stories260K.gguf");
    let f = GgufFile::open(&src).expect("open");
    let mut md = f.metadata().clone();
    md.set("general.name", "edited");
    md.set("general.new_key", vec![1u32, 2]);
    assert!(md.remove("llama.tensor_data_layout").is_some());
    let tmp = common::temp_dir("editor");
    let out = tmp.join("edited.gguf");
    f.save_with_metadata(&out, &md).expect("save");
    let g = GgufFile::open(&out).expect("reopen");
    assert_eq!(g.get_str("general.name").unwrap(), "edited");
    assert_eq!(g.get_array::<u32>("general.new_key").unwrap(), vec![1, 2]);
    assert!(g.get("llama.tensor_data_layout").is_none());
    assert_eq!(g.metadata().keys().next(), Some("general.architecture"));
    assert_eq!(g.tensors().len(), 48);
    for t in f.tensors() {
        assert_eq!(
            g.tensor_data(g.tensor(&t.name).unwrap()).unwrap(),
            f.tensor_data(t).unwrap()
        );
    }

    // A new alignment moves the tensors; the data stays the same.
    md.set("general.alignment", 256u32);
    let out2 = tmp.join("aligned.gguf");
    f.save_with_metadata(&out2, &md).expect("save aligned");
    let h = GgufFile::open(&out2).expect("reopen aligned");
    assert_eq!(h.alignment(), 256);
    assert_eq!(h.data_offset() % 256, 0);
    for t in h.tensors() {
        assert_eq!(t.offset % 256, 0);
        assert_eq!(
            h.tensor_data(t).unwrap(),
            f.tensor_data(f.tensor(&t.name).unwrap()).unwrap()
        );
    }

    // Never over the file being read.
    assert!(matches!(
        g.save_with_metadata(&out, &md),
        Err(gguf::Error::Writer(_))
    ));
    std::fs::remove_dir_all(&tmp).ok();
}

const PY_SCRIPT: &str = r#"
import sys, numpy as np, gguf
from gguf import GGUFValueType as T
def build(path, endian):
    w = gguf.GGUFWriter(path, "llama", endianess=endian)
    w.add_uint8("t.u8", 200); w.add_int8("t.i8", -100); w.add_uint16("t.u16", 60000); w.add_int16("t.i16", -30000)
    w.add_uint32("t.u32", 512); w.add_int32("t.i32", -7); w.add_float32("t.f32", 1.5); w.add_bool("t.bool", True)
    w.add_string("t.str", "h\u00e9llo"); w.add_uint64("t.u64", 2**64-2); w.add_int64("t.i64", -2**63+1); w.add_float64("t.f64", -2.25)
    for k, v, st in [("u8",[1,2,3],T.UINT8),("i8",[-1,2],T.INT8),("u16",[1,65535],T.UINT16),("i16",[-1,7],T.INT16),
                     ("u32",list(range(1,11)),T.UINT32),("i32",[-1,1],T.INT32),("f32",[0.5,-0.25],T.FLOAT32),
                     ("bool",[True,False,True],T.BOOL),("str",["a","","ccc"],T.STRING),("u64",[2**64-1],T.UINT64),
                     ("i64",[-2**63],T.INT64),("f64",[1e300],T.FLOAT64),("nested",[[1,2],["x"]],T.ARRAY)]:
        w.add_key_value("t.arr."+k, v, T.ARRAY, st)
    w.add_tensor("a.f32", np.arange(8, dtype=np.float32).reshape(2,4))
    w.add_tensor("b.q8_0", np.arange(68, dtype=np.uint8).reshape(2,34), raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("c.f16", np.array([1,2,3], dtype=np.float16))
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
build(sys.argv[1], gguf.GGUFEndian.LITTLE)
build(sys.argv[2], gguf.GGUFEndian.BIG)
"#;

fn python_has_gguf() -> bool {
    Command::new("python3")
        .args(["-c", "import gguf, numpy"])
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn writer_matches_gguf_py_byte_for_byte() {
    if !python_has_gguf() {
        eprintln!("skipped: python3 with gguf not available");
        return;
    }
    let tmp = common::temp_dir("gguf-py");
    let script = tmp.join("mk.py");
    std::fs::write(&script, PY_SCRIPT).expect("script");
    let (le, be) = (tmp.join("le.gguf"), tmp.join("be.gguf"));
    let st = Command::new("python3")
        .arg(&script)
        .arg(&le)
        .arg(&be)
        .status()
        .expect("python3");
    assert!(st.success());

    let mut md = common::scalar_and_array_metadata();
    md.set(
        "t.arr.nested",
        Value::Array(gguf::Array::Array(vec![
            gguf::Array::I32(vec![1, 2]),
            gguf::Array::String(["x"].into_iter().collect()),
        ])),
    );
    let ts = vec![
        TensorInfo::new("a.f32", GgmlType::F32, &[4, 2]).unwrap(),
        TensorInfo::new("b.q8_0", GgmlType::Q8_0, &[32, 2]).unwrap(),
        TensorInfo::new("c.f16", GgmlType::F16, &[3]).unwrap(),
    ];
    let a: Vec<u8> = (0..8).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let b: Vec<u8> = (0..68u8).collect();
    let c: Vec<u8> = [0x3c00u16, 0x4000, 0x4200]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    let mut w = GgufWriter::new(Vec::new(), &md, &ts).unwrap();
    for (t, d) in ts.iter().zip([&a, &b, &c]) {
        w.write_tensor(&t.name, d).unwrap();
    }
    let ours = w.finish().unwrap();
    let theirs = std::fs::read(&le).expect("le");
    assert!(ours == theirs, "little-endian output differs from gguf-py");

    // gguf-py's big-endian file: same metadata, and written back identically.
    let f = GgufFile::open(&be).expect("big-endian file");
    assert_eq!(f.endian(), Endian::Big);
    assert_eq!(f.metadata(), &md);
    let t = f.tensor("c.f16").unwrap();
    assert_eq!(f.tensor_data(t).unwrap(), &[0x3c, 0, 0x40, 0, 0x42, 0]);
    assert!(f.write_to(Vec::new()).unwrap() == std::fs::read(&be).unwrap());
    std::fs::remove_dir_all(&tmp).ok();
}
