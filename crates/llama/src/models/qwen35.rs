//! `qwen35`: Qwen3.5. Layers are gated DeltaNet linear attention
//! (`attention.recurrent_layers`, else every layer but each
//! `full_attention_interval`-th) or gated full attention (a sigmoid gate
//! per query value, per-head q/k RMS norms, interleaved multimodal rope
//! over `rope.dimension_count` dims with `rope.dimension_sections`). Every
//! layer: `x += mixer(norm(x))`, then `x += FFN(norm(x) *
//! post_attention_norm)`; the FFN is SwiGLU, or (`qwen35moe`) softmax
//! routed SwiGLU experts plus a shared expert gated by
//! sigmoid(`ffn_gate_inp_shexp` . x).
//!
//! For text every position component of the multimodal rope is the token
//! position, except the fourth, which is 0: the rotation is NeoX rope
//! where the sections give the pairs the first three components, and none
//! for pairs of the fourth. Sections that leave a rotated pair to the
//! fourth component are refused as not supported.

use ggml_core::{RopeMode, TensorId, UnaryOp};

use crate::arch::{Need, TensorKind, TensorKind::*, TensorSpec};
use crate::error::{LlamaError, Result};
use crate::graph::{Builder, Ffn};
use crate::hparams::{HParams, MetaView};
use crate::models::{kq_scale, ArchDef, HEAD};

const fn spec(kind: TensorKind, need: Need, shape: Option<crate::arch::ShapeFn>) -> TensorSpec {
    TensorSpec { kind, need, shape }
}

/// Query and gate values of every head.
fn q_gate_shape(hp: &HParams, il: usize) -> Vec<usize> {
    vec![hp.n_embd, 2 * hp.n_embd_head_k * hp.n_head(il)]
}

/// The q, k and v channels of a DeltaNet layer.
fn qkv_shape(hp: &HParams, _: usize) -> Vec<usize> {
    vec![hp.n_embd, hp.ssm_conv_dim()]
}

/// The norm shared by the V heads.
fn head_norm_shape(hp: &HParams, _: usize) -> Vec<usize> {
    vec![hp.ssm_d_state]
}

/// The mixers of a layer (with its pre-norm) and the FFN pre-norm.
pub const MIXERS: &[TensorSpec] = &[
    spec(AttnNorm, Need::Required, None),
    spec(AttnPostNorm, Need::Required, None),
    spec(AttnQ, Need::Attention, Some(q_gate_shape)),
    spec(AttnK, Need::Attention, None),
    spec(AttnV, Need::Attention, None),
    spec(AttnOut, Need::Attention, None),
    spec(AttnQNorm, Need::Attention, None),
    spec(AttnKNorm, Need::Attention, None),
    spec(AttnQkv, Need::Recurrent, Some(qkv_shape)),
    spec(AttnGate, Need::Recurrent, None),
    spec(SsmConv1d, Need::Recurrent, None),
    spec(SsmDtBias, Need::Recurrent, None),
    spec(SsmANoScan, Need::Recurrent, None),
    spec(SsmBeta, Need::Recurrent, None),
    spec(SsmAlpha, Need::Recurrent, None),
    spec(SsmNorm, Need::Recurrent, Some(head_norm_shape)),
    spec(SsmOut, Need::Recurrent, None),
];

/// The dense SwiGLU FFN (its pre-norm is `post_attention_norm`).
const FFN: &[TensorSpec] = &[
    spec(FfnGate, Need::Required, None),
    spec(FfnDown, Need::Required, None),
    spec(FfnUp, Need::Required, None),
];

/// The registry entry.
pub static DEF: ArchDef = ArchDef {
    name: "qwen35",
    rope_mode: RopeMode::Neox,
    tensors: &[HEAD, MIXERS, FFN],
    load_hparams,
    build,
};

fn load_hparams(hp: &mut HParams, meta: &MetaView<'_>) -> Result<()> {
    load_trunk(hp, meta)
}

/// The keys of the Qwen3.5 trunk (shared with `qwen35moe`): the DeltaNet
/// shapes, which layers are recurrent, the rope sections.
pub fn load_trunk(hp: &mut HParams, meta: &MetaView<'_>) -> Result<()> {
    let arch = hp.arch;
    let k = |s: &str| arch.key(s);
    hp.load_ssm(meta, true)?;
    if hp.ssm_d_inner / hp.ssm_dt_rank != hp.ssm_d_state {
        return Err(LlamaError::HParams(format!(
            "{} = {} over {} = {} gives V heads {} wide, but {} = {} (Q/K and V heads must be as wide)",
            k("ssm.inner_size"),
            hp.ssm_d_inner,
            k("ssm.time_step_rank"),
            hp.ssm_dt_rank,
            hp.ssm_d_inner / hp.ssm_dt_rank,
            k("ssm.state_size"),
            hp.ssm_d_state
        )));
    }
    hp.recurrent_layers = recurrent_layers(hp, meta)?;
    if hp.has_attention() {
        if hp.n_embd_head_k != hp.n_embd_head_v {
            return Err(LlamaError::HParams(format!(
                "{} = {} and {} = {} differ: gated attention needs equal head widths",
                k("attention.key_length"),
                hp.n_embd_head_k,
                k("attention.value_length"),
                hp.n_embd_head_v
            )));
        }
        check_rope_sections(hp, meta)?;
    }
    Ok(())
}

