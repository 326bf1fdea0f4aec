//! Malformed input: truncation at every byte, huge counts and lengths, each
//! validation rule broken once, and seeded random mutations. Every case must
//! give an error (or a valid file), never a panic.

mod common;

use std::io::Cursor;

use gguf::{
    Array, DataLayout, Error, GgmlType, GgufFile, GgufWriter, ReadOptions, TensorInfo, Value,
};

/// An independent encoder that remembers where each numeric field lies, so
/// tests can break fields by name.
#[derive(Default, Clone)]
struct Emit {
    b: Vec<u8>,
    /// Name, offset and width of each numeric field.
    fields: Vec<(String, usize, usize)>,
}

struct RawTensor {
    name: Vec<u8>,
    dims: Vec<u64>,
    ty: u32,
}

impl RawTensor {
    fn new(name: &str, ty: GgmlType, dims: &[u64]) -> RawTensor {
        RawTensor {
            name: name.as_bytes().to_vec(),
            dims: dims.to_vec(),
            ty: ty.id(),
        }
    }

    fn size(&self) -> u64 {
        GgmlType::from_u32(self.ty)
            .and_then(|t| t.tensor_size(&self.dims))
            .unwrap_or(0)
    }
}

impl Emit {
    fn field(&mut self, name: String, bytes: &[u8]) {
        self.fields.push((name, self.b.len(), bytes.len()));
        self.b.extend_from_slice(bytes);
    }
    /// String contents: located (for `at`) but not numeric.
    fn bytes(&mut self, name: String, bytes: &[u8]) {
        self.fields.push((name, self.b.len(), 0));
        self.b.extend_from_slice(bytes);
    }
    fn u32(&mut self, name: String, v: u32) {
        self.field(name, &v.to_le_bytes());
    }
    fn u64(&mut self, name: String, v: u64) {
        self.field(name, &v.to_le_bytes());
    }
    fn str(&mut self, name: String, s: &[u8]) {
        self.u64(format!("{name}.len"), s.len() as u64);
        self.bytes(name, s);
    }
    fn value(&mut self, name: &str, v: &Value) {
        match v {
            Value::U8(x) => self.b.extend(x.to_le_bytes()),
            Value::I8(x) => self.b.extend(x.to_le_bytes()),
            Value::U16(x) => self.b.extend(x.to_le_bytes()),
            Value::I16(x) => self.b.extend(x.to_le_bytes()),
            Value::U32(x) => self.b.extend(x.to_le_bytes()),
            Value::I32(x) => self.b.extend(x.to_le_bytes()),
            Value::F32(x) => self.b.extend(x.to_le_bytes()),
            Value::Bool(x) => self.b.push(u8::from(*x)),
            Value::String(s) => self.str(format!("{name}.str"), s),
            Value::Array(a) => self.array(name, a),
            Value::U64(x) => self.b.extend(x.to_le_bytes()),
            Value::I64(x) => self.b.extend(x.to_le_bytes()),
            Value::F64(x) => self.b.extend(x.to_le_bytes()),
        }
    }
    fn array(&mut self, name: &str, a: &Array) {
        self.u32(format!("{name}.arr.type"), a.element_type().id());
        self.u64(format!("{name}.arr.len"), a.len() as u64);
        match a {
            Array::String(v) => {
                for (j, s) in v.iter().enumerate() {
                    self.str(format!("{name}[{j}]"), s);
                }
            }
            Array::Array(v) => {
                for (j, inner) in v.iter().enumerate() {
                    self.array(&format!("{name}[{j}]"), inner);
                }
            }
            Array::U8(v) => self.b.extend(v),
            Array::I8(v) => v.iter().for_each(|x| self.b.extend(x.to_le_bytes())),
            Array::U16(v) => v.iter().for_each(|x| self.b.extend(x.to_le_bytes())),
            Array::I16(v) => v.iter().for_each(|x| self.b.extend(x.to_le_bytes())),
            Array::U32(v) => v.iter().for_each(|x| self.b.extend(x.to_le_bytes())),
            Array::I32(v) => v.iter().for_each(|x| self.b.extend(x.to_le_bytes())),
            Array::F32(v) => v.iter().for_each(|x| self.b.extend(x.to_le_bytes())),
            Array::Bool(v) => v.iter().for_each(|&x| self.b.push(u8::from(x))),
            Array::U64(v) => v.iter().for_each(|x| self.b.extend(x.to_le_bytes())),
            Array::I64(v) => v.iter().for_each(|x| self.b.extend(x.to_le_bytes())),
            Array::F64(v) => v.iter().for_each(|x| self.b.extend(x.to_le_bytes())),
        }
    }

