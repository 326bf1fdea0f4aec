//! `deepseek2`: DeepSeek-V2-Lite's layout. Multi-head latent attention
//! without a low-rank query (`attn_q`), the latent and rotary key from
//! `attn_kv_a_mqa`, the absorbed per-head `attn_k_b` / `attn_v_b`, as the
//! converter writes them; the first layer a dense SwiGLU FFN of `--n-ff`,
//! the others 64 experts (6 used, softmax router, weights not
//! renormalised) plus 2 shared experts, YaRN factor 40 over 4096 positions
//! with DeepSeek's mscale. The MLA widths follow the head width h =
//! n_embd / n_head as in V2-Lite (h = 128): non-rotary key h, rotary key
//! h / 2, value h, latent 4 h; an expert is 1408 / 10944 of `--n-ff` wide
//! (rounded up to 32).

use gguf::Metadata;

use super::{ArchGen, Block};
use crate::gen_model::shape::Shape;

/// The generator entry.
pub static GEN: ArchGen = ArchGen {
    name: "deepseek2",
    rms_eps: 1e-6,
    rope_freq_base: 10_000.0,
    qkv_bias: false,
    metadata,
    block: Some(block),
};

/// Experts per MoE layer, used per token, shared.
const N_EXPERT: u32 = 64;
const N_EXPERT_USED: u32 = 6;
const N_EXPERT_SHARED: u32 = 2;
/// Leading layers with a dense FFN.
const N_DENSE_LEAD: u32 = 1;

/// The MLA widths of `s`: (non-rotary key, rotary key, value, latent).
pub fn mla(s: &Shape) -> (u32, u32, u32, u32) {
    let h = s.head_dim();
    (h, h / 2, h, 4 * h)
}

/// Width of one routed expert.
pub fn n_ff_exp(s: &Shape) -> u32 {
    let w = (u64::from(s.n_ff) * 1408).div_ceil(10944) as u32;
    w.div_ceil(32).max(1) * 32
}

fn metadata(s: &Shape, md: &mut Metadata) {
    let k = |name: &str| format!("deepseek2.{name}");
    let (nope, rope, v, lora) = mla(s);
    md.set(k("attention.head_count_kv"), 1u32);
    md.set(k("attention.key_length"), lora + rope);
    md.set(k("attention.value_length"), lora);
    md.set(k("attention.key_length_mla"), nope + rope);
    md.set(k("attention.value_length_mla"), v);
    md.set(k("attention.q_lora_rank"), 0u32);
    md.set(k("attention.kv_lora_rank"), lora);
    md.set(k("rope.dimension_count"), rope);
    md.set(k("leading_dense_block_count"), N_DENSE_LEAD);
    md.set(k("expert_count"), N_EXPERT);
    md.set(k("expert_used_count"), N_EXPERT_USED);
    md.set(k("expert_shared_count"), N_EXPERT_SHARED);
    md.set(k("expert_feed_forward_length"), n_ff_exp(s));
    md.set(k("expert_weights_scale"), 1.0f32);
    md.set(k("expert_gating_func"), 1u32);
    md.set(k("rope.scaling.type"), "yarn");
    md.set(k("rope.scaling.factor"), 40.0f32);
    md.set(k("rope.scaling.original_context_length"), 4096u32);
    md.set(k("rope.scaling.yarn_log_multiplier"), 0.0707f32);
}

fn block(b: &mut Block<'_>) {
    let s = b.shape;
    let (e, n_head) = (s.n_embd, s.n_head);
    let (nope, rope, v, lora) = mla(s);
    b.norm("attn_norm", e);
    b.norm("attn_kv_a_norm", lora);
    b.matrix("attn_q", e, n_head * (nope + rope));
    b.matrix("attn_kv_a_mqa", e, lora + rope);
    b.stacked("attn_k_b", &[nope, lora, n_head], nope);
    b.stacked("attn_v_b", &[lora, v, n_head], lora);
    b.matrix("attn_output", n_head * v, e);
    if b.il < N_DENSE_LEAD {
        b.ffn();
        return;
    }
    let ff = n_ff_exp(s);
    b.norm("ffn_norm", e);
    b.matrix("ffn_gate_inp", e, N_EXPERT);
    b.stacked("ffn_gate_exps", &[e, ff, N_EXPERT], e);
    b.stacked("ffn_up_exps", &[e, ff, N_EXPERT], e);
    b.stacked("ffn_down_exps", &[ff, e, N_EXPERT], ff);
    let sh = ff * N_EXPERT_SHARED;
    b.matrix("ffn_gate_shexp", e, sh);
    b.matrix("ffn_up_shexp", e, sh);
    b.matrix("ffn_down_shexp", sh, e);
}
