//! What the RWKV-6 and RWKV-7 generators share: heads of 64 (every
//! released model's), the keys of a model without attention, the
//! LayerNorms with biases (the embeddings' one written with block 0, the
//! output's bias with the last block), the token-shift lerps and the
//! squared-ReLU channel mix. Value scales keep the recurrences finite:
//! lerps in (0, 1), small biases, projections of unit output scale.

use gguf::Metadata;

use super::Block;
use crate::gen_model::plan::{Init, NORM};
use crate::gen_model::shape::Shape;

/// Head size of every released RWKV-6 and RWKV-7 model.
pub const HEAD_SIZE: u32 = 64;

/// LayerNorm epsilon of the released models.
pub const NORM_EPS: f32 = 1e-5;

/// Biases of the LayerNorms.
pub const BIAS: Init = Init {
    mean: 0.0,
    std: 0.1,
};

/// Token-shift lerps, mostly in (0, 1).
pub const LERP: Init = Init {
    mean: 0.5,
    std: 0.15,
};

/// The keys of an RWKV model: no attention heads, the LayerNorm epsilon
/// and the head size; no rope keys.
pub fn metadata(s: &Shape, md: &mut Metadata) {
    let k = |name: &str| format!("{}.{name}", s.arch.name());
    md.set(k("attention.head_count"), 0u32);
    md.set(k("attention.layer_norm_epsilon"), NORM_EPS);
    md.set(k("wkv.head_size"), HEAD_SIZE);
    for key in [
        "attention.head_count_kv",
        "attention.layer_norm_rms_epsilon",
        "rope.dimension_count",
        "rope.freq_base",
    ] {
        md.remove(&k(key));
    }
}

/// A LayerNorm `name` (weight and bias) of the block.
pub fn layer_norm(b: &mut Block<'_>, name: &str) {
    let e = b.shape.n_embd;
    b.norm(name, e);
    b.raw(&format!("{name}.bias"), &[e], BIAS);
}

/// The tensors around the blocks that RWKV adds: the embeddings'
/// LayerNorm with block 0, the output norm's bias with the last block.
pub fn outer(b: &mut Block<'_>) {
    let e = b.shape.n_embd;
    if b.il == 0 {
        b.outer("token_embd_norm.weight", &[e], NORM);
        b.outer("token_embd_norm.bias", &[e], BIAS);
    }
    if b.il + 1 == b.shape.n_layer {
        b.outer("output_norm.bias", &[e], BIAS);
    }
}

/// The GroupNorm of the WKV output and the output projection.
pub fn wkv_out(b: &mut Block<'_>) {
    let e = b.shape.n_embd;
    layer_norm(b, "time_mix_ln");
    b.matrix("time_mix_output", e, e);
}

/// The channel mix: LayerNorm `attn_norm_2`, the key lerp (and the
/// receptance's for RWKV-6), key and value of width `n_ff`.
pub fn channel_mix(b: &mut Block<'_>, receptance: bool) {
    let (e, ff) = (b.shape.n_embd, b.shape.n_ff);
    layer_norm(b, "attn_norm_2");
    b.raw("channel_mix_lerp_k.weight", &[e, 1, 1], LERP);
    if receptance {
        b.raw("channel_mix_lerp_r.weight", &[e, 1, 1], LERP);
    }
    b.matrix("channel_mix_key", e, ff);
    b.matrix("channel_mix_value", ff, e);
    if receptance {
        b.matrix("channel_mix_receptance", e, e);
    }
}

/// A low-rank projection `name` of `rows` rows of `cols`, F32 as the
/// quantize rules keep them, std 1/sqrt(cols).
pub fn low_rank(b: &mut Block<'_>, name: &str, cols: u32, rows: u32) {
    let std = 1.0 / (cols as f32).sqrt();
    b.raw(
        &format!("{name}.weight"),
        &[cols, rows],
        Init { mean: 0.0, std },
    );
}
