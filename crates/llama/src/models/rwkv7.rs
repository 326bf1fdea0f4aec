//! `rwkv7`: RWKV-7 ("Goose"). LayerNorm of the embeddings; every layer a
//! LayerNorm and time mix (six token-shift lerps, a low-rank decay
//! `exp(-0.607 sigmoid(.))`, the value residual from layer 0, the
//! in-context learning rate `a`, keys normalized per head for the removal
//! term, the WKV7 generalized delta rule, per-head GroupNorm, the bonus
//! `(r . k r_k) v` and a low-rank output gate), then a LayerNorm and
//! squared-ReLU channel mix, each with a residual add; LayerNorm output
//! head. The token shifts and WKV states live in the recurrent memory.

use ggml_core::{RopeMode, TensorId, UnaryOp};

use crate::arch::{recr, req, TensorKind, TensorKind::*, TensorSpec};
use crate::error::Result;
use crate::graph::Builder;
use crate::hparams::{HParams, MetaView};
use crate::models::rwkv6::RWKV_HEAD;
use crate::models::ArchDef;

/// An RWKV-7 layer.
const LAYER: &[TensorSpec] = &[
    req(AttnNorm),
    req(AttnNormBias),
    req(AttnNorm2),
    req(AttnNorm2Bias),
    recr(TimeMixW0),
    recr(TimeMixW1),
    recr(TimeMixW2),
    recr(TimeMixA0),
    recr(TimeMixA1),
    recr(TimeMixA2),
    recr(TimeMixV0),
    recr(TimeMixV1),
    recr(TimeMixV2),
    recr(TimeMixG1),
    recr(TimeMixG2),
    recr(TimeMixLerpFused),
    recr(TimeMixKK),
    recr(TimeMixKA),
    recr(TimeMixRK),
    recr(TimeMixKey),
    recr(TimeMixValue),
    recr(TimeMixReceptance),
    recr(TimeMixLn),
    recr(TimeMixLnBias),
    recr(TimeMixOutput),
    recr(ChannelMixLerpK),
    recr(ChannelMixKey),
    recr(ChannelMixValue),
];

/// The registry entry.
pub static DEF: ArchDef = ArchDef {
    name: "rwkv7",
    rope_mode: RopeMode::Normal,
    tensors: &[RWKV_HEAD, LAYER],
    load_hparams,
    build,
};

fn load_hparams(hp: &mut HParams, meta: &MetaView<'_>) -> Result<()> {
    hp.load_rwkv7(meta)
}

/// llama.cpp's decay scale: exp(-0.5) rounded as it writes it.
const DECAY_SCALE: f32 = -0.606531;

fn build(b: &mut Builder<'_>) -> Result<(TensorId, TensorId)> {
    // Layer 0's values, mixed into every later layer's.
    let mut v_first: Option<TensorId> = None;
    b.rwkv_decoder(
        0,
        |b, x, prev, il| time_mix(b, x, prev, &mut v_first, il),
        Builder::channel_mix7,
    )
}

/// `up(down(x))`, with an activation between when given.
fn low_rank(
    b: &mut Builder<'_>,
    x: TensorId,
    down: TensorKind,
    act: Option<UnaryOp>,
    up: TensorKind,
    il: usize,
) -> Result<TensorId> {
    let h = b.linear(x, down, None, il)?;
    let h = match act {
        Some(a) => b.g.unary(h, a)?,
        None => h,
    };
    b.linear(h, up, None, il)
}

