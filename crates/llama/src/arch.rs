//! Tensor roles and the one table that says, for each role, its GGUF name,
//! whether it exists once or per layer, and the op that reads it (llama.cpp's
//! `LLM_TENSOR_INFOS`). Placement probing, `is_matrix` and weight assembly all
//! read this table; the architectures themselves live in [`crate::models`].

use ggml_core::RopeMode;

use crate::error::{LlamaError, Result};
use crate::hparams::HParams;
use crate::models::{ArchDef, REGISTRY};

/// A supported model architecture: a handle on its entry of the registry in
/// [`crate::models`].
#[derive(Clone, Copy)]
pub struct Arch(&'static ArchDef);

impl PartialEq for Arch {
    fn eq(&self, other: &Arch) -> bool {
        self.0.name == other.0.name
    }
}

impl Eq for Arch {}

impl std::fmt::Debug for Arch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Arch({})", self.0.name)
    }
}

impl Arch {
    /// Every supported architecture, in registry order.
    pub fn all() -> impl Iterator<Item = Arch> {
        REGISTRY.iter().map(|d| Arch(d))
    }

    /// The architecture named by `general.architecture`.
    pub fn from_name(name: &str) -> Result<Arch> {
        Arch::all()
            .find(|a| a.name() == name)
            .ok_or_else(|| LlamaError::UnknownArch(name.to_string()))
    }

    /// The registry entry: hparams hook, tensor table, graph builder.
    pub fn def(self) -> &'static ArchDef {
        self.0
    }

    /// The GGUF name, also the prefix of its metadata keys.
    pub fn name(self) -> &'static str {
        self.0.name
    }

    /// Rotary embedding layout.
    pub fn rope_mode(self) -> RopeMode {
        self.0.rope_mode
    }

    /// The tensor table, row by row (its parts in order).
    pub fn tensors(self) -> impl Iterator<Item = &'static TensorSpec> + Clone {
        self.0.tensors.iter().flat_map(|part| part.iter())
    }

    /// `{arch}.{suffix}`, e.g. `llama.context_length`.
    pub fn key(self, suffix: &str) -> String {
        format!("{}.{suffix}", self.name())
    }
}

