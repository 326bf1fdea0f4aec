//! Feed-forward variants. An architecture names its variant; a new kind
//! (mixture of experts, say) is one more arm here, chosen per architecture.

use ggml_core::{GluOp, TensorId};

use crate::arch::TensorKind;
use crate::error::Result;
use crate::graph::Builder;

/// A feed-forward block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ffn {
    /// `down(silu(gate x) * up x)` with separate gate and up.
    Swiglu,
    /// `down(gelu(gate x) * up x)` with separate gate and up (GELU tanh).
    Geglu,
    /// `down(silu(a) * b)` where `ffn_up` gives [a; b] (phi3).
    SwigluFused,
}

impl Builder<'_> {
    /// Applies feed-forward `kind` of layer `il` to the normed input `x`.
    pub fn ffn(&mut self, x: TensorId, kind: Ffn, il: usize) -> Result<TensorId> {
        let act = match kind {
            Ffn::Swiglu | Ffn::Geglu => {
                let up = self.linear(x, TensorKind::FfnUp, None, il)?;
                let gate = self.linear(x, TensorKind::FfnGate, None, il)?;
                let op = if kind == Ffn::Swiglu {
                    GluOp::Swiglu
                } else {
                    GluOp::Geglu
                };
                self.g.glu_split(gate, up, op)?
            }
            Ffn::SwigluFused => {
                let up = self.linear(x, TensorKind::FfnUp, None, il)?;
                self.g.glu(up, GluOp::Swiglu, false)?
            }
        };
        let down = self.linear(act, TensorKind::FfnDown, None, il)?;
        self.g.set_name(down, format!("ffn_out-{il}"));
        Ok(down)
    }
}
