//! `qwen35moe`: the Qwen3.5 trunk of [`super::qwen35`] with a mixture of
//! SwiGLU experts in every layer (softmax router, top-k weights
//! renormalised) plus a shared expert gated per token by
//! sigmoid(`ffn_gate_inp_shexp` . x).

use ggml_core::RopeMode;

use crate::arch::{req, TensorKind::*, TensorSpec};
use crate::error::{LlamaError, Result};
use crate::hparams::{checked_dim, HParams, MetaView};
use crate::models::{qwen35, ArchDef, HEAD};

/// The router, the stacked experts and the gated shared expert.
const MOE_FFN: &[TensorSpec] = &[
    req(FfnGateInp),
    req(FfnGateExps),
    req(FfnDownExps),
    req(FfnUpExps),
    req(FfnGateInpShexp),
    req(FfnGateShexp),
    req(FfnUpShexp),
    req(FfnDownShexp),
];

/// The registry entry.
pub static DEF: ArchDef = ArchDef {
    name: "qwen35moe",
    rope_mode: RopeMode::Neox,
    tensors: &[HEAD, qwen35::MIXERS, MOE_FFN],
    load_hparams,
    build: qwen35::build,
};

fn load_hparams(hp: &mut HParams, meta: &MetaView<'_>) -> Result<()> {
    qwen35::load_trunk(hp, meta)?;
    if hp.n_expert == 0 {
        return Err(LlamaError::HParams(format!(
            "{} must be above 0: every qwen35moe layer is a mixture of experts",
            hp.arch.key("expert_count")
        )));
    }
    // Without expert_feed_forward_length the experts split the FFN width;
    // the shared expert is feed_forward_length wide unless the file says.
    for il in 0..hp.n_layer {
        if hp.n_ff_exp_arr[il] == 0 {
            hp.n_ff_exp_arr[il] = hp.n_ff(il) / hp.n_expert_used(il);
        }
    }
    hp.expert_weights_norm = true;
    let key = hp.arch.key("expert_shared_feed_forward_length");
    hp.n_ff_shexp = match meta.get_usize_opt(&key)? {
        Some(n) if n > 0 => n,
        _ => hp.n_ff(0),
    };
    if hp.n_ff_shexp == 0 {
        return Err(LlamaError::HParams(format!(
            "{key} and feed_forward_length are 0: the shared expert needs a width"
        )));
    }
    checked_dim("n_ff_shexp * n_embd", &[hp.n_ff_shexp, hp.n_embd])?;
    Ok(())
}