    /// A whole file with the standard layout and patterned tensor data.
    fn file(kvs: &[(&[u8], Value)], tensors: &[RawTensor]) -> Emit {
        let mut e = Emit::default();
        e.bytes("magic".into(), b"GGUF");
        e.u32("version".into(), 3);
        e.u64("n_tensors".into(), tensors.len() as u64);
        e.u64("n_kv".into(), kvs.len() as u64);
        let mut alignment = 32;
        for (i, (k, v)) in kvs.iter().enumerate() {
            e.str(format!("kv{i}.key"), k);
            e.u32(format!("kv{i}.type"), v.value_type().id());
            e.value(&format!("kv{i}"), v);
            if *k == b"general.alignment" {
                if let Value::U32(a) = v {
                    alignment = u64::from(*a).max(1);
                }
            }
        }
        let pad = |x: u64| x.div_ceil(alignment) * alignment;
        let mut offset = 0;
        for (i, t) in tensors.iter().enumerate() {
            e.str(format!("t{i}.name"), &t.name);
            e.u32(format!("t{i}.n_dims"), t.dims.len() as u32);
            for (j, d) in t.dims.iter().enumerate() {
                e.u64(format!("t{i}.ne{j}"), *d);
            }
            e.u32(format!("t{i}.type"), t.ty);
            e.u64(format!("t{i}.offset"), offset);
            offset += pad(t.size());
        }
        if !tensors.is_empty() {
            e.b.resize(pad(e.b.len() as u64) as usize, 0);
            for t in tensors {
                let start = e.b.len();
                e.b.extend((0..t.size()).map(|i| i as u8 ^ 0x5a));
                e.b.resize(start + pad(t.size()) as usize, 0);
            }
        }
        e
    }

    fn at(&self, name: &str) -> (usize, usize) {
        self.fields
            .iter()
            .find(|f| f.0 == name)
            .map(|f| (f.1, f.2))
            .unwrap_or_else(|| panic!("no field {name}"))
    }

    /// The file with field `name` set to `v` (truncated to the field's width).
    fn patched(&self, name: &str, v: u64) -> Vec<u8> {
        let (at, size) = self.at(name);
        let mut b = self.b.clone();
        b[at..at + size].copy_from_slice(&v.to_le_bytes()[..size]);
        b
    }
}

fn sample_emit() -> Emit {
    let md = common::sample_metadata();
    let kvs: Vec<(&[u8], Value)> = md.iter().map(|(k, v)| (k.as_bytes(), v.clone())).collect();
    let tensors: Vec<RawTensor> = common::sample_tensors()
        .iter()
        .map(|t| RawTensor {
            name: t.name.as_bytes().to_vec(),
            dims: t.dims.clone(),
            ty: t.ty.id(),
        })
        .collect();
    let mut e = Emit::file(&kvs, &tensors);
    // Same data as the writer sample.
    let f = GgufFile::from_bytes(&e.b).expect("emitted sample parses");
    for t in common::sample_tensors() {
        let got = f.tensor(&t.name).expect("tensor").clone();
        let start = (f.data_offset() + got.offset) as usize;
        e.b[start..start + t.size as usize].copy_from_slice(&common::tensor_bytes(&t));
    }
    e
}

fn parse(bytes: &[u8]) -> gguf::Result<GgufFile> {
    let a = GgufFile::from_bytes(bytes);
    let b = GgufFile::read_from(Cursor::new(bytes));
    assert_eq!(
        a.is_ok(),
        b.is_ok(),
        "slice and stream readers disagree: {a:?} / {b:?}"
    );
    if let (Err(x), Err(y)) = (&a, &b) {
        assert_eq!(x.to_string(), y.to_string());
    }
    a
}

fn err(bytes: &[u8]) -> Error {
    match parse(bytes) {
        Ok(_) => panic!("accepted a broken file"),
        Err(e) => e,
    }
}

fn err_text(bytes: &[u8]) -> String {
    err(bytes).to_string()
}