/// The role of a tensor in a model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TensorKind {
    /// Token embeddings [n_embd, n_vocab].
    TokenEmbd,
    /// Final norm [n_embd].
    OutputNorm,
    /// Output projection [n_embd, n_vocab] (tied to the embeddings when absent).
    Output,
    /// Rope frequency factors [n_rot / 2] (llama 3.1).
    RopeFreqs,
    /// Long-context rope factors [n_rot / 2] (phi3).
    RopeFactorsLong,
    /// Short-context rope factors [n_rot / 2] (phi3).
    RopeFactorsShort,
    /// Attention norm [n_embd].
    AttnNorm,
    /// Query projection.
    AttnQ,
    /// Key projection.
    AttnK,
    /// Value projection.
    AttnV,
    /// Fused query/key/value projection (phi3).
    AttnQkv,
    /// Attention output projection.
    AttnOut,
    /// Query bias.
    AttnQBias,
    /// Key bias.
    AttnKBias,
    /// Value bias.
    AttnVBias,
    /// Attention output bias.
    AttnOutBias,
    /// Per-head query RMS norm [n_embd_head_k].
    AttnQNorm,
    /// Per-head key RMS norm [n_embd_head_k].
    AttnKNorm,
    /// Norm of the attention output before the residual add [n_embd].
    AttnPostNorm,
    /// FFN norm [n_embd].
    FfnNorm,
    /// FFN gate projection.
    FfnGate,
    /// FFN down projection.
    FfnDown,
    /// FFN up projection (gate and up fused in phi3).
    FfnUp,
    /// Norm of the FFN output before the residual add [n_embd].
    FfnPostNorm,
    /// Expert router [n_embd, n_expert].
    FfnGateInp,
    /// Gate projections of all experts [n_embd, n_ff_exp, n_expert].
    FfnGateExps,
    /// Up projections of all experts [n_embd, n_ff_exp, n_expert].
    FfnUpExps,
    /// Down projections of all experts [n_ff_exp, n_embd, n_expert].
    FfnDownExps,
    /// Gate projection of the shared expert [n_embd, n_ff_shexp].
    FfnGateShexp,
    /// Up projection of the shared expert [n_embd, n_ff_shexp].
    FfnUpShexp,
    /// Down projection of the shared expert [n_ff_shexp, n_embd].
    FfnDownShexp,
    /// SSM input projection (Mamba: x and z; Mamba-2: z, x, B, C, dt).
    SsmIn,
    /// Depthwise causal convolution kernel [d_conv, conv channels].
    SsmConv1d,
    /// Bias of the convolution [conv channels].
    SsmConv1dBias,
    /// Mamba's projection of x to dt, B and C [d_inner, dt_rank + 2 d_state].
    SsmX,
    /// Mamba's projection of dt [dt_rank, d_inner].
    SsmDt,
    /// Bias of dt (Mamba: [d_inner]; Mamba-2: one per head).
    SsmDtBias,
    /// State decay A (Mamba: [d_state, d_inner]; Mamba-2: [1, n_head]).
    SsmA,
    /// Skip connection D (Mamba: [d_inner]; Mamba-2: [1, n_head]).
    SsmD,
    /// Mamba-2's grouped RMS norm [d_inner / n_group, n_group].
    SsmNorm,
    /// SSM output projection [d_inner, n_embd].
    SsmOut,
    /// LayerNorm of the token embeddings [n_embd] (RWKV; on the first layer, as llama.cpp places it).
    TokenEmbdNorm,
    /// Bias of the embeddings' LayerNorm [n_embd].
    TokenEmbdNormBias,
    /// Bias of the final LayerNorm [n_embd].
    OutputNormBias,
    /// Bias of the attention (time mix) LayerNorm [n_embd].
    AttnNormBias,
    /// RWKV's LayerNorm before the channel mix [n_embd].
    AttnNorm2,
    /// Bias of the channel mix LayerNorm [n_embd].
    AttnNorm2Bias,
    /// RWKV-6: lerp of the token shift into the lerps' input [n_embd, 1, 1].
    TimeMixLerpX,
    /// The token-shift lerps, fused [n_embd, 1, 1, 5 (RWKV-6) or 6 (RWKV-7)].
    TimeMixLerpFused,
    /// RWKV-7: decay bias [n_embd].
    TimeMixW0,
    /// Low-rank down projection of the lerps (RWKV-6) or of the decay (RWKV-7).
    TimeMixW1,
    /// Low-rank up projection of the lerps (RWKV-6, one per lerp) or of the decay (RWKV-7).
    TimeMixW2,
    /// RWKV-7: in-context learning rate bias [n_embd].
    TimeMixA0,
    /// RWKV-7: in-context learning rate down projection.
    TimeMixA1,
    /// RWKV-7: in-context learning rate up projection.
    TimeMixA2,
    /// RWKV-7: value residual mix bias [n_embd].
    TimeMixV0,
    /// RWKV-7: value residual mix down projection.
    TimeMixV1,
    /// RWKV-7: value residual mix up projection.
    TimeMixV2,
    /// RWKV-7: output gate down projection.
    TimeMixG1,
    /// RWKV-7: output gate up projection.
    TimeMixG2,
    /// RWKV-7: key scale of the normalized removal key [n_embd].
    TimeMixKK,
    /// RWKV-7: key scale by the learning rate [n_embd].
    TimeMixKA,
    /// RWKV-7: per-head bonus of r . k [n_embd].
    TimeMixRK,
    /// RWKV-6: the current token's bonus u [head_size, n_head].
    TimeMixFirst,
    /// RWKV-6: decay bias [n_embd].
    TimeMixDecay,
    /// RWKV-6: decay down projection.
    TimeMixDecayW1,
    /// RWKV-6: decay up projection.
    TimeMixDecayW2,
    /// Time mix key projection.
    TimeMixKey,
    /// Time mix value projection.
    TimeMixValue,
    /// Time mix receptance projection.
    TimeMixReceptance,
    /// RWKV-6: output gate projection.
    TimeMixGate,
    /// Per-head GroupNorm weight of the WKV output [n_embd].
    TimeMixLn,
    /// Per-head GroupNorm bias [n_embd].
    TimeMixLnBias,
    /// Time mix output projection.
    TimeMixOutput,
    /// Channel mix lerp of the key input [n_embd, 1, 1].
    ChannelMixLerpK,
    /// RWKV-6: channel mix lerp of the receptance input [n_embd, 1, 1].
    ChannelMixLerpR,
    /// Channel mix key projection [n_embd, n_ff].
    ChannelMixKey,
    /// Channel mix value projection [n_ff, n_embd].
    ChannelMixValue,
    /// RWKV-6: channel mix receptance projection [n_embd, n_embd].
    ChannelMixReceptance,
}

