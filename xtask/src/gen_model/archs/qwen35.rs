//! `qwen35`: Qwen3.5 (dense). Three layers in four are gated DeltaNet
//! (the fourth, eighth, ... are gated attention, `full_attention_interval`
//! 4), with the released models' fixed sizes: 16 Q/K and 16 V heads of
//! 128 for the DeltaNet layers, attention heads of 256 (`--n-head`,
//! `--n-head-kv` of them) whose rope turns the first 64 dims with
//! sections [11, 11, 10, 0]; every layer then has a SwiGLU FFN of `--n-ff`
//! behind `post_attention_norm`. The decays keep the state bounded:
//! `ssm_a` = -exp(A_log) around -1 and softplus of a bias around -3.

use gguf::Metadata;

use super::{ArchGen, Block};
use crate::gen_model::plan::{Init, NORM};
use crate::gen_model::shape::Shape;

/// Width of an attention head.
pub const ATTN_HEAD_DIM: u32 = 256;
/// Rotated dims of an attention head (a quarter).
pub const N_ROT: u32 = 64;
/// Multimodal rope sections (pairs per position component).
pub const SECTIONS: [i32; 4] = [11, 11, 10, 0];
/// Every n-th layer is attention.
pub const INTERVAL: u32 = 4;
/// Q/K heads of a DeltaNet layer.
pub const N_K_HEADS: u32 = 16;
/// V heads of a DeltaNet layer.
pub const N_V_HEADS: u32 = 16;
/// Width of a DeltaNet head (Q, K and V).
pub const HEAD: u32 = 128;
/// Convolution width.
pub const D_CONV: u32 = 4;

const CONV: Init = Init {
    mean: 0.0,
    std: 0.5,
};
const DT_BIAS: Init = Init {
    mean: -3.0,
    std: 0.5,
};
const A: Init = Init {
    mean: -1.0,
    std: 0.2,
};

/// The generator entry.
pub static GEN: ArchGen = ArchGen {
    name: "qwen35",
    rms_eps: 1e-6,
    rope_freq_base: 10_000_000.0,
    qkv_bias: false,
    metadata,
    block: Some(block),
};

/// Whether layer `il` is gated attention.
pub fn is_attention(il: u32) -> bool {
    (il + 1) % INTERVAL == 0
}

fn metadata(s: &Shape, md: &mut Metadata) {
    let k = |name: &str| format!("{}.{name}", s.arch.name());
    md.set(k("attention.key_length"), ATTN_HEAD_DIM);
    md.set(k("attention.value_length"), ATTN_HEAD_DIM);
    md.set(k("rope.dimension_count"), N_ROT);
    md.set(k("rope.dimension_sections"), SECTIONS.to_vec());
    md.set(k("full_attention_interval"), INTERVAL);
    md.set(k("ssm.conv_kernel"), D_CONV);
    md.set(k("ssm.state_size"), HEAD);
    md.set(k("ssm.group_count"), N_K_HEADS);
    md.set(k("ssm.time_step_rank"), N_V_HEADS);
    md.set(k("ssm.inner_size"), N_V_HEADS * HEAD);
}

fn block(b: &mut Block<'_>) {
    let s = b.shape;
    let e = s.n_embd;
    b.norm("attn_norm", e);
    b.norm("post_attention_norm", e);
    if is_attention(b.il) {
        let (q, kv) = (ATTN_HEAD_DIM * s.n_head, ATTN_HEAD_DIM * s.n_head_kv);
        b.matrix("attn_q", e, 2 * q);
        b.matrix("attn_k", e, kv);
        b.matrix("attn_v", e, kv);
        b.matrix("attn_output", q, e);
        b.norm("attn_q_norm", ATTN_HEAD_DIM);
        b.norm("attn_k_norm", ATTN_HEAD_DIM);
    } else {
        let d_inner = N_V_HEADS * HEAD;
        let conv_dim = 2 * N_K_HEADS * HEAD + d_inner;
        b.matrix("attn_qkv", e, conv_dim);
        b.matrix("attn_gate", e, d_inner);
        b.raw("ssm_conv1d.weight", &[D_CONV, conv_dim], CONV);
        b.raw("ssm_dt.bias", &[N_V_HEADS], DT_BIAS);
        b.raw("ssm_a", &[N_V_HEADS], A);
        b.matrix("ssm_beta", e, N_V_HEADS);
        b.matrix("ssm_alpha", e, N_V_HEADS);
        b.raw("ssm_norm.weight", &[HEAD], NORM);
        b.matrix("ssm_out", d_inner, e);
    }
    b.matrix("ffn_gate", e, s.n_ff);
    b.matrix("ffn_up", e, s.n_ff);
    b.matrix("ffn_down", s.n_ff, e);
}

#[cfg(test)]
mod tests {
    use crate::gen_model::plan::{find, plan};
    use crate::gen_model::shape::Preset;

    #[test]
    fn qwen35_0_8b_has_llama_cpps_shapes() {
        let s = Preset::Qwen35_0_8b.shape();
        let p = plan(&s, "q8_0".parse().unwrap()).unwrap();
        // token_embd + 18 DeltaNet layers x 14 + 6 attention layers x 11 +
        // output_norm, tied.
        assert_eq!(p.len(), 1 + 18 * 14 + 6 * 11 + 1);
        let dims = |n: &str| find(&p, n).dims.clone();
        assert_eq!(dims("blk.0.attn_qkv.weight"), [1024, 6144]);
        assert_eq!(dims("blk.0.ssm_conv1d.weight"), [4, 6144]);
        assert_eq!(dims("blk.3.attn_q.weight"), [1024, 2 * 8 * 256]);
        assert_eq!(dims("blk.3.attn_output.weight"), [8 * 256, 1024]);
        assert_eq!(dims("blk.4.ssm_a"), [16]);
        let a = find(&p, "blk.0.ssm_a").init;
        assert!(a.mean + 4.0 * a.std < 0.0);
    }
}
