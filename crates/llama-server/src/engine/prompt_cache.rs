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
//! reused, and a recurrent or hybrid memory cannot drop its last
//! positions. Those reuse a cache that they can cut at the common prefix,
//! or else the newest context checkpoint (llama.cpp's `--ctx-checkpoints`:
//! the sliding-window cache or recurrent states of the sequence taken
//! `4 + n_ubatch` and 4 tokens before the end of an earlier prompt; the
//! full-attention cells stay) that the new prompt starts with, or else
//! decode the prompt again; they never shift chunks. Checkpoints past
//! what a request keeps are dropped, as llama.cpp drops them.

use std::time::Instant;

use llama::memory::{SeqMemory, StateParts};
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

/// A checkpoint is taken this many tokens before the end of a prompt (and
/// another a ubatch before that), so that the same prompt again still has
/// tokens to decode for its logits.
pub const CHECKPOINT_OFFSET: usize = 4;

/// What cannot be rolled back of a slot's sequence after its first
/// `n_tokens` tokens: the sliding-window cache or the recurrent states
/// (`Context::state_seq_get_data_parts` with `StateParts::RollbackOnly`,
/// which holds the tokens too). The full-attention cells of those tokens
/// stay in the cache.
#[derive(Clone, Debug)]
pub struct Checkpoint {
    /// Tokens the state holds.
    pub n_tokens: usize,
    /// The request that took it.
    pub id_task: u64,
    /// The state.
    pub data: Vec<u8>,
}

/// Where a prompt of `len` tokens gets its checkpoints, in order: as in
/// llama.cpp, `4 + n_ubatch` and 4 tokens before its end (at most
/// `n_batch` before), where at least one token comes before.
pub fn checkpoint_points(len: usize, n_batch: usize, n_ubatch: usize) -> Vec<usize> {
    let mut out = Vec::with_capacity(2);
    for offset in [CHECKPOINT_OFFSET + n_ubatch, CHECKPOINT_OFFSET] {
        let n_last = offset.min(n_batch.max(1));
        if len > n_last && !out.contains(&(len - n_last)) {
            out.push(len - n_last);
        }
    }
    out
}

/// Keeps `ck` in `list` (oldest first) as llama.cpp does: when the list is
/// full, checkpoints of other requests within `min_step` tokens of the one
/// before them go first, then the oldest, down to `max - 1`; one of the
/// same length is replaced. Nothing is kept with `max` 0.
pub fn add_checkpoint(list: &mut Vec<Checkpoint>, ck: Checkpoint, max: usize, min_step: usize) {
    if max == 0 {
        return;
    }
    let mut last: Option<usize> = None;
    let mut i = 0;
    while list.len() + 1 >= max && i < list.len() {
        let c = &list[i];
        if c.id_task != ck.id_task && last.is_some_and(|l| c.n_tokens <= l + min_step) {
            list.remove(i);
            continue;
        }
        last = Some(c.n_tokens);
        i += 1;
    }
    while list.len() >= max {
        list.remove(0);
    }
    list.retain(|c| c.n_tokens != ck.n_tokens);
    list.push(ck);
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
/// restores the newest of `checkpoints` the prompt starts with; those
/// past the kept tokens are dropped.
pub fn prepare(
    ctx: &mut Context<'_>,
    seq: usize,
    cache: &mut Vec<Token>,
    checkpoints: &mut Vec<Checkpoint>,
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
        n_shifted = 0;
        n_past = match restore_checkpoint(ctx, s, checkpoints, &prompt[..matched]) {
            Some(n) => {
                llama::info!("slot {seq}: restored the context checkpoint of {n} tokens");
                n
            }
            None => {
                let _ = ctx.seq_rm(s, -1, -1);
                llama::info!(
                    "slot {seq}: the memory cannot keep {matched} tokens and no checkpoint fits; decoding the prompt again"
                );
                0
            }
        };
        cache.clear();
        cache.extend_from_slice(&prompt[..n_past]);
    } else {
        cache.truncate(n_past);
    }
    checkpoints.retain(|c| c.n_tokens <= n_past);
    Reuse { n_past, n_shifted }
}

