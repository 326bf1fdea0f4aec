//! `qwen3moe`: Qwen 3's attention (per-head q/k RMS norms before NeoX
//! rope) with a mixture of SwiGLU experts in every layer: softmax router,
//! top-k experts per token with their weights renormalised over the k,
//! experts `expert_feed_forward_length` wide.

use ggml_core::RopeMode;

use crate::arch::{req, TensorKind::*, TensorSpec};
use crate::error::{LlamaError, Result};
use crate::hparams::{HParams, MetaView};
use crate::models::{qwen3, ArchDef, ATTN, HEAD, QK_NORM};

/// The FFN pre-norm, the router and the stacked expert projections.
const MOE_FFN: &[TensorSpec] = &[
    req(FfnNorm),
    req(FfnGateInp),
    req(FfnGateExps),
    req(FfnDownExps),
    req(FfnUpExps),
];

/// The registry entry.
pub static DEF: ArchDef = ArchDef {
    name: "qwen3moe",
    rope_mode: RopeMode::Neox,
    tensors: &[HEAD, ATTN, QK_NORM, MOE_FFN],
    load_hparams,
    build: qwen3::build,
};

fn load_hparams(hp: &mut HParams, _: &MetaView<'_>) -> Result<()> {
    if hp.n_expert == 0 {
        return Err(LlamaError::HParams(format!(
            "{} must be above 0: every qwen3moe layer is a mixture of experts",
            hp.arch.key("expert_count")
        )));
    }
    // Without expert_feed_forward_length the experts split the FFN width.
    for il in 0..hp.n_layer {
        if hp.n_ff_exp_arr[il] == 0 {
            hp.n_ff_exp_arr[il] = hp.n_ff(il) / hp.n_expert_used(il);
        }
    }
    hp.expert_weights_norm = true;
    Ok(())
}
