//! Hand-written f64 reference forward passes of the tests: the model's
//! tensors as written to a GGUF file, and the operations on them in f64.

#![allow(dead_code)]

use gguf::{GgmlType, GgufWriter, Metadata, StringArray, TensorInfo, Value};

/// name, dims (ggml order), values
pub type Tensors = Vec<(String, Vec<usize>, Vec<f32>)>;

/// Sets the keys of a SentencePiece vocabulary of `n_vocab` tokens:
/// `<unk>`, `<s>`, `</s>`, then `t3`, `t4`, ... of score 0.
pub fn set_spm_vocab(md: &mut Metadata, n_vocab: usize) {
    md.set("tokenizer.ggml.model", "llama");
    let mut toks = vec!["<unk>".to_string(), "<s>".into(), "</s>".into()];
    toks.extend((3..n_vocab).map(|i| format!("t{i}")));
    let refs: Vec<&str> = toks.iter().map(|t| t.as_str()).collect();
    md.set(
        "tokenizer.ggml.tokens",
        Value::from(refs.iter().collect::<StringArray>()),
    );
    md.set("tokenizer.ggml.scores", Value::from(vec![0f32; n_vocab]));
    let mut types = vec![1i32; n_vocab];
    types[0] = 2;
    types[1] = 3;
    types[2] = 3;
    md.set("tokenizer.ggml.token_type", Value::from(types));
}

/// Writes `md` and the tensors, all F32, to a GGUF file at `path`.
pub fn write_f32(path: &std::path::Path, md: &Metadata, tensors: &Tensors) {
    let infos: Vec<TensorInfo> = tensors
        .iter()
        .map(|(n, d, _)| {
            let dims: Vec<u64> = d.iter().map(|&x| x as u64).collect();
            TensorInfo::new(n.clone(), GgmlType::F32, &dims).unwrap()
        })
        .collect();
    let f = std::fs::File::create(path).unwrap();
    let mut w = GgufWriter::new(f, md, &infos).unwrap();
    for (n, _, v) in tensors {
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        w.write_tensor(n, &bytes).unwrap();
    }
    w.finish().unwrap();
}

/// The values of tensor `name`, if the model has it.
pub fn tensor<'a>(t: &'a Tensors, name: &str) -> Option<&'a [f32]> {
    t.iter()
        .find(|(n, _, _)| n == name)
        .map(|(_, _, v)| v.as_slice())
}

/// y[o] = sum_i w[o * n_in + i] * x[i] (+ b[o]).
pub fn matvec(w: &[f32], x: &[f64], b: Option<&[f32]>) -> Vec<f64> {
    let n_in = x.len();
    let n_out = w.len() / n_in;
    (0..n_out)
        .map(|o| {
            let s: f64 = (0..n_in).map(|i| f64::from(w[o * n_in + i]) * x[i]).sum();
            s + b.map_or(0.0, |b| f64::from(b[o]))
        })
        .collect()
}

/// The attention output of one position whose query is `q` (`n_head`
/// heads) over the cached keys `ks` and values `vs` it sees: each query
/// head reads key/value head `h / (n_head / n_head_kv)`, and the softmax of
/// its dot products scaled by 1/sqrt(head width) weighs the values.
pub fn attend(
    q: &[f64],
    ks: &[Vec<f64>],
    vs: &[Vec<f64>],
    n_head: usize,
    n_head_kv: usize,
) -> Vec<f64> {
    let hd = q.len() / n_head;
    let gqa = n_head / n_head_kv;
    let mut att = vec![0f64; q.len()];
    for hh in 0..n_head {
        let kh = hh / gqa;
        let qh = &q[hh * hd..(hh + 1) * hd];
        let sc: Vec<f64> = ks
            .iter()
            .map(|k| {
                qh.iter()
                    .zip(&k[kh * hd..(kh + 1) * hd])
                    .map(|(a, b)| a * b)
                    .sum::<f64>()
                    / (hd as f64).sqrt()
            })
            .collect();
        let m = sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = sc.iter().map(|v| (v - m).exp()).collect();
        let z: f64 = e.iter().sum();
        for (ej, v) in e.iter().zip(vs) {
            for d in 0..hd {
                att[hh * hd + d] += ej / z * v[kh * hd + d];
            }
        }
    }
    att
}

/// RMS norm (eps 1e-6) times the weight `w`.
pub fn rms_norm(x: &[f64], w: &[f32]) -> Vec<f64> {
    let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
    let r = 1.0 / (ms + 1e-6).sqrt();
    x.iter()
        .zip(w)
        .map(|(v, &g)| v * r * f64::from(g))
        .collect()
}

/// Rotates the first `n_rot` values of one head at position `pos`:
/// adjacent pairs (normal), or the halves (`neox`).
pub fn rope(x: &mut [f64], pos: usize, n_rot: usize, neox: bool, base: f64) {
    for i in 0..n_rot / 2 {
        let theta = pos as f64 * base.powf(-2.0 * i as f64 / n_rot as f64);
        let (c, s) = (theta.cos(), theta.sin());
        let (a, b) = if neox {
            (i, i + n_rot / 2)
        } else {
            (2 * i, 2 * i + 1)
        };
        let (x0, x1) = (x[a], x[b]);
        x[a] = x0 * c - x1 * s;
        x[b] = x0 * s + x1 * c;
    }
}