/// Restores into sequence `s`, whose full-attention cells still hold
/// `shared`, the newest checkpoint that holds a non-empty prefix of
/// `shared`, and drops the cells past it; its length. A checkpoint that
/// does not load, holds other tokens, or leaves the sequence other than
/// its tokens say, is passed over.
fn restore_checkpoint(
    ctx: &mut Context<'_>,
    s: i32,
    checkpoints: &[Checkpoint],
    shared: &[Token],
) -> Option<usize> {
    for ck in checkpoints.iter().rev() {
        let n = ck.n_tokens;
        if n == 0 || n > shared.len() {
            continue;
        }
        match ctx.state_seq_set_data_parts(s, &ck.data, StateParts::RollbackOnly) {
            Ok(tokens) if tokens == shared[..n] => {
                if ctx.seq_rm(s, n as i32, -1) && ctx.mem.seq_pos_max(s) + 1 == n as i32 {
                    return Some(n);
                }
            }
            Ok(_) => {}
            Err(e) => llama::warn!("a context checkpoint did not load: {e}"),
        }
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
    fn checkpoints_sit_before_the_prompt_end() {
        // ubatch 512, batch 2048.
        assert_eq!(checkpoint_points(4, 2048, 512), Vec::<usize>::new());
        assert_eq!(checkpoint_points(5, 2048, 512), vec![1]);
        assert_eq!(checkpoint_points(60, 2048, 512), vec![56]);
        assert_eq!(checkpoint_points(2000, 2048, 512), vec![1484, 1996]);
        // A batch smaller than the offset: its size before the end.
        assert_eq!(checkpoint_points(2000, 256, 512), vec![1744, 1996]);
        assert_eq!(checkpoint_points(2000, 2, 512), vec![1998]);
    }

    fn ck(n_tokens: usize, id_task: u64) -> Checkpoint {
        Checkpoint {
            n_tokens,
            id_task,
            data: vec![n_tokens as u8],
        }
    }

    fn lengths(list: &[Checkpoint]) -> Vec<usize> {
        list.iter().map(|c| c.n_tokens).collect()
    }

    #[test]
    fn checkpoints_are_bounded_as_llama_cpp_bounds_them() {
        // Without a minimum step: the oldest go; the same length replaces.
        let mut list = Vec::new();
        for (i, n) in [10, 20, 30, 20, 40, 50, 60].into_iter().enumerate() {
            add_checkpoint(&mut list, ck(n, i as u64), 4, 0);
        }
        assert_eq!(lengths(&list), vec![30, 40, 50, 60]);
        // Off.
        let mut none = Vec::new();
        add_checkpoint(&mut none, ck(10, 0), 0, 0);
        assert!(none.is_empty());
        // Full: checkpoints of other requests within the minimum step of
        // the one before them go before the oldest.
        let mut list = vec![ck(100, 1), ck(150, 1), ck(1000, 2), ck(1040, 2)];
        add_checkpoint(&mut list, ck(2000, 3), 4, 100);
        assert_eq!(lengths(&list), vec![100, 1000, 2000]);
        // ... but not those of the request adding one.
        let mut list = vec![ck(100, 1), ck(150, 1), ck(1000, 2), ck(1040, 2)];
        add_checkpoint(&mut list, ck(2000, 1), 4, 100);
        assert_eq!(lengths(&list), vec![100, 150, 1000, 2000]);
        // Not full: nothing is pruned for being close.
        let mut list = vec![ck(100, 1), ck(150, 1)];
        add_checkpoint(&mut list, ck(160, 2), 8, 100);
        assert_eq!(lengths(&list), vec![100, 150, 160]);
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
