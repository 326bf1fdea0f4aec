//! SentencePiece BPE (`llama` vocabularies).
//!
//! The text (spaces already written as U+2581) starts as one symbol per
//! UTF-8 character. Every pair of neighbours whose concatenation is a token
//! is a candidate; the candidate with the highest token score merges first
//! (the leftmost on ties), and the merged symbol forms new candidates with
//! its neighbours, until no candidate remains. Symbols that are not tokens
//! fall back to one `<0xXX>` token per byte.

use std::cmp::Ordering;

use super::symbols::{merge_by_priority, split_utf8};
use super::{TokenId, Vocab};

/// A merge candidate: the symbol at `left` and its right neighbour. It is
/// stale once their combined length is no longer `size` (the neighbour of a
/// live symbol only changes when it merges into it or grows).
#[derive(Clone, Copy, Debug)]
struct Bigram {
    score: f32,
    left: u32,
    /// Byte length of the merged text.
    size: u32,
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Bigram {}

impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Bigram {
    /// Higher score first, then the leftmost.
    fn cmp(&self, other: &Self) -> Ordering {
        if self.score < other.score {
            Ordering::Less
        } else if self.score > other.score {
            Ordering::Greater
        } else {
            other.left.cmp(&self.left)
        }
    }
}

/// Tokenizes escaped `text`, appending to `out`.
pub(crate) fn tokenize(vocab: &Vocab, text: &[u8], out: &mut Vec<TokenId>) {
    let mut symbols = split_utf8(text);

    merge_by_priority(
        &mut symbols,
        |symbols, left, right| {
            let start = symbols[left].start;
            let size = symbols[left].n + symbols[right].n;
            let token = vocab.token(vocab.text_to_token(&text[start..start + size])?)?;
            // Positions past 4 GiB are out of reach (the text never gets
            // there in one piece); such a candidate is simply not considered.
            Some(Bigram {
                score: token.score,
                left: u32::try_from(left).ok()?,
                size: u32::try_from(size).ok()?,
            })
        },
        |symbols, bigram| {
            // Skip candidates whose symbols changed since they were queued.
            let l = bigram.left as usize;
            let r = symbols[l].next?;
            let live = symbols[l].n != 0 && symbols[l].n + symbols[r].n == bigram.size as usize;
            live.then_some((l, r))
        },
    );

    let mut cursor = if symbols.is_empty() { None } else { Some(0) };
    while let Some(i) = cursor {
        let s = symbols[i];
        let piece = &text[s.start..s.start + s.n];
        match vocab.text_to_token(piece) {
            Some(id) => out.push(id),
            None => {
                for &b in piece {
                    // A vocabulary without byte tokens cannot spell this
                    // byte; it becomes the unknown token (or nothing).
                    if let Some(id) = vocab.byte_to_token(b).or(vocab.unk()) {
                        out.push(id);
                    }
                }
            }
        }
        cursor = s.next;
    }
}
