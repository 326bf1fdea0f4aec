//! Structure-aware GGUF: a header, metadata and a tensor table built from
//! the input by an encoder of our own (so every field can lie: counts,
//! lengths, types, dimensions, offsets, alignment), parsed by the reader.
//! A file the reader accepts keeps the tensors and keys it was given.

#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;

/// Keys the loaders read, so that values land where they are checked.
const KEYS: &[&str] = &[
    "general.architecture",
    "general.alignment",
    "general.name",
    "general.file_type",
    "split.no",
    "split.count",
    "split.tensors.count",
    "llama.context_length",
    "llama.embedding_length",
    "llama.block_count",
    "llama.attention.head_count",
    "tokenizer.ggml.model",
    "tokenizer.ggml.tokens",
    "tokenizer.ggml.scores",
    "tokenizer.chat_template",
];

const NAMES: &[&str] = &[
    "token_embd.weight",
    "output_norm.weight",
    "output.weight",
    "blk.0.attn_q.weight",
    "blk.0.ffn_down.weight",
];

#[derive(Arbitrary, Debug)]
enum Key {
    Known(u8),
    Raw(String),
}

#[derive(Arbitrary, Debug)]
enum Val {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(u8),
    Str(String),
    U64(u64),
    I64(i64),
    F64(f64),
    ArrU32(Vec<u32>),
    ArrF32(Vec<f32>),
    ArrStr(Vec<String>),
    /// An array of arrays `depth` deep.
    Nested(u8),
    /// Any type id with any bytes after it.
    Raw(u32, Vec<u8>),
    /// An array whose count lies.
    LyingArray(u32, u64),
}

#[derive(Arbitrary, Debug)]
enum Name {
    Known(u8),
    Raw(String),
}

#[derive(Arbitrary, Debug)]
struct Tensor {
    name: Name,
    n_dims: u8,
    dims: [u16; 4],
    big_dim: Option<(u8, u64)>,
    ty: u8,
    /// None: the next aligned offset; Some: this one.
    offset: Option<u64>,
}

#[derive(Arbitrary, Debug)]
struct Input {
    version: u8,
    big_endian: bool,
    kvs: Vec<(Key, Val)>,
    tensors: Vec<Tensor>,
    /// Counts written instead of the true ones.
    lying_counts: Option<(u64, u64)>,
    /// Bytes of tensor data written (at most 64 KiB).
    data_len: u16,
}

struct Enc {
    b: Vec<u8>,
    big: bool,
    v1: bool,
}

impl Enc {
    fn u32(&mut self, v: u32) {
        let bytes = if self.big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        };
        self.b.extend_from_slice(&bytes);
    }
    fn u64(&mut self, v: u64) {
        let bytes = if self.big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        };
        self.b.extend_from_slice(&bytes);
    }
    /// A count or length: 32 bits in version 1, else 64.
    fn count(&mut self, v: u64) {
        if self.v1 {
            self.u32(v as u32)
        } else {
            self.u64(v)
        }
    }
    fn str(&mut self, s: &[u8]) {
        self.count(s.len() as u64);
        self.b.extend_from_slice(s);
    }
    fn value(&mut self, v: &Val) {
        let (ty, body): (u32, Vec<u8>) = {
            let mut e = Enc {
                b: Vec::new(),
                big: self.big,
                v1: self.v1,
            };
            let ty = match v {
                Val::U8(x) => {
                    e.b.push(*x);
                    0
                }
                Val::I8(x) => {
                    e.b.push(*x as u8);
                    1
                }
                Val::U16(x) => {
                    e.b.extend(if e.big {
                        x.to_be_bytes()
                    } else {
                        x.to_le_bytes()
                    });
                    2
                }
                Val::I16(x) => {
                    e.b.extend(if e.big {
                        x.to_be_bytes()
                    } else {
                        x.to_le_bytes()
                    });
                    3
                }
                Val::U32(x) => {
                    e.u32(*x);
                    4
                }
                Val::I32(x) => {
                    e.u32(*x as u32);
                    5
                }
                Val::F32(x) => {
                    e.u32(x.to_bits());
                    6
                }
                Val::Bool(x) => {
                    e.b.push(*x);
                    7
                }
                Val::Str(s) => {
                    e.str(s.as_bytes());
                    8
                }
                Val::U64(x) => {
                    e.u64(*x);
                    10
                }
                Val::I64(x) => {
                    e.u64(*x as u64);
                    11
                }
                Val::F64(x) => {
                    e.u64(x.to_bits());
                    12
                }
                Val::ArrU32(a) => {
                    e.u32(4);
                    e.count(a.len() as u64);
                    a.iter().for_each(|x| e.u32(*x));
                    9
                }
                Val::ArrF32(a) => {
                    e.u32(6);
                    e.count(a.len() as u64);
                    a.iter().for_each(|x| e.u32(x.to_bits()));
                    9
                }
                Val::ArrStr(a) => {
                    e.u32(8);
                    e.count(a.len() as u64);
                    a.iter().for_each(|s| e.str(s.as_bytes()));
                    9
                }
                Val::Nested(depth) => {
                    for _ in 0..*depth {
                        e.u32(9);
                        e.count(1);
                    }
                    e.u32(4);
                    e.count(1);
                    e.u32(7);
                    9
                }
                Val::Raw(ty, bytes) => {
                    e.b.extend_from_slice(bytes);
                    return self.raw(*ty, &e.b);
                }
                Val::LyingArray(ty, n) => {
                    e.u32(*ty);
                    e.count(*n);
                    e.b.extend_from_slice(&[0; 16]);
                    9
                }
            };
            (ty, e.b)
        };
        self.raw(ty, &body);
    }
    fn raw(&mut self, ty: u32, body: &[u8]) {
        self.u32(ty);
        self.b.extend_from_slice(body);
    }
}

