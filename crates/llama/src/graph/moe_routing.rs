//! The router of a mixture-of-experts layer (llama.cpp's expert choice in
//! `build_moe_ffn`): expert scores from the router logits (softmax or
//! sigmoid), an optional per-expert bias that steers the choice only,
//! optional expert groups (only the best groups' experts may be chosen),
//! the top-k experts per token, and their weights: the unbiased scores,
//! renormalised over the k when the model says so, times the model's
//! weight scale.

use ggml_core::TensorId;

use crate::arch::TensorKind;
use crate::error::Result;
use crate::graph::Builder;
use crate::hparams::ExpertGating;

/// Lower bound of the sum of the selected experts' weights before dividing
/// by it: 2^-14, the smallest normal F16, as llama.cpp clamps.
const MIN_WEIGHT_SUM: f32 = 1.0 / 16384.0;

/// Best scores of a group that make its score.
const GROUP_TOP: usize = 2;

/// The experts chosen for each token and their weights.
pub struct Routing {
    /// I32 [n_used, n_tokens]: expert ids, best first.
    pub selected: TensorId,
    /// F32 [1, n_used, n_tokens].
    pub weights: TensorId,
}

impl Builder<'_> {
    /// Routes the normed input `x` [n_embd, n_tokens] of layer `il`.
    pub fn route_experts(&mut self, x: TensorId, il: usize) -> Result<Routing> {
        let hp = self.hp;
        let n_tokens = self.g.desc(x).ne[1];
        let (n_expert, n_used) = (hp.n_expert, hp.n_expert_used(il));
        let logits = self.linear(x, TensorKind::FfnGateInp, None, il)?;
        self.g.set_name(logits, format!("ffn_moe_logits-{il}"));
        let probs = match hp.expert_gating {
            ExpertGating::Softmax => self.g.soft_max_ext(logits, None, 1.0, 0.0)?,
            ExpertGating::Sigmoid => self.g.sigmoid(logits)?,
        };
        self.g.set_name(probs, format!("ffn_moe_probs-{il}"));
        // The bias steers the choice; the weights stay unbiased.
        let mut selection = match self.weight_opt(TensorKind::FfnExpProbsB, il) {
            Some(b) => self.g.add_op(probs, b)?,
            None => probs,
        };
        if hp.n_expert_groups > 1 && n_tokens > 0 {
            selection = self.mask_expert_groups(selection, n_tokens, il)?;
        }
        // [n_used, n_tokens]: expert ids, best first.
        let selected = self.g.argsort_top_k(selection, n_used)?;
        self.g.set_name(selected, format!("ffn_moe_topk-{il}"));
        let probs3 = self.g.reshape(probs, &[1, n_expert, n_tokens])?;
        let mut weights = self.g.get_rows(probs3, selected)?; // [1, n_used, n_tokens]
        if hp.expert_weights_norm {
            let w2 = self.g.reshape(weights, &[n_used, n_tokens])?;
            let sum = self.g.sum_rows(w2)?;
            let sum = self.g.clamp(sum, MIN_WEIGHT_SUM, f32::INFINITY)?;
            let w2 = self.g.div(w2, sum)?;
            weights = self.g.reshape(w2, &[1, n_used, n_tokens])?;
        }
        if hp.expert_weights_scale != 0.0 && hp.expert_weights_scale != 1.0 {
            weights = self.g.scale(weights, hp.expert_weights_scale)?;
        }
        self.g.set_name(weights, format!("ffn_moe_weights-{il}"));
        Ok(Routing { selected, weights })
    }

    /// The selection scores [n_expert, n_tokens] with every expert outside
    /// the token's `n_group_used` best groups set to -inf; a group's score
    /// is the sum of its two best scores.
    fn mask_expert_groups(
        &mut self,
        selection: TensorId,
        n_tokens: usize,
        il: usize,
    ) -> Result<TensorId> {
        let hp = self.hp;
        let n_groups = hp.n_expert_groups;
        let per_group = hp.n_expert / n_groups;
        let g = &mut self.g;
        // [per_group, n_groups, n_tokens]
        let groups = g.reshape(selection, &[per_group, n_groups, n_tokens])?;
        let best = g.argsort_top_k(groups, GROUP_TOP)?; // [2, n_groups, n_tokens]
        let groups4 = g.reshape(groups, &[1, per_group, n_groups, n_tokens])?;
        let best = g.get_rows(groups4, best)?; // [1, 2, n_groups, n_tokens]
        let best = g.reshape(best, &[GROUP_TOP, n_groups, n_tokens])?;
        let scores = g.sum_rows(best)?; // [1, n_groups, n_tokens]
        let scores = g.reshape(scores, &[n_groups, n_tokens])?;
        let kept = g.argsort_top_k(scores, hp.n_group_used)?; // [n_used_groups, n_tokens]
        g.set_name(kept, format!("ffn_moe_group_topk-{il}"));
        let kept_rows = g.get_rows(groups, kept)?; // [per_group, n_used_groups, n_tokens]
                                                   // Every score to -inf (a clamp to [-inf, -inf] fills the tensor),
                                                   // then the kept groups' rows written back.
        let empty = g.clamp(groups, f32::NEG_INFINITY, f32::NEG_INFINITY)?;
        let masked = g.set_rows(empty, kept_rows, kept)?;
        let masked = g.reshape(masked, &[hp.n_expert, n_tokens])?;
        g.set_name(masked, format!("ffn_moe_probs_masked-{il}"));
        Ok(masked)
    }
}
