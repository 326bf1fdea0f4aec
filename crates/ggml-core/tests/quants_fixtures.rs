//! Reference quantizers and dequantizers against llama.cpp's own output:
//! the tensors of the tiny-* models (quantized by ggml from tiny-f32.gguf) and
//! the dequantized values in `expected/dequant/`.

use std::collections::HashMap;

use ggml_core::quants::{dequantize_row, quantize_row};
use ggml_core::Type;
use test_support::fixtures;

/// One tensor of a GGUF file: type, dimensions (ne order) and data.
struct Tensor {
    ty: Type,
    dims: Vec<usize>,
    data: Vec<u8>,
}

impl Tensor {
    fn n_elements(&self) -> usize {
        self.dims.iter().product()
    }
}

/// The tensors of a fixture model, read with the `gguf` crate.
struct Gguf {
    tensors: HashMap<String, Tensor>,
}

impl Gguf {
    fn open(path: &std::path::Path) -> Gguf {
        let file = gguf::GgufFile::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let tensors = file
            .tensors()
            .iter()
            .map(|info| {
                let data = file.tensor_data(info).unwrap().to_vec();
                let dims = info.dims.iter().map(|&d| d as usize).collect();
                (
                    info.name.clone(),
                    Tensor {
                        ty: info.ty,
                        dims,
                        data,
                    },
                )
            })
            .collect();
        Gguf { tensors }
    }

    fn tensor(&self, name: &str) -> &Tensor {
        self.tensors
            .get(name)
            .unwrap_or_else(|| panic!("no tensor {name}"))
    }
}

fn read_f32(path: &std::path::Path) -> Vec<f32> {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

const TENSOR: &str = "blk.0.attn_q.weight";

/// (model, type of its blk.0.attn_q.weight)
const DEQUANT_MODELS: &[(&str, Type)] = &[
    ("tiny-f32", Type::F32),
    ("tiny-f16", Type::F16),
    ("tiny-bf16", Type::BF16),
    ("tiny-q4_0", Type::Q4_0),
    ("tiny-q4_1", Type::Q4_1),
    ("tiny-q5_0", Type::Q5_0),
    ("tiny-q5_1", Type::Q5_1),
    ("tiny-q8_0", Type::Q8_0),
    ("tiny-q2_k", Type::Q2_K),
    ("tiny-q3_k_m", Type::Q3_K),
    ("tiny-q4_k_m", Type::Q4_K),
    ("tiny-q5_k_m", Type::Q5_K),
    ("tiny-q6_k", Type::Q6_K),
    ("tiny-iq4_nl", Type::IQ4_NL),
    ("stories260K-q4_k_m", Type::Q5_0),
];

#[test]
fn dequantize_matches_llama_cpp_bit_for_bit() {
    let Some(dir) = fixtures() else { return };
    for &(model, ty) in DEQUANT_MODELS {
        let file = Gguf::open(&dir.join(format!("models/{model}.gguf")));
        let t = file.tensor(TENSOR);
        assert_eq!(t.ty, ty, "{model}");
        let expected = read_f32(&dir.join(format!("expected/dequant/{model}.{TENSOR}.f32")));
        assert_eq!(expected.len(), t.n_elements(), "{model}");
        let mut got = vec![0f32; t.n_elements()];
        dequantize_row(t.ty, &t.data, &mut got).unwrap();
        let mismatches = got
            .iter()
            .zip(&expected)
            .filter(|(a, b)| a.to_bits() != b.to_bits())
            .count();
        assert_eq!(
            mismatches, 0,
            "{model}: {mismatches} values differ from llama.cpp"
        );
        // Row by row gives the same values as the whole tensor at once.
        let ne0 = t.dims[0];
        let row_bytes = t.data.len() / (t.n_elements() / ne0);
        let mut row = vec![0f32; ne0];
        dequantize_row(t.ty, &t.data[row_bytes..2 * row_bytes], &mut row).unwrap();
        assert_eq!(row, got[ne0..2 * ne0], "{model}");
    }
}

/// (model, type) of the tiny models whose tensors ggml's quantizer made
/// from tiny-f32: the dequantized ones but tiny-f32 itself and stories260K.
fn quant_models() -> impl Iterator<Item = &'static (&'static str, Type)> {
    DEQUANT_MODELS
        .iter()
        .filter(|(m, _)| m.starts_with("tiny-") && *m != "tiny-f32")
}

fn rms_error(ty: Type, q: &[u8], x: &[f32]) -> f64 {
    let mut y = vec![0f32; x.len()];
    dequantize_row(ty, q, &mut y).unwrap();
    let se: f64 = x
        .iter()
        .zip(&y)
        .map(|(a, b)| (f64::from(*a) - f64::from(*b)).powi(2))
        .sum();
    (se / x.len() as f64).sqrt()
}

/// Quantizes `names` of tiny-f32 to every type and compares with the files.
/// Returns the types whose bytes differ, with our and llama.cpp's RMS error.
fn compare_quantizers(dir: &std::path::Path, names: &[&str]) -> Vec<(String, f64, f64)> {
    let f32_file = Gguf::open(&dir.join("models/tiny-f32.gguf"));
    let mut differ = Vec::new();
    for &(model, ty) in quant_models() {
        let file = Gguf::open(&dir.join(format!("models/{model}.gguf")));
        for &name in names {
            let src = f32_file.tensor(name);
            assert_eq!(src.ty, Type::F32);
            let x: Vec<f32> = src
                .data
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect();
            let theirs = file.tensor(name);
            assert_eq!(theirs.ty, ty, "{model} {name}");
            let mut ours = vec![0u8; theirs.data.len()];
            quantize_row(ty, &x, &mut ours).unwrap();
            let blocks_differ = ours
                .chunks_exact(ty.type_size())
                .zip(theirs.data.chunks_exact(ty.type_size()))
                .filter(|(a, b)| a != b)
                .count();
            if blocks_differ == 0 {
                continue;
            }
            let (e_ours, e_theirs) = (rms_error(ty, &ours, &x), rms_error(ty, &theirs.data, &x));
            println!(
                "{model} {name}: {blocks_differ} blocks differ; rms {e_ours:e} vs {e_theirs:e}"
            );
            differ.push((format!("{model} {name}"), e_ours, e_theirs));
        }
    }
    differ
}

#[test]
fn quantizers_reproduce_llama_cpp_bytes() {
    let Some(dir) = fixtures() else { return };
    let differ = compare_quantizers(&dir, &[TENSOR]);
    for (what, ours, theirs) in &differ {
        assert!(
            ours <= theirs,
            "{what}: our rms error {ours:e} > llama.cpp's {theirs:e}"
        );
    }
    assert!(differ.is_empty(), "not bit-exact: {differ:?}");
}

/// Every 2-D tensor of every tiny model.
#[test]
fn quantizers_reproduce_every_tensor() {
    let Some(dir) = fixtures() else { return };
    let f32_file = Gguf::open(&dir.join("models/tiny-f32.gguf"));
    let mut names: Vec<&str> = f32_file
        .tensors
        .iter()
        .filter(|(_, t)| t.dims.len() == 2)
        .map(|(n, _)| n.as_str())
        .collect();
    names.sort();
    let differ = compare_quantizers(&dir, &names);
    assert!(differ.is_empty(), "not bit-exact: {differ:?}");
}
