//! `qwen2`: the llama block with required q/k/v biases and NeoX rope.

use ggml_core::RopeMode;

use crate::arch::{req, tied, TensorKind::*, TensorSpec};
use crate::models::{llama, no_extra_hparams, ArchDef};

const TENSORS: &[TensorSpec] = &[
    req(TokenEmbd),
    req(OutputNorm),
    tied(Output),
    req(AttnNorm),
    req(AttnQ),
    req(AttnK),
    req(AttnV),
    req(AttnOut),
    req(AttnQBias),
    req(AttnKBias),
    req(AttnVBias),
    req(FfnNorm),
    req(FfnGate),
    req(FfnDown),
    req(FfnUp),
];

/// The registry entry.
pub static DEF: ArchDef = ArchDef {
    name: "qwen2",
    rope_mode: RopeMode::Neox,
    tensors: TENSORS,
    load_hparams: no_extra_hparams,
    build: llama::build,
};