/// `attention.recurrent_layers` (one bool per layer) when present, else
/// every layer but each `full_attention_interval`-th (default 4).
fn recurrent_layers(hp: &HParams, meta: &MetaView<'_>) -> Result<Vec<bool>> {
    let key = hp.arch.key("attention.recurrent_layers");
    if let Some(v) = meta.metadata().get(&key) {
        let n = v.as_array().map(|a| a.len()).ok_or_else(|| {
            LlamaError::Metadata(format!(
                "key '{key}' is {}, need an array of bool",
                v.type_description()
            ))
        })?;
        if n != hp.n_layer {
            return Err(LlamaError::HParams(format!(
                "{key} has {n} entries, expected one per layer ({})",
                hp.n_layer
            )));
        }
        return meta
            .metadata()
            .get_array::<bool>(&key)
            .map_err(|e| LlamaError::Metadata(format!("key '{key}': {e}")));
    }
    let ikey = hp.arch.key("full_attention_interval");
    let interval = meta.get_usize_opt(&ikey)?.unwrap_or(4);
    if interval == 0 {
        return Err(LlamaError::HParams(format!(
            "{ikey} = 0: every n-th layer is full attention, n must be at least 1"
        )));
    }
    Ok((0..hp.n_layer).map(|il| (il + 1) % interval != 0).collect())
}

/// Reads the required `rope.dimension_sections` and checks that, for
/// text, every rotated pair takes one of the three position components
/// (interleaved: pair p of sector p mod the section total goes to
/// component sector mod 3 when sector < 3 * that component's section).
fn check_rope_sections(hp: &HParams, meta: &MetaView<'_>) -> Result<()> {
    let key = hp.arch.key("rope.dimension_sections");
    let Some(v) = meta.metadata().get(&key) else {
        return Err(LlamaError::HParams(format!(
            "key '{key}' not found: the multimodal rope of this architecture needs its sections"
        )));
    };
    let n = v.as_array().map(|a| a.len()).unwrap_or(0);
    if n == 0 || n > 4 {
        return Err(LlamaError::HParams(format!(
            "{key} must be an array of 1 to 4 integers, found {}",
            v.type_description()
        )));
    }
    let raw: Vec<i64> = meta
        .metadata()
        .get_array::<i32>(&key)
        .map(|v| v.into_iter().map(i64::from).collect())
        .or_else(|_| {
            meta.metadata()
                .get_array::<u32>(&key)
                .map(|v| v.into_iter().map(i64::from).collect())
        })
        .map_err(|e| LlamaError::Metadata(format!("key '{key}': {e}")))?;
    if raw.iter().any(|&x| !(0..=i64::from(u16::MAX)).contains(&x)) {
        return Err(LlamaError::HParams(format!(
            "{key} = {raw:?} has an entry outside 0..=65535"
        )));
    }
    let mut sec = [0usize; 4];
    for (d, &x) in sec.iter_mut().zip(&raw) {
        *d = x as usize;
    }
    let total: usize = sec.iter().sum();
    if sec[..3].iter().all(|&x| x == 0) {
        return Err(LlamaError::HParams(format!(
            "{key} = {raw:?}: the first three sections are all 0"
        )));
    }
    let text_pair = |p: usize| {
        let s = p % total;
        (s % 3 == 0 && s < 3 * sec[0])
            || (s % 3 == 1 && s < 3 * sec[1])
            || (s % 3 == 2 && s < 3 * sec[2])
    };
    if let Some(p) = (0..hp.n_rot / 2).find(|&p| !text_pair(p)) {
        return Err(LlamaError::NotSupported(format!(
            "{key} = {raw:?} leaves rotated pair {p} of {} to the fourth position component",
            hp.n_rot / 2
        )));
    }
    Ok(())
}

/// The Qwen3.5 decoder; `qwen35moe` layers carry experts and a gated
/// shared expert instead of the dense FFN.
pub fn build(b: &mut Builder<'_>) -> Result<(TensorId, TensorId)> {
    let hp = b.hp;
    let (mut inp_l, _) = b.inp_embd()?;
    let scale = kq_scale(hp);
    for il in 0..hp.n_layer {
        let cur = b.rms_norm(inp_l, AttnNorm, il)?;
        let cur = if hp.is_recurrent(il) {
            b.delta_net_mixer(cur, il)?
        } else {
            b.gated_attention(cur, il, scale)?
        };
        let (cur, inp_sa) = b.last_layer_rows(il, cur, inp_l)?;
        let ffn_inp = b.g.add_op(cur, inp_sa)?;
        let x = b.rms_norm(ffn_inp, AttnPostNorm, il)?;
        let out = if hp.n_expert > 0 {
            let moe = b.ffn(x, Ffn::MoeSwiglu, il)?;
            let sh = b.shared_expert(x, il)?;
            let gate = b.linear(x, FfnGateInpShexp, None, il)?;
            let gate = b.g.unary(gate, UnaryOp::Sigmoid)?;
            let sh = b.g.mul(sh, gate)?;
            b.g.add_op(moe, sh)?
        } else {
            b.ffn(x, Ffn::Swiglu, il)?
        };
        inp_l = b.g.add_op(out, ffn_inp)?;
        inp_l = b.layer_out(inp_l, il)?;
    }
    b.output_head(inp_l, 0.0)
}
