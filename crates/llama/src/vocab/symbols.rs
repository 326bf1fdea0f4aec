//! The symbols SentencePiece and BPE merge: UTF-8 characters of a text as
//! a linked list of byte ranges, where a merge grows a symbol over its
//! right neighbour.

use std::collections::BinaryHeap;

use super::unicode::utf8_len;

/// A symbol: a byte range of the text, linked to its live neighbours.
#[derive(Clone, Copy, Debug)]
pub(super) struct Symbol {
    /// First byte.
    pub start: usize,
    /// Length in bytes; 0 once merged into its left neighbour.
    pub n: usize,
    /// The live symbol before it.
    pub prev: Option<usize>,
    /// The live symbol after it.
    pub next: Option<usize>,
}

/// One symbol per UTF-8 character of `text` (a truncated sequence at its
/// end is one symbol of the bytes left).
pub(super) fn split_utf8(text: &[u8]) -> Vec<Symbol> {
    let mut symbols: Vec<Symbol> = Vec::with_capacity(text.len());
    let mut offs = 0;
    while offs < text.len() {
        let n = utf8_len(text[offs]).min(text.len() - offs);
        let index = symbols.len();
        offs += n;
        symbols.push(Symbol {
            start: offs - n,
            n,
            prev: index.checked_sub(1),
            next: (offs < text.len()).then_some(index + 1),
        });
    }
    symbols
}

/// Merges neighbours by priority until no candidate is left, the way both
/// SentencePiece and BPE do: every pair of neighbours that `candidate`
/// accepts (`candidate(symbols, left, right)`) is queued, the greatest
/// merges first, and the merged symbol forms new candidates with its
/// neighbours. `live` gives the pair a popped candidate stands for, or
/// `None` when its symbols changed since it was queued.
pub(super) fn merge_by_priority<B: Ord>(
    symbols: &mut [Symbol],
    candidate: impl Fn(&[Symbol], usize, usize) -> Option<B>,
    live: impl Fn(&[Symbol], &B) -> Option<(usize, usize)>,
) {
    let mut queue = BinaryHeap::new();
    let try_add = |symbols: &[Symbol], queue: &mut BinaryHeap<B>, left, right| {
        if let (Some(left), Some(right)) = (left, right) {
            queue.extend(candidate(symbols, left, right));
        }
    };
    for i in 1..symbols.len() {
        try_add(symbols, &mut queue, Some(i - 1), Some(i));
    }
    while let Some(bigram) = queue.pop() {
        let Some((l, r)) = live(symbols, &bigram) else {
            continue;
        };
        merge(symbols, l, r);
        try_add(symbols, &mut queue, symbols[l].prev, Some(l));
        try_add(symbols, &mut queue, Some(l), symbols[l].next);
    }
}

/// Merges symbol `r` into its left neighbour `l`.
fn merge(symbols: &mut [Symbol], l: usize, r: usize) {
    symbols[l].n += symbols[r].n;
    symbols[r].n = 0;
    symbols[l].next = symbols[r].next;
    if let Some(next) = symbols[r].next {
        symbols[next].prev = Some(l);
    }
}