/// Number of [`TensorKind`]s.
pub const N_TENSOR_KINDS: usize = 79;

/// Where a tensor lives in the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Once, in the input layer (on the CPU).
    Input,
    /// Once, in the output layer.
    Output,
    /// Once, with the first repeating layer (rope factors read by every layer).
    Rope,
    /// Once per repeating layer.
    Layer,
}

/// The op that reads a weight: the probe of its buffer type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TensorOp {
    /// GET_ROWS (embeddings).
    GetRows,
    /// MUL (norm weights).
    Mul,
    /// ADD (biases).
    Add,
    /// MUL_MAT (projections).
    MulMat,
    /// MUL_MAT_ID (expert projections, one matrix per selected expert).
    MulMatId,
    /// ROPE frequency factors.
    Rope,
    /// SSM_CONV (the convolution kernel).
    SsmConv,
    /// SSM_SCAN (the state decay A).
    SsmScan,
    /// RWKV_WKV6 (the bonus u).
    RwkvWkv6,
}

/// One row of the tensor-info table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    /// GGUF name without the `blk.N.` prefix.
    pub name: &'static str,
    /// Global or per layer.
    pub scope: Scope,
    /// The op that reads it.
    pub op: TensorOp,
}

const fn ti(name: &'static str, scope: Scope, op: TensorOp) -> TensorInfo {
    TensorInfo { name, scope, op }
}

impl TensorKind {
    /// Index in per-layer tables.
    pub fn index(self) -> usize {
        self as usize
    }