#[test]
fn independent_encoder_matches_writer() {
    assert!(sample_emit().b == common::sample_file());
}

#[test]
fn truncation_at_every_byte_fails() {
    let bytes = common::sample_file();
    let f = GgufFile::from_bytes(&bytes).expect("sample");
    let last = f.tensors().last().expect("tensors");
    let needed = (f.data_offset() + last.offset + last.size) as usize;
    for n in 0..bytes.len() {
        let r = parse(&bytes[..n]);
        if n < needed {
            let e = r
                .err()
                .unwrap_or_else(|| panic!("prefix of {n} bytes accepted"));
            if n >= f.data_offset() as usize {
                assert!(matches!(e, Error::DataOutOfBounds { .. }), "{n}: {e}");
            }
        } else {
            // Only the last tensor's padding is missing, which is allowed.
            assert!(r.is_ok(), "{n}: {r:?}");
        }
    }
}

#[test]
fn huge_counts_and_lengths_fail() {
    let e = sample_emit();
    let len = e.b.len() as u64;
    let huge = [
        len + 1,
        1 << 31,
        u32::MAX as u64,
        1 << 40,
        1 << 62,
        1 << 63,
        u64::MAX / 2,
        u64::MAX - 1,
        u64::MAX,
    ];
    let mut checked = 0;
    for (name, _, size) in &e.fields {
        if name == "magic" || name == "version" || !(*size == 4 || *size == 8) {
            continue;
        }
        for &v in &huge {
            let b = e.patched(name, v);
            // A u32 field only takes the low bits; those may be harmless.
            if *size == 4 && (v as u32 as u64) < len + 1 {
                let _ = parse(&b);
                continue;
            }
            let msg = match parse(&b) {
                Ok(_) => panic!("{name} = {v} accepted"),
                Err(e) => e.to_string(),
            };
            assert!(!msg.is_empty());
            checked += 1;
        }
    }
    assert!(checked > 300, "{checked}");
}

#[test]
fn header_rules() {
    let e = sample_emit();
    let mut b = e.b.clone();
    b[3] = b'X';
    assert_eq!(
        err_text(&b),
        "invalid magic 'GGUX' at offset 0, expected 'GGUF'"
    );
    for v in [0u64, 4, 0x0001_0000, u32::MAX as u64] {
        assert!(matches!(
            err(&e.patched("version", v)),
            Error::UnsupportedVersion { .. }
        ));
    }
    let m = err_text(&e.patched("n_tensors", 1 << 40));
    assert!(
        m.contains("header tensor count") && m.contains("offset 8"),
        "{m}"
    );
    let m = err_text(&e.patched("n_kv", 1 << 40));
    assert!(
        m.contains("header key/value count") && m.contains("offset 16"),
        "{m}"
    );
    assert!(matches!(err(&b"GG"[..]), Error::Truncated { .. }));
    assert!(matches!(err(&[]), Error::Truncated { .. }));
}

fn kv_file(kvs: &[(&[u8], Value)]) -> Emit {
    Emit::file(kvs, &[RawTensor::new("w", GgmlType::F32, &[8])])
}

