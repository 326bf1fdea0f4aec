//! `gemma3`: embeddings scaled by sqrt(n_embd), sandwich norms (post-attention
//! and post-FFN), per-head q/k RMS norms, NeoX rope with its own base on
//! sliding-window layers, GEGLU, optional final logit soft-capping, tied
//! output.

use ggml_core::{RopeMode, TensorId};

use crate::arch::{req, tied, TensorKind::*, TensorSpec};
use crate::error::Result;
use crate::graph::{Builder, Ffn};
use crate::hparams::{HParams, MetaView};
use crate::models::{gemma_query_scale, ArchDef};

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
    // Gemma 3 27B has 62 layers.
    hp.f_attention_scale = gemma_query_scale(hp, 62);
    Ok(())
}

fn build(b: &mut Builder<'_>) -> Result<(TensorId, TensorId)> {
    let mut x = b.gemma_input()?;
    for il in 0..b.hp.n_layer {
        let sa_out = b.sandwich_attention(x, il, true)?;
        x = b.sandwich_ffn(sa_out, Ffn::Geglu, il)?;
    }
    b.output_head(x, b.hp.f_final_logit_softcapping)
}