    /// The tensor-info row of this kind.
    pub const fn info(self) -> TensorInfo {
        use Scope::*;
        use TensorOp::*;
        match self {
            TensorKind::TokenEmbd => ti("token_embd.weight", Input, GetRows),
            TensorKind::OutputNorm => ti("output_norm.weight", Output, Mul),
            TensorKind::Output => ti("output.weight", Output, MulMat),
            TensorKind::RopeFreqs => ti("rope_freqs.weight", Scope::Rope, TensorOp::Rope),
            TensorKind::RopeFactorsLong => {
                ti("rope_factors_long.weight", Scope::Rope, TensorOp::Rope)
            }
            TensorKind::RopeFactorsShort => {
                ti("rope_factors_short.weight", Scope::Rope, TensorOp::Rope)
            }
            TensorKind::AttnNorm => ti("attn_norm.weight", Layer, Mul),
            TensorKind::AttnQ => ti("attn_q.weight", Layer, MulMat),
            TensorKind::AttnK => ti("attn_k.weight", Layer, MulMat),
            TensorKind::AttnV => ti("attn_v.weight", Layer, MulMat),
            TensorKind::AttnQkv => ti("attn_qkv.weight", Layer, MulMat),
            TensorKind::AttnOut => ti("attn_output.weight", Layer, MulMat),
            TensorKind::AttnQBias => ti("attn_q.bias", Layer, Add),
            TensorKind::AttnKBias => ti("attn_k.bias", Layer, Add),
            TensorKind::AttnVBias => ti("attn_v.bias", Layer, Add),
            TensorKind::AttnOutBias => ti("attn_output.bias", Layer, Add),
            TensorKind::AttnQNorm => ti("attn_q_norm.weight", Layer, Mul),
            TensorKind::AttnKNorm => ti("attn_k_norm.weight", Layer, Mul),
            TensorKind::AttnPostNorm => ti("post_attention_norm.weight", Layer, Mul),
            TensorKind::FfnNorm => ti("ffn_norm.weight", Layer, Mul),
            TensorKind::FfnGate => ti("ffn_gate.weight", Layer, MulMat),
            TensorKind::FfnDown => ti("ffn_down.weight", Layer, MulMat),
            TensorKind::FfnUp => ti("ffn_up.weight", Layer, MulMat),
            TensorKind::FfnPostNorm => ti("post_ffw_norm.weight", Layer, Mul),
            TensorKind::FfnGateInp => ti("ffn_gate_inp.weight", Layer, MulMat),
            TensorKind::FfnGateExps => ti("ffn_gate_exps.weight", Layer, MulMatId),
            TensorKind::FfnUpExps => ti("ffn_up_exps.weight", Layer, MulMatId),
            TensorKind::FfnDownExps => ti("ffn_down_exps.weight", Layer, MulMatId),
            TensorKind::FfnGateShexp => ti("ffn_gate_shexp.weight", Layer, MulMat),
            TensorKind::FfnUpShexp => ti("ffn_up_shexp.weight", Layer, MulMat),
            TensorKind::FfnDownShexp => ti("ffn_down_shexp.weight", Layer, MulMat),
            TensorKind::SsmIn => ti("ssm_in.weight", Layer, MulMat),
            TensorKind::SsmConv1d => ti("ssm_conv1d.weight", Layer, SsmConv),
            TensorKind::SsmConv1dBias => ti("ssm_conv1d.bias", Layer, Add),
            TensorKind::SsmX => ti("ssm_x.weight", Layer, MulMat),
            TensorKind::SsmDt => ti("ssm_dt.weight", Layer, MulMat),
            TensorKind::SsmDtBias => ti("ssm_dt.bias", Layer, Add),
            TensorKind::SsmA => ti("ssm_a", Layer, SsmScan),
            TensorKind::SsmD => ti("ssm_d", Layer, Mul),
            TensorKind::SsmNorm => ti("ssm_norm.weight", Layer, Mul),
            TensorKind::SsmOut => ti("ssm_out.weight", Layer, MulMat),
            TensorKind::TokenEmbdNorm => ti("token_embd_norm.weight", Scope::Rope, Mul),
            TensorKind::TokenEmbdNormBias => ti("token_embd_norm.bias", Scope::Rope, Add),
            TensorKind::OutputNormBias => ti("output_norm.bias", Output, Add),
            TensorKind::AttnNormBias => ti("attn_norm.bias", Layer, Add),
            TensorKind::AttnNorm2 => ti("attn_norm_2.weight", Layer, Mul),
            TensorKind::AttnNorm2Bias => ti("attn_norm_2.bias", Layer, Add),
            TensorKind::TimeMixLerpX => ti("time_mix_lerp_x.weight", Layer, Mul),
            TensorKind::TimeMixLerpFused => ti("time_mix_lerp_fused.weight", Layer, Add),
            TensorKind::TimeMixW0 => ti("time_mix_w0.weight", Layer, Add),
            TensorKind::TimeMixW1 => ti("time_mix_w1.weight", Layer, MulMat),
            TensorKind::TimeMixW2 => ti("time_mix_w2.weight", Layer, MulMat),
            TensorKind::TimeMixA0 => ti("time_mix_a0.weight", Layer, Add),
            TensorKind::TimeMixA1 => ti("time_mix_a1.weight", Layer, MulMat),
            TensorKind::TimeMixA2 => ti("time_mix_a2.weight", Layer, MulMat),
            TensorKind::TimeMixV0 => ti("time_mix_v0.weight", Layer, Add),
            TensorKind::TimeMixV1 => ti("time_mix_v1.weight", Layer, MulMat),
            TensorKind::TimeMixV2 => ti("time_mix_v2.weight", Layer, MulMat),
            TensorKind::TimeMixG1 => ti("time_mix_g1.weight", Layer, MulMat),
            TensorKind::TimeMixG2 => ti("time_mix_g2.weight", Layer, MulMat),
            TensorKind::TimeMixKK => ti("time_mix_k_k.weight", Layer, Mul),
            TensorKind::TimeMixKA => ti("time_mix_k_a.weight", Layer, Mul),
            TensorKind::TimeMixRK => ti("time_mix_r_k.weight", Layer, Mul),
            TensorKind::TimeMixFirst => ti("time_mix_first.weight", Layer, RwkvWkv6),
            TensorKind::TimeMixDecay => ti("time_mix_decay.weight", Layer, Add),
            TensorKind::TimeMixDecayW1 => ti("time_mix_decay_w1.weight", Layer, MulMat),
            TensorKind::TimeMixDecayW2 => ti("time_mix_decay_w2.weight", Layer, MulMat),
            TensorKind::TimeMixKey => ti("time_mix_key.weight", Layer, MulMat),
            TensorKind::TimeMixValue => ti("time_mix_value.weight", Layer, MulMat),
            TensorKind::TimeMixReceptance => ti("time_mix_receptance.weight", Layer, MulMat),
            TensorKind::TimeMixGate => ti("time_mix_gate.weight", Layer, MulMat),
            TensorKind::TimeMixLn => ti("time_mix_ln.weight", Layer, Mul),
            TensorKind::TimeMixLnBias => ti("time_mix_ln.bias", Layer, Add),
            TensorKind::TimeMixOutput => ti("time_mix_output.weight", Layer, MulMat),
            TensorKind::ChannelMixLerpK => ti("channel_mix_lerp_k.weight", Layer, Mul),
            TensorKind::ChannelMixLerpR => ti("channel_mix_lerp_r.weight", Layer, Mul),
            TensorKind::ChannelMixKey => ti("channel_mix_key.weight", Layer, MulMat),
            TensorKind::ChannelMixValue => ti("channel_mix_value.weight", Layer, MulMat),
            TensorKind::ChannelMixReceptance => ti("channel_mix_receptance.weight", Layer, MulMat),
        }
    }