fn key_name(k: &Key) -> Vec<u8> {
    match k {
        Key::Known(i) => KEYS[*i as usize % KEYS.len()].as_bytes().to_vec(),
        Key::Raw(s) => s.as_bytes().to_vec(),
    }
}

fuzz_target!(|input: Input| {
    let version = match input.version % 8 {
        0 => 1,
        1 => 2,
        7 => u32::from(input.version),
        _ => 3,
    };
    let mut e = Enc {
        b: b"GGUF".to_vec(),
        big: input.big_endian,
        v1: version == 1,
    };
    e.u32(version);
    let (n_tensors, n_kv) = input
        .lying_counts
        .unwrap_or((input.tensors.len() as u64, input.kvs.len() as u64));
    e.count(n_tensors);
    e.count(n_kv);
    // Version 1 stores the counts in 32 bits.
    let (n_tensors, n_kv) = if e.v1 {
        (u64::from(n_tensors as u32), u64::from(n_kv as u32))
    } else {
        (n_tensors, n_kv)
    };
    let mut alignment = 32u64;
    for (k, v) in &input.kvs {
        let name = key_name(k);
        if name == b"general.alignment" {
            if let Val::U32(a) = v {
                alignment = u64::from(*a);
            }
        }
        e.str(&name);
        e.value(v);
    }
    let mut next = 0u64;
    let align = |x: u64| {
        if alignment.is_power_of_two() {
            x.div_ceil(alignment) * alignment
        } else {
            x
        }
    };
    for t in &input.tensors {
        let name = match &t.name {
            Name::Known(i) => NAMES[*i as usize % NAMES.len()].to_string(),
            Name::Raw(s) => s.clone(),
        };
        e.str(name.as_bytes());
        let n_dims = u32::from(t.n_dims % 6);
        e.u32(n_dims);
        let mut dims: Vec<u64> = t.dims.iter().map(|&d| u64::from(d)).collect();
        if let Some((i, v)) = t.big_dim {
            dims[i as usize % 4] = v;
        }
        for i in 0..n_dims as usize {
            e.count(dims.get(i).copied().unwrap_or(1));
        }
        let ty = u32::from(t.ty % 42);
        e.u32(ty);
        let used = &dims[..(n_dims as usize).min(4)];
        let size = gguf::GgmlType::from_u32(ty)
            .and_then(|ty| ty.tensor_size(used))
            .unwrap_or(0);
        let offset = t.offset.unwrap_or_else(|| {
            let o = align(next);
            next = o.saturating_add(size);
            o
        });
        e.u64(offset);
    }
    let header = e.b.len() as u64;
    e.b.resize(align(header) as usize, 0);
    let data_len = usize::from(input.data_len);
    e.b.extend((0..data_len).map(|i| i as u8));

    let Ok(f) = gguf::GgufFile::from_bytes(&e.b) else {
        return;
    };
    assert_eq!(f.tensors().len() as u64, n_tensors, "tensor count");
    assert_eq!(f.metadata().len() as u64, n_kv, "key count");
    for t in f.tensors() {
        let d = f
            .tensor_data_in(&e.b, t)
            .unwrap_or_else(|err| panic!("accepted tensor '{}' has no data: {err}", t.name));
        assert_eq!(d.len() as u64, t.size, "tensor '{}'", t.name);
    }
});
