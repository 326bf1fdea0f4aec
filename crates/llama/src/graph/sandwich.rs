//! The sandwich-norm blocks of Gemma 2 and 3: each sub-block's output is
//! RMS-normed again before the residual add (post-attention and post-FFN
//! norms), queries are scaled before attention instead of the scores, and
//! Gemma 3 adds per-head q/k norms.

use ggml_core::TensorId;

use crate::arch::TensorKind::*;
use crate::error::Result;
use crate::graph::{Builder, Ffn};

impl Builder<'_> {
    /// Attention of layer `il` on the residual stream `x` with
    /// `attn_norm`, optional per-head q/k norms, queries scaled by
    /// `f_attention_scale`, attention soft-capping from the hyperparameters
    /// and `post_attention_norm`; returns the residual stream after it
    /// (only the output rows in the last layer).
    pub fn sandwich_attention(
        &mut self,
        x: TensorId,
        il: usize,
        qk_norm: bool,
    ) -> Result<TensorId> {
        let hp = self.hp;
        let cur = self.rms_norm(x, AttnNorm, il)?;
        let mut qkv = self.qkv(cur, il)?;
        if qk_norm {
            qkv.q = self.rms_norm(qkv.q, AttnQNorm, il)?;
            qkv.k = self.rms_norm(qkv.k, AttnKNorm, il)?;
        }
        let q = self.rope(qkv.q, il)?;
        qkv.k = self.rope(qkv.k, il)?;
        qkv.q = self.g.scale(q, hp.f_attention_scale)?;
        let attn = self.attention(qkv, il, 1.0, hp.f_attn_logit_softcapping)?;
        let cur = self.attn_out(attn, il)?;
        let (cur, x) = self.last_layer_rows(il, cur, x)?;
        let cur = self.rms_norm(cur, AttnPostNorm, il)?;
        Ok(self.g.add_op(cur, x)?)
    }

    /// The feed-forward block `ffn` of layer `il` between `ffn_norm` and
    /// `post_ffw_norm`; returns the residual stream after it.
    pub fn sandwich_ffn(&mut self, x: TensorId, ffn: Ffn, il: usize) -> Result<TensorId> {
        let h = self.rms_norm(x, FfnNorm, il)?;
        let down = self.ffn(h, ffn, il)?;
        let cur = self.rms_norm(down, FfnPostNorm, il)?;
        let out = self.g.add_op(cur, x)?;
        let out = self.layer_out(out, il)?;
        Ok(out)
    }

    /// Gemma's input: token embeddings scaled by sqrt(n_embd) (caller
    /// embeddings as given).
    pub fn gemma_input(&mut self) -> Result<TensorId> {
        let (x, from_tokens) = self.inp_embd()?;
        if from_tokens {
            Ok(self.g.scale(x, (self.hp.n_embd as f32).sqrt())?)
        } else {
            Ok(x)
        }
    }
}