    /// The GGUF name (`token_embd.weight`, `blk.N.attn_q.weight`).
    pub fn name(self, layer: Option<usize>) -> String {
        let base = self.info().name;
        match layer {
            Some(il) => format!("blk.{il}.{base}"),
            None => base.to_string(),
        }
    }

    /// True when the tensor exists once per repeating layer.
    pub fn per_layer(self) -> bool {
        self.info().scope == Scope::Layer
    }

    /// The shape the hyperparameters imply for the common layout, for layer
    /// `il` when per layer. Architectures with fused tensors give their own
    /// shape in their table.
    pub fn shape(self, hp: &HParams, il: usize) -> Vec<usize> {
        let n_embd = hp.n_embd;
        let q_width = hp.n_embd_head_k * hp.n_head(il);
        let r = &hp.rwkv;
        match self {
            TensorKind::TokenEmbd | TensorKind::Output => vec![n_embd, hp.n_vocab],
            TensorKind::OutputNorm
            | TensorKind::AttnNorm
            | TensorKind::FfnNorm
            | TensorKind::AttnPostNorm
            | TensorKind::FfnPostNorm
            | TensorKind::AttnOutBias => vec![n_embd],
            TensorKind::RopeFreqs | TensorKind::RopeFactorsLong | TensorKind::RopeFactorsShort => {
                vec![hp.n_rot / 2]
            }
            TensorKind::AttnQNorm | TensorKind::AttnKNorm => vec![hp.n_embd_head_k],
            TensorKind::AttnQ => vec![n_embd, q_width],
            TensorKind::AttnK => vec![n_embd, hp.n_embd_k_gqa(il)],
            TensorKind::AttnV => vec![n_embd, hp.n_embd_v_gqa(il)],
            TensorKind::AttnQkv => {
                vec![n_embd, q_width + hp.n_embd_k_gqa(il) + hp.n_embd_v_gqa(il)]
            }
            TensorKind::AttnOut => vec![hp.n_embd_head_v * hp.n_head(il), n_embd],
            TensorKind::AttnQBias => vec![q_width],
            TensorKind::AttnKBias => vec![hp.n_embd_k_gqa(il)],
            TensorKind::AttnVBias => vec![hp.n_embd_v_gqa(il)],
            TensorKind::FfnGate | TensorKind::FfnUp => vec![n_embd, hp.n_ff(il)],
            TensorKind::FfnDown => vec![hp.n_ff(il), n_embd],
            TensorKind::FfnGateInp => vec![n_embd, hp.n_expert],
            TensorKind::FfnGateExps | TensorKind::FfnUpExps => {
                vec![n_embd, hp.n_ff_exp(il), hp.n_expert]
            }
            TensorKind::FfnDownExps => vec![hp.n_ff_exp(il), n_embd, hp.n_expert],
            TensorKind::FfnGateShexp | TensorKind::FfnUpShexp => vec![n_embd, hp.n_ff_shexp],
            TensorKind::FfnDownShexp => vec![hp.n_ff_shexp, n_embd],
            TensorKind::SsmIn => vec![n_embd, hp.ssm_d_in_proj()],
            TensorKind::SsmConv1d => vec![hp.ssm_d_conv, hp.ssm_conv_dim()],
            TensorKind::SsmConv1dBias => vec![hp.ssm_conv_dim()],
            TensorKind::SsmX => vec![hp.ssm_d_inner, hp.ssm_dt_rank + 2 * hp.ssm_d_state],
            TensorKind::SsmDt => vec![hp.ssm_dt_rank, hp.ssm_d_inner],
            TensorKind::SsmDtBias => vec![hp.ssm_n_dt()],
            TensorKind::SsmA if hp.ssm_n_group == 0 => vec![hp.ssm_d_state, hp.ssm_d_inner],
            TensorKind::SsmA => vec![1, hp.ssm_dt_rank],
            TensorKind::SsmD if hp.ssm_n_group == 0 => vec![hp.ssm_d_inner],
            TensorKind::SsmD => vec![1, hp.ssm_dt_rank],
            TensorKind::SsmNorm => vec![
                hp.ssm_d_inner / hp.ssm_n_group.max(1),
                hp.ssm_n_group.max(1),
            ],
            TensorKind::SsmOut => vec![hp.ssm_d_inner, n_embd],
            TensorKind::TokenEmbdNorm => vec![n_embd],
            TensorKind::TokenEmbdNormBias => vec![n_embd],
            TensorKind::OutputNormBias => vec![n_embd],
            TensorKind::AttnNormBias => vec![n_embd],
            TensorKind::AttnNorm2 => vec![n_embd],
            TensorKind::AttnNorm2Bias => vec![n_embd],
            TensorKind::TimeMixLerpX => vec![n_embd, 1, 1],
            TensorKind::TimeMixLerpFused => {
                vec![n_embd, 1, 1, if r.time_mix_extra_dim > 0 { 5 } else { 6 }]
            }
            TensorKind::TimeMixW0 => vec![n_embd],
            TensorKind::TimeMixW1 => {
                if r.time_mix_extra_dim > 0 {
                    vec![n_embd, 5 * r.time_mix_extra_dim]
                } else {
                    vec![n_embd, r.n_lora_decay]
                }
            }
            TensorKind::TimeMixW2 => {
                if r.time_mix_extra_dim > 0 {
                    vec![r.time_mix_extra_dim, n_embd, 5]
                } else {
                    vec![r.n_lora_decay, n_embd]
                }
            }
            TensorKind::TimeMixA0 => vec![n_embd],
            TensorKind::TimeMixA1 => vec![n_embd, r.n_lora_iclr],
            TensorKind::TimeMixA2 => vec![r.n_lora_iclr, n_embd],
            TensorKind::TimeMixV0 => vec![n_embd],
            TensorKind::TimeMixV1 => vec![n_embd, r.value_res_rank(il)],
            TensorKind::TimeMixV2 => vec![r.value_res_rank(il), n_embd],
            TensorKind::TimeMixG1 => vec![n_embd, r.n_lora_gate],
            TensorKind::TimeMixG2 => vec![r.n_lora_gate, n_embd],
            TensorKind::TimeMixKK => vec![n_embd],
            TensorKind::TimeMixKA => vec![n_embd],
            TensorKind::TimeMixRK => vec![n_embd],
            TensorKind::TimeMixFirst => vec![r.head_size, r.n_head(n_embd)],
            TensorKind::TimeMixDecay => vec![n_embd],
            TensorKind::TimeMixDecayW1 => vec![n_embd, r.time_decay_extra_dim],
            TensorKind::TimeMixDecayW2 => vec![r.time_decay_extra_dim, n_embd],
            TensorKind::TimeMixKey => vec![n_embd, n_embd],
            TensorKind::TimeMixValue => vec![n_embd, n_embd],
            TensorKind::TimeMixReceptance => vec![n_embd, n_embd],
            TensorKind::TimeMixGate => vec![n_embd, n_embd],
            TensorKind::TimeMixLn => vec![n_embd],
            TensorKind::TimeMixLnBias => vec![n_embd],
            TensorKind::TimeMixOutput => vec![n_embd, n_embd],
            TensorKind::ChannelMixLerpK => vec![n_embd, 1, 1],
            TensorKind::ChannelMixLerpR => vec![n_embd, 1, 1],
            TensorKind::ChannelMixKey => vec![n_embd, hp.n_ff(il)],
            TensorKind::ChannelMixValue => vec![hp.n_ff(il), n_embd],
            TensorKind::ChannelMixReceptance => vec![n_embd, n_embd],
        }
    }

