//! The prompt cache of the slots: each slot keeps the tokens of its last
//! request in the KV cache; a new request goes to the free slot whose
//! cached tokens share the largest part of its prompt (llama.cpp's rule,
//! `--slot-prompt-similarity`), or else to the least recently used one,
//! and reuses the longest common prefix. With `--cache-reuse N`, chunks of
//! at least N matching tokens after the first difference are shifted into
//! place instead of decoded again (attention memories that can shift).
//!
//! Limits by memory: an attention cache drops any suffix; a sliding-window
//! cache smaller than the context cannot give back positions it already
//! reused (the prompt is then decoded again); a recurrent or hybrid memory
//! cannot drop its last positions, so it reuses only a cache that is an
//! exact prefix of the new prompt, and never shifts chunks.

use std::time::Instant;

use llama::memory::SeqMemory;
use llama::{Context, Token};

/// What a slot holds between requests.
#[derive(Clone, Debug)]
pub struct SlotCache {
    /// The tokens in the KV cache for the slot, in position order.
    pub tokens: Vec<Token>,
    /// When its last request ended.
    pub last_used: Instant,
    /// The LoRA scales (by adapter id) its cells were computed under:
    /// cells of other adapters are never reused.
    pub lora: Vec<f32>,
}

impl Default for SlotCache {
    fn default() -> Self {
        SlotCache {
            tokens: Vec::new(),
            last_used: Instant::now(),
            lora: Vec::new(),
        }
    }
}

/// Length of the common prefix of `a` and `b`.
pub fn common_prefix(a: &[Token], b: &[Token]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// The free slot for `prompt`: among `free` (slot ids with their caches),
/// the one whose cache shares the largest fraction of the prompt, when
/// that fraction is above `similarity` (0 turns this off); else the least
/// recently used.
pub fn pick_slot(free: &[(usize, &SlotCache)], prompt: &[Token], similarity: f32) -> Option<usize> {
    if similarity > 0.0 && !prompt.is_empty() {
        let mut best: Option<(usize, f32)> = None;
        for &(id, c) in free {
            if c.tokens.is_empty() {
                continue;
            }
            let sim = common_prefix(&c.tokens, prompt) as f32 / prompt.len() as f32;
            if sim > similarity && best.is_none_or(|(_, b)| sim > b) {
                best = Some((id, sim));
            }
        }
        if let Some((id, _)) = best {
            return Some(id);
        }
    }
    free.iter()
        .min_by_key(|(_, c)| c.last_used)
        .map(|&(id, _)| id)
}

/// A chunk of the cache moved to another place of the prompt: cache
/// positions `[from, from + n)` become `[to, to + n)` (`to <= from`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shift {
    /// Where the chunk is in the cache.
    pub from: usize,
    /// Where it goes.
    pub to: usize,
    /// Its length.
    pub n: usize,
}

/// The chunks of `cache` after `n_past` that match the prompt at the same
/// point for at least `min_chunk` tokens (llama.cpp's `--cache-reuse`
/// walk): each match moves the prompt on; a mismatch moves the cache on.
pub fn reuse_plan(
    cache: &[Token],
    prompt: &[Token],
    n_past: usize,
    min_chunk: usize,
) -> Vec<Shift> {
    let mut out = Vec::new();
    if min_chunk == 0 {
        return out;
    }
    let (mut hc, mut hp) = (n_past, n_past);
    while hc < cache.len() && hp < prompt.len() {
        let n = common_prefix(&cache[hc..], &prompt[hp..]);
        if n >= min_chunk {
            out.push(Shift {
                from: hc,
                to: hp,
                n,
            });
            hc += n;
            hp += n;
        } else {
            hc += 1;
        }
    }
    out
}

/// How a request starts in a slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reuse {
    /// Prompt tokens already in the cache (the first token to decode).
    pub n_past: usize,
    /// Tokens moved by `--cache-reuse` (part of `n_past`).
    pub n_shifted: usize,
}

