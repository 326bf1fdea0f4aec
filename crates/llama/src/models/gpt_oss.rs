//! `gpt-oss` (OpenAI's gpt-oss-20b / -120b; llama.cpp's `openai-moe`):
//! pre-norm blocks whose attention has Q/K/V/O biases and a learned sink
//! logit per head, NeoX rope (YaRN from the file's scaling keys), every
//! other layer attending through a sliding window (pattern 2: even layers
//! windowed, odd layers full), and a mixture of experts with a biased
//! router, softmax over the selected logits and biased experts with the
//! clamped SwiGLU (`post_attention_norm` is the pre-FFN norm).

use ggml_core::{RopeMode, TensorId};

use crate::arch::{req, TensorKind::*, TensorSpec};
use crate::error::{LlamaError, Result};
use crate::graph::{Builder, Ffn};
use crate::hparams::{HParams, MetaView};
use crate::models::{ArchDef, ATTN, HEAD};

/// The rows after the shared head and attention projections.
const TENSORS: &[TensorSpec] = &[
    req(AttnQBias),
    req(AttnKBias),
    req(AttnVBias),
    req(AttnOutBias),
    req(AttnSinks),
    req(AttnPostNorm),
    req(FfnGateInp),
    req(FfnGateInpBias),
    req(FfnGateExps),
    req(FfnDownExps),
    req(FfnUpExps),
    req(FfnGateExpsBias),
    req(FfnDownExpsBias),
    req(FfnUpExpsBias),
];

/// The registry entry.
pub static DEF: ArchDef = ArchDef {
    name: "gpt-oss",
    rope_mode: RopeMode::Neox,
    tensors: &[HEAD, ATTN, TENSORS],
    load_hparams,
    build,
};

fn load_hparams(hp: &mut HParams, meta: &MetaView<'_>) -> Result<()> {
    if hp.n_expert == 0 {
        return Err(LlamaError::HParams(format!(
            "{} must be above 0: every gpt-oss layer is a mixture of experts",
            hp.arch.key("expert_count")
        )));
    }
    let key = hp.arch.key("attention.sliding_window");
    if meta.get_usize_opt(&key)?.is_none() {
        return Err(LlamaError::HParams(format!(
            "{key} is missing: gpt-oss needs the window of its sliding-window layers"
        )));
    }
    hp.load_swa(meta, 2, None)?;
    hp.rope_freq_base_train_swa = meta
        .get_f32_opt(&hp.arch.key("rope.freq_base_swa"))?
        .unwrap_or(hp.rope_freq_base_train);
    hp.rope_freq_scale_train_swa = hp.rope_freq_scale_train;
    Ok(())
}

fn build(b: &mut Builder<'_>) -> Result<(TensorId, TensorId)> {
    let hp = b.hp;
    let (mut inp_l, _) = b.inp_embd()?;
    let scale = 1.0 / (hp.n_rot as f32).sqrt();
    for il in 0..hp.n_layer {
        let cur = b.rms_norm(inp_l, AttnNorm, il)?;
        let mut qkv = b.qkv(cur, il)?;
        qkv.q = b.rope(qkv.q, il)?;
        qkv.k = b.rope(qkv.k, il)?;
        let sinks = b.weight(AttnSinks, il)?;
        let attn = b.attention_with_sinks(qkv, il, scale, 0.0, Some(sinks))?;
        let cur = b.attn_out(attn, il)?;
        let (cur, inp_sa) = b.last_layer_rows(il, cur, inp_l)?;
        let ffn_inp = b.g.add_op(cur, inp_sa)?;
        let x = b.rms_norm(ffn_inp, AttnPostNorm, il)?;
        let moe = b.ffn(x, Ffn::MoeSwigluOai, il)?;
        inp_l = b.g.add_op(moe, ffn_inp)?;
        inp_l = b.layer_out(inp_l, il)?;
    }
    b.output_head(inp_l, 0.0)
}