    /// True when the op that reads the tensor is a matrix multiplication.
    pub fn is_matrix(self) -> bool {
        matches!(self.info().op, TensorOp::MulMat | TensorOp::MulMatId)
    }

    /// True for the 3-d tensors holding one matrix per expert.
    pub fn is_expert(self) -> bool {
        self.info().op == TensorOp::MulMatId
    }
}

/// Whether a tensor must be present.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// Loading fails without it.
    Required,
    /// May be absent.
    Optional,
    /// May be absent; then the token embeddings are used (tied output).
    TiedToEmbd,
    /// Required when the model has no experts (`expert_count` 0), and not
    /// read otherwise: the dense FFN of an architecture with both layouts.
    Dense,
    /// Required when the model has experts, not read otherwise.
    Moe,
    /// May be present when the model has experts, not read otherwise.
    MoeOptional,
    /// Required in recurrent layers, not read in the others.
    Recurrent,
    /// May be present in recurrent layers, not read in the others.
    RecurrentOptional,
    /// Required in attention layers (every layer that is not recurrent),
    /// not read in the others.
    Attention,
    /// Required when the model has experts and a shared expert
    /// (`expert_shared_feed_forward_length` above 0).
    SharedExpert,
}

impl Need {
    /// Whether a model with `n_expert` experts reads the tensor at all.
    pub fn applies(self, n_expert: usize) -> bool {
        match self {
            Need::Dense => n_expert == 0,
            Need::Moe | Need::MoeOptional | Need::SharedExpert => n_expert > 0,
            Need::Required
            | Need::Optional
            | Need::TiedToEmbd
            | Need::Recurrent
            | Need::RecurrentOptional
            | Need::Attention => true,
        }
    }

