//! Byte-level BPE (`gpt2` vocabularies).
//!
//! The pre-tokenizer splits the text into words written with the
//! byte-to-unicode map. Each word starts as one symbol per character; the
//! neighbouring pair with the lowest merge rank merges first (the leftmost
//! on ties) until no pair has a rank. A final symbol that is not a token
//! falls back to the tokens of its single bytes, where such tokens exist.

use std::cmp::{Ordering, Reverse};

use super::pretokenize::PreTokenizer;
use super::symbols::{merge_by_priority, split_utf8};
use super::{TokenId, Vocab};

/// A merge candidate; ordered so that the max-heap pops the lowest rank,
/// then the leftmost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Bigram {
    key: Reverse<(u32, usize)>,
    right: usize,
    size: usize,
}

impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Bigram {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key.cmp(&other.key)
    }
}

/// Tokenizes `text` (one fragment), appending to `out`.
pub(crate) fn tokenize(vocab: &Vocab, pre: &PreTokenizer, text: &[u8], out: &mut Vec<TokenId>) {
    for word in pre.split(text) {
        for (start, n) in merge_word(vocab, &word) {
            let piece = &word[start..start + n];
            match vocab.text_to_token(piece) {
                Some(id) => out.push(id),
                None => out.extend(piece.iter().filter_map(|&b| vocab.text_to_token(&[b]))),
            }
        }
    }
}

/// Applies the merges to one word; returns the final symbols as
/// `(start, len)` byte ranges, in order.
fn merge_word(vocab: &Vocab, word: &[u8]) -> Vec<(usize, usize)> {
    if word.is_empty() {
        return Vec::new();
    }
    if vocab.ignore_merges() && vocab.text_to_token(word).is_some() {
        return vec![(0, word.len())];
    }
    let mut symbols = split_utf8(word);

    merge_by_priority(
        &mut symbols,
        |symbols, left, right| {
            let (l, r) = (symbols[left], symbols[right]);
            let left_text = &word[l.start..l.start + l.n];
            let right_text = &word[r.start..r.start + r.n];
            let rank = vocab.find_bpe_rank(left_text, right_text)?;
            Some(Bigram {
                key: Reverse((rank, left)),
                right,
                size: l.n + r.n,
            })
        },
        |symbols, bigram| {
            let (Reverse((_, l)), r) = (bigram.key, bigram.right);
            // A live pair is still adjacent, so its text is unchanged
            // exactly when its length is.
            let (nl, nr) = (symbols[l].n, symbols[r].n);
            (nl != 0 && nr != 0 && nl + nr == bigram.size).then_some((l, r))
        },
    );

    symbols
        .iter()
        .filter(|s| s.n > 0)
        .map(|s| (s.start, s.n))
        .collect()
}
