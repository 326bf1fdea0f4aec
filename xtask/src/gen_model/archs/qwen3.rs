//! `qwen3`: the llama block without biases, with per-head q/k RMS norms.

use super::{no_metadata, ArchGen, Block};

/// The generator entry.
pub static GEN: ArchGen = ArchGen {
    name: "qwen3",
    rms_eps: 1e-6,
    rope_freq_base: 1_000_000.0,
    qkv_bias: false,
    metadata: no_metadata,
    block: Some(block),
};

fn block(b: &mut Block<'_>) {
    b.attention();
    let hd = b.shape.head_dim();
    b.norm("attn_q_norm", hd);
    b.norm("attn_k_norm", hd);
    b.ffn();
}