    /// Whether layer `il` of a model with `hp` reads the tensor at all.
    pub fn applies_to(self, hp: &HParams, il: Option<usize>) -> bool {
        if !self.applies(hp.n_expert) {
            return false;
        }
        let recurrent = il.is_some_and(|il| hp.is_recurrent(il));
        match self {
            Need::Recurrent | Need::RecurrentOptional => recurrent,
            Need::Attention => !recurrent,
            Need::SharedExpert => hp.n_ff_shexp > 0,
            _ => true,
        }
    }

    /// Whether loading fails when the tensor is absent (and read).
    pub fn required(self) -> bool {
        matches!(
            self,
            Need::Required
                | Need::Dense
                | Need::Moe
                | Need::Recurrent
                | Need::Attention
                | Need::SharedExpert
        )
    }
}

/// The shape of a tensor as a function of the hyperparameters and layer.
pub type ShapeFn = fn(&HParams, usize) -> Vec<usize>;

/// One row of an architecture's tensor table.
#[derive(Clone, Copy, Debug)]
pub struct TensorSpec {
    /// Role.
    pub kind: TensorKind,
    /// Presence rule.
    pub need: Need,
    /// The expected shape when it differs from [`TensorKind::shape`].
    pub shape: Option<ShapeFn>,
}

