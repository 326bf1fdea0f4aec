//! `gemma2`: the Gemma decoder without q/k norms, with attention logit
//! soft-capping (default 50) and final logit soft-capping (default 30), and
//! sliding-window attention on every other layer (window 4096 unless the
//! file says otherwise).

use ggml_core::{RopeMode, TensorId};

use crate::arch::{req, tied, TensorKind::*, TensorSpec};
use crate::error::Result;
use crate::graph::Builder;
use crate::hparams::{HParams, MetaView};
use crate::models::{gemma3, ArchDef};

const TENSORS: &[TensorSpec] = &[
    req(TokenEmbd),
    req(OutputNorm),
    tied(Output),
    req(AttnNorm),
    req(AttnQ),
    req(AttnK),
    req(AttnV),
    req(AttnOut),
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
    tensors: TENSORS,
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
    // Gemma 2 27B (46 layers) scales by the model width per head.
    hp.f_attention_scale = if hp.n_layer == 46 {
        1.0 / ((hp.n_embd / hp.n_head(0)) as f32).sqrt()
    } else {
        1.0 / (hp.n_embd_head_k as f32).sqrt()
    };
    Ok(())
}

fn build(b: &mut Builder<'_>) -> Result<(TensorId, TensorId)> {
    gemma3::decoder(b, false)
}
