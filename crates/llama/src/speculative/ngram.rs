//! Prompt lookup without a draft model (llama.cpp's `ngram-simple`): the
//! last `size_n` tokens (the history's last `size_n - 1` and the token
//! just sampled) are searched for earlier in the history, newest match
//! first; the tokens that followed the match, at most `size_m` of them,
//! are the proposal. A match followed by fewer than `size_n` tokens
//! proposes nothing, as llama.cpp's.

use crate::batch::Token;
use crate::error::{LlamaError, Result};

/// Largest n-gram and m-gram sizes (llama.cpp's limit).
pub const NGRAM_SIZE_MAX: usize = 1024;

/// `--spec-ngram-simple-size-n` and `--spec-ngram-simple-size-m`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NgramParams {
    /// Length of the n-gram looked up.
    pub size_n: usize,
    /// Most tokens proposed after a match.
    pub size_m: usize,
}

impl Default for NgramParams {
    fn default() -> Self {
        // llama.cpp's defaults.
        NgramParams {
            size_n: 12,
            size_m: 48,
        }
    }
}

impl NgramParams {
    /// Checks both sizes are in [1, 1024].
    pub fn validate(&self) -> Result<()> {
        for (name, v) in [("size n", self.size_n), ("size m", self.size_m)] {
            if !(1..=NGRAM_SIZE_MAX).contains(&v) {
                return Err(LlamaError::InvalidParam(format!(
                    "ngram {name} must be between 1 and {NGRAM_SIZE_MAX}, not {v}"
                )));
            }
        }
        Ok(())
    }
}

/// The proposal for the token after `sampled`, given `history` (the
/// tokens before it); empty without a match.
pub fn ngram_simple_draft(history: &[Token], sampled: Token, p: NgramParams) -> Vec<Token> {
    let (n, m) = (p.size_n.max(1), p.size_m);
    let len = history.len();
    if len <= n + m + 1 {
        return Vec::new();
    }
    // The pattern: the history's last n - 1 tokens, then `sampled`.
    let tail = &history[len - n + 1..];
    let matches = |j: usize| history[j..j + n - 1] == *tail && history[j + n - 1] == sampled;
    // Newest first; position 0 is never a match (llama.cpp's rule).
    let Some(at) = (1..len - n).rev().find(|&j| matches(j)) else {
        return Vec::new();
    };
    let n_copy = m.min(len - (at + n));
    if n_copy < n {
        return Vec::new();
    }
    history[at + n..at + n + n_copy].to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(n: usize, m: usize) -> NgramParams {
        NgramParams {
            size_n: n,
            size_m: m,
        }
    }

    #[test]
    fn proposes_what_followed_the_newest_earlier_match() {
        // 0 1 2 ... 9, then 1 2 and 3 sampled: 4 5 6 ... followed 1 2 3.
        let mut h: Vec<Token> = (0..=9).collect();
        h.extend([1, 2]);
        let d = ngram_simple_draft(&h, 3, p(3, 4));
        assert_eq!(d, vec![4, 5, 6, 7]);
        let d = ngram_simple_draft(&h, 3, p(3, 5));
        assert_eq!(d, vec![4, 5, 6, 7, 8]);
        // The newest match wins.
        let mut h2 = vec![0, 1, 2, 3, 10, 11, 12, 13, 1, 2, 3, 20, 21, 22, 23, 24, 9];
        h2.extend([1, 2]);
        assert_eq!(ngram_simple_draft(&h2, 3, p(3, 3)), vec![20, 21, 22]);
    }

    #[test]
    fn no_match_short_history_or_short_continuation_propose_nothing() {
        let h: Vec<Token> = (1..=20).collect();
        assert!(ngram_simple_draft(&h, 99, p(2, 4)).is_empty());
        assert!(ngram_simple_draft(&h[..5], 5, p(3, 4)).is_empty());
        // A match at position 0 is ignored.
        let mut h: Vec<Token> = vec![7, 8, 1, 1, 1, 1, 1, 1, 1, 1, 7];
        assert!(ngram_simple_draft(&h, 8, p(2, 3)).is_empty());
        // A continuation shorter than n proposes nothing.
        h = vec![0, 5, 6, 1, 9, 9, 9, 9, 9, 9, 9, 5];
        assert_eq!(ngram_simple_draft(&h, 6, p(2, 3)), vec![1, 9, 9]);
        let h = vec![0, 0, 0, 0, 0, 0, 0, 0, 5, 6, 5];
        assert!(ngram_simple_draft(&h, 6, p(2, 3)).is_empty());
    }

    #[test]
    fn sizes_are_checked() {
        assert!(p(12, 48).validate().is_ok());
        assert!(p(0, 48).validate().is_err());
        assert!(p(12, 1025).validate().is_err());
    }
}