/// RWKV-7's time mix of the normed input `x` [n_embd, n] with its
/// previous tokens `prev`.
fn time_mix(
    b: &mut Builder<'_>,
    x: TensorId,
    prev: TensorId,
    v_first: &mut Option<TensorId>,
    il: usize,
) -> Result<TensorId> {
    let hp = b.hp;
    let (n_embd, n) = (hp.n_embd, b.n_tokens());
    let (hs, nh) = (hp.rwkv.head_size, hp.rwkv.n_head(n_embd));
    let sx = b.sub(prev, x)?;
    let fused = b.weight(TimeMixLerpFused, il)?;
    // The six lerps r, w, k, v, a, g: x + sx * mu_c, one row of the fused
    // weight each.
    let mut parts = [x; 6];
    for (c, p) in parts.iter_mut().enumerate() {
        let mu = b.g.view_1d(fused, n_embd, c * n_embd * 4)?;
        *p = b.lerp(x, sx, mu)?;
    }
    let [xr, xw, xk, xv, xa, xg] = parts;
    let r = b.linear(xr, TimeMixReceptance, None, il)?;
    let w = low_rank(b, xw, TimeMixW1, Some(UnaryOp::Tanh), TimeMixW2, il)?;
    let w0 = b.weight(TimeMixW0, il)?;
    let w = b.g.add_op(w, w0)?;
    let w = b.g.unary(w, UnaryOp::Sigmoid)?;
    let w = b.g.scale(w, DECAY_SCALE)?;
    let w = b.g.unary(w, UnaryOp::Exp)?;
    let k = b.linear(xk, TimeMixKey, None, il)?;
    let mut v = b.linear(xv, TimeMixValue, None, il)?;
    match *v_first {
        None => *v_first = Some(v),
        Some(v0) => {
            let mix = low_rank(b, xv, TimeMixV1, None, TimeMixV2, il)?;
            let bias = b.weight(TimeMixV0, il)?;
            let mix = b.g.add_op(mix, bias)?;
            let mix = b.g.unary(mix, UnaryOp::Sigmoid)?;
            let d = b.sub(v0, v)?;
            let d = b.g.mul(d, mix)?;
            v = b.g.add_op(v, d)?;
        }
    }
    let g = low_rank(b, xg, TimeMixG1, Some(UnaryOp::Sigmoid), TimeMixG2, il)?;
    let a = low_rank(b, xa, TimeMixA1, None, TimeMixA2, il)?;
    let a0 = b.weight(TimeMixA0, il)?;
    let a = b.g.add_op(a, a0)?;
    let a = b.g.unary(a, UnaryOp::Sigmoid)?;
    // The removal key: k * k_k, normalized per head.
    let kk_w = b.weight(TimeMixKK, il)?;
    let kk = b.g.mul(k, kk_w)?;
    let kk = b.g.reshape(kk, &[hs, nh, n])?;
    let kk = b.g.l2_norm(kk, 1e-12)?;
    // k + (a * k k_a - k k_a)
    let ka_w = b.weight(TimeMixKA, il)?;
    let ka = b.g.mul(k, ka_w)?;
    let aka = b.g.mul(a, ka)?;
    let d = b.sub(aka, ka)?;
    let k = b.g.add_op(k, d)?;
    let [r, w, k, v, a] = [r, w, k, v, a].map(|t| b.g.reshape(t, &[hs, nh, n]));
    let (r, w, k, v, a) = (r?, w?, k?, v?, a?);
    let neg_kk = b.g.unary(kk, UnaryOp::Neg)?;
    let kk_a = b.g.mul(kk, a)?;
    let state = b.wkv_state_load(il)?;
    let out = b.g.rwkv_wkv7(r, w, k, v, neg_kk, kk_a, state)?;
    b.g.set_name(out, format!("wkv7-{il}"));
    let y = b.wkv_finish(out, il)?;
    let y = b.wkv_group_norm(y, il)?;
    // The bonus: per head (sum of k r r_k) v.
    let rk_w = b.weight(TimeMixRK, il)?;
    let rk_w = b.g.reshape(rk_w, &[hs, nh])?;
    let kr = b.g.mul(k, r)?;
    let kr = b.g.mul(kr, rk_w)?;
    let rk = b.g.sum_rows(kr)?;
    let bonus = b.g.mul(v, rk)?;
    let bonus = b.g.reshape(bonus, &[n_embd, n])?;
    let y = b.g.add_op(y, bonus)?;
    let y = b.g.mul(y, g)?;
    b.linear(y, TimeMixOutput, None, il)
}
