//! Architectures as tables: metadata key names, tensor names and the shapes
//! the hyperparameters imply. Adding an architecture is adding a table entry
//! and a graph builder.

use ggml_core::RopeMode;

use crate::error::{LlamaError, Result};
use crate::hparams::HParams;

/// A supported model architecture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    /// Llama 1/2/3, Mistral, TinyLlama, llama2.c stories.
    Llama,
    /// Qwen2: llama with q/k/v biases and NeoX rope.
    Qwen2,
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
    /// Attention norm [n_embd].
    AttnNorm,
    /// Query projection.
    AttnQ,
    /// Key projection.
    AttnK,
    /// Value projection.
    AttnV,
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
    /// FFN norm [n_embd].
    FfnNorm,
    /// FFN gate projection.
    FfnGate,
    /// FFN down projection.
    FfnDown,
    /// FFN up projection.
    FfnUp,
}

/// Number of [`TensorKind`]s.
pub const N_TENSOR_KINDS: usize = 17;

impl TensorKind {
    /// Index in per-layer tables.
    pub fn index(self) -> usize {
        self as usize
    }

    /// The GGUF name (`token_embd.weight`, `blk.N.attn_q.weight`).
    pub fn name(self, layer: Option<usize>) -> String {
        let base = match self {
            TensorKind::TokenEmbd => "token_embd.weight",
            TensorKind::OutputNorm => "output_norm.weight",
            TensorKind::Output => "output.weight",
            TensorKind::RopeFreqs => "rope_freqs.weight",
            TensorKind::AttnNorm => "attn_norm.weight",
            TensorKind::AttnQ => "attn_q.weight",
            TensorKind::AttnK => "attn_k.weight",
            TensorKind::AttnV => "attn_v.weight",
            TensorKind::AttnOut => "attn_output.weight",
            TensorKind::AttnQBias => "attn_q.bias",
            TensorKind::AttnKBias => "attn_k.bias",
            TensorKind::AttnVBias => "attn_v.bias",
            TensorKind::AttnOutBias => "attn_output.bias",
            TensorKind::FfnNorm => "ffn_norm.weight",
            TensorKind::FfnGate => "ffn_gate.weight",
            TensorKind::FfnDown => "ffn_down.weight",
            TensorKind::FfnUp => "ffn_up.weight",
        };
        match layer {
            Some(il) => format!("blk.{il}.{base}"),
            None => base.to_string(),
        }
    }

    /// The shape the hyperparameters imply, for layer `il` when per layer.
    pub fn shape(self, hp: &HParams, il: usize) -> Vec<usize> {
        let n_embd = hp.n_embd;
        match self {
            TensorKind::TokenEmbd | TensorKind::Output => vec![n_embd, hp.n_vocab],
            TensorKind::OutputNorm | TensorKind::AttnNorm | TensorKind::FfnNorm => vec![n_embd],
            TensorKind::RopeFreqs => vec![hp.n_rot / 2],
            TensorKind::AttnQ => vec![n_embd, hp.n_embd_head_k * hp.n_head(il)],
            TensorKind::AttnK => vec![n_embd, hp.n_embd_k_gqa(il)],
            TensorKind::AttnV => vec![n_embd, hp.n_embd_v_gqa(il)],
            TensorKind::AttnOut => vec![hp.n_embd_head_v * hp.n_head(il), n_embd],
            TensorKind::AttnQBias => vec![hp.n_embd_head_k * hp.n_head(il)],
            TensorKind::AttnKBias => vec![hp.n_embd_k_gqa(il)],
            TensorKind::AttnVBias => vec![hp.n_embd_v_gqa(il)],
            TensorKind::AttnOutBias => vec![n_embd],
            TensorKind::FfnGate | TensorKind::FfnUp => vec![n_embd, hp.n_ff(il)],
            TensorKind::FfnDown => vec![hp.n_ff(il), n_embd],
        }
    }

