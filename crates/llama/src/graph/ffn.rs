//! Feed-forward variants. An architecture names its variant; a new kind is
//! one more arm here, chosen per architecture. The mixture of experts is
//! llama.cpp's `build_moe_ffn`: the router's choice (`moe_routing`), then
//! the selected experts' SwiGLU outputs summed with the router's weights.

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
    /// Mixture of SwiGLU experts with softmax routing (Mixtral, qwen3moe).
    MoeSwiglu,
    /// gpt-oss's mixture of experts: biased router, softmax over the
    /// selected logits, biased experts with the clamped SwiGLU (see
    /// `moe_oai.rs`).
    MoeSwigluOai,
}

impl Builder<'_> {
    /// Applies feed-forward `kind` of layer `il` to the normed input `x`.
    pub fn ffn(&mut self, x: TensorId, kind: Ffn, il: usize) -> Result<TensorId> {
        let act = match kind {
            Ffn::MoeSwiglu => return self.moe_ffn(x, il),
            Ffn::MoeSwigluOai => return self.moe_ffn_oai(x, il),
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

    /// The shared expert of layer `il`: a SwiGLU FFN every token goes
    /// through next to its routed experts.
    pub fn shared_expert(&mut self, x: TensorId, il: usize) -> Result<TensorId> {
        let up = self.linear(x, TensorKind::FfnUpShexp, None, il)?;
        let gate = self.linear(x, TensorKind::FfnGateShexp, None, il)?;
        let act = self.g.glu_split(gate, up, GluOp::Swiglu)?;
        let down = self.linear(act, TensorKind::FfnDownShexp, None, il)?;
        self.g.set_name(down, format!("ffn_shexp-{il}"));
        Ok(down)
    }
}

impl Builder<'_> {
    /// Mixture-of-experts FFN of layer `il` on the normed input `x`
    /// [n_embd, n_tokens]: each token goes through the `n_expert_used`
    /// experts its router chooses; the outputs are summed with the
    /// router's weights.
    pub fn moe_ffn(&mut self, x: TensorId, il: usize) -> Result<TensorId> {
        let hp = self.hp;
        let n_embd = self.g.desc(x).ne[0];
        let n_tokens = self.g.desc(x).ne[1];
        let n_used = hp.n_expert_used(il);
        let routing = self.route_experts(x, il)?;
        let (selected, weights) = (routing.selected, routing.weights);

        let cur = self.g.reshape(x, &[n_embd, 1, n_tokens])?;
        let up = self.mm_id(TensorKind::FfnUpExps, il, cur, selected)?; // [n_ff_exp, n_used, n_tokens]
        let model_w = self.w;
        let act = match model_w.layers[il].get(TensorKind::FfnGateExps) {
            Some(gate_w) => {
                let gate = self.mm_id_of(gate_w, cur, selected)?;
                self.g.glu_split(gate, up, GluOp::Swiglu)?
            }
            // Experts without a gate projection: silu(up).
            None => self.g.unary(up, ggml_core::UnaryOp::Silu)?,
        };
        let experts = self.mm_id(TensorKind::FfnDownExps, il, act, selected)?; // [n_embd, n_used, n_tokens]
        let experts = self.g.mul(experts, weights)?;
        let (nb1, nb2) = {
            let d = self.g.desc(experts);
            (d.nb[1], d.nb[2])
        };
        let mut out = self.g.view_2d(experts, n_embd, n_tokens, nb2, 0)?;
        for slot in 1..n_used {
            let v = self.g.view_2d(experts, n_embd, n_tokens, nb2, slot * nb1)?;
            out = self.g.add_op(out, v)?;
        }
        if n_used == 1 {
            // The slot's view is strided; later ops want rows.
            out = self.g.cont(out)?;
        }
        self.g.set_name(out, format!("ffn_moe_out-{il}"));
        Ok(out)
    }
}
