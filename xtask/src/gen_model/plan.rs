//! The tensor list of a model: names, shapes, storage types and the
//! distribution each tensor's values are drawn from.

use gguf::GgmlType;

use super::mixture::assign_types;
use super::shape::Shape;
use super::types::OutType;
use crate::error::Result;

/// The distribution of a tensor's values: N(mean, std²).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Init {
    /// Mean.
    pub mean: f32,
    /// Standard deviation.
    pub std: f32,
}

/// Norm weights: 1 + N(0, 0.1²).
pub(super) const NORM: Init = Init {
    mean: 1.0,
    std: 0.1,
};
/// Biases: N(0, 0.1²).
const BIAS: Init = Init {
    mean: 0.0,
    std: 0.1,
};
/// token_embd of an untied model: its scale only sets the residual stream's
/// size relative to the blocks' outputs (the first norm removes it).
const EMBD_STD: f32 = 4.0;
/// Target standard deviation of the logits for an input of unit RMS: large
/// enough that the top token stands clear of the rest.
pub(super) const LOGIT_STD: f32 = 8.0;

/// One planned tensor.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorPlan {
    /// GGUF name.
    pub name: String,
    /// Dimensions in ggml order (`dims[0]` is the row length).
    pub dims: Vec<u64>,
    /// Storage type.
    pub ty: GgmlType,
    /// Value distribution.
    pub init: Init,
    /// The type the file type's mixture asked for, when it did not fit the
    /// rows and `ty` is a fall-back.
    pub wanted: Option<GgmlType>,
}

impl TensorPlan {
    pub(super) fn vector(name: String, n: u32, init: Init) -> TensorPlan {
        TensorPlan {
            name,
            dims: vec![u64::from(n)],
            ty: GgmlType::F32,
            init,
            wanted: None,
        }
    }

    /// A weight of `ne1` rows of `ne0` values, planned as F32 until
    /// [`assign_types`] gives it its file type's type.
    pub(super) fn matrix(name: String, ne0: u32, ne1: u32, std: f32) -> TensorPlan {
        TensorPlan {
            name,
            dims: vec![u64::from(ne0), u64::from(ne1)],
            ty: GgmlType::F32,
            init: Init { mean: 0.0, std },
            wanted: None,
        }
    }

    /// Why the tensor is stored in a fall-back type, if it is.
    pub fn fallback_reason(&self) -> Option<String> {
        self.wanted.map(|w| {
            format!(
                "rows of {} are not a multiple of the {} block size {}: fallback {}",
                self.dims[0],
                w,
                w.block_size(),
                self.ty
            )
        })
    }

    /// Number of rows (product of all dimensions but the first).
    pub fn n_rows(&self) -> u64 {
        self.dims.iter().skip(1).product()
    }
}

