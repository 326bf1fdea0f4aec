//! `qwen3`: the llama block with per-head q/k RMS norms before rope, NeoX
//! rope and no attention biases.

use ggml_core::{RopeMode, TensorId};

use crate::arch::{req, tied, TensorKind::*, TensorSpec};
use crate::error::Result;
use crate::graph::Builder;
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
    req(AttnQNorm),
    req(AttnKNorm),
    req(FfnNorm),
    req(FfnGate),
    req(FfnDown),
    req(FfnUp),
];

/// The registry entry.
pub static DEF: ArchDef = ArchDef {
    name: "qwen3",
    rope_mode: RopeMode::Neox,
    tensors: TENSORS,
    load_hparams: no_extra_hparams,
    build,
};

/// The qwen3 decoder, shared with qwen3moe (whose layers carry experts).
pub fn build(b: &mut Builder<'_>) -> Result<(TensorId, TensorId)> {
    llama::decoder(b, true)
}
