//! `lfm2`: Liquid LFM2. Short gated convolutions (`shortconv.l_cache` 3,
//! as every released LFM2) and attention with per-head Q and K norms;
//! every layer then has a dense SwiGLU FFN of `--n-ff`. With 16 layers the
//! attention layers are those of LFM2-350M (2, 5, 8, 10, 12, 14); with
//! other counts every third layer from the third. `attention.head_count_kv`
//! is written per layer, 0 for the convolution layers. The final norm is
//! written as `token_embd_norm.weight`, LFM2's name for it.
//!
//! `lfm2moe` is the same trunk with experts, in the proportions of
//! LFM2-8B-A1B: the first two layers (of at least three) keep the dense
//! FFN, the others have 32 SwiGLU experts (4 used, each a quarter of
//! `--n-ff` wide), a sigmoid router and its choice bias `exp_probs_b`.

use gguf::Metadata;

use super::{ArchGen, Block};
use crate::gen_model::plan::Init;
use crate::gen_model::shape::Shape;

/// The generator entry.
pub static GEN: ArchGen = ArchGen {
    name: "lfm2",
    rms_eps: 1e-5,
    rope_freq_base: 1_000_000.0,
    qkv_bias: false,
    metadata,
    block: Some(block),
};

/// The generator entry of the variant with experts.
pub static GEN_MOE: ArchGen = ArchGen {
    name: "lfm2moe",
    rms_eps: 1e-5,
    rope_freq_base: 1_000_000.0,
    qkv_bias: false,
    metadata: metadata_moe,
    block: Some(block_moe),
};

/// Experts per layer and used per token (LFM2-8B-A1B's).
const N_EXPERT: u32 = 32;
const N_EXPERT_USED: u32 = 4;

/// Layers with a dense FFN before the experts, of `n_layer`.
fn dense_lead(n_layer: u32) -> u32 {
    if n_layer >= 3 {
        2
    } else {
        0
    }
}

/// Width of one expert.
fn n_ff_exp(s: &Shape) -> u32 {
    (s.n_ff / 4).max(1)
}

/// Choice biases: N(0, 0.1²), enough to move a choice now and then.
const PROBS_B: Init = Init {
    mean: 0.0,
    std: 0.1,
};

/// Taps of the short convolution of the released models.
pub const L_CACHE: u32 = 3;

/// LFM2-350M's attention layers (of 16).
const ATTENTION_16: &[u32] = &[2, 5, 8, 10, 12, 14];

/// Convolution weights: N(0, 0.5²), as the fixtures'.
const CONV: Init = Init {
    mean: 0.0,
    std: 0.5,
};

/// Whether layer `il` of `n_layer` is attention.
pub fn is_attention(il: u32, n_layer: u32) -> bool {
    if n_layer == 16 {
        ATTENTION_16.contains(&il)
    } else {
        il % 3 == 2
    }
}

fn metadata(s: &Shape, md: &mut Metadata) {
    let k = |name: &str| format!("{}.{name}", s.arch.name());
    let kv: Vec<u32> = (0..s.n_layer)
        .map(|il| {
            if is_attention(il, s.n_layer) {
                s.n_head_kv
            } else {
                0
            }
        })
        .collect();
    md.set(k("attention.head_count_kv"), kv);
    md.set(k("shortconv.l_cache"), L_CACHE);
}

fn metadata_moe(s: &Shape, md: &mut Metadata) {
    metadata(s, md);
    let k = |name: &str| format!("lfm2moe.{name}");
    md.set(k("expert_count"), N_EXPERT);
    md.set(k("expert_used_count"), N_EXPERT_USED);
    md.set(k("expert_feed_forward_length"), n_ff_exp(s));
    md.set(k("leading_dense_block_count"), dense_lead(s.n_layer));
    md.set(k("expert_gating_func"), 2u32);
}