#[test]
fn metadata_rules() {
    let ok = |k: &'static [u8], v: Value| (k, v);
    // Empty key.
    let m = err_text(&kv_file(&[ok(b"a", 1u8.into()), ok(b"", 1u8.into())]).b);
    assert_eq!(m, "invalid kv[1] key at offset 38: empty key");
    // Duplicate key, reported at the second occurrence.
    let e = kv_file(&[
        ok(b"a", 1u8.into()),
        ok(b"b", 1u8.into()),
        ok(b"a", 2u8.into()),
    ]);
    let (at, _) = e.at("kv2.key.len");
    match err(&e.b) {
        Error::DuplicateKey { key, offset } => assert_eq!((key.as_str(), offset), ("a", at as u64)),
        other => panic!("{other}"),
    }
    // Key not UTF-8.
    assert!(err_text(&kv_file(&[ok(b"\xff", 1u8.into())]).b).contains("not valid UTF-8"));
    // Unknown value type and element type.
    let e = kv_file(&[ok(b"a", 1u32.into())]);
    let m = err_text(&e.patched("kv0.type", 13));
    assert!(
        m.contains("kv[0] 'a' value type") && m.contains("unknown value type 13"),
        "{m}"
    );
    let e = kv_file(&[ok(b"a", vec![1u32].into())]);
    let m = err_text(&e.patched("kv0.arr.type", 99));
    assert!(
        m.contains("array element type") && m.contains("unknown value type 99"),
        "{m}"
    );
    // Lengths beyond the file.
    let e = kv_file(&[ok(b"a", "text".into())]);
    assert!(matches!(
        err(&e.patched("kv0.str.len", 1 << 20)),
        Error::Truncated { .. }
    ));
    let e = kv_file(&[ok(b"a", vec![1u32, 2].into())]);
    let m = err_text(&e.patched("kv0.arr.len", 1 << 30));
    assert!(
        m.contains("kv[0] 'a' array length") && m.contains("cannot fit"),
        "{m}"
    );
    // Nesting.
    let mut deep = Array::U8(vec![1]);
    for _ in 0..gguf::MAX_ARRAY_DEPTH {
        deep = Array::Array(vec![deep]);
    }
    assert!(
        err_text(&kv_file(&[ok(b"a", Value::Array(deep.clone()))]).b).contains("nested deeper")
    );
    if let Array::Array(mut v) = deep {
        let shallower = v.remove(0);
        assert!(parse(&kv_file(&[ok(b"a", Value::Array(shallower))]).b).is_ok());
    }
    // Alignment: a non-zero power of two stored as u32.
    for bad in [
        Value::U32(0),
        Value::U32(3),
        Value::U32(48),
        Value::U64(32),
        Value::I32(32),
    ] {
        let m = err_text(&kv_file(&[ok(b"general.alignment", bad)]).b);
        assert!(m.contains("kv[0] 'general.alignment'"), "{m}");
    }
    let f = parse(&kv_file(&[ok(b"general.alignment", Value::U32(64))]).b).expect("aligned to 64");
    assert_eq!((f.alignment(), f.data_offset() % 64), (64, 0));
}

fn t(name: &str, ty: GgmlType, dims: &[u64]) -> RawTensor {
    RawTensor::new(name, ty, dims)
}

#[test]
fn tensor_rules() {
    let two = || vec![t("a", GgmlType::F32, &[8]), t("b", GgmlType::F32, &[8])];
    let e = Emit::file(&[], &two());
    assert!(parse(&e.b).is_ok());

    // Name length: 63 is fine, 64 is not.
    assert!(parse(&Emit::file(&[], &[t(&"n".repeat(63), GgmlType::F32, &[1])]).b).is_ok());
    let m = err_text(&Emit::file(&[], &[t(&"n".repeat(64), GgmlType::F32, &[1])]).b);
    assert!(
        m.contains("tensor_info[0] name length") && m.contains("64 bytes"),
        "{m}"
    );
    let mut bad = t("x", GgmlType::F32, &[1]);
    bad.name = vec![0xc3];
    assert!(err_text(&Emit::file(&[], &[bad]).b).contains("not valid UTF-8"));
    // Duplicate names.
    let e = Emit::file(
        &[],
        &[t("a", GgmlType::F32, &[8]), t("a", GgmlType::F32, &[8])],
    );
    match err(&e.b) {
        Error::DuplicateTensor { name, offset } => {
            assert_eq!((name.as_str(), offset), ("a", e.at("t1.name.len").0 as u64))
        }
        other => panic!("{other}"),
    }
    // Dimensions.
    let m = err_text(&e_patch(&two(), "t0.n_dims", 5));
    assert!(
        m.contains("'a' n_dims") && m.contains("5 dimensions"),
        "{m}"
    );
    let m = err_text(&e_patch(&two(), "t0.ne0", 1 << 63));
    assert!(
        m.contains("'a' dimensions") && m.contains("dimension 0"),
        "{m}"
    );
    let m = err_text(&Emit::file(&[], &[t("a", GgmlType::F32, &[1 << 32, 1 << 32])]).b);
    assert!(m.contains("overflows"), "{m}");
    // Types.
    let m = err_text(&e_patch(&two(), "t1.type", 40));
    assert!(m.contains("'b' type") && m.contains("out of range"), "{m}");
    let m = err_text(&e_patch(&two(), "t1.type", 31));
    assert!(
        m.contains("type 31 (q4_0_4_4)") && m.contains("removed"),
        "{m}"
    );
    assert!(matches!(
        err(&e_patch(&two(), "t0.type", 4)),
        Error::RemovedType { id: 4, .. }
    ));
    let m = err_text(&Emit::file(&[], &[t("q", GgmlType::Q8_0, &[33])]).b);
    assert!(
        m.contains("'q' ne[0]") && m.contains("block size 32"),
        "{m}"
    );
    // Offsets: llama.cpp's running offset.
    let e = Emit::file(&[], &two());
    let m = err_text(&e.patched("t1.offset", 64));
    assert!(m.contains("'b' offset") && m.contains("expected 32"), "{m}");
    assert!(err_text(&e.patched("t0.offset", 32)).contains("expected 0"));
}

