//! `deepseek2`: DeepSeek V2 / V2-Lite / V3 / R1 and the models built on
//! them. Multi-head latent attention ([`crate::graph`]'s `mla`) with or
//! without a low-rank query; normal (adjacent-pair) rope on the rotary
//! part of each head, YaRN with DeepSeek's mscale carried by the attention
//! scale; `leading_dense_block_count` layers with a dense SwiGLU FFN, the
//! others a mixture of SwiGLU experts (softmax or sigmoid scores, the
//! optional choice bias `exp_probs_b`, expert groups, renormalised and
//! scaled weights) plus shared experts.

use ggml_core::{RopeMode, TensorId};

use crate::arch::{
    dense, moe, moe_opt, req, req_shaped, shexp, when, Need, TensorKind::*, TensorSpec, When,
};
use crate::error::{LlamaError, Result};
use crate::graph::{Builder, Ffn};
use crate::hparams::{checked_dim, ExpertGating, HParams, MetaView, Mla};
use crate::models::{ArchDef, HEAD};

/// A layer: the attention pre-norm, latent attention in either query and
/// key/value layout, and the dense or the expert FFN.
const LAYER: &[TensorSpec] = &[
    req(AttnNorm),
    when(AttnQANorm, When::QLora),
    req(AttnKvANorm),
    when(AttnQA, When::QLora),
    when(AttnQB, When::QLora),
    TensorSpec {
        kind: AttnQ,
        need: Need::If(When::NoQLora),
        shape: Some(q_shape),
    },
    req(AttnKvAMqa),
    when(AttnKB, When::MlaAbsorbed),
    when(AttnVB, When::MlaAbsorbed),
    when(AttnKvB, When::MlaFused),
    req_shaped(AttnOut, out_shape),
    req(FfnNorm),
    dense(FfnGate),
    dense(FfnDown),
    dense(FfnUp),
    moe(FfnGateInp),
    moe_opt(FfnExpProbsB),
    moe(FfnDownExps),
    moe(FfnGateExps),
    moe(FfnUpExps),
    shexp(FfnGateShexp),
    shexp(FfnDownShexp),
    shexp(FfnUpShexp),
];

/// The registry entry.
pub static DEF: ArchDef = ArchDef {
    name: "deepseek2",
    rope_mode: RopeMode::Normal,
    tensors: &[HEAD, LAYER],
    load_hparams,
    build,
};

/// `attn_q` [n_embd, n_head * head_k]: the heads' query width is MLA's,
/// not the cache's key row.
fn q_shape(hp: &HParams, il: usize) -> Vec<usize> {
    let head_k = hp.mla.map_or(0, |m| m.head_k);
    vec![hp.n_embd, hp.n_head(il) * head_k]
}

/// `attn_output` [n_head * head_v, n_embd] with MLA's value width.
fn out_shape(hp: &HParams, il: usize) -> Vec<usize> {
    let head_v = hp.mla.map_or(0, |m| m.head_v);
    vec![hp.n_head(il) * head_v, hp.n_embd]
}

/// Layer counts of the "lite" models (DeepSeek-V2-Lite and kin), which may
/// leave out `attention.q_lora_rank` (llama.cpp's heuristic).
fn is_lite(hp: &HParams) -> bool {
    hp.n_layer == 26 || hp.n_layer == 27 || (hp.n_layer == 48 && hp.n_vocab == 128_256)
}

