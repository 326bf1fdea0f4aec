//! `lfm2`: Liquid LFM2. Layers whose `attention.head_count_kv` is 0 are
//! short gated convolutions (`shortconv.l_cache` taps over the embedding
//! width, a state per sequence in the recurrent memory), the others
//! attention with per-head RMS norms of Q and K and NeoX rope; every layer
//! then has a SwiGLU FFN. The final norm is the tensor LFM2 files name
//! `token_embd_norm`, applied after the last layer (not to the
//! embeddings); the LM head is tied to the embeddings unless the file has
//! `output.weight`.

use ggml_core::{RopeMode, TensorId};

use crate::arch::{attn, recr, req, tied, TensorKind::*, TensorSpec};
use crate::error::{LlamaError, Result};
use crate::graph::{Builder, Ffn};
use crate::hparams::{checked_dim, HParams, MetaView};
use crate::models::{kq_scale, ArchDef, GATED_FFN};

/// The rows outside the layers: the embeddings, LFM2's final norm and the
/// (usually tied) output projection.
pub(super) const HEAD: &[TensorSpec] = &[req(TokenEmbd), req(OutputNormLfm2), tied(Output)];

/// A layer: the operator norm, a short convolution or attention, the FFN.
pub(super) const LAYER: &[TensorSpec] = &[
    req(AttnNorm),
    recr(ShortconvInProj),
    recr(ShortconvConv),
    recr(ShortconvOutProj),
    attn(AttnQ),
    attn(AttnK),
    attn(AttnV),
    attn(AttnQNorm),
    attn(AttnKNorm),
    attn(AttnOut),
];

/// The registry entry.
pub static DEF: ArchDef = ArchDef {
    name: "lfm2",
    rope_mode: RopeMode::Neox,
    tensors: &[HEAD, LAYER, GATED_FFN],
    load_hparams,
    build,
};

/// Reads `shortconv.l_cache` (the convolution's taps, at least 2) as the
/// convolution width over `n_embd` channels: the recurrent memory then
/// keeps `(l_cache - 1) * n_embd` floats per sequence and layer, and no
/// SSM state. A sliding window is refused.
fn load_hparams(hp: &mut HParams, meta: &MetaView<'_>) -> Result<()> {
    load_trunk(hp, meta)
}

/// The keys of the trunk LFM2 and [`super::lfm2moe`] share; the dense FFN
/// width is checked for the layers without experts.
pub(super) fn load_trunk(hp: &mut HParams, meta: &MetaView<'_>) -> Result<()> {
    let key = hp.arch.key("shortconv.l_cache");
    let l_cache = meta.get_usize(&key)?;
    if l_cache < 2 {
        return Err(LlamaError::HParams(format!(
            "{key} = {l_cache}: the short convolution needs at least 2 taps"
        )));
    }
    checked_dim(&key, &[l_cache, hp.n_embd])?;
    checked_dim("shortconv in_proj", &[3, hp.n_embd])?;
    hp.ssm_d_conv = l_cache;
    hp.ssm_d_inner = hp.n_embd;
    let swa_key = hp.arch.key("attention.sliding_window");
    if let Some(n) = meta.get_usize_opt(&swa_key)?.filter(|&n| n > 0) {
        return Err(LlamaError::NotSupported(format!(
            "{swa_key} = {n}: LFM2 with sliding-window attention layers"
        )));
    }
    if !hp.has_recurrent() {
        return Err(LlamaError::HParams(format!(
            "{} has no 0 entry: an LFM2 model without short-convolution layers",
            hp.arch.key("attention.head_count_kv")
        )));
    }
    if let Some(il) = (0..hp.n_layer).find(|&il| hp.is_dense_ffn(il) && hp.n_ff(il) == 0) {
        return Err(LlamaError::HParams(format!(
            "layer {il}: {} = 0",
            hp.arch.key("feed_forward_length")
        )));
    }
    Ok(())
}

/// The forward graph of LFM2 and [`super::lfm2moe`] (whose layers past
/// the leading dense ones have experts).
pub(super) fn build(b: &mut Builder<'_>) -> Result<(TensorId, TensorId)> {
    let hp = b.hp;
    let (mut inp_l, _) = b.inp_embd()?;
    let scale = kq_scale(hp);
    for il in 0..hp.n_layer {
        let cur = b.rms_norm(inp_l, AttnNorm, il)?;
        let cur = if hp.is_recurrent(il) {
            b.shortconv(cur, il)?
        } else {
            let mut qkv = b.qkv(cur, il)?;
            qkv.q = b.rms_norm(qkv.q, AttnQNorm, il)?;
            qkv.k = b.rms_norm(qkv.k, AttnKNorm, il)?;
            qkv.q = b.rope(qkv.q, il)?;
            qkv.k = b.rope(qkv.k, il)?;
            let a = b.attention(qkv, il, scale, 0.0)?;
            b.attn_out(a, il)?
        };
        let (cur, inp_sa) = b.last_layer_rows(il, cur, inp_l)?;
        let ffn_inp = b.g.add_op(cur, inp_sa)?;
        let x = b.rms_norm(ffn_inp, FfnNorm, il)?;
        let out = if hp.is_dense_ffn(il) {
            b.ffn(x, Ffn::Swiglu, il)?
        } else {
            b.moe_ffn(x, il)?
        };
        inp_l = b.g.add_op(out, ffn_inp)?;
        inp_l = b.layer_out(inp_l, il)?;
    }
    b.output_head(inp_l, 0.0)
}
