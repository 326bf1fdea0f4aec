//! Splitting a batch into ubatches. With attention layers only, a ubatch
//! is the next `n_ubatch` tokens in batch order. A memory with recurrent
//! layers scans each sequence's tokens of a ubatch as one block, so its
//! ubatches are equal splits (llama.cpp's `split_equal`): a few sequence
//! sets (tokens with the same sequence ids) that share no sequence, each
//! advancing by the same number of tokens, laid out set after set.

use std::ops::Range;

use crate::kv_cells::SeqId;

/// The ubatches of a batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Split {
    /// Batch index of each token, in ubatch order (ubatch after ubatch).
    pub order: Vec<usize>,
    /// Each ubatch: its range of `order`, and how many sequence sets it
    /// holds (its tokens are that many equal blocks; 1 for the simple
    /// split).
    pub ubatches: Vec<(Range<usize>, usize)>,
}

impl Split {
    /// Whether the ubatches keep the batch's order.
    pub fn in_order(&self) -> bool {
        self.order.iter().enumerate().all(|(i, &j)| i == j)
    }
}

/// The next `n_ubatch` tokens at a time.
pub fn split_simple(n: usize, n_ubatch: usize) -> Split {
    Split {
        order: (0..n).collect(),
        ubatches: (0..n)
            .step_by(n_ubatch.max(1))
            .map(|s| (s..(s + n_ubatch).min(n), 1))
            .collect(),
    }
}

fn overlaps(a: &[SeqId], b: &[SeqId]) -> bool {
    a.iter().any(|s| b.contains(s))
}

fn same_set(a: &[SeqId], b: &[SeqId]) -> bool {
    a.len() == b.len() && a.iter().all(|s| b.contains(s))
}

/// Equal splits of a batch whose token `i` belongs to the sequences
/// `seqs[i]`: each ubatch takes up to `n_seq_max` sequence sets that share
/// no sequence and whose next tokens no earlier token of an overlapping set
/// precedes, and the same number of tokens from each (the shortest run,
/// within `n_ubatch` in all).
pub fn split_equal(seqs: &[Vec<SeqId>], n_ubatch: usize, n_seq_max: usize) -> Split {
    let n = seqs.len();
    let n_ubatch = n_ubatch.max(1);
    let mut used = vec![false; n];
    let mut left = n;
    let mut order = Vec::with_capacity(n);
    let mut ubatches = Vec::new();
    while left > 0 {
        // Candidates: the first unused token of each set, unless an earlier
        // unused token of an overlapping other set comes before it.
        let mut chosen: Vec<usize> = Vec::new(); // first token of each chosen set
        let mut seen: Vec<usize> = Vec::new(); // first unused token of each set met
        for i in (0..n).filter(|&i| !used[i]) {
            if seen.iter().any(|&j| same_set(&seqs[j], &seqs[i])) {
                continue;
            }
            let blocked = seen.iter().any(|&j| overlaps(&seqs[j], &seqs[i]));
            seen.push(i);
            if !blocked
                && chosen.len() < n_seq_max.max(1)
                && chosen.len() < n_ubatch
                && !chosen.iter().any(|&j| overlaps(&seqs[j], &seqs[i]))
            {
                chosen.push(i);
            }
        }
        // Each chosen set's run: its unused tokens from its first on, up to
        // an unused token of an overlapping other set.
        let runs: Vec<Vec<usize>> = chosen
            .iter()
            .map(|&first| {
                let set = &seqs[first];
                let mut run = Vec::new();
                for i in (first..n).filter(|&i| !used[i]) {
                    if same_set(&seqs[i], set) {
                        run.push(i);
                    } else if overlaps(&seqs[i], set) {
                        break;
                    }
                }
                run
            })
            .collect();
        let n_seqs = runs.len();
        let per = runs
            .iter()
            .map(Vec::len)
            .min()
            .unwrap_or(0)
            .min(n_ubatch / n_seqs.max(1))
            .max(1);
        let start = order.len();
        for run in &runs {
            for &i in &run[..per] {
                used[i] = true;
                order.push(i);
                left -= 1;
            }
        }
        ubatches.push((start..order.len(), n_seqs));
    }
    Split { order, ubatches }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(v: &[i32]) -> Vec<Vec<SeqId>> {
        v.iter().map(|&s| vec![s]).collect()
    }

    #[test]
    fn one_sequence_is_cut_in_order() {
        let s = split_equal(&ids(&[0; 10]), 4, 4);
        assert!(s.in_order());
        assert_eq!(s.ubatches, vec![(0..4, 1), (4..8, 1), (8..10, 1)]);
    }

    #[test]
    fn sequences_advance_together() {
        // Sequence 0: 5 tokens, sequence 1: 2, interleaved in the batch.
        let seqs = ids(&[0, 1, 0, 1, 0, 0, 0]);
        let s = split_equal(&seqs, 8, 4);
        assert_eq!(s.order, vec![0, 2, 1, 3, 4, 5, 6]);
        assert_eq!(s.ubatches, vec![(0..4, 2), (4..7, 1)]);
        // The ubatch size bounds the tokens per sequence.
        let s = split_equal(&seqs, 3, 4);
        assert_eq!(s.ubatches[0], (0..2, 2));
        assert_eq!(&s.order[..2], &[0, 1]);
        // So does the number of sequences per ubatch.
        let s = split_equal(&seqs, 8, 1);
        assert_eq!(s.ubatches[0], (0..5, 1));
    }

    #[test]
    fn overlapping_sets_wait_their_turn() {
        // A token shared by sequences 0 and 1 after one of sequence 0.
        let seqs = vec![vec![0], vec![0, 1], vec![1]];
        let s = split_equal(&seqs, 8, 4);
        assert_eq!(s.order, vec![0, 1, 2]);
        assert_eq!(s.ubatches, vec![(0..1, 1), (1..2, 1), (2..3, 1)]);
        for (r, n_seqs) in &s.ubatches {
            assert_eq!(r.len() % n_seqs, 0);
        }
    }

    #[test]
    fn simple_split_keeps_the_order() {
        let s = split_simple(5, 2);
        assert!(s.in_order());
        assert_eq!(s.ubatches, vec![(0..2, 1), (2..4, 1), (4..5, 1)]);
    }
}
