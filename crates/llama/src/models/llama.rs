//! `llama`: Llama 1/2/3, Mistral, Mixtral, TinyLlama and llama2.c models.
//! Pre-norm blocks, normal (adjacent-pair) rope with optional frequency
//! factors, optional attention biases, SwiGLU, or with `llama.expert_count`
//! a mixture of SwiGLU experts (Mixtral: experts as wide as
//! `feed_forward_length`, top-k weights renormalised).

use ggml_core::{RopeMode, TensorId};

use crate::arch::{dense, moe, moe_opt, opt, req, TensorKind::*, TensorSpec};
use crate::error::Result;
use crate::graph::{Builder, Ffn};
use crate::hparams::{HParams, MetaView};
use crate::models::{kq_scale, ArchDef, ATTN, HEAD};

/// The rows after the shared head and attention: optional biases, and the
/// dense or the expert FFN.
const TENSORS: &[TensorSpec] = &[
    opt(AttnQBias),
    opt(AttnKBias),
    opt(AttnVBias),
    opt(AttnOutBias),
    req(FfnNorm),
    dense(FfnGate),
    dense(FfnDown),
    dense(FfnUp),
    moe(FfnGateInp),
    moe_opt(FfnGateExps),
    moe(FfnDownExps),
    moe(FfnUpExps),
];

/// The registry entry.
pub static DEF: ArchDef = ArchDef {
    name: "llama",
    rope_mode: RopeMode::Normal,
    tensors: &[HEAD, &[opt(RopeFreqs)], ATTN, TENSORS],
    load_hparams,
    build,
};

fn load_hparams(hp: &mut HParams, _: &MetaView<'_>) -> Result<()> {
    if hp.n_expert > 0 {
        // Mixtral's experts are as wide as the dense FFN would be.
        hp.n_ff_exp_arr = hp.n_ff_arr.clone();
        hp.expert_weights_norm = true;
    }
    Ok(())
}

/// The llama block, shared with the architectures that differ only in
/// their tables (qwen2).
pub fn build(b: &mut Builder<'_>) -> Result<(TensorId, TensorId)> {
    decoder(b, false)
}

/// The pre-norm SwiGLU decoder; `qk_norm` adds per-head RMS norms of Q and
/// K before rope (qwen3). Models with experts use the mixture-of-experts
/// FFN.
pub fn decoder(b: &mut Builder<'_>, qk_norm: bool) -> Result<(TensorId, TensorId)> {
    let hp = b.hp;
    let (mut inp_l, _) = b.inp_embd()?;
    let scale = kq_scale(hp);
    let ffn = if hp.n_expert > 0 {
        Ffn::MoeSwiglu
    } else {
        Ffn::Swiglu
    };
    for il in 0..hp.n_layer {
        let cur = b.rms_norm(inp_l, AttnNorm, il)?;
        let mut qkv = b.qkv(cur, il)?;
        if qk_norm {
            qkv.q = b.rms_norm(qkv.q, AttnQNorm, il)?;
            qkv.k = b.rms_norm(qkv.k, AttnKNorm, il)?;
        }
        qkv.q = b.rope(qkv.q, il)?;
        qkv.k = b.rope(qkv.k, il)?;
        let attn = b.attention(qkv, il, scale, 0.0)?;
        let cur = b.attn_out(attn, il)?;
        let (cur, inp_sa) = b.last_layer_rows(il, cur, inp_l)?;
        let ffn_inp = b.g.add_op(cur, inp_sa)?;
        let x = b.rms_norm(ffn_inp, FfnNorm, il)?;
        let down = b.ffn(x, ffn, il)?;
        inp_l = b.g.add_op(down, ffn_inp)?;
        inp_l = b.layer_out(inp_l, il)?;
    }
    b.output_head(inp_l, 0.0)
}
