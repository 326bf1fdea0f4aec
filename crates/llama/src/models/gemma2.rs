//! `gemma2`: the Gemma decoder without q/k norms, with attention logit
//! soft-capping (default 50) and final logit soft-capping (default 30), and
//! sliding-window attention on every other layer (window 4096 unless the
//! file says otherwise).

use ggml_core::{RopeMode, TensorId};

use crate::arch::{req, TensorKind::*, TensorSpec};
use crate::error::Result;
use crate::graph::{Builder, Ffn};
use crate::hparams::{HParams, MetaView};
use crate::models::{gemma_query_scale, ArchDef, ATTN, HEAD};

/// The rows of a layer after its attention projections (and gemma3's q/k
/// norms): the post-attention norm and the sandwich-normed gated FFN.
pub const SANDWICH_REST: &[TensorSpec] = &[
    req(AttnPostNorm),
    req(FfnNorm),
    req(FfnGate),
    req(FfnDown),
    req(FfnUp),
    req(FfnPostNorm),
];

/// The registry entry.
pub static DEF: ArchDef = ArchDef {
    name: "gemma2",
    rope_mode: RopeMode::Neox,
    tensors: &[HEAD, ATTN, SANDWICH_REST],
    load_hparams,
    build,
};

fn load_hparams(hp: &mut HParams, meta: &MetaView<'_>) -> Result<()> {
    hp.load_swa(meta, 2, Some(4096))?;
    hp.rope_freq_base_train_swa = meta
        .get_f32_opt(&hp.arch.key("rope.freq_base_swa"))?
        .unwrap_or(hp.rope_freq_base_train);
    hp.rope_freq_scale_train_swa = hp.rope_freq_scale_train;
    hp.f_attn_logit_softcapping = meta
        .get_f32_opt(&hp.arch.key("attn_logit_softcapping"))?
        .unwrap_or(50.0);
    hp.f_final_logit_softcapping = meta
        .get_f32_opt(&hp.arch.key("final_logit_softcapping"))?
        .unwrap_or(30.0);
    // Gemma 2 27B has 46 layers.
    hp.f_attention_scale = gemma_query_scale(hp, 46);
    Ok(())
}

fn build(b: &mut Builder<'_>) -> Result<(TensorId, TensorId)> {
    decoder(b, false)
}

/// The Gemma decoder of sandwich-normed attention and GEGLU blocks, shared
/// with gemma3; `qk_norm` adds per-head RMS norms of Q and K (gemma3).
pub fn decoder(b: &mut Builder<'_>, qk_norm: bool) -> Result<(TensorId, TensorId)> {
    let mut x = b.gemma_input()?;
    for il in 0..b.hp.n_layer {
        let sa_out = b.sandwich_attention(x, il, qk_norm)?;
        x = b.sandwich_ffn(sa_out, Ffn::Geglu, il)?;
    }
    b.output_head(x, b.hp.f_final_logit_softcapping)
}
