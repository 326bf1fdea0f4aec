//! Speculative decoding, shared by llama-cli and llama-server: a proposer
//! guesses the next tokens, the target decodes the last sampled token and
//! the guesses in one batch, and keeps the guesses its own sampler agrees
//! with (each row is sampled as plain decoding would sample it, so greedy
//! output is the target's alone).
//!
//! Two proposers, as llama.cpp's `--spec-type`:
//! - `draft-simple` (`draft_model`): a smaller model of the same
//!   vocabulary (`compat`) drafts greedily, stopping below `p_min`; one
//!   draft context serves many sequences, decoding one token of each per
//!   step in one batch;
//! - `ngram-simple` (`ngram`): prompt lookup, no model: the last tokens
//!   are searched for earlier in the history and what followed them there
//!   is proposed.
//!
//! `verify` holds the acceptance rule, `generate` the single-sequence loop
//! of llama-cli, `args` the flags both tools read.

pub mod args;
pub mod compat;
pub mod draft_model;
pub mod generate;
pub mod ngram;
pub mod verify;

pub use args::{SpecArgs, SpecType};
pub use compat::{check_vocab_compatible, VOCAB_CHECK_START_TOKEN_ID, VOCAB_MAX_SIZE_DIFFERENCE};
pub use draft_model::{draft_many, DraftRequest, DraftSeq, Drafter};
pub use generate::{generate, Proposer};
pub use ngram::{ngram_simple_draft, NgramParams};
pub use verify::sample_and_accept;

/// Settings of a draft model (`--draft-max`, `--draft-min`,
/// `--draft-p-min`; per request `speculative.n_max`, `.n_min`, `.p_min`).
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

/// Counts of one generation with speculation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpecStats {
    /// Tokens the target holds in its sequence at the end.
    pub n_past: usize,
    /// Tokens proposed and sent to the target for verification.
    pub n_drafted: usize,
    /// Proposed tokens the target agreed with.
    pub n_accepted: usize,
    /// Target decodes that verified a proposal.
    pub n_verify_steps: usize,
}
