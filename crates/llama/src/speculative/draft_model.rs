//! Drafting with a draft model (llama.cpp's `draft-simple`): each
//! sequence of the draft context mirrors a target sequence's tokens; a
//! draft decodes what the draft's cache lacks of the history, then
//! proposes greedily, one token per step, stopping at `n_max` tokens or at
//! a token less probable than `p_min`. Several sequences draft together:
//! every step decodes one token of each sequence still drafting in one
//! batch.

use super::DraftParams;
use crate::batch::{Batch, Token};
use crate::context::Context;
use crate::error::Result;

/// What one sequence of a draft context holds.
#[derive(Clone, Debug, Default)]
pub struct DraftSeq {
    /// The sequence id in the draft context.
    pub seq: i32,
    /// The tokens in the draft's cache for the sequence, in order.
    held: Vec<Token>,
}

impl DraftSeq {
    /// An empty sequence `seq`.
    pub fn new(seq: i32) -> Self {
        DraftSeq {
            seq,
            held: Vec::new(),
        }
    }

    /// Tokens in the draft's cache.
    pub fn n_held(&self) -> usize {
        self.held.len()
    }
}

/// One sequence's part of a draft.
pub struct DraftRequest<'a> {
    /// The sequence.
    pub seq: &'a mut DraftSeq,
    /// Every token so far, the last one not yet decoded by the target.
    pub history: &'a [Token],
    /// Most tokens to propose (also capped by `params.n_max`).
    pub limit: usize,
    /// The draft settings.
    pub params: DraftParams,
}

/// Proposals for each request, in order (empty where none): at most
/// `limit` and `n_max` tokens, none when fewer than `n_min`. `n_ctx_seq`
/// is the room of one sequence; a history that leaves no room drafts
/// nothing. A failed decode leaves the sequences it touched empty and is
/// returned.
pub fn draft_many(
    ctx: &mut Context<'_>,
    reqs: &mut [DraftRequest<'_>],
    n_ctx_seq: usize,
) -> Result<Vec<Vec<Token>>> {
    let res = draft_inner(ctx, reqs, n_ctx_seq);
    if res.is_err() {
        for r in reqs.iter_mut() {
            // Removing a whole sequence always succeeds.
            let _ = ctx.seq_rm(r.seq.seq, -1, -1);
            r.seq.held.clear();
        }
    }
    res
}

fn draft_inner(
    ctx: &mut Context<'_>,
    reqs: &mut [DraftRequest<'_>],
    n_ctx_seq: usize,
) -> Result<Vec<Vec<Token>>> {
    let mut out: Vec<Vec<Token>> = vec![Vec::new(); reqs.len()];
    // Which requests draft, with their limits.
    let mut limits = vec![0usize; reqs.len()];
    for (i, r) in reqs.iter_mut().enumerate() {
        let limit = r.limit.min(r.params.n_max);
        if limit == 0 || r.history.is_empty() || r.history.len() + limit >= n_ctx_seq {
            continue;
        }
        // Keep what the draft's cache shares with the history, but decode
        // at least the last token again, for its logits.
        let s = &mut *r.seq;
        let mut n = s
            .held
            .iter()
            .zip(r.history)
            .take_while(|(a, b)| a == b)
            .count()
            .min(r.history.len() - 1);
        if !ctx.seq_rm(s.seq, n as i32, -1) {
            // A memory that cannot drop its last positions starts over.
            let _ = ctx.seq_rm(s.seq, -1, -1);
            n = 0;
        }
        s.held.truncate(n);
        limits[i] = limit;
    }
    // Catch up: everything but the last token of each history, without
    // logits, in batches of at most n_batch tokens.
    let n_batch = ctx.params.n_batch.max(1);
    let mut b = Batch::new();
    for (i, r) in reqs.iter_mut().enumerate() {
        if limits[i] == 0 {
            continue;
        }
        let s = &mut *r.seq;
        while s.held.len() + 1 < r.history.len() {
            let at = s.held.len();
            b.add(r.history[at], at as i32, &[s.seq], false);
            s.held.push(r.history[at]);
            if b.tokens.len() >= n_batch {
                ctx.decode(&b)?;
                b = Batch::new();
            }
        }
    }
    if !b.tokens.is_empty() {
        ctx.decode(&b)?;
    }
    // Draft: each step decodes the newest token of every drafting
    // sequence (first the history's last) and reads its best successor.
    let mut next: Vec<Option<Token>> = reqs
        .iter()
        .enumerate()
        .map(|(i, r)| (limits[i] > 0).then(|| r.history[r.history.len() - 1]))
        .collect();
    while next.iter().any(Option::is_some) {
        let mut b = Batch::new();
        let mut rows = Vec::new();
        for (i, r) in reqs.iter_mut().enumerate() {
            if let Some(t) = next[i] {
                let s = &mut *r.seq;
                b.add(t, s.held.len() as i32, &[s.seq], true);
                s.held.push(t);
                rows.push((i, b.tokens.len() - 1));
            }
        }
        ctx.decode(&b)?;
        for (i, row) in rows {
            let (best, p) = best_with_prob(ctx.logits_ith(row as i32)?);
            next[i] = None;
            if p < reqs[i].params.p_min {
                continue;
            }
            out[i].push(best);
            if out[i].len() < limits[i] {
                next[i] = Some(best);
            }
        }
    }
    for (i, r) in reqs.iter().enumerate() {
        if out[i].len() < r.params.n_min {
            out[i].clear();
        }
    }
    Ok(out)
}

/// The draft side of llama-cli: a draft context of one sequence.
pub struct Drafter<'m> {
    /// The draft model's context.
    pub ctx: Context<'m>,
    seq: DraftSeq,
    params: DraftParams,
}

impl<'m> Drafter<'m> {
    /// A drafter over `ctx` (its sequence 0).
    pub fn new(ctx: Context<'m>, params: DraftParams) -> Self {
        Drafter {
            ctx,
            seq: DraftSeq::new(0),
            params,
        }
    }

    /// Proposes at most `limit` (and `n_max`) tokens to follow `history`
    /// (every token so far, the last one not yet decoded by the target).
    pub fn draft(&mut self, history: &[Token], limit: usize) -> Result<Vec<Token>> {
        let n_ctx = self.ctx.n_ctx();
        let mut reqs = [DraftRequest {
            seq: &mut self.seq,
            history,
            limit,
            params: self.params,
        }];
        Ok(draft_many(&mut self.ctx, &mut reqs, n_ctx)?
            .pop()
            .unwrap_or_default())
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
