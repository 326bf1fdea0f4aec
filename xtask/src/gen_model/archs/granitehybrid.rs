//! `granitehybrid`: Granite 4.0-H. Most layers are Mamba-2 mixers (sizes as
//! [`super::mamba2`]), a few attention without rope (`--n-head`,
//! `--n-head-kv`); every layer then has a dense SwiGLU FFN of `--n-ff`
//! (Granite-4.0-H-Micro's; the MoE variants are not written). One layer in
//! ten is attention, the sixth of each ten (one layer, the middle one, in
//! models under ten layers): `attention.head_count_kv` is written per
//! layer, 0 for the Mamba-2 layers. The attention scale is Granite's
//! 1/head_dim; the embedding, residual and logit multipliers are not
//! written (llama.cpp's defaults: none), so that the residual stream keeps
//! the generator's usual balance of embeddings and block outputs (with
//! random weights, Granite's embeddings times 12 drown the blocks and the
//! next token follows from the last one alone).

use gguf::Metadata;

use super::{ssm, ArchGen, Block};
use crate::gen_model::shape::Shape;

/// The generator entry.
pub static GEN: ArchGen = ArchGen {
    name: "granitehybrid",
    rms_eps: 1e-5,
    rope_freq_base: 10_000.0,
    qkv_bias: false,
    metadata,
    block: Some(block),
};

/// Whether layer `il` of `n_layer` is attention.
pub fn is_attention(il: u32, n_layer: u32) -> bool {
    let period = n_layer.min(10);
    il % period == period / 2
}

fn metadata(s: &Shape, md: &mut Metadata) {
    let k = |name: &str| format!("granitehybrid.{name}");
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
    md.set(k("rope.scaling.finetuned"), false);
    md.set(k("attention.scale"), 1.0 / s.head_dim() as f32);
    ssm::metadata(s, md, false);
}

fn block(b: &mut Block<'_>) {
    if is_attention(b.il, b.shape.n_layer) {
        b.attention();
    } else {
        ssm::mamba2_mixer(b);
    }
    b.ffn();
}
