//! `qwen2`: the llama block with required q/k/v biases and NeoX rope.

use ggml_core::RopeMode;

use crate::arch::{req, TensorKind::*, TensorSpec};
use crate::models::{llama, no_extra_hparams, ArchDef, ATTN, GATED_FFN, HEAD};

/// Qwen 2's required Q, K and V biases.
const BIASES: &[TensorSpec] = &[req(AttnQBias), req(AttnKBias), req(AttnVBias)];

/// The registry entry.
pub static DEF: ArchDef = ArchDef {
    name: "qwen2",
    rope_mode: RopeMode::Neox,
    tensors: &[HEAD, ATTN, BIASES, GATED_FFN],
    load_hparams: no_extra_hparams,
    build: llama::build,
};