fn block_moe(b: &mut Block<'_>) {
    mixer(b);
    if b.il < dense_lead(b.shape.n_layer) {
        b.ffn();
        return;
    }
    let (e, ff) = (b.shape.n_embd, n_ff_exp(b.shape));
    b.norm("ffn_norm", e);
    b.matrix("ffn_gate_inp", e, N_EXPERT);
    b.raw("exp_probs_b.bias", &[N_EXPERT], PROBS_B);
    b.stacked("ffn_gate_exps", &[e, ff, N_EXPERT], e);
    b.stacked("ffn_up_exps", &[e, ff, N_EXPERT], e);
    b.stacked("ffn_down_exps", &[ff, e, N_EXPERT], ff);
}

fn block(b: &mut Block<'_>) {
    mixer(b);
    b.ffn();
}

/// The short convolution or attention of a layer.
fn mixer(b: &mut Block<'_>) {
    let e = b.shape.n_embd;
    if is_attention(b.il, b.shape.n_layer) {
        b.attention();
        let hd = b.shape.head_dim();
        b.norm("attn_q_norm", hd);
        b.norm("attn_k_norm", hd);
    } else {
        b.norm("attn_norm", e);
        b.matrix("shortconv.in_proj", e, 3 * e);
        b.raw("shortconv.conv.weight", &[L_CACHE, e], CONV);
        b.matrix("shortconv.out_proj", e, e);
    }
}

#[cfg(test)]
mod tests {
    use gguf::GgmlType;

    use crate::gen_model::plan::find;
    use crate::gen_model::shape::{Preset, ShapeOverrides};
    use crate::gen_model::ModelSpec;

    #[test]
    fn lfm2_350m_layers_keys_and_shapes() {
        let spec = ModelSpec::synthetic(
            Preset::Lfm2_350m,
            &ShapeOverrides::default(),
            "q8_0".parse().unwrap(),
            1,
            "l",
        )
        .unwrap();
        let md = spec.metadata().unwrap();
        let kv = match md.get("lfm2.attention.head_count_kv") {
            Some(gguf::Value::Array(gguf::Array::U32(v))) => v.clone(),
            other => panic!("head_count_kv: {other:?}"),
        };
        let attn: Vec<usize> = (0..16).filter(|&i| kv[i] != 0).collect();
        assert_eq!(attn, [2, 5, 8, 10, 12, 14]);
        assert!(attn.iter().all(|&i| kv[i] == 8));
        assert_eq!(md.get_u32("lfm2.shortconv.l_cache").ok(), Some(3));
        assert_eq!(md.get_u32("lfm2.feed_forward_length").ok(), Some(4608));
        let p = spec.plan().unwrap();
        // token_embd, 10 conv layers of 8, 6 attention layers of 11, the
        // final norm; tied output.
        assert_eq!(p.len(), 1 + 10 * 8 + 6 * 11 + 1);
        let dims = |n: &str| find(&p, n).dims.clone();
        assert_eq!(dims("blk.0.shortconv.in_proj.weight"), [1024, 3072]);
        assert_eq!(dims("blk.0.shortconv.conv.weight"), [3, 1024]);
        assert_eq!(dims("blk.1.shortconv.out_proj.weight"), [1024, 1024]);
        assert_eq!(dims("blk.2.attn_k.weight"), [1024, 512]);
        assert_eq!(dims("blk.2.attn_q_norm.weight"), [64]);
        assert_eq!(dims("blk.15.ffn_down.weight"), [4608, 1024]);
        assert_eq!(dims("token_embd_norm.weight"), [1024]);
        assert!(!p.iter().any(|t| t.name == "output_norm.weight"));
        assert!(!p.iter().any(|t| t.name == "blk.2.shortconv.conv.weight"));
        assert_eq!(find(&p, "blk.0.shortconv.conv.weight").ty, GgmlType::F32);
        assert_eq!(
            find(&p, "blk.0.shortconv.in_proj.weight").ty,
            GgmlType::Q8_0
        );
    }
}