fn load_hparams(hp: &mut HParams, meta: &MetaView<'_>) -> Result<()> {
    let arch = hp.arch;
    let k = |s: &str| arch.key(s);
    let err = |msg: String| Err(LlamaError::HParams(msg));
    hp.n_layer_dense_lead = meta
        .get_usize_opt(&k("leading_dense_block_count"))?
        .unwrap_or(0);
    let q_lora_rank = if is_lite(hp) {
        meta.get_usize_opt(&k("attention.q_lora_rank"))?
            .unwrap_or(0)
    } else {
        meta.get_usize(&k("attention.q_lora_rank"))?
    };
    let kv_lora_rank = meta.get_usize(&k("attention.kv_lora_rank"))?;
    let key_mla = meta.get_usize_opt(&k("attention.key_length_mla"))?;
    let value_mla = meta.get_usize_opt(&k("attention.value_length_mla"))?;
    if kv_lora_rank == 0 {
        return err(format!(
            "{} = 0 must be positive",
            k("attention.kv_lora_rank")
        ));
    }
    checked_dim(&k("attention.q_lora_rank"), &[q_lora_rank])?;
    checked_dim(&k("attention.kv_lora_rank"), &[kv_lora_rank])?;
    let mla = match (key_mla, value_mla) {
        // The absorbed layout: the converter writes the cache's row widths
        // as key_length (latent + rope) and value_length (latent).
        (Some(head_k), Some(head_v)) => {
            if hp.n_embd_head_k != kv_lora_rank + hp.n_rot || hp.n_embd_head_v != kv_lora_rank {
                return err(format!(
                    "{} = {} and {} = {} must be {} + {} (kv_lora_rank + rope) and {} \
                     (kv_lora_rank) with {} present",
                    k("attention.key_length"),
                    hp.n_embd_head_k,
                    k("attention.value_length"),
                    hp.n_embd_head_v,
                    k("attention.kv_lora_rank"),
                    k("rope.dimension_count"),
                    k("attention.kv_lora_rank"),
                    k("attention.key_length_mla")
                ));
            }
            if (0..hp.n_layer).any(|il| hp.n_head_kv(il) != 1) {
                return err(format!(
                    "{} must be 1 with {}: the latent is shared by every head",
                    k("attention.head_count_kv"),
                    k("attention.key_length_mla")
                ));
            }
            Mla {
                q_lora_rank,
                kv_lora_rank,
                head_k,
                head_v,
                absorbed: true,
            }
        }
        (None, None) => Mla {
            q_lora_rank,
            kv_lora_rank,
            head_k: hp.n_embd_head_k,
            head_v: hp.n_embd_head_v,
            absorbed: false,
        },
        _ => {
            return err(format!(
                "{} and {} must both be present or both absent",
                k("attention.key_length_mla"),
                k("attention.value_length_mla")
            ))
        }
    };
    if mla.head_k <= hp.n_rot || mla.head_v == 0 {
        return err(format!(
            "query/key head width {} must exceed {} = {} and the value width {} be positive",
            mla.head_k,
            k("rope.dimension_count"),
            hp.n_rot,
            mla.head_v
        ));
    }
    for &w in &[mla.head_k, mla.head_v] {
        checked_dim("MLA head width * n_head", &[w, hp.n_head(0).max(1), 2])?;
    }
    checked_dim("MLA latent + rope", &[kv_lora_rank + hp.n_rot, 2])?;
    hp.mla = Some(mla);

    let has_moe_layers = hp.n_layer_dense_lead < hp.n_layer;
    if has_moe_layers && hp.n_expert == 0 {
        return err(format!(
            "{} must be above 0: layers {}.. are mixtures of experts ({} = {})",
            k("expert_count"),
            hp.n_layer_dense_lead,
            k("leading_dense_block_count"),
            hp.n_layer_dense_lead
        ));
    }
    if hp.n_expert > 0 {
        let n_shared = meta.get_usize(&k("expert_shared_count"))?;
        // The routed experts' width must be given (the dense width is the
        // leading layers').
        meta.get_per_layer(&k("expert_feed_forward_length"), hp.n_layer)?;
        let first_moe = hp.n_layer_dense_lead.min(hp.n_layer - 1);
        hp.n_ff_shexp = checked_dim(
            &k("expert_shared_count"),
            &[hp.n_ff_exp(first_moe), n_shared],
        )?;
        checked_dim("n_ff_shexp * n_embd", &[hp.n_ff_shexp, hp.n_embd])?;
        // Dense leading layers have no expert width of their own.
        for il in 0..hp.n_layer_dense_lead.min(hp.n_layer) {
            if hp.n_ff_exp_arr[il] == 0 {
                hp.n_ff_exp_arr[il] = hp.n_ff_exp(first_moe);
            }
        }
        hp.expert_weights_scale = meta.get_f32_opt(&k("expert_weights_scale"))?.unwrap_or(0.0);
        hp.expert_weights_norm = meta
            .get_bool_opt(&k("expert_weights_norm"))?
            .unwrap_or(false);
        hp.expert_gating = match meta.get_usize_opt(&k("expert_gating_func"))? {
            None | Some(0) => {
                // Older V2 files have no gating key; GLM-4.7-Flash is
                // known by its shape (llama.cpp's rule).
                if (hp.n_layer == 47 || hp.n_layer == 48) && hp.n_vocab == 154_880 {
                    ExpertGating::Sigmoid
                } else {
                    ExpertGating::Softmax
                }
            }
            Some(1) => ExpertGating::Softmax,
            Some(2) => ExpertGating::Sigmoid,
            Some(other) => {
                return Err(LlamaError::NotSupported(format!(
                    "{} = {other} (1: softmax and 2: sigmoid are supported)",
                    k("expert_gating_func")
                )))
            }
        };
        load_expert_groups(hp, meta)?;
    }
    if let Some(m) = meta.get_f32_opt(&k("rope.scaling.yarn_log_multiplier"))? {
        // The converter writes 0.1 x mscale_all_dim.
        hp.rope_yarn_log_mul = m / 0.1;
        if hp.rope_yarn_log_mul != 1.0 {
            hp.rope_yarn_mscale = hp.rope_yarn_log_mul;
        }
    }
    if meta
        .get_f32_opt(&k("attention.temperature_scale"))?
        .is_some_and(|t| t != 0.0)
    {
        return Err(LlamaError::NotSupported(format!(
            "{} (attention temperature tuning)",
            k("attention.temperature_scale")
        )));
    }
    Ok(())
}

