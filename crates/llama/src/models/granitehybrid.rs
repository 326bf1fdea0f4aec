//! `granitehybrid`: IBM Granite 4.0 hybrid. Layers whose
//! `attention.head_count_kv` is 0 are Mamba-2 mixers, the others attention
//! (rope only when `rope.scaling.finetuned` is true, which the converter
//! writes false for these models); every layer then has an FFN: a mixture
//! of SwiGLU experts (softmax router, weights renormalised) plus a shared
//! expert, or a dense SwiGLU. Granite's multipliers: the token embeddings
//! times `embedding_scale`, every mixer and FFN output times
//! `residual_scale` before its residual add, the logits divided by
//! `logit_scale`; the attention scale is `attention.scale`.

use ggml_core::{RopeMode, TensorId};

use crate::arch::{attn, dense, moe, opt, recr, recr_opt, req, shexp, TensorKind::*, TensorSpec};
use crate::error::Result;
use crate::graph::{Builder, Ffn};
use crate::hparams::{HParams, MetaView};
use crate::models::{kq_scale, ArchDef, HEAD};

/// A layer: the pre-norm, a Mamba-2 mixer or attention, and the FFN.
const LAYER: &[TensorSpec] = &[
    req(AttnNorm),
    recr(SsmIn),
    recr(SsmConv1d),
    recr_opt(SsmConv1dBias),
    recr(SsmDtBias),
    recr(SsmA),
    recr(SsmD),
    recr(SsmNorm),
    recr(SsmOut),
    attn(AttnQ),
    attn(AttnK),
    attn(AttnV),
    attn(AttnOut),
    opt(AttnOutBias),
    req(FfnNorm),
    dense(FfnGate),
    dense(FfnDown),
    dense(FfnUp),
    moe(FfnGateInp),
    moe(FfnGateExps),
    moe(FfnDownExps),
    moe(FfnUpExps),
    shexp(FfnGateShexp),
    shexp(FfnUpShexp),
    shexp(FfnDownShexp),
];

/// The registry entry.
pub static DEF: ArchDef = ArchDef {
    name: "granitehybrid",
    rope_mode: RopeMode::Normal,
    tensors: &[HEAD, LAYER],
    load_hparams,
    build,
};

fn load_hparams(hp: &mut HParams, meta: &MetaView<'_>) -> Result<()> {
    let arch = hp.arch;
    let k = |s: &str| arch.key(s);
    hp.f_logit_scale = meta.get_f32_opt(&k("logit_scale"))?.unwrap_or(0.0);
    hp.f_residual_scale = meta.get_f32_opt(&k("residual_scale"))?.unwrap_or(0.0);
    hp.f_embedding_scale = meta.get_f32_opt(&k("embedding_scale"))?.unwrap_or(0.0);
    hp.f_attention_scale = meta.get_f32_opt(&k("attention.scale"))?.unwrap_or(0.0);
    hp.use_rope = meta
        .get_bool_opt(&k("rope.scaling.finetuned"))?
        .unwrap_or(true);
    hp.load_ssm(meta, true)?;
    hp.require_ssm_expand_2()?;
    if hp.n_expert > 0 {
        // The experts are `feed_forward_length` wide unless the file says.
        for il in 0..hp.n_layer {
            if hp.n_ff_exp_arr[il] == 0 {
                hp.n_ff_exp_arr[il] = hp.n_ff(il);
            }
        }
        hp.expert_weights_norm = true;
        hp.n_ff_shexp = meta
            .get_usize_opt(&k("expert_shared_feed_forward_length"))?
            .unwrap_or(0);
        crate::hparams::checked_dim("n_ff_shexp * n_embd", &[hp.n_ff_shexp, hp.n_embd])?;
    } else if let Some(il) = (0..hp.n_layer).find(|&il| hp.n_ff(il) == 0) {
        return Err(crate::error::LlamaError::HParams(format!(
            "layer {il}: {} = 0 without experts",
            k("feed_forward_length")
        )));
    }
    Ok(())
}

fn build(b: &mut Builder<'_>) -> Result<(TensorId, TensorId)> {
    let hp = b.hp;
    let (mut inp_l, from_tokens) = b.inp_embd()?;
    if hp.f_embedding_scale != 0.0 && from_tokens {
        inp_l = b.g.scale(inp_l, hp.f_embedding_scale)?;
    }
    let scale = kq_scale(hp);
    let ffn = if hp.n_expert > 0 {
        Ffn::MoeSwiglu
    } else {
        Ffn::Swiglu
    };
    let residual = |b: &mut Builder<'_>, x: TensorId| -> Result<TensorId> {
        if hp.f_residual_scale != 0.0 {
            Ok(b.g.scale(x, hp.f_residual_scale)?)
        } else {
            Ok(x)
        }
    };
    for il in 0..hp.n_layer {
        let cur = b.rms_norm(inp_l, AttnNorm, il)?;
        let cur = if hp.is_recurrent(il) {
            b.ssm_mixer(cur, il)?
        } else {
            let mut qkv = b.qkv(cur, il)?;
            if hp.use_rope {
                qkv.q = b.rope(qkv.q, il)?;
                qkv.k = b.rope(qkv.k, il)?;
            }
            let a = b.attention(qkv, il, scale, 0.0)?;
            b.attn_out(a, il)?
        };
        let (cur, inp_sa) = b.last_layer_rows(il, cur, inp_l)?;
        let cur = residual(b, cur)?;
        let ffn_inp = b.g.add_op(cur, inp_sa)?;
        let x = b.rms_norm(ffn_inp, FfnNorm, il)?;
        let mut out = b.ffn(x, ffn, il)?;
        if hp.n_expert > 0 && hp.n_ff_shexp > 0 {
            let sh = b.shared_expert(x, il)?;
            out = b.g.add_op(out, sh)?;
        }
        let out = residual(b, out)?;
        inp_l = b.g.add_op(out, ffn_inp)?;
        inp_l = b.layer_out(inp_l, il)?;
    }
    let (logits, embd) = b.output_head(inp_l, 0.0)?;
    let logits = if hp.f_logit_scale != 0.0 {
        b.g.scale(logits, 1.0 / hp.f_logit_scale)?
    } else {
        logits
    };
    Ok((logits, embd))
}
