//! `gemma2`: sandwich norms (after attention and after the FFN), attention
//! and final logit soft-capping, sliding-window attention on every other
//! layer with Gemma 2's window of 4096 positions.

use gguf::Metadata;

use super::{ArchGen, Block};
use crate::gen_model::shape::Shape;

/// The generator entry.
pub static GEN: ArchGen = ArchGen {
    name: "gemma2",
    rms_eps: 1e-6,
    rope_freq_base: 10_000.0,
    qkv_bias: false,
    metadata,
    block: Some(block),
};

fn metadata(s: &Shape, md: &mut Metadata) {
    let k = |name: &str| format!("{}.{name}", s.arch.name());
    md.set(k("attention.sliding_window"), 4096u32);
    md.set(k("attn_logit_softcapping"), 50f32);
    md.set(k("final_logit_softcapping"), 30f32);
}

fn block(b: &mut Block<'_>) {
    b.attention();
    b.post_norm("post_attention_norm");
    b.ffn();
    b.post_norm("post_ffw_norm");
}
