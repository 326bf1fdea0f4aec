//! gpt-oss's mixture of experts (llama.cpp's `build_moe_ffn` with
//! `SOFTMAX_WEIGHT` gating and `SWIGLU_OAI_MOE`): router logits plus the
//! router bias, the top-k experts by logit, a softmax over the k selected
//! logits as their weights; each selected expert's up and gate projections
//! plus that expert's biases (ADD_ID), the clamped SwiGLU, the down
//! projection plus its bias, weighted and summed.

use ggml_core::TensorId;

use crate::arch::TensorKind;
use crate::error::Result;
use crate::graph::Builder;

/// The sigmoid slope of gpt-oss's SwiGLU (fixed by the model, as in
/// llama.cpp).
pub const SWIGLU_OAI_ALPHA: f32 = 1.702;
/// The clamp of gpt-oss's SwiGLU.
pub const SWIGLU_OAI_LIMIT: f32 = 7.0;

impl Builder<'_> {
    /// Expert projection `kind` of the selected experts with its per-expert
    /// bias `bias` when the model has one: [n_out, n_used, n_tokens].
    fn expert_proj(
        &mut self,
        x: TensorId,
        kind: TensorKind,
        bias: TensorKind,
        selected: TensorId,
        il: usize,
    ) -> Result<TensorId> {
        let y = self.mm_id(kind, il, x, selected)?;
        Ok(match self.weight_opt(bias, il) {
            Some(b) => self.g.add_id(y, b, selected)?,
            None => y,
        })
    }

    /// gpt-oss's mixture-of-experts FFN of layer `il` on the normed input
    /// `x` [n_embd, n_tokens].
    pub fn moe_ffn_oai(&mut self, x: TensorId, il: usize) -> Result<TensorId> {
        let hp = self.hp;
        let n_embd = self.g.desc(x).ne[0];
        let n_tokens = self.g.desc(x).ne[1];
        let (n_expert, n_used) = (hp.n_expert, hp.n_expert_used(il));
        let logits = self.linear(
            x,
            TensorKind::FfnGateInp,
            Some(TensorKind::FfnGateInpBias),
            il,
        )?;
        self.g.set_name(logits, format!("ffn_moe_logits-{il}"));
        // [n_used, n_tokens]: the experts of the largest logits, first the
        // largest.
        let selected = self.g.argsort_top_k(logits, n_used)?;
        self.g.set_name(selected, format!("ffn_moe_topk-{il}"));
        let l3 = self.g.reshape(logits, &[1, n_expert, n_tokens])?;
        let picked = self.g.get_rows(l3, selected)?; // [1, n_used, n_tokens]
        let picked = self.g.reshape(picked, &[n_used, n_tokens])?;
        let weights = self.g.soft_max_ext(picked, None, 1.0, 0.0)?;
        let weights = self.g.reshape(weights, &[1, n_used, n_tokens])?;
        self.g.set_name(weights, format!("ffn_moe_weights-{il}"));

        let cur = self.g.reshape(x, &[n_embd, 1, n_tokens])?;
        let up = self.expert_proj(
            cur,
            TensorKind::FfnUpExps,
            TensorKind::FfnUpExpsBias,
            selected,
            il,
        )?;
        let gate = self.expert_proj(
            cur,
            TensorKind::FfnGateExps,
            TensorKind::FfnGateExpsBias,
            selected,
            il,
        )?;
        let act = self
            .g
            .swiglu_oai(gate, up, SWIGLU_OAI_ALPHA, SWIGLU_OAI_LIMIT)?;
        let experts = self.expert_proj(
            act,
            TensorKind::FfnDownExps,
            TensorKind::FfnDownExpsBias,
            selected,
            il,
        )?; // [n_embd, n_used, n_tokens]
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
