//! The tensor list of a model: names, shapes, storage types and the
//! distribution each tensor's values are drawn from.

use gguf::GgmlType;

use super::shape::Shape;
use super::types::{storage_type, OutType};

/// The distribution of a tensor's values: N(mean, std²).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Init {
    /// Mean.
    pub mean: f32,
    /// Standard deviation.
    pub std: f32,
}

/// Norm weights: 1 + N(0, 0.1²).
const NORM: Init = Init {
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
const LOGIT_STD: f32 = 8.0;

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
    /// The type asked for, when it did not fit the rows and `ty` is a
    /// fall-back.
    pub wanted: Option<GgmlType>,
}

impl TensorPlan {
    fn vector(name: String, n: u32, init: Init) -> TensorPlan {
        TensorPlan {
            name,
            dims: vec![u64::from(n)],
            ty: GgmlType::F32,
            init,
            wanted: None,
        }
    }

    fn matrix(name: String, ne0: u32, ne1: u32, want: OutType, std: f32) -> TensorPlan {
        let ty = storage_type(want.ty, u64::from(ne0));
        TensorPlan {
            name,
            dims: vec![u64::from(ne0), u64::from(ne1)],
            ty,
            init: Init { mean: 0.0, std },
            wanted: (ty != want.ty).then_some(want.ty),
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
/// Weight scales follow the tiny fixture models (n_embd 256): projections
/// reading the residual stream have std 1/sqrt(n_embd) (1/16 there), so
/// their outputs have unit scale at any width; ffn_down has 1/sqrt(n_ff);
/// `output` has 8/sqrt(n_embd) (0.5 there), giving logits of std ~8. A tied
/// model's token_embd doubles as the output projection and takes the output
/// scale.
pub fn plan(shape: &Shape, ty: OutType) -> Vec<TensorPlan> {
    let (e, kv, ff, v) = (shape.n_embd, shape.n_embd_kv(), shape.n_ff, shape.n_vocab);
    let proj = 1.0 / (e as f32).sqrt();
    let down = 1.0 / (ff as f32).sqrt();
    let out = LOGIT_STD / (e as f32).sqrt();
    let embd = if shape.tied_output { out } else { EMBD_STD };
    let mut t = vec![TensorPlan::matrix(
        "token_embd.weight".into(),
        e,
        v,
        ty,
        embd,
    )];
    for il in 0..shape.n_layer {
        let n = |s: &str| format!("blk.{il}.{s}");
        t.push(TensorPlan::vector(n("attn_norm.weight"), e, NORM));
        for (proj_name, rows) in [("attn_q", e), ("attn_k", kv), ("attn_v", kv)] {
            t.push(TensorPlan::matrix(
                n(&format!("{proj_name}.weight")),
                e,
                rows,
                ty,
                proj,
            ));
            if shape.qkv_bias {
                t.push(TensorPlan::vector(
                    n(&format!("{proj_name}.bias")),
                    rows,
                    BIAS,
                ));
            }
        }
        t.push(TensorPlan::matrix(n("attn_output.weight"), e, e, ty, proj));
        t.push(TensorPlan::vector(n("ffn_norm.weight"), e, NORM));
        t.push(TensorPlan::matrix(n("ffn_gate.weight"), e, ff, ty, proj));
        t.push(TensorPlan::matrix(n("ffn_up.weight"), e, ff, ty, proj));
        t.push(TensorPlan::matrix(n("ffn_down.weight"), ff, e, ty, down));
    }
    t.push(TensorPlan::vector("output_norm.weight".into(), e, NORM));
    if !shape.tied_output {
        t.push(TensorPlan::matrix("output.weight".into(), e, v, ty, out));
    }
    t
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
        let p = plan(&s, "f32".parse().unwrap());
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
        let p = plan(&Preset::Qwen2_0_5b.shape(), "q8_0".parse().unwrap());
        assert_eq!(p.len(), 1 + 12 * 24 + 1);
        assert_eq!(p[3].name, "blk.0.attn_q.bias");
        assert_eq!(p[3].ty, GgmlType::F32);
        assert_eq!(p[5].dims, vec![128]);
        assert_eq!(
            p.last().map(|t| t.name.as_str()),
            Some("output_norm.weight")
        );
    }
}
