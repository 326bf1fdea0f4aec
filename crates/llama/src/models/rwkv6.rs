//! `rwkv6`: RWKV-6 ("Finch"). LayerNorm of the embeddings; every layer a
//! LayerNorm and time mix (token shift with five data-dependent lerps, a
//! data-dependent decay, the WKV6 recurrence with a per-head bonus,
//! per-head GroupNorm, SiLU gate), then a LayerNorm and channel mix, each
//! with a residual add; the residual stream halved after every
//! `rescale_every_n_layers` layers; LayerNorm output head. The token
//! shifts and WKV states live in the recurrent memory.

use ggml_core::{RopeMode, TensorId, UnaryOp};

use crate::arch::{recr, req, TensorKind::*, TensorSpec};
use crate::error::Result;
use crate::graph::Builder;
use crate::hparams::{HParams, MetaView};
use crate::models::ArchDef;

/// Outside the layers: embeddings with their LayerNorm, LayerNorm head.
pub const RWKV_HEAD: &[TensorSpec] = &[
    req(TokenEmbd),
    req(TokenEmbdNorm),
    req(TokenEmbdNormBias),
    req(OutputNorm),
    req(OutputNormBias),
    req(Output),
];

/// An RWKV-6 layer.
const LAYER: &[TensorSpec] = &[
    req(AttnNorm),
    req(AttnNormBias),
    req(AttnNorm2),
    req(AttnNorm2Bias),
    recr(TimeMixLerpX),
    recr(TimeMixW1),
    recr(TimeMixW2),
    recr(TimeMixLerpFused),
    recr(TimeMixFirst),
    recr(TimeMixDecay),
    recr(TimeMixDecayW1),
    recr(TimeMixDecayW2),
    recr(TimeMixKey),
    recr(TimeMixValue),
    recr(TimeMixReceptance),
    recr(TimeMixGate),
    recr(TimeMixLn),
    recr(TimeMixLnBias),
    recr(TimeMixOutput),
    recr(ChannelMixLerpK),
    recr(ChannelMixLerpR),
    recr(ChannelMixKey),
    recr(ChannelMixValue),
    recr(ChannelMixReceptance),
];

/// The registry entry.
pub static DEF: ArchDef = ArchDef {
    name: "rwkv6",
    rope_mode: RopeMode::Normal,
    tensors: &[RWKV_HEAD, LAYER],
    load_hparams,
    build,
};

fn load_hparams(hp: &mut HParams, meta: &MetaView<'_>) -> Result<()> {
    hp.load_rwkv6(meta)
}

fn build(b: &mut Builder<'_>) -> Result<(TensorId, TensorId)> {
    let rescale = b.hp.rwkv.rescale_every_n_layers;
    b.rwkv_decoder(rescale, time_mix, Builder::channel_mix6)
}

/// RWKV-6's time mix of the normed input `x` [n_embd, n] with its
/// previous tokens `prev`.
fn time_mix(b: &mut Builder<'_>, x: TensorId, prev: TensorId, il: usize) -> Result<TensorId> {
    let hp = b.hp;
    let (n_embd, n) = (hp.n_embd, b.n_tokens());
    let extra = hp.rwkv.time_mix_extra_dim;
    let (hs, nh) = (hp.rwkv.head_size, hp.rwkv.n_head(n_embd));
    let f = 4;
    let sx = b.sub(prev, x)?;
    let lx = b.weight(TimeMixLerpX, il)?;
    let xxx = b.lerp(x, sx, lx)?;
    // Five low-rank data-dependent lerp offsets, [n_embd, n, 5]: one
    // matrix of the stack w2 per lerp (llama.cpp's [n_embd, 1, n, 5], the
    // same memory).
    let xxx = b.linear(xxx, TimeMixW1, None, il)?;
    let xxx = b.g.unary(xxx, UnaryOp::Tanh)?;
    let xxx = b.g.reshape(xxx, &[extra, 5, n])?;
    let xxx = b.g.permute(xxx, [0, 2, 1, 3])?;
    let xxx = b.g.cont(xxx)?;
    let w2 = b.weight(TimeMixW2, il)?;
    let xxx = b.g.mul_mat(w2, xxx)?;
    let fused = b.weight(TimeMixLerpFused, il)?;
    let fused = b.g.reshape(fused, &[n_embd, 1, 5])?;
    let xxx = b.g.add_op(xxx, fused)?;
    let xxx = b.g.mul(xxx, sx)?;
    let xxx = b.g.add_op(xxx, x)?;
    let part =
        |b: &mut Builder<'_>, c: usize| b.g.view_2d(xxx, n_embd, n, n_embd * f, c * n_embd * n * f);
    let (xw, xk, xv, xr, xg) = (
        part(b, 0)?,
        part(b, 1)?,
        part(b, 2)?,
        part(b, 3)?,
        part(b, 4)?,
    );
    let r = b.linear(xr, TimeMixReceptance, None, il)?;
    let k = b.linear(xk, TimeMixKey, None, il)?;
    let v = b.linear(xv, TimeMixValue, None, il)?;
    let g = b.linear(xg, TimeMixGate, None, il)?;
    let g = b.g.unary(g, UnaryOp::Silu)?;
    // The decay exp(-exp(w)).
    let w = b.linear(xw, TimeMixDecayW1, None, il)?;
    let w = b.g.unary(w, UnaryOp::Tanh)?;
    let w = b.linear(w, TimeMixDecayW2, None, il)?;
    let decay = b.weight(TimeMixDecay, il)?;
    let w = b.g.add_op(w, decay)?;
    let w = b.g.unary(w, UnaryOp::Exp)?;
    let w = b.g.unary(w, UnaryOp::Neg)?;
    let w = b.g.unary(w, UnaryOp::Exp)?;
    let [k, v, r, w] = [k, v, r, w].map(|t| b.g.reshape(t, &[hs, nh, n]));
    let (k, v, r, w) = (k?, v?, r?, w?);
    let u = b.weight(TimeMixFirst, il)?;
    let state = b.wkv_state_load(il)?;
    let out = b.g.rwkv_wkv6(k, v, r, u, w, state)?;
    b.g.set_name(out, format!("wkv6-{il}"));
    let y = b.wkv_finish(out, il)?;
    let y = b.wkv_group_norm(y, il)?;
    let y = b.g.mul(y, g)?;
    b.linear(y, TimeMixOutput, None, il)
}