    /// The op that consumes the tensor, for buffer-type probing.
    pub fn is_matrix(self) -> bool {
        matches!(
            self,
            TensorKind::Output
                | TensorKind::AttnQ
                | TensorKind::AttnK
                | TensorKind::AttnV
                | TensorKind::AttnOut
                | TensorKind::FfnGate
                | TensorKind::FfnDown
                | TensorKind::FfnUp
        )
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
}

/// One row of an architecture's tensor table.
#[derive(Clone, Copy, Debug)]
pub struct TensorSpec {
    /// Role.
    pub kind: TensorKind,
    /// Once per layer, or once per model.
    pub per_layer: bool,
    /// Presence rule.
    pub need: Need,
}

const fn g(kind: TensorKind, need: Need) -> TensorSpec {
    TensorSpec {
        kind,
        per_layer: false,
        need,
    }
}

const fn l(kind: TensorKind, need: Need) -> TensorSpec {
    TensorSpec {
        kind,
        per_layer: true,
        need,
    }
}

use Need::{Optional, Required, TiedToEmbd};
use TensorKind::*;

const LLAMA_TENSORS: &[TensorSpec] = &[
    g(TokenEmbd, Required),
    g(OutputNorm, Required),
    g(Output, TiedToEmbd),
    g(RopeFreqs, Optional),
    l(AttnNorm, Required),
    l(AttnQ, Required),
    l(AttnK, Required),
    l(AttnV, Required),
    l(AttnOut, Required),
    l(AttnQBias, Optional),
    l(AttnKBias, Optional),
    l(AttnVBias, Optional),
    l(AttnOutBias, Optional),
    l(FfnNorm, Required),
    l(FfnGate, Required),
    l(FfnDown, Required),
    l(FfnUp, Required),
];

const QWEN2_TENSORS: &[TensorSpec] = &[
    g(TokenEmbd, Required),
    g(OutputNorm, Required),
    g(Output, TiedToEmbd),
    l(AttnNorm, Required),
    l(AttnQ, Required),
    l(AttnK, Required),
    l(AttnV, Required),
    l(AttnOut, Required),
    l(AttnQBias, Required),
    l(AttnKBias, Required),
    l(AttnVBias, Required),
    l(FfnNorm, Required),
    l(FfnGate, Required),
    l(FfnDown, Required),
    l(FfnUp, Required),
];

impl Arch {
    /// Every supported architecture.
    pub const ALL: [Arch; 2] = [Arch::Llama, Arch::Qwen2];

    /// The architecture named by `general.architecture`.
    pub fn from_name(name: &str) -> Result<Arch> {
        Arch::ALL
            .into_iter()
            .find(|a| a.name() == name)
            .ok_or_else(|| LlamaError::UnknownArch(name.to_string()))
    }

    /// The GGUF name, also the prefix of its metadata keys.
    pub fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
        }
    }

    /// Rotary embedding layout.
    pub fn rope_mode(self) -> RopeMode {
        match self {
            Arch::Llama => RopeMode::Normal,
            Arch::Qwen2 => RopeMode::Neox,
        }
    }

    /// The tensor table.
    pub fn tensors(self) -> &'static [TensorSpec] {
        match self {
            Arch::Llama => LLAMA_TENSORS,
            Arch::Qwen2 => QWEN2_TENSORS,
        }
    }

    /// `{arch}.{suffix}`, e.g. `llama.context_length`.
    pub fn key(self, suffix: &str) -> String {
        format!("{}.{suffix}", self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(Arch::from_name("qwen2").unwrap(), Arch::Qwen2);
        let e = Arch::from_name("mamba").unwrap_err().to_string();
        assert!(e.contains("unknown model architecture: 'mamba'"), "{e}");
        assert_eq!(TensorKind::AttnQ.name(Some(3)), "blk.3.attn_q.weight");
        assert_eq!(TensorKind::FfnUp as usize + 1, N_TENSOR_KINDS);
    }
}
