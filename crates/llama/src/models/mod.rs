//! One module per architecture: its hyperparameter keys beyond the common
//! ones, its tensor table and its graph builder, on the shared blocks of
//! [`crate::graph`]. Adding an architecture is adding a module and a line to
//! [`REGISTRY`].

mod deepseek2;
mod gemma2;
mod gemma3;
mod gpt_oss;
mod granitehybrid;
mod lfm2;
mod lfm2moe;
mod llama;
mod mamba;
mod mamba2;
mod phi3;
mod qwen2;
mod qwen3;
mod qwen35;
mod qwen35moe;
mod qwen3moe;
mod rwkv6;
mod rwkv7;

use ggml_core::{RopeMode, TensorId};

use crate::arch::{req, tied, TensorKind::*, TensorSpec};
use crate::error::Result;
use crate::graph::Builder;
use crate::hparams::{HParams, MetaView};

/// Reads the architecture's own keys after the common ones.
pub type HParamsFn = fn(&mut HParams, &MetaView<'_>) -> Result<()>;

/// Builds the forward graph; returns (logits, final normed hidden state).
pub type BuildFn = fn(&mut Builder<'_>) -> Result<(TensorId, TensorId)>;

/// What the rest of the crate knows about an architecture.
pub struct ArchDef {
    /// `general.architecture` value, also the metadata key prefix.
    pub name: &'static str,
    /// Rotary embedding layout.
    pub rope_mode: RopeMode,
    /// Tensors of the model, with presence rules: the table in parts (the
    /// shared ones below and the architecture's own), read in order.
    pub tensors: &'static [&'static [TensorSpec]],
    /// Architecture-specific hyperparameters.
    pub load_hparams: HParamsFn,
    /// Graph builder.
    pub build: BuildFn,
}

/// Every supported architecture.
pub static REGISTRY: &[&ArchDef] = &[
    &llama::DEF,
    &qwen2::DEF,
    &qwen3::DEF,
    &qwen3moe::DEF,
    &gemma2::DEF,
    &gemma3::DEF,
    &phi3::DEF,
    &mamba::DEF,
    &mamba2::DEF,
    &granitehybrid::DEF,
    &rwkv6::DEF,
    &rwkv7::DEF,
    &qwen35::DEF,
    &qwen35moe::DEF,
    &gpt_oss::DEF,
    &deepseek2::DEF,
    &lfm2::DEF,
    &lfm2moe::DEF,
];

/// The rows outside the layers that every decoder has: token embeddings,
/// the final norm and the output projection (tied to the embeddings when
/// the file has none).
pub const HEAD: &[TensorSpec] = &[req(TokenEmbd), req(OutputNorm), tied(Output)];

/// The attention pre-norm and separate Q, K, V and output projections.
pub const ATTN: &[TensorSpec] = &[
    req(AttnNorm),
    req(AttnQ),
    req(AttnK),
    req(AttnV),
    req(AttnOut),
];

/// Per-head RMS norms of Q and K (before rope).
pub const QK_NORM: &[TensorSpec] = &[req(AttnQNorm), req(AttnKNorm)];

/// The FFN pre-norm and the gate, down and up projections of a gated FFN.
pub const GATED_FFN: &[TensorSpec] = &[req(FfnNorm), req(FfnGate), req(FfnDown), req(FfnUp)];

/// No architecture-specific keys.
pub fn no_extra_hparams(_: &mut HParams, _: &MetaView<'_>) -> Result<()> {
    Ok(())
}

/// 1/sqrt(head width), or the model's own attention scale.
pub fn kq_scale(hp: &HParams) -> f32 {
    if hp.f_attention_scale != 0.0 {
        hp.f_attention_scale
    } else {
        1.0 / (hp.n_embd_head_k as f32).sqrt()
    }
}

/// The query scale of Gemma 2 and 3: 1/sqrt(head width), except in the
/// 27B models (`n_layer_27b` layers), which scale by the model width per
/// head.
pub fn gemma_query_scale(hp: &HParams, n_layer_27b: usize) -> f32 {
    if hp.n_layer == n_layer_27b {
        1.0 / ((hp.n_embd / hp.n_head(0)) as f32).sqrt()
    } else {
        1.0 / (hp.n_embd_head_k as f32).sqrt()
    }
}
