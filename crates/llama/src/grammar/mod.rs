//! GBNF grammars (llama.cpp's grammar language) and the grammar stage of
//! sampling.
//!
//! - [`parse`](Grammar::parse): the GBNF text into rules: alternatives,
//!   groups, `* + ?` and `{m}` `{m,}` `{m,n}` repetitions (rewritten into
//!   generated rules as llama.cpp does), character classes with ranges and
//!   negation, `.`, escapes, comments, token references (`<[id]>`,
//!   `<text>` and their negation `!<...>`); errors give line and column.
//! - `matcher`: the pushdown stacks, advanced code point by code point
//!   (or by token id at token references), with UTF-8 cut across tokens.
//! - [`GrammarSampler`]: the sampler stage; [`crate::sampling::SamplerChain`]
//!   places it as llama.cpp's common sampler does (sample, check the token,
//!   resample with the grammar applied first when it does not fit).
//! - [`GrammarTrigger`]: what starts a lazy grammar.

mod error;
mod matcher;
mod parse;
mod rules;
mod sampler;
mod trigger;
mod utf8;

#[cfg(test)]
mod matcher_tests;
#[cfg(test)]
mod parse_tests;
#[cfg(test)]
mod sampler_tests;

pub use error::GrammarError;
pub use parse::MAX_REPETITION;
pub use rules::{Element, ElementKind, Grammar};
pub use sampler::{GrammarSampler, TokenPieces};
pub use trigger::GrammarTrigger;
pub use utf8::PartialUtf8;
