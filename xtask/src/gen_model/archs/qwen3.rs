//! `qwen3`: the llama block without biases, with per-head q/k RMS norms.

use gguf::Metadata;

use super::{ArchGen, Block};
use crate::gen_model::shape::Shape;

/// The generator entry.
pub static GEN: ArchGen = ArchGen {
    name: "qwen3",
    rms_eps: 1e-6,
    rope_freq_base: 1_000_000.0,
    qkv_bias: false,
    metadata,
    block: Some(block),
};

fn metadata(_: &Shape, _: &mut Metadata) {}

fn block(b: &mut Block<'_>) {
    b.attention();
    let hd = b.shape.head_dim();
    b.norm("attn_q_norm", hd);
    b.norm("attn_k_norm", hd);
    b.ffn();
}