impl TensorSpec {
    /// Once per layer, or once per model (from the tensor-info table).
    pub fn per_layer(&self) -> bool {
        self.kind.per_layer()
    }

    /// The expected shape for layer `il`.
    pub fn expected_shape(&self, hp: &HParams, il: usize) -> Vec<usize> {
        match self.shape {
            Some(f) => f(hp, il),
            None => self.kind.shape(hp, il),
        }
    }
}

/// A required tensor of the common shape.
pub const fn req(kind: TensorKind) -> TensorSpec {
    TensorSpec {
        kind,
        need: Need::Required,
        shape: None,
    }
}

/// An optional tensor of the common shape.
pub const fn opt(kind: TensorKind) -> TensorSpec {
    TensorSpec {
        kind,
        need: Need::Optional,
        shape: None,
    }
}

/// The output projection, tied to the embeddings when absent.
pub const fn tied(kind: TensorKind) -> TensorSpec {
    TensorSpec {
        kind,
        need: Need::TiedToEmbd,
        shape: None,
    }
}

/// A tensor of the dense FFN of an architecture that also has an expert
/// layout.
pub const fn dense(kind: TensorKind) -> TensorSpec {
    TensorSpec {
        kind,
        need: Need::Dense,
        shape: None,
    }
}

/// A tensor required in models with experts.
pub const fn moe(kind: TensorKind) -> TensorSpec {
    TensorSpec {
        kind,
        need: Need::Moe,
        shape: None,
    }
}

/// A tensor that models with experts may have.
pub const fn moe_opt(kind: TensorKind) -> TensorSpec {
    TensorSpec {
        kind,
        need: Need::MoeOptional,
        shape: None,
    }
}

/// A tensor required in recurrent layers.
pub const fn recr(kind: TensorKind) -> TensorSpec {
    TensorSpec {
        kind,
        need: Need::Recurrent,
        shape: None,
    }
}

/// A tensor recurrent layers may have.
pub const fn recr_opt(kind: TensorKind) -> TensorSpec {
    TensorSpec {
        kind,
        need: Need::RecurrentOptional,
        shape: None,
    }
}

/// A tensor required in attention layers (of a model that also has
/// recurrent ones).
pub const fn attn(kind: TensorKind) -> TensorSpec {
    TensorSpec {
        kind,
        need: Need::Attention,
        shape: None,
    }
}

/// A tensor of the shared expert.
pub const fn shexp(kind: TensorKind) -> TensorSpec {
    TensorSpec {
        kind,
        need: Need::SharedExpert,
        shape: None,
    }
}

/// A required tensor with an architecture-specific shape.
pub const fn req_shaped(kind: TensorKind, shape: ShapeFn) -> TensorSpec {
    TensorSpec {
        kind,
        need: Need::Required,
        shape: Some(shape),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(Arch::from_name("qwen2").unwrap().name(), "qwen2");
        let e = Arch::from_name("rwkv5").unwrap_err().to_string();
        assert!(e.contains("unknown model architecture: 'rwkv5'"), "{e}");
        assert_eq!(TensorKind::AttnQ.name(Some(3)), "blk.3.attn_q.weight");
        assert_eq!(
            TensorKind::ChannelMixReceptance as usize + 1,
            N_TENSOR_KINDS
        );
    }

    #[test]
    fn every_table_row_is_known_and_unique() {
        for a in Arch::all() {
            let mut seen = std::collections::HashSet::new();
            for s in a.tensors() {
                assert!(seen.insert(s.kind), "{}: {:?} twice", a.name(), s.kind);
                if s.need == Need::TiedToEmbd {
                    assert_eq!(s.kind, TensorKind::Output);
                }
            }
            assert!(seen.contains(&TensorKind::TokenEmbd), "{}", a.name());
        }
    }
}
