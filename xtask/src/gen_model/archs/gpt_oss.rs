//! `gpt-oss`: OpenAI's gpt-oss-20b layout. Heads of 64 whatever the
//! width (the real model's 64 query heads are 4096 wide over a 2880 wide
//! stream), Q/K/V/O biases, one learned sink logit per head, sliding
//! windows of 128 on the even layers (llama.cpp's pattern 2), NeoX rope
//! with base 150000 and YaRN factor 32 over 4096 positions, and every
//! layer a mixture of 32 experts (4 used) with a biased router and biased
//! experts behind the clamped SwiGLU; `post_attention_norm` is the norm
//! before the experts. An expert is `--n-ff` wide, rounded up to whole
//! 32-element blocks so that MXFP4 takes every expert matrix.

use gguf::Metadata;

use super::{ArchGen, Block};
use crate::gen_model::plan::Init;
use crate::gen_model::shape::Shape;

/// The generator entry.
pub static GEN: ArchGen = ArchGen {
    name: "gpt-oss",
    rms_eps: 1e-5,
    rope_freq_base: 150_000.0,
    qkv_bias: false,
    metadata,
    block: Some(block),
};

/// Width of one attention head.
pub const HEAD_DIM: u32 = 64;
/// Experts per layer and used per token.
const N_EXPERT: u32 = 32;
const N_EXPERT_USED: u32 = 4;
/// Tokens a sliding-window layer attends to.
const SLIDING_WINDOW: u32 = 128;
/// Biases and sink logits: N(0, 0.1²).
const BIAS: Init = Init {
    mean: 0.0,
    std: 0.1,
};

/// Width of one expert.
pub fn n_ff_exp(s: &Shape) -> u32 {
    s.n_ff.div_ceil(32).max(1) * 32
}

fn metadata(s: &Shape, md: &mut Metadata) {
    let k = |name: &str| format!("gpt-oss.{name}");
    md.set(k("attention.key_length"), HEAD_DIM);
    md.set(k("attention.value_length"), HEAD_DIM);
    md.set(k("rope.dimension_count"), HEAD_DIM);
    md.set(k("feed_forward_length"), n_ff_exp(s));
    md.set(k("expert_count"), N_EXPERT);
    md.set(k("expert_used_count"), N_EXPERT_USED);
    md.set(k("expert_feed_forward_length"), n_ff_exp(s));
    md.set(k("attention.sliding_window"), SLIDING_WINDOW);
    md.set(k("rope.scaling.type"), "yarn");
    md.set(k("rope.scaling.factor"), 32.0f32);
    md.set(k("rope.scaling.original_context_length"), 4096u32);
}

fn block(b: &mut Block<'_>) {
    let s = b.shape;
    let (e, q, kv) = (s.n_embd, s.n_head * HEAD_DIM, s.n_head_kv * HEAD_DIM);
    let ff = n_ff_exp(s);
    b.norm("attn_norm", e);
    b.matrix("attn_q", e, q);
    b.raw("attn_q.bias", &[q], BIAS);
    b.matrix("attn_k", e, kv);
    b.raw("attn_k.bias", &[kv], BIAS);
    b.matrix("attn_v", e, kv);
    b.raw("attn_v.bias", &[kv], BIAS);
    b.matrix("attn_output", q, e);
    b.raw("attn_output.bias", &[e], BIAS);
    b.raw("attn_sinks.weight", &[s.n_head], BIAS);
    b.norm("post_attention_norm", e);
    b.matrix("ffn_gate_inp", e, N_EXPERT);
    b.raw("ffn_gate_inp.bias", &[N_EXPERT], BIAS);
    b.stacked("ffn_gate_exps", &[e, ff, N_EXPERT], e);
    b.raw("ffn_gate_exps.bias", &[ff, N_EXPERT], BIAS);
    b.stacked("ffn_up_exps", &[e, ff, N_EXPERT], e);
    b.raw("ffn_up_exps.bias", &[ff, N_EXPERT], BIAS);
    b.stacked("ffn_down_exps", &[ff, e, N_EXPERT], ff);
    b.raw("ffn_down_exps.bias", &[e, N_EXPERT], BIAS);
}
