//! `gemma3`: embeddings scaled by sqrt(n_embd), sandwich norms (post-attention
//! and post-FFN), per-head q/k RMS norms, NeoX rope with its own base on
//! sliding-window layers, GEGLU, optional final logit soft-capping, tied
//! output.

use ggml_core::{RopeMode, TensorId};

use crate::arch::{req, tied, TensorKind::*, TensorSpec};
use crate::error::Result;
use crate::graph::{Builder, Ffn};
use crate::hparams::{HParams, MetaView};
use crate::models::ArchDef;

const TENSORS: &[TensorSpec] = &[
    req(TokenEmbd),
    req(OutputNorm),
    tied(Output),
    req(AttnNorm),
    req(AttnQ),
    req(AttnK),
    req(AttnV),
    req(AttnOut),
    req(AttnQNorm),
    req(AttnKNorm),
    req(AttnPostNorm),
    req(FfnNorm),
    req(FfnGate),
    req(FfnDown),
    req(FfnUp),
    req(FfnPostNorm),
];

/// The registry entry.
pub static DEF: ArchDef = ArchDef {
    name: "gemma3",
    rope_mode: RopeMode::Neox,
    tensors: TENSORS,
    load_hparams,
    build,
};

fn load_hparams(hp: &mut HParams, meta: &MetaView<'_>) -> Result<()> {
    hp.load_swa(meta, 6, None)?;
    if hp.n_swa > 0 {
        if let Some(b) = meta.get_f32_opt(&hp.arch.key("rope.freq_base_swa"))? {
            hp.rope_freq_base_train_swa = b;
        }
    }
    hp.f_final_logit_softcapping = meta
        .get_f32_opt(&hp.arch.key("final_logit_softcapping"))?
        .unwrap_or(0.0);
    // Gemma 3 27B (62 layers) scales by the model width per head.
    hp.f_attention_scale = if hp.n_layer == 62 {
        1.0 / ((hp.n_embd / hp.n_head(0)) as f32).sqrt()
    } else {
        1.0 / (hp.n_embd_head_k as f32).sqrt()
    };
    Ok(())
}

fn build(b: &mut Builder<'_>) -> Result<(TensorId, TensorId)> {
    decoder(b, true)
}

/// The Gemma 2/3 decoder; `qk_norm` adds the per-head q/k norms of Gemma 3.
/// Attention and final soft-capping come from the hyperparameters.
pub fn decoder(b: &mut Builder<'_>, qk_norm: bool) -> Result<(TensorId, TensorId)> {
    let hp = b.hp;
    let (x, from_tokens) = b.inp_embd()?;
    let mut inp_l = if from_tokens {
        b.g.scale(x, (hp.n_embd as f32).sqrt())?
    } else {
        x
    };
    for il in 0..hp.n_layer {
        let cur = b.rms_norm(inp_l, AttnNorm, il)?;
        let mut qkv = b.qkv(cur, il)?;
        if qk_norm {
            qkv.q = b.rms_norm(qkv.q, AttnQNorm, il)?;
            qkv.k = b.rms_norm(qkv.k, AttnKNorm, il)?;
        }
        let q = b.rope(qkv.q, il)?;
        qkv.k = b.rope(qkv.k, il)?;
        qkv.q = b.g.scale(q, hp.f_attention_scale)?;
        let attn = b.attention(qkv, il, 1.0, hp.f_attn_logit_softcapping)?;
        let mut cur = b.attn_out(attn, il)?;
        if il == hp.n_layer - 1 {
            cur = b.out_rows(cur)?;
            inp_l = b.out_rows(inp_l)?;
        }
        let cur = b.rms_norm(cur, AttnPostNorm, il)?;
        let sa_out = b.g.add_op(cur, inp_l)?;
        let x = b.rms_norm(sa_out, FfnNorm, il)?;
        let down = b.ffn(x, Ffn::Geglu, il)?;
        let cur = b.rms_norm(down, FfnPostNorm, il)?;
        inp_l = b.g.add_op(cur, sa_out)?;
        b.g.set_name(inp_l, format!("l_out-{il}"));
    }
    b.output_head(inp_l, hp.f_final_logit_softcapping)
}
