//! `phi3`: fused Q/K/V and fused gate+up projections, NeoX rope with
//! optional long/short frequency factors (chosen by whether the context
//! exceeds the original one), Q scaled before attention. The sliding window
//! some files declare is ignored, as llama.cpp does.

use ggml_core::{RopeMode, TensorId};

use crate::arch::{opt, req, req_shaped, TensorKind::*, TensorSpec};
use crate::error::Result;
use crate::graph::{Builder, Ffn};
use crate::hparams::HParams;
use crate::models::{no_extra_hparams, ArchDef, HEAD};

fn ffn_up_fused(hp: &HParams, il: usize) -> Vec<usize> {
    vec![hp.n_embd, 2 * hp.n_ff(il)]
}

/// The rows after the shared head.
const TENSORS: &[TensorSpec] = &[
    opt(RopeFactorsLong),
    opt(RopeFactorsShort),
    req(AttnNorm),
    req(AttnQkv),
    req(AttnOut),
    req(FfnNorm),
    req(FfnDown),
    req_shaped(FfnUp, ffn_up_fused),
];

/// The registry entry.
pub static DEF: ArchDef = ArchDef {
    name: "phi3",
    rope_mode: RopeMode::Neox,
    tensors: &[HEAD, TENSORS],
    load_hparams: no_extra_hparams,
    build,
};

fn build(b: &mut Builder<'_>) -> Result<(TensorId, TensorId)> {
    let hp = b.hp;
    let (mut inp_l, _) = b.inp_embd()?;
    let q_scale = 1.0 / (hp.n_embd_head_k as f32).sqrt();
    for il in 0..hp.n_layer {
        let cur = b.rms_norm(inp_l, AttnNorm, il)?;
        let mut qkv = b.qkv(cur, il)?;
        let q = b.rope(qkv.q, il)?;
        qkv.k = b.rope(qkv.k, il)?;
        qkv.q = b.g.scale(q, q_scale)?;
        let attn = b.attention(qkv, il, 1.0, 0.0)?;
        let cur = b.attn_out(attn, il)?;
        let (cur, residual) = b.last_layer_rows(il, cur, inp_l)?;
        let ffn_inp = b.g.add_op(cur, residual)?;
        let x = b.rms_norm(ffn_inp, FfnNorm, il)?;
        let down = b.ffn(x, Ffn::SwigluFused, il)?;
        inp_l = b.g.add_op(ffn_inp, down)?;
        inp_l = b.layer_out(inp_l, il)?;
    }
    b.output_head(inp_l, 0.0)
}
