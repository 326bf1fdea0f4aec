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
//! cannot drop its last positions, so it reuses a cache that is an exact
//! prefix of the new prompt, or else the longest context checkpoint (the
//! sequence's whole state a few tokens before the end of an earlier
//! prompt, llama.cpp's `--ctx-checkpoints` idea) that the new prompt
//! starts with; it never shifts chunks.

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
    /// Snapshots of the sequence for memories that cannot drop their last
    /// positions, oldest first.
    pub checkpoints: Vec<Checkpoint>,
}

/// Most checkpoints a slot keeps; a new one pushes out the oldest.
pub const MAX_CHECKPOINTS: usize = 4;

/// A checkpoint is taken this many tokens before the end of a prompt, so
/// that the same prompt again still has tokens to decode for its logits.
pub const CHECKPOINT_OFFSET: usize = 4;

/// The whole state of a slot's sequence after its first `n_tokens` tokens
/// (`Context::state_seq_get_data`, which holds the tokens too).
#[derive(Clone, Debug)]
pub struct Checkpoint {
    /// Tokens the state holds.
    pub n_tokens: usize,
    /// The state.
    pub data: Vec<u8>,
}

/// Where a prompt of `len` tokens gets its checkpoint (None: too short).
pub fn checkpoint_at(len: usize) -> Option<usize> {
    (len > 2 * CHECKPOINT_OFFSET).then(|| len - CHECKPOINT_OFFSET)
}

/// Keeps `ck`, dropping a checkpoint of the same length and the oldest
/// beyond `MAX_CHECKPOINTS`.
pub fn add_checkpoint(list: &mut Vec<Checkpoint>, ck: Checkpoint) {
    list.retain(|c| c.n_tokens != ck.n_tokens);
    list.push(ck);
    if list.len() > MAX_CHECKPOINTS {
        list.remove(0);
    }
}

impl Default for SlotCache {
    fn default() -> Self {
        SlotCache {
            tokens: Vec::new(),
            last_used: Instant::now(),
            lora: Vec::new(),
            checkpoints: Vec::new(),
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
/// logits start generation). A memory that cannot keep the common prefix
/// restores the newest of `checkpoints` the prompt starts with.
pub fn prepare(
    ctx: &mut Context<'_>,
    seq: usize,
    cache: &mut Vec<Token>,
    checkpoints: &[Checkpoint],
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
    // What a checkpoint may cover: tokens the prompt shares with the cache.
    let matched = if n_shifted == 0 { n_past } else { 0 };
    let mut start_over = false;
    if !ctx.seq_rm(s, n_past as i32, -1) {
        // The memory cannot drop those positions.
        start_over = true;
    } else if ctx.mem.seq_pos_max(s) + 1 != n_past as i32 {
        // What the memory holds does not end where the tokens say (a
        // recurrent state past n_past).
        start_over = true;
    }
    if start_over {
        let _ = ctx.seq_rm(s, -1, -1);
        n_shifted = 0;
        n_past = match restore_checkpoint(ctx, s, checkpoints, &prompt[..matched]) {
            Some(n) => {
                llama::info!("slot {seq}: restored the context checkpoint of {n} tokens");
                n
            }
            None => {
                llama::info!(
                    "slot {seq}: the memory cannot keep {matched} tokens and no checkpoint fits; decoding the prompt again"
                );
                0
            }
        };
        cache.clear();
        cache.extend_from_slice(&prompt[..n_past]);
        return Reuse { n_past, n_shifted };
    }
    cache.truncate(n_past);
    Reuse { n_past, n_shifted }
}

/// Restores into the empty sequence `s` the longest checkpoint that holds
/// a non-empty prefix of `shared`; its length. A checkpoint that does not
/// load, or holds other tokens, is passed over.
fn restore_checkpoint(
    ctx: &mut Context<'_>,
    s: i32,
    checkpoints: &[Checkpoint],
    shared: &[Token],
) -> Option<usize> {
    let mut order: Vec<&Checkpoint> = checkpoints.iter().collect();
    order.sort_by_key(|c| std::cmp::Reverse(c.n_tokens));
    for ck in order {
        if ck.n_tokens == 0 || ck.n_tokens > shared.len() {
            continue;
        }
        match ctx.state_seq_set_data(s, &ck.data) {
            Ok(tokens) if tokens == shared[..ck.n_tokens] => {
                if ctx.mem.seq_pos_max(s) + 1 == ck.n_tokens as i32 {
                    return Some(ck.n_tokens);
                }
            }
            Ok(_) => {}
            Err(e) => llama::warn!("a context checkpoint did not load: {e}"),
        }
        let _ = ctx.seq_rm(s, -1, -1);
    }
    None
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
            checkpoints: Vec::new(),
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
    fn checkpoints_sit_before_the_prompt_end_and_are_bounded() {
        assert_eq!(checkpoint_at(8), None);
        assert_eq!(checkpoint_at(9), Some(5));
        assert_eq!(checkpoint_at(124), Some(120));
        let mut list = Vec::new();
        for n in [10, 20, 30, 20, 40, 50, 60] {
            add_checkpoint(
                &mut list,
                Checkpoint {
                    n_tokens: n,
                    data: vec![n as u8],
                },
            );
        }
        let kept: Vec<usize> = list.iter().map(|c| c.n_tokens).collect();
        assert_eq!(kept, vec![20, 40, 50, 60]);
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
