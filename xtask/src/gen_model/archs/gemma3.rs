//! `gemma3`: Gemma 2's sandwich norms plus per-head q/k RMS norms, no
//! soft-capping, five sliding-window layers in every six (llama.cpp's
//! default pattern) with Gemma 3 270M's window of 512 positions, rope base
//! 1e6 on the global layers and 1e4 on the local ones.

use gguf::Metadata;

use super::{ArchGen, Block};
use crate::gen_model::shape::Shape;

/// The generator entry.
pub static GEN: ArchGen = ArchGen {
    name: "gemma3",
    rms_eps: 1e-6,
    rope_freq_base: 1_000_000.0,
    qkv_bias: false,
    metadata,
    block: Some(block),
};

fn metadata(s: &Shape, md: &mut Metadata) {
    let k = |name: &str| format!("{}.{name}", s.arch.name());
    md.set(k("attention.sliding_window"), 512u32);
    md.set(k("rope.freq_base_swa"), 10_000f32);
}

fn block(b: &mut Block<'_>) {
    let hd = b.shape.head_dim();
    b.attention();
    b.norm("attn_q_norm", hd);
    b.norm("attn_k_norm", hd);
    b.post_norm("post_attention_norm");
    b.ffn();
    b.post_norm("post_ffw_norm");
}
