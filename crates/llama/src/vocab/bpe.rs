//! Byte-level BPE (`gpt2` vocabularies).
//!
//! The pre-tokenizer splits the text into words written with the
//! byte-to-unicode map. Each word starts as one symbol per character; the
//! neighbouring pair with the lowest merge rank merges first (the leftmost
//! on ties) until no pair has a rank. A final symbol that is not a token
//! falls back to the tokens of its single bytes, where such tokens exist.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use super::pretokenize::PreTokenizer;
use super::symbols::{merge, split_utf8, Symbol};
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

    let mut queue = BinaryHeap::new();
    let try_add = |symbols: &[Symbol],
                   queue: &mut BinaryHeap<Bigram>,
                   left: Option<usize>,
                   right: Option<usize>| {
        let (Some(left), Some(right)) = (left, right) else {
            return;
        };
        let (l, r) = (symbols[left], symbols[right]);
        let left_text = &word[l.start..l.start + l.n];
        let right_text = &word[r.start..r.start + r.n];
        if let Some(rank) = vocab.find_bpe_rank(left_text, right_text) {
            queue.push(Bigram {
                key: Reverse((rank, left)),
                right,
                size: l.n + r.n,
            });
        }
    };

    for i in 1..symbols.len() {
        try_add(&symbols, &mut queue, Some(i - 1), Some(i));
    }

    while let Some(bigram) = queue.pop() {
        let Reverse((_, l)) = bigram.key;
        let r = bigram.right;
        // A live pair is still adjacent, so its text is unchanged exactly
        // when its length is.
        if symbols[l].n == 0 || symbols[r].n == 0 || symbols[l].n + symbols[r].n != bigram.size {
            continue;
        }
        merge(&mut symbols, l, r);
        try_add(&symbols, &mut queue, symbols[l].prev, Some(l));
        try_add(&symbols, &mut queue, Some(l), symbols[l].next);
    }

    symbols
        .iter()
        .filter(|s| s.n > 0)
        .map(|s| (s.start, s.n))
        .collect()
}
