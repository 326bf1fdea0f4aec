//! The per-tensor types of a quantized file type: llama-quantize's rules,
//! from the llama crate ([`llama::quantize::mixture`]), which the
//! `llama-quantize` tool shares, applied to a planned model.
//!
//! Every planned tensor is generated as f32; the rules then give each one
//! the type llama-quantize would write from that f32 model (norms and
//! biases stay F32, weights take the file type's base type or its
//! mixture, with llama-quantize's fall-backs for rows that fit no block).

use llama::quantize::mixture::{self, Choice, ModelInfo, TensorRef, TypeOptions};

use super::plan::TensorPlan;
use super::shape::Shape;
use super::types::OutType;
use crate::error::Result;

/// Sets the type of each tensor of `plan`, a model of `shape` written as
/// `arch` with `n_expert` experts, as llama-quantize gives them for `ty`.
pub fn assign_types(
    plan: &mut [TensorPlan],
    shape: &Shape,
    arch: &str,
    n_expert: u32,
    ty: OutType,
) -> Result<()> {
    let info = ModelInfo {
        arch: arch.to_string(),
        n_layer: shape.n_layer,
        n_head: shape.n_head,
        n_head_kv: shape.n_head_kv,
        n_expert,
    };
    let mut opts = TypeOptions::new(ty.file_type);
    opts.pure = ty.pure;
    // llama-quantize walks the tensors by layer, then by name: its counts
    // of attn_v and ffn_down tensors follow that order.
    let mut order: Vec<usize> = (0..plan.len()).collect();
    order.sort_by(|&a, &b| mixture::tensor_order(&plan[a].name, &plan[b].name));
    let refs: Vec<TensorRef<'_>> = order
        .iter()
        .map(|&i| {
            let t = &plan[i];
            let mut ne = [1u64; 4];
            ne[..t.dims.len()].copy_from_slice(&t.dims);
            TensorRef {
                name: &t.name,
                ne,
                ty: gguf::GgmlType::F32,
            }
        })
        .collect();
    let (choices, _) = mixture::compute_types(&info, &opts, &refs)?;
    for (&i, c) in order.iter().zip(choices) {
        let Choice {
            ty, fallback_from, ..
        } = c;
        plan[i].ty = ty;
        plan[i].wanted = fallback_from;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use gguf::GgmlType as T;

    use crate::gen_model::plan::{find, plan};
    use crate::gen_model::shape::Preset;

    fn ty(preset: Preset, file_type: &str, name: &str) -> T {
        find(
            &plan(&preset.shape(), file_type.parse().unwrap()).unwrap(),
            name,
        )
        .ty
    }

    #[test]
    fn float_files_and_the_output_rule() {
        let t = |f: &str, n: &str| ty(Preset::Tinyllama1_1b, f, n);
        assert_eq!(t("f16", "output.weight"), T::F16);
        assert_eq!(t("bf16", "blk.0.attn_v.weight"), T::BF16);
        assert_eq!(t("f16", "blk.0.attn_norm.weight"), T::F32);
        for (f, want) in [("q4_0", T::Q6_K), ("q8_0", T::Q8_0), ("iq4_nl", T::Q6_K)] {
            assert_eq!(t(f, "output.weight"), want, "{f}");
        }
        // Q3_K_M's attn_v: Q5_K in the first two layers, then Q4_K.
        assert_eq!(t("q3_k_m", "blk.1.attn_v.weight"), T::Q5_K);
        assert_eq!(t("q3_k_m", "blk.2.attn_v.weight"), T::Q4_K);
        // Q2_K with 8 query heads per kv head.
        assert_eq!(t("q2_k", "blk.3.attn_v.weight"), T::Q4_K);
        assert_eq!(t("q2_k", "blk.3.ffn_down.weight"), T::Q3_K);
    }
}