fn e_patch(ts: &[RawTensor], field: &str, v: u64) -> Vec<u8> {
    Emit::file(&[], ts).patched(field, v)
}

#[test]
fn relaxed_layout_accepts_any_order_but_not_overlap_or_misalignment() {
    let relaxed = ReadOptions {
        layout: DataLayout::Relaxed,
    };
    let ts = [t("a", GgmlType::F32, &[8]), t("b", GgmlType::F32, &[8])];
    let e = Emit::file(&[], &ts);
    let mut swapped = e.patched("t0.offset", 32);
    let (at, _) = e.at("t1.offset");
    swapped[at..at + 8].copy_from_slice(&0u64.to_le_bytes());
    assert!(GgufFile::from_bytes(&swapped).is_err());
    let f = GgufFile::from_bytes_with(&swapped, &relaxed).expect("relaxed");
    assert_eq!(f.tensor("a").unwrap().offset, 32);
    let a = f.tensor_data_in(&swapped, f.tensor("a").unwrap()).unwrap();
    assert_eq!(a, &swapped[(f.data_offset() + 32) as usize..][..32]);

    let misaligned = e.patched("t1.offset", 16);
    let m = GgufFile::from_bytes_with(&misaligned, &relaxed)
        .unwrap_err()
        .to_string();
    assert!(m.contains("not a multiple of the alignment 32"), "{m}");

    let kvs: [(&[u8], Value); 1] = [(b"general.alignment", Value::U32(16))];
    let e = Emit::file(&kvs, &ts);
    let overlap = e.patched("t1.offset", 16);
    let m = GgufFile::from_bytes_with(&overlap, &relaxed)
        .unwrap_err()
        .to_string();
    assert!(m.contains("overlaps tensor 'a'"), "{m}");
    // An empty tensor inside another does not hide a later overlap.
    let ts3 = [
        t("a", GgmlType::F32, &[16]),
        t("z", GgmlType::F32, &[0]),
        t("b", GgmlType::F32, &[8]),
    ];
    let e = Emit::file(&kvs, &ts3);
    let b = e.patched("t1.offset", 16);
    let (at, _) = e.at("t2.offset");
    let mut b2 = b.clone();
    b2[at..at + 8].copy_from_slice(&32u64.to_le_bytes());
    assert!(GgufFile::from_bytes_with(&b2, &relaxed)
        .unwrap_err()
        .to_string()
        .contains("overlaps"));
}

#[test]
fn data_outside_the_file_names_the_tensor() {
    let e = Emit::file(
        &[],
        &[
            t("a", GgmlType::F32, &[8]),
            t("blk.0.w", GgmlType::F32, &[8]),
        ],
    );
    let b = &e.b[..e.b.len() - 1];
    assert_eq!(
        err_text(b),
        "tensor 'blk.0.w' data is not within the file bounds: the file may be truncated"
    );
    let relaxed = ReadOptions {
        layout: DataLayout::Relaxed,
    };
    let far = e.patched("t1.offset", 1 << 20);
    let m = GgufFile::from_bytes_with(&far, &relaxed)
        .unwrap_err()
        .to_string();
    assert_eq!(
        m,
        "tensor 'blk.0.w' data is not within the file bounds: the file may be truncated"
    );
    // And through a file on disk with a foreign tensor info.
    let f = GgufFile::from_bytes(&e.b).unwrap();
    let mut foreign = f.tensors()[1].clone();
    foreign.offset = u64::MAX - 3;
    assert!(matches!(
        f.tensor_data_in(&e.b, &foreign),
        Err(Error::DataOutOfBounds { .. })
    ));
    let mut buf = vec![0u8; foreign.size as usize];
    let r = f.read_tensor_data(&mut Cursor::new(&e.b), &foreign, &mut buf);
    assert!(matches!(r, Err(Error::DataOutOfBounds { .. })));
}