/// Makes the KV cache of `seq` hold the longest part of `prompt` it can
/// keep from `cache` (its tokens), and removes the rest; `cache` becomes
/// the kept tokens. At least one prompt token is left to decode (its
/// logits start generation).
pub fn prepare(
    ctx: &mut Context<'_>,
    seq: usize,
    cache: &mut Vec<Token>,
    prompt: &[Token],
    cache_prompt: bool,
    min_chunk: usize,
) -> Reuse {
    let s = seq as i32;
    let mut n_past = if cache_prompt {
        common_prefix(cache, prompt)
    } else {
        0
    };
    let mut n_shifted = 0;
    // Chunks move only in a memory without recurrent layers that can shift.
    let can_move = ctx.mem.rs().is_none() && ctx.can_shift();
    if cache_prompt && min_chunk > 0 && can_move {
        for sh in reuse_plan(cache, prompt, n_past, min_chunk) {
            let delta = sh.to as i32 - sh.from as i32;
            // The cells between the prompt's head and the chunk go; the
            // chunk moves down to the prompt's head.
            if ctx.seq_rm(s, sh.to as i32, sh.from as i32) {
                ctx.seq_add(s, sh.from as i32, (sh.from + sh.n) as i32, delta);
                cache.copy_within(sh.from..sh.from + sh.n, sh.to);
                n_past += sh.n;
                n_shifted += sh.n;
            } else {
                break;
            }
        }
    }
    if n_past >= prompt.len() && n_past > 0 {
        n_past = prompt.len() - 1;
    }
    if !ctx.seq_rm(s, n_past as i32, -1) {
        // The memory cannot drop those positions: start over.
        llama::info!(
            "slot {seq}: the memory cannot drop positions from {n_past} on; decoding the prompt again"
        );
        let _ = ctx.seq_rm(s, -1, -1);
        n_past = 0;
        n_shifted = 0;
    }
    if ctx.mem.seq_pos_max(s) + 1 != n_past as i32 {
        // What the memory holds does not end where the tokens say (a
        // recurrent state past n_past): start over.
        let _ = ctx.seq_rm(s, -1, -1);
        n_past = 0;
        n_shifted = 0;
    }
    cache.truncate(n_past);
    Reuse { n_past, n_shifted }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn common_prefixes() {
        assert_eq!(common_prefix(&[1, 2, 3], &[1, 2, 4]), 2);
        assert_eq!(common_prefix(&[], &[1]), 0);
        assert_eq!(common_prefix(&[1, 2], &[1, 2, 3]), 2);
    }

    #[test]
    fn the_most_similar_slot_wins_over_the_oldest() {
        let t0 = Instant::now();
        let c = |tokens: Vec<Token>, age: u64| SlotCache {
            tokens,
            last_used: t0 + Duration::from_secs(age),
            lora: Vec::new(),
        };
        let a = c(vec![1, 2, 3, 4], 5);
        let b = c(vec![1, 2, 9, 9], 1);
        let e = c(vec![], 0);
        let free = [(0, &a), (1, &b), (2, &e)];
        assert_eq!(pick_slot(&free, &[1, 2, 3, 4, 5], 0.1), Some(0));
        // Below the threshold: least recently used.
        assert_eq!(pick_slot(&free, &[1, 2, 3, 4, 5], 0.9), Some(2));
        // Similarity off.
        assert_eq!(pick_slot(&free, &[1, 2, 3, 4, 5], 0.0), Some(2));
        assert_eq!(pick_slot(&[], &[1], 0.1), None);
    }

    #[test]
    fn reuse_walks_chunks_like_llama_cpp() {
        // cache: A B C x D E F G ; prompt: A B C D E F G H
        let cache = [1, 2, 3, 99, 4, 5, 6, 7];
        let prompt = [1, 2, 3, 4, 5, 6, 7, 8];
        let n_past = common_prefix(&cache, &prompt);
        assert_eq!(n_past, 3);
        assert_eq!(
            reuse_plan(&cache, &prompt, n_past, 2),
            vec![Shift {
                from: 4,
                to: 3,
                n: 4
            }]
        );
        // Chunks shorter than the minimum are skipped.
        assert!(reuse_plan(&cache, &prompt, n_past, 5).is_empty());
        assert!(reuse_plan(&cache, &prompt, n_past, 0).is_empty());
        // Two chunks.
        let cache = [1, 9, 2, 3, 9, 9, 4, 5];
        let prompt = [1, 2, 3, 4, 5];
        assert_eq!(
            reuse_plan(&cache, &prompt, 1, 2),
            vec![
                Shift {
                    from: 2,
                    to: 1,
                    n: 2
                },
                Shift {
                    from: 6,
                    to: 3,
                    n: 2
                }
            ]
        );
    }
}
