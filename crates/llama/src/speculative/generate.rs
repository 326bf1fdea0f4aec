//! Generation of one sequence with speculation (llama-cli): the proposer
//! guesses, the target decodes the last sampled token and the guesses in
//! one batch and keeps what its sampler agrees with; the rest leave its
//! cache.

use super::{ngram_simple_draft, sample_and_accept, Drafter, NgramParams, SpecStats};
use crate::batch::{Batch, Token};
use crate::context::Context;
use crate::error::{LlamaError, Result};
use crate::sampling::SamplerChain;

/// Who proposes the tokens.
pub enum Proposer<'m> {
    /// A draft model (boxed: its context is large).
    Model(Box<Drafter<'m>>),
    /// Prompt lookup in the history.
    Ngram(NgramParams),
}

impl Proposer<'_> {
    /// At most `limit` tokens to follow `history` (its last token sampled
    /// and not yet decoded by the target).
    pub fn propose(&mut self, history: &[Token], limit: usize) -> Result<Vec<Token>> {
        match self {
            Proposer::Model(d) => d.draft(history, limit),
            Proposer::Ngram(p) => {
                let Some((&last, before)) = history.split_last() else {
                    return Ok(Vec::new());
                };
                let mut d = ngram_simple_draft(before, last, *p);
                d.truncate(limit);
                Ok(d)
            }
        }
    }
}

/// Generates on sequence 0 of `ctx`, which holds `prompt` with the logits
/// of its last token. Each generated token goes to `emit` (end of
/// generation tokens not included). Stops at an end of generation token,
/// after `n_predict` tokens (negative: no limit) or when the context is
/// full (no context shift).
pub fn generate(
    ctx: &mut Context<'_>,
    proposer: &mut Proposer<'_>,
    sampler: &mut SamplerChain,
    prompt: &[Token],
    n_predict: i64,
    mut emit: impl FnMut(Token),
) -> Result<SpecStats> {
    if ctx.mem.rs().is_some() {
        return Err(LlamaError::NotSupported(
            "speculative decoding with a recurrent target model (it cannot drop rejected drafts)"
                .into(),
        ));
    }
    let vocab = &ctx.model().vocab;
    let n_ctx = ctx.n_ctx();
    let mut stats = SpecStats {
        n_past: prompt.len(),
        ..SpecStats::default()
    };
    let mut history = prompt.to_vec();
    let mut n_gen = 0i64;
    let mut next = sampler.sample(ctx.logits_ith(-1)?);
    sampler.try_accept(next)?;
    loop {
        if vocab.is_eog(next) {
            break;
        }
        emit(next);
        n_gen += 1;
        if (n_predict >= 0 && n_gen >= n_predict) || stats.n_past + 1 >= n_ctx {
            break;
        }
        history.push(next);
        let left = if n_predict >= 0 {
            (n_predict - n_gen) as usize
        } else {
            usize::MAX
        };
        let room = n_ctx.saturating_sub(stats.n_past + 2);
        let draft = proposer.propose(&history, left.min(room))?;
        let mut b = Batch::new();
        b.add(next, stats.n_past as i32, &[0], true);
        for (i, &t) in draft.iter().enumerate() {
            b.add(t, (stats.n_past + 1 + i) as i32, &[0], true);
        }
        ctx.decode(&b)?;
        stats.n_past += 1;
        let c = &*ctx;
        let ids = sample_and_accept(sampler, &draft, move |i| c.logits_ith(i as i32))?;
        if !draft.is_empty() {
            stats.n_drafted += draft.len();
            stats.n_verify_steps += 1;
        }
        let Some((&last, accepted)) = ids.split_last() else {
            break;
        };
        stats.n_accepted += accepted.len();
        let mut stop = false;
        for &t in accepted {
            history.push(t);
            stats.n_past += 1;
            if vocab.is_eog(t) {
                stop = true;
                break;
            }
            emit(t);
            n_gen += 1;
            if n_predict >= 0 && n_gen >= n_predict {
                stop = true;
                break;
            }
        }
        // The rejected drafts leave the target's cache.
        if !ctx.seq_rm(0, stats.n_past as i32, -1) {
            return Err(LlamaError::Decode(
                "the memory cannot drop rejected drafts".into(),
            ));
        }
        if stop {
            break;
        }
        next = last;
    }
    Ok(stats)
}
