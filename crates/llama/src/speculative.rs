//! Speculative decoding with a draft model: the draft proposes up to
//! `n_max` tokens greedily (stopping when its best token's probability is
//! below `p_min`); the target decodes the last accepted token and the
//! proposals in one batch and keeps the proposals its own sampler agrees
//! with. With greedy sampling the output is the target's alone.
//!
//! The draft must share the target's vocabulary, checked as llama.cpp
//! does: the same vocabulary type, BOS/EOS settings and ids, sizes within
//! 128 tokens, and the same text for every token from id 5 on.

use crate::batch::{Batch, Token};
use crate::context::Context;
use crate::error::{LlamaError, Result};
use crate::vocab::Vocab;

/// Largest difference of vocabulary sizes a draft may have.
pub const VOCAB_MAX_SIZE_DIFFERENCE: usize = 128;
/// Token texts are compared from this id on.
pub const VOCAB_CHECK_START_TOKEN_ID: usize = 5;

/// Settings of the draft (`--draft-max`, `--draft-min`, `--draft-p-min`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DraftParams {
    /// Most tokens drafted per step.
    pub n_max: usize,
    /// Fewer drafted tokens than this are not used.
    pub n_min: usize,
    /// Drafting stops at a token less probable than this (greedy).
    pub p_min: f32,
}

impl Default for DraftParams {
    fn default() -> Self {
        // llama.cpp's defaults.
        DraftParams {
            n_max: 3,
            n_min: 0,
            p_min: 0.0,
        }
    }
}

/// Why a draft vocabulary cannot serve the target's, if it cannot.
pub fn check_vocab_compatible(tgt: &Vocab, dft: &Vocab) -> Result<()> {
    let bad = |m: String| Err(LlamaError::InvalidParam(format!("draft model: {m}")));
    if tgt.vocab_type() != dft.vocab_type() {
        return bad(format!(
            "vocabulary type {:?} does not match the target's {:?}",
            dft.vocab_type(),
            tgt.vocab_type()
        ));
    }
    if tgt.add_bos() != dft.add_bos() || (tgt.add_bos() && tgt.bos() != dft.bos()) {
        return bad(format!(
            "BOS tokens must match the target's (add: {} - {}, id: {:?} - {:?})",
            tgt.add_bos(),
            dft.add_bos(),
            tgt.bos(),
            dft.bos()
        ));
    }
    if tgt.add_eos() != dft.add_eos() || (tgt.add_eos() && tgt.eos() != dft.eos()) {
        return bad(format!(
            "EOS tokens must match the target's (add: {} - {}, id: {:?} - {:?})",
            tgt.add_eos(),
            dft.add_eos(),
            tgt.eos(),
            dft.eos()
        ));
    }
    let (nt, nd) = (tgt.n_tokens(), dft.n_tokens());
    if nt.abs_diff(nd) > VOCAB_MAX_SIZE_DIFFERENCE {
        return bad(format!(
            "vocabulary of {nd} tokens is too far from the target's {nt} (at most {VOCAB_MAX_SIZE_DIFFERENCE} apart)"
        ));
    }
    for i in VOCAB_CHECK_START_TOKEN_ID..nt.min(nd) {
        let id = i as Token;
        if tgt.get_text(id) != dft.get_text(id) {
            return bad(format!(
                "token {i} is '{}' in the draft and '{}' in the target",
                String::from_utf8_lossy(dft.get_text(id).unwrap_or_default()),
                String::from_utf8_lossy(tgt.get_text(id).unwrap_or_default())
            ));
        }
    }
    Ok(())
}

/// The draft side: a context of the draft model and the tokens its
/// sequence 0 holds.
pub struct Drafter<'m> {
    /// The draft model's context.
    pub ctx: Context<'m>,
    held: Vec<Token>,
    params: DraftParams,
    /// Tokens drafted so far.
    pub n_drafted: usize,
}

impl<'m> Drafter<'m> {
    /// A drafter over `ctx` (its sequence 0).
    pub fn new(ctx: Context<'m>, params: DraftParams) -> Self {
        Drafter {
            ctx,
            held: Vec::new(),
            params,
            n_drafted: 0,
        }
    }

    /// Proposes at most `limit` (and `n_max`) tokens to follow `history`
    /// (every token so far, the last one not yet decoded by the target).
    pub fn draft(&mut self, history: &[Token], limit: usize) -> Result<Vec<Token>> {
        let limit = limit.min(self.params.n_max);
        if limit == 0 || history.is_empty() {
            return Ok(Vec::new());
        }
        // Keep what the draft's cache shares with the history; decode the
        // rest (at least the last token, for its logits).
        let mut n = self
            .held
            .iter()
            .zip(history)
            .take_while(|(a, b)| a == b)
            .count();
        n = n.min(history.len() - 1);
        if !self.ctx.seq_rm(0, n as i32, -1) {
            let _ = self.ctx.seq_rm(0, -1, -1);
            n = 0;
        }
        self.held.truncate(n);
        let n_ctx = self.ctx.n_ctx();
        if history.len() + limit >= n_ctx {
            return Ok(Vec::new());
        }
        let n_batch = self.ctx.params.n_batch.max(1);
        let mut pos = n;
        while pos < history.len() {
            let end = (pos + n_batch).min(history.len());
            let mut b = Batch::new();
            for (i, &t) in history[pos..end].iter().enumerate() {
                b.add(t, (pos + i) as i32, &[0], pos + i + 1 == history.len());
            }
            self.ctx.decode(&b)?;
            self.held.extend_from_slice(&history[pos..end]);
            pos = end;
        }
        let mut out = Vec::new();
        loop {
            let logits = self.ctx.logits_ith(-1)?;
            let (best, p) = best_with_prob(logits);
            if p < self.params.p_min {
                break;
            }
            out.push(best);
            if out.len() >= limit {
                break;
            }
            let at = self.held.len() as i32;
            let mut b = Batch::new();
            b.add(best, at, &[0], true);
            self.ctx.decode(&b)?;
            self.held.push(best);
        }
        if out.len() < self.params.n_min {
            out.clear();
        }
        self.n_drafted += out.len();
        Ok(out)
    }
}

/// The most probable token of `logits` and its probability.
fn best_with_prob(logits: &[f32]) -> (Token, f32) {
    let (mut best, mut max) = (0usize, f32::NEG_INFINITY);
    for (i, &l) in logits.iter().enumerate() {
        if l > max {
            max = l;
            best = i;
        }
    }
    let sum: f32 = logits.iter().map(|&l| (l - max).exp()).sum();
    (best as Token, 1.0 / sum.max(1.0))
}

#[cfg(test)]
mod tests {
    use super::best_with_prob;

    #[test]
    fn best_token_and_its_probability() {
        let (t, p) = best_with_prob(&[0.0, 2.0, 0.0]);
        assert_eq!(t, 1);
        let want = 2f32.exp() / (2f32.exp() + 2.0);
        assert!((p - want).abs() < 1e-6);
    }
}
