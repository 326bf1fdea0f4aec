//! `gemma3`: embeddings scaled by sqrt(n_embd), sandwich norms (post-attention
//! and post-FFN), per-head q/k RMS norms, NeoX rope with its own base on
//! sliding-window layers, GEGLU, optional final logit soft-capping, tied
//! output.

use ggml_core::{RopeMode, TensorId};

use crate::error::Result;
use crate::graph::Builder;
use crate::hparams::{HParams, MetaView};
use crate::models::{gemma2, gemma_query_scale, ArchDef, ATTN, HEAD, QK_NORM};

/// The registry entry.
pub static DEF: ArchDef = ArchDef {
    name: "gemma3",
    rope_mode: RopeMode::Neox,
    tensors: &[HEAD, ATTN, QK_NORM, gemma2::SANDWICH_REST],
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
    gemma2::decoder(b, true)
}
