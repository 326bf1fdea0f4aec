//! `qwen3`: the llama block with per-head q/k RMS norms before rope, NeoX
//! rope and no attention biases.

use ggml_core::{RopeMode, TensorId};

use crate::error::Result;
use crate::graph::Builder;
use crate::models::{llama, no_extra_hparams, ArchDef, ATTN, GATED_FFN, HEAD, QK_NORM};

/// The registry entry.
pub static DEF: ArchDef = ArchDef {
    name: "qwen3",
    rope_mode: RopeMode::Neox,
    tensors: &[HEAD, ATTN, QK_NORM, GATED_FFN],
    load_hparams: no_extra_hparams,
    build,
};

/// The qwen3 decoder, shared with qwen3moe (whose layers carry experts).
pub fn build(b: &mut Builder<'_>) -> Result<(TensorId, TensorId)> {
    llama::decoder(b, true)
}