/// The tensors of a model, in the order llama.cpp's converter writes them.
///
/// Each weight's type is the one llama-quantize gives it for the file type
/// (see [`assign_types`]: its mixture, all the base type for float and
/// pure files, and its fall-backs); norms and biases are F32.
///
/// Weight scales follow the tiny fixture models (n_embd 256): projections
/// reading the residual stream have std 1/sqrt(n_embd) (1/16 there), so
/// their outputs have unit scale at any width; ffn_down has 1/sqrt(n_ff);
/// `output` has 8/sqrt(n_embd) (0.5 there), giving logits of std ~8. A tied
/// model's token_embd doubles as the output projection and takes the output
/// scale.
pub fn plan(shape: &Shape, ty: OutType) -> Result<Vec<TensorPlan>> {
    let (e, kv, ff, v) = (shape.n_embd, shape.n_embd_kv(), shape.n_ff, shape.n_vocab);
    let proj = 1.0 / (e as f32).sqrt();
    let down = 1.0 / (ff as f32).sqrt();
    let out = LOGIT_STD / (e as f32).sqrt();
    let embd = if shape.tied_output { out } else { EMBD_STD };
    let matrix = TensorPlan::matrix;
    let mut t = vec![matrix("token_embd.weight".into(), e, v, embd)];
    // The architecture's own block, or llama's (written here).
    let block = super::archs::generator(shape.arch).and_then(|g| g.block);
    if let Some(block) = block {
        super::archs::blocks(block, shape, &mut t);
    }
    for il in (0..shape.n_layer).filter(|_| block.is_none()) {
        let n = |s: &str| format!("blk.{il}.{s}");
        t.push(TensorPlan::vector(n("attn_norm.weight"), e, NORM));
        for (proj_name, rows) in [("attn_q", e), ("attn_k", kv), ("attn_v", kv)] {
            t.push(matrix(n(&format!("{proj_name}.weight")), e, rows, proj));
            if shape.qkv_bias {
                t.push(TensorPlan::vector(
                    n(&format!("{proj_name}.bias")),
                    rows,
                    BIAS,
                ));
            }
        }
        t.push(matrix(n("attn_output.weight"), e, e, proj));
        t.push(TensorPlan::vector(n("ffn_norm.weight"), e, NORM));
        t.push(matrix(n("ffn_gate.weight"), e, ff, proj));
        t.push(matrix(n("ffn_up.weight"), e, ff, proj));
        t.push(matrix(n("ffn_down.weight"), ff, e, down));
    }
    t.push(TensorPlan::vector(output_norm_name(shape), e, NORM));
    if !shape.tied_output {
        t.push(matrix("output.weight".into(), e, v, out));
    }
    assign_types(&mut t, shape, shape.arch.name(), 0, ty)?;
    Ok(t)
}

/// The name of the final norm: the row of the architecture's table in
/// the llama crate that is a norm of the output layer (LFM2's is
/// `token_embd_norm.weight`).
fn output_norm_name(shape: &Shape) -> String {
    shape
        .arch
        .tensors()
        .map(|s| s.kind.info())
        .find(|i| i.scope == llama::arch::Scope::Output && i.op == llama::arch::TensorOp::Mul)
        .map_or("output_norm.weight", |i| i.name)
        .to_string()
}