/// Writes a parsed file (from memory) back out.
fn rewrite(f: &GgufFile, bytes: &[u8]) -> Vec<u8> {
    let mut w = GgufWriter::with_options(Vec::new(), f.metadata(), f.tensors(), &f.write_options())
        .expect("a file that parses can be written");
    for t in f.tensors() {
        let d = f
            .tensor_data_in(bytes, t)
            .expect("validated data is in bounds");
        assert_eq!(d.len() as u64, t.size);
        w.write_tensor(&t.name, d).expect("write");
    }
    w.finish().expect("finish")
}

/// Exercises everything a caller may do with a parsed file; what it writes
/// parses again and writes identically (NaNs make metadata comparison
/// unreliable, bytes are not).
fn use_file(f: &GgufFile, bytes: &[u8]) {
    for (k, v) in f.metadata().iter() {
        let _ = (
            f.get_uint(k),
            f.get_str(k),
            f.get_str_array(k),
            f.get_array::<f32>(k),
        );
        let _ = v.type_description();
    }
    let out = rewrite(f, bytes);
    let g = GgufFile::from_bytes(&out).expect("written file parses");
    assert!(rewrite(&g, &out) == out);
}

#[test]
fn seeded_random_mutations_never_panic() {
    let e = sample_emit();
    let base = e.b.clone();
    let interesting = [
        0u64,
        1,
        2,
        3,
        4,
        8,
        9,
        12,
        13,
        31,
        32,
        33,
        63,
        64,
        255,
        256,
        0x7fff_ffff,
        0xffff_ffff,
        1 << 32,
        1 << 63,
        u64::MAX,
    ];
    let mut rng = common::Rng(0x6767_7566);
    let (mut ok, mut failed) = (0, 0);
    for iter in 0..20_000 {
        let mut b = base.clone();
        for _ in 0..1 + rng.below(3) {
            if b.is_empty() {
                break;
            }
            match rng.below(7) {
                0 => {
                    let i = rng.below(b.len());
                    b[i] = rng.next_u64() as u8;
                }
                1 => {
                    let i = rng.below(b.len());
                    b[i] ^= 1 << rng.below(8);
                }
                2 => {
                    let (_, at, size) = &e.fields[rng.below(e.fields.len())];
                    let v = interesting[rng.below(interesting.len())];
                    if *size > 0 && at + size <= b.len() {
                        b[*at..at + size].copy_from_slice(&v.to_le_bytes()[..*size]);
                    }
                }
                3 => b.truncate(rng.below(b.len())),
                4 => {
                    let i = rng.below(b.len());
                    let n = 1 + rng.below(16);
                    b.splice(i..i, (0..n).map(|_| rng.next_u64() as u8));
                }
                5 => {
                    let i = rng.below(b.len());
                    let n = (1 + rng.below(16)).min(b.len() - i);
                    b.drain(i..i + n);
                }
                _ => {
                    let i = rng.below(b.len());
                    let n = (1 + rng.below(64)).min(b.len() - i);
                    let chunk: Vec<u8> = b[i..i + n].to_vec();
                    let j = rng.below(b.len());
                    b.splice(j..j, chunk);
                }
            }
        }
        let r = if iter % 4 == 0 {
            parse(&b)
        } else {
            GgufFile::from_bytes(&b)
        };
        match r {
            Ok(f) => {
                use_file(&f, &b);
                ok += 1;
            }
            Err(e) => {
                assert!(!e.to_string().is_empty());
                failed += 1;
            }
        }
    }
    assert!(ok > 50 && failed > 1000, "ok {ok}, failed {failed}");
}

#[test]
fn writer_rejects_what_the_reader_rejects() {
    let md = gguf::Metadata::new();
    let mut t = TensorInfo::new("w", GgmlType::F32, &[8]).unwrap();
    t.dims = vec![1, 1, 1, 1, 1];
    assert!(GgufWriter::new(Vec::new(), &md, &[t]).is_err());
    let mut t = TensorInfo::new("w", GgmlType::F32, &[8]).unwrap();
    t.name = "n".repeat(64);
    assert!(GgufWriter::new(Vec::new(), &md, &[t]).is_err());
}
