//! Speculative decoding of the slots: each slot's proposer (its sequence
//! of the shared draft context, or prompt lookup in its own tokens)
//! guesses the tokens after its sampled one; the engine decodes the
//! sampled token and the guesses with the other slots' tokens in one batch
//! and keeps what the slot's sampler agrees with (`llama::speculative`).

use llama::speculative::{
    draft_many, ngram_simple_draft, DraftParams, DraftRequest, DraftSeq, NgramParams, SpecArgs,
    SpecType,
};
use llama::{Context, ContextParams, LlamaError, Model, Token};

/// The proposers of the slots.
pub(super) enum Speculation<'m> {
    /// A draft model: one context, one sequence per slot.
    Draft {
        ctx: Box<Context<'m>>,
        seqs: Vec<DraftSeq>,
    },
    /// Prompt lookup.
    Ngram(NgramParams),
}

/// What one slot asks of its proposer.
pub(super) struct Want<'a> {
    /// The slot.
    pub slot: usize,
    /// Its tokens in the cache, then the sampled one.
    pub history: &'a [Token],
    /// Most tokens that fit the slot's context and its `n_predict`.
    pub limit: usize,
    /// The request's draft settings.
    pub params: DraftParams,
}

impl<'m> Speculation<'m> {
    /// The proposers `spec` asks for, for `n_slots` slots of `n_ctx_slot`
    /// tokens over `target` (None: no speculation). A recurrent target
    /// cannot drop rejected proposals and is refused.
    pub fn new(
        spec: &SpecArgs,
        draft_model: Option<&'m Model>,
        target: &Context<'_>,
        base: &ContextParams,
        n_slots: usize,
    ) -> llama::Result<Option<Speculation<'m>>> {
        let kind = spec.kind()?;
        if kind == SpecType::None {
            return Ok(None);
        }
        if target.mem.rs().is_some() {
            return Err(LlamaError::NotSupported(
                "speculative decoding with a recurrent or hybrid model (it cannot drop rejected drafts)"
                    .into(),
            ));
        }
        match (kind, draft_model) {
            (SpecType::Draft, Some(dm)) => {
                let params = ContextParams {
                    n_ctx: target.n_ctx(),
                    n_seq_max: n_slots,
                    embeddings: false,
                    ..base.clone()
                };
                let ctx = Context::new(dm, params).map_err(|e| {
                    LlamaError::InvalidParam(format!(
                        "draft model: failed to create its context: {e}"
                    ))
                })?;
                Ok(Some(Speculation::Draft {
                    ctx: Box::new(ctx),
                    seqs: (0..n_slots).map(|s| DraftSeq::new(s as i32)).collect(),
                }))
            }
            (SpecType::NgramSimple, _) => Ok(Some(Speculation::Ngram(spec.ngram))),
            _ => Err(LlamaError::InvalidParam(
                "speculative decoding type draft-simple needs a draft model (-md)".into(),
            )),
        }
    }

    /// Proposals for each of `wants`, in order (empty where none), drafted
    /// together. A draft that fails is logged and proposes nothing: the
    /// slots then decode as without speculation.
    pub fn propose(&mut self, wants: &[Want<'_>], n_ctx_slot: usize) -> Vec<Vec<Token>> {
        match self {
            Speculation::Ngram(p) => wants
                .iter()
                .map(|w| {
                    let Some((&last, before)) = w.history.split_last() else {
                        return Vec::new();
                    };
                    let mut d = ngram_simple_draft(before, last, *p);
                    d.truncate(w.limit);
                    d
                })
                .collect(),
            Speculation::Draft { ctx, seqs } => {
                // Each slot's sequence, taken out while it drafts.
                let mut taken: Vec<DraftSeq> = wants
                    .iter()
                    .map(|w| std::mem::take(&mut seqs[w.slot]))
                    .collect();
                let mut reqs: Vec<DraftRequest<'_>> = taken
                    .iter_mut()
                    .zip(wants)
                    .map(|(seq, w)| DraftRequest {
                        seq,
                        history: w.history,
                        limit: w.limit,
                        params: w.params,
                    })
                    .collect();
                let out = draft_many(ctx, &mut reqs, n_ctx_slot);
                drop(reqs);
                for (seq, w) in taken.into_iter().zip(wants) {
                    seqs[w.slot] = seq;
                }
                out.unwrap_or_else(|e| {
                    llama::warn!("draft failed, decoding without it: {e}");
                    vec![Vec::new(); wants.len()]
                })
            }
        }
    }

    /// The most tokens a slot may propose under `params` before the
    /// context and `n_predict` limits.
    pub fn cap(&self, params: &DraftParams) -> usize {
        match self {
            Speculation::Draft { .. } => params.n_max,
            Speculation::Ngram(p) => p.size_m,
        }
    }
}