/// Reads `expert_group_count` and `expert_group_used_count`: the groups
/// must split the experts evenly, hold at least two experts each (a group
/// scores by its two best) and fewer groups be used than there are.
fn load_expert_groups(hp: &mut HParams, meta: &MetaView<'_>) -> Result<()> {
    let arch = hp.arch;
    let (gk, uk, ek) = (
        arch.key("expert_group_count"),
        arch.key("expert_group_used_count"),
        arch.key("expert_count"),
    );
    let groups = meta.get_usize_opt(&gk)?.unwrap_or(0);
    let used = meta.get_usize_opt(&uk)?.unwrap_or(0);
    if groups <= 1 {
        return Ok(());
    }
    let err = |msg: String| Err(LlamaError::HParams(msg));
    if groups >= hp.n_expert {
        return err(format!(
            "{gk} = {groups} must be below {ek} = {}",
            hp.n_expert
        ));
    }
    if hp.n_expert % groups != 0 {
        return err(format!(
            "{gk} = {groups} does not divide {ek} = {}",
            hp.n_expert
        ));
    }
    if hp.n_expert / groups < 2 {
        return err(format!(
            "{gk} = {groups} leaves fewer than 2 of {ek} = {} experts per group",
            hp.n_expert
        ));
    }
    if used == 0 || used >= groups {
        return err(format!(
            "{uk} = {used} must be between 1 and {gk} - 1 = {}",
            groups - 1
        ));
    }
    if let Some(il) =
        (0..hp.n_layer).find(|&il| hp.n_expert_used(il) > used * (hp.n_expert / groups))
    {
        return err(format!(
            "{} = {} (layer {il}) is more than the {} experts of {uk} = {used} groups",
            arch.key("expert_used_count"),
            hp.n_expert_used(il),
            used * (hp.n_expert / groups)
        ));
    }
    hp.n_expert_groups = groups;
    hp.n_group_used = used;
    Ok(())
}

fn build(b: &mut Builder<'_>) -> Result<(TensorId, TensorId)> {
    let hp = b.hp;
    let (mut inp_l, _) = b.inp_embd()?;
    for il in 0..hp.n_layer {
        let cur = b.rms_norm(inp_l, AttnNorm, il)?;
        let attn = b.mla_attention(cur, il)?;
        let cur = b.attn_out(attn, il)?;
        let (cur, inp_sa) = b.last_layer_rows(il, cur, inp_l)?;
        let ffn_inp = b.g.add_op(cur, inp_sa)?;
        let x = b.rms_norm(ffn_inp, FfnNorm, il)?;
        let out = if hp.is_dense_ffn(il) {
            b.ffn(x, Ffn::Swiglu, il)?
        } else {
            let routed = b.moe_ffn(x, il)?;
            let shared = b.shared_expert(x, il)?;
            b.g.add_op(routed, shared)?
        };
        inp_l = b.g.add_op(out, ffn_inp)?;
        inp_l = b.layer_out(inp_l, il)?;
    }
    b.output_head(inp_l, 0.0)
}
