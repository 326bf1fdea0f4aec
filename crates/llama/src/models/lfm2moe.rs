//! `lfm2moe`: Liquid LFM2 with mixtures of experts (LFM2-8B-A1B,
//! LFM2-24B-A2B). The trunk of [`super::lfm2`] (short gated convolutions
//! where `attention.head_count_kv` is 0, attention with per-head Q and K
//! norms elsewhere); the first `leading_dense_block_count` layers have a
//! dense SwiGLU FFN, the others SwiGLU experts `expert_feed_forward_length`
//! wide, chosen by the router's probabilities (softmax or sigmoid,
//! `expert_gating_func`) plus the choice bias `exp_probs_b`, their weights
//! renormalised over the chosen experts.

use ggml_core::RopeMode;

use crate::arch::{dense, moe, req, TensorKind::*, TensorSpec};
use crate::error::{LlamaError, Result};
use crate::hparams::{checked_dim, ExpertGating, HParams, MetaView};
use crate::models::{lfm2, ArchDef};

/// The FFN of a layer: dense in the leading layers, experts after them.
const FFN: &[TensorSpec] = &[
    req(FfnNorm),
    dense(FfnGate),
    dense(FfnDown),
    dense(FfnUp),
    moe(FfnGateInp),
    moe(FfnExpProbsB),
    moe(FfnGateExps),
    moe(FfnDownExps),
    moe(FfnUpExps),
];

/// The registry entry.
pub static DEF: ArchDef = ArchDef {
    name: "lfm2moe",
    rope_mode: RopeMode::Neox,
    tensors: &[lfm2::HEAD, lfm2::LAYER, FFN],
    load_hparams,
    build: lfm2::build,
};

fn load_hparams(hp: &mut HParams, meta: &MetaView<'_>) -> Result<()> {
    let arch = hp.arch;
    let k = |s: &str| arch.key(s);
    hp.n_layer_dense_lead = meta
        .get_usize_opt(&k("leading_dense_block_count"))?
        .unwrap_or(0);
    lfm2::load_trunk(hp, meta)?;
    if hp.n_layer_dense_lead < hp.n_layer && (hp.n_expert == 0 || hp.n_expert_used(0) == 0) {
        return Err(LlamaError::HParams(format!(
            "{} and {} must be above 0: layers {}.. are mixtures of experts ({} = {})",
            k("expert_count"),
            k("expert_used_count"),
            hp.n_layer_dense_lead,
            k("leading_dense_block_count"),
            hp.n_layer_dense_lead
        )));
    }
    if hp.n_expert > 0 {
        // The width must be given (the dense width is the leading layers').
        meta.get_per_layer(&k("expert_feed_forward_length"), hp.n_layer)?;
        for il in hp.n_layer_dense_lead..hp.n_layer {
            let ff = hp.n_ff_exp(il);
            if ff == 0 {
                return Err(LlamaError::HParams(format!(
                    "layer {il}: {} = 0",
                    k("expert_feed_forward_length")
                )));
            }
            checked_dim(
                &k("expert_feed_forward_length"),
                &[ff, hp.n_embd, hp.n_expert],
            )?;
        }
        hp.expert_gating = match meta.get_usize(&k("expert_gating_func"))? {
            1 => ExpertGating::Softmax,
            2 => ExpertGating::Sigmoid,
            other => {
                return Err(LlamaError::NotSupported(format!(
                    "{} = {other} (1: softmax and 2: sigmoid are supported)",
                    k("expert_gating_func")
                )))
            }
        };
        // The experts' weights are always renormalised and never scaled.
        hp.expert_weights_norm = true;
        hp.expert_weights_scale = 0.0;
    }
    Ok(())
}