/// The planned tensor `name` of `p` (a test's look-up: panics without it).
#[cfg(test)]
pub(crate) fn find<'a>(p: &'a [TensorPlan], name: &str) -> &'a TensorPlan {
    p.iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("no {name}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gen_model::shape::Preset;

    #[test]
    fn fixture_scales_and_order() {
        let mut s = Preset::Stories260k.shape();
        s.n_embd = 256;
        s.n_ff = 768;
        let p = plan(&s, "f32".parse().unwrap()).unwrap();
        assert_eq!(p.len(), 2 + 9 * 5 + 1);
        assert_eq!(p[0].init.std, 4.0);
        assert_eq!(p[2].name, "blk.0.attn_q.weight");
        assert_eq!(p[2].init.std, 1.0 / 16.0);
        assert_eq!(p.last().map(|t| t.init.std), Some(0.5));
        assert_eq!(p[3].dims, vec![256, 128]);
        assert_eq!(p[9].dims, vec![768, 256]);
    }

    #[test]
    fn qwen2_biases_and_tied_output() {
        let p = plan(&Preset::Qwen2_0_5b.shape(), "q8_0".parse().unwrap()).unwrap();
        assert_eq!(p.len(), 1 + 12 * 24 + 1);
        assert_eq!(p[3].name, "blk.0.attn_q.bias");
        assert_eq!(p[3].ty, GgmlType::F32);
        assert_eq!(p[5].dims, vec![128]);
        assert_eq!(
            p.last().map(|t| t.name.as_str()),
            Some("output_norm.weight")
        );
    }

    #[test]
    fn tinyllama_q4_k_m_mixture() {
        let s = Preset::Tinyllama1_1b.shape();
        let p = plan(&s, "q4_k_m".parse().unwrap()).unwrap();
        let more = [0, 1, 4, 7, 10, 13, 16, 19, 20, 21];
        for il in 0..22 {
            let want = if more.contains(&il) {
                GgmlType::Q6_K
            } else {
                GgmlType::Q4_K
            };
            for w in ["attn_v", "ffn_down"] {
                let t = find(&p, &format!("blk.{il}.{w}.weight"));
                assert_eq!((t.ty, t.wanted), (want, None), "{}", t.name);
            }
            for w in ["attn_q", "attn_k", "attn_output", "ffn_gate", "ffn_up"] {
                let t = find(&p, &format!("blk.{il}.{w}.weight"));
                assert_eq!(t.ty, GgmlType::Q4_K, "{}", t.name);
            }
        }
        assert_eq!(find(&p, "output.weight").ty, GgmlType::Q6_K);
        assert_eq!(find(&p, "token_embd.weight").ty, GgmlType::Q4_K);
        assert_eq!(find(&p, "output_norm.weight").ty, GgmlType::F32);

        // --pure: every 2-D weight in the base type.
        let pure = plan(&s, "q4_k_m".parse::<OutType>().unwrap().pure()).unwrap();
        for t in &pure {
            let want = if t.dims.len() == 2 {
                GgmlType::Q4_K
            } else {
                GgmlType::F32
            };
            assert_eq!(t.ty, want, "{}", t.name);
        }

        // Q4_0: only the output changes.
        let q4_0 = plan(&s, "q4_0".parse().unwrap()).unwrap();
        for t in q4_0.iter().filter(|t| t.dims.len() == 2) {
            let want = if t.name == "output.weight" {
                GgmlType::Q6_K
            } else {
                GgmlType::Q4_0
            };
            assert_eq!(t.ty, want, "{}", t.name);
        }
    }

    #[test]
    fn stories260k_q4_k_m_as_llama_quantize_writes_it() {
        // Rows of 64 and 172 fit no K-quant: the mixture's types fall back
        // (Q4_K -> Q5_0, Q6_K -> Q8_0; nothing but F16 fits 172).
        let p = plan(&Preset::Stories260k.shape(), "q4_k_m".parse().unwrap()).unwrap();
        let mut counts = std::collections::BTreeMap::new();
        for t in &p {
            *counts.entry(t.ty.to_string()).or_insert(0) += 1;
        }
        let counts: Vec<_> = counts.into_iter().collect();
        assert_eq!(
            counts,
            [
                ("F16".to_string(), 5),
                ("F32".to_string(), 11),
                ("Q5_0".to_string(), 29),
                ("Q8_0".to_string(), 3),
            ]
        );
        for name in ["blk.2.attn_v.weight", "blk.4.attn_v.weight"] {
            let t = find(&p, name);
            assert_eq!((t.ty, t.wanted), (GgmlType::Q8_0, Some(GgmlType::Q6_K)));
        }
        // The output rule asks for Q8_0 itself: 64 is not a multiple of 256.
        let t = find(&p, "output.weight");
        assert_eq!((t.ty, t.wanted), (GgmlType::Q8_0, None));
        let t = find(&p, "blk.2.ffn_down.weight");
        assert_eq!((t.ty, t.wanted), (GgmlType::F16, Some(GgmlType::Q6_K)));
    }

    #[test]
    fn tied_embeddings_take_the_output_rule() {
        let s = Preset::Qwen2_0_5b.shape();
        // 896 is a multiple of 32, not of 256: Q6_K, which falls back.
        let t = plan(&s, "q4_0".parse().unwrap()).unwrap().swap_remove(0);
        assert_eq!(t.name, "token_embd.weight");
        assert_eq!((t.ty, t.wanted), (GgmlType::Q8_0, Some(GgmlType::Q6_K)));
        // Not a multiple of Q4_K's block: Q8_0 by the rule itself.
        let t = plan(&s, "q4_k_m".parse().unwrap()).unwrap().swap_remove(0);
        assert_eq!((t.ty, t.wanted), (GgmlType::Q8_0, None));
        let t = plan(&s, "f16".parse().unwrap()).unwrap().swap_remove(0);
        assert_eq!(t.ty, GgmlType::F16);
    }
}
