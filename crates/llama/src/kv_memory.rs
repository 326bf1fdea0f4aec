//! The memory of a context: one KV cache for the full-attention layers and,
//! for a model with sliding-window layers, a second one for those. The
//! second holds only what a window can still see (about `n_swa` cells per
//! sequence plus a ubatch) and reuses cells whose position has left every
//! window, unless full-size caches were asked for (`swa_full`). Sequence
//! operations go to both caches.

use std::ops::Range;

use crate::error::Result;
use crate::hparams::HParams;
use crate::kv_cache::{KvCache, KvCacheSpec, KvCells, KvLayer, Pos, SeqId, MAX_SEQ};
use crate::model::Model;

/// Sliding-window caches are padded to this many cells.
const SWA_PAD: usize = 256;

/// How the memory is laid out.
#[derive(Clone, Copy, Debug)]
pub struct KvMemoryParams {
    /// Cells of the full-attention cache (the context size).
    pub n_ctx: usize,
    /// Most sequences.
    pub n_seq_max: usize,
    /// Most tokens per ubatch.
    pub n_ubatch: usize,
    /// Give sliding-window layers a full-size cache too.
    pub swa_full: bool,
    /// Key type.
    pub type_k: ggml_core::Type,
    /// Value type.
    pub type_v: ggml_core::Type,
    /// Store V transposed (attention without flash attention).
    pub v_trans: bool,
    /// Keep each layer's cache on its device.
    pub offload: bool,
    /// Plan only: buffers that hold no memory.
    pub planning: bool,
}

/// Cells chosen for one ubatch in each cache.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Slots {
    /// In the full-attention cache.
    pub base: Vec<usize>,
    /// In the sliding-window cache (empty without one).
    pub swa: Vec<usize>,
}

/// Cells of both caches, to undo a failed decode.
pub struct Snapshot(KvCells, Option<KvCells>);

/// The caches of a context.
pub struct KvMemory {
    /// The cache of full-attention layers (of every layer without SWA).
    pub base: KvCache,
    /// The cache of sliding-window layers.
    pub swa: Option<KvCache>,
}

/// Cells of the sliding-window cache: the window of every sequence plus a
/// ubatch, padded, never more than the context.
pub fn swa_cache_size(n_ctx: usize, n_swa: usize, n_seq_max: usize, n_ubatch: usize) -> usize {
    let want = n_swa.saturating_mul(n_seq_max).saturating_add(n_ubatch);
    n_ctx.min(want.div_ceil(SWA_PAD).saturating_mul(SWA_PAD))
}

impl KvMemory {
    /// Allocates the caches of `model`.
    pub fn new(model: &Model, p: KvMemoryParams) -> Result<KvMemory> {
        let hp = &model.hparams;
        let spec = KvCacheSpec {
            size: p.n_ctx,
            n_swa: 0,
            type_k: p.type_k,
            type_v: p.type_v,
            v_trans: p.v_trans,
            offload: p.offload,
            planning: p.planning,
        };
        let attends = |il: usize| !hp.is_recurrent(il);
        if !hp.has_swa() {
            let base = KvCache::new(model, spec, attends, "")?;
            return Ok(KvMemory { base, swa: None });
        }
        let size_swa = if p.swa_full {
            crate::warn!("llama_kv_cache_iswa: using full-size SWA cache");
            p.n_ctx
        } else {
            swa_cache_size(p.n_ctx, hp.n_swa, p.n_seq_max, p.n_ubatch)
        };
        crate::info!(
            "llama_kv_cache_iswa: creating non-SWA KV cache, size = {} cells",
            p.n_ctx
        );
        let base = KvCache::new(model, spec, |il| attends(il) && !hp.is_swa(il), "")?;
        crate::info!("llama_kv_cache_iswa: creating     SWA KV cache, size = {size_swa} cells");
        let swa_spec = KvCacheSpec {
            size: size_swa,
            n_swa: hp.n_swa,
            ..spec
        };
        let swa = KvCache::new(model, swa_spec, |il| attends(il) && hp.is_swa(il), "SWA ")?;
        Ok(KvMemory {
            base,
            swa: Some(swa),
        })
    }

    /// The cache holding layer `il`.
    pub fn cache_for(&self, hp: &HParams, il: usize) -> &KvCache {
        match &self.swa {
            Some(c) if hp.is_swa(il) => c,
            _ => &self.base,
        }
    }

    /// K and V of layer `il`, whichever cache holds them.
    pub fn layer(&self, il: usize) -> Option<&KvLayer> {
        std::iter::once(&self.base)
            .chain(&self.swa)
            .find_map(|c| c.layers.get(il).and_then(Option::as_ref))
    }

    /// Every cache.
    pub fn caches(&self) -> impl Iterator<Item = &KvCache> {
        std::iter::once(&self.base).chain(&self.swa)
    }

    fn caches_mut(&mut self) -> impl Iterator<Item = &mut KvCache> {
        std::iter::once(&mut self.base).chain(&mut self.swa)
    }

    /// Cells of the full-attention cache (the context size).
    pub fn size(&self) -> usize {
        self.base.size
    }

    /// Non-empty cells of the full-attention cache.
    pub fn used(&self) -> usize {
        self.base.cells.used
    }

    /// Bytes of K and V in every cache.
    pub fn size_bytes(&self) -> usize {
        self.caches().map(KvCache::size_bytes).sum()
    }

    /// Whether positions can be shifted with [`KvMemory::seq_add`] for a
    /// context shift: not when the sliding-window cache is smaller than the
    /// context (what it dropped cannot be shifted back into a window).
    pub fn can_shift(&self) -> bool {
        self.swa.as_ref().is_none_or(|c| c.size == self.base.size)
    }

    /// Empties every cell.
    pub fn clear(&mut self) {
        self.caches_mut().for_each(|c| c.cells.clear());
    }

    /// Removes positions `[p0, p1)` of `seq` (`seq < 0`: every sequence;
    /// negative bounds are open). Returns false, and changes nothing, when
    /// the removal would leave a sequence whose sliding window reaches back
    /// to positions its sliding-window cache has already given up; the
    /// caller then has to clear the sequence and decode it again.
    #[must_use]
    pub fn seq_rm(&mut self, seq: SeqId, p0: Pos, p1: Pos) -> bool {
        if let Some(swa) = &self.swa {
            let mut base = self.base.cells.clone();
            let mut cells = swa.cells.clone();
            base.seq_rm(seq, p0, p1);
            cells.seq_rm(seq, p0, p1);
            let seqs: Vec<SeqId> = if seq < 0 {
                (0..MAX_SEQ as SeqId).collect()
            } else {
                vec![seq]
            };
            if let Some(s) = seqs
                .into_iter()
                .find(|&s| !window_complete(&base, &cells, s))
            {
                crate::warn!(
                    "seq_rm: sequence {s} would lose positions its sliding window needs (the SWA cache no longer holds them)"
                );
                return false;
            }
        }
        self.caches_mut().for_each(|c| c.cells.seq_rm(seq, p0, p1));
        true
    }

    /// Adds `dst` to the cells of `src` in `[p0, p1)`.
    pub fn seq_cp(&mut self, src: SeqId, dst: SeqId, p0: Pos, p1: Pos) {
        self.caches_mut()
            .for_each(|c| c.cells.seq_cp(src, dst, p0, p1));
    }

    /// Keeps only `seq`.
    pub fn seq_keep(&mut self, seq: SeqId) {
        self.caches_mut().for_each(|c| c.cells.seq_keep(seq));
    }

    /// Shifts positions `[p0, p1)` of `seq` by `delta` (K re-rotated before
    /// the next decode).
    pub fn seq_add(&mut self, seq: SeqId, p0: Pos, p1: Pos, delta: Pos) {
        self.caches_mut()
            .for_each(|c| c.cells.seq_add(seq, p0, p1, delta));
    }

    /// Largest position of `seq`, or -1.
    pub fn seq_pos_max(&self, seq: SeqId) -> Pos {
        self.base.cells.seq_pos_max(seq)
    }

    /// Largest position of every sequence (-1 where it has none).
    pub fn seq_pos_max_all(&self) -> [Pos; MAX_SEQ] {
        self.base.cells.seq_pos_max_all()
    }

    /// Smallest position of `seq` that every layer still holds (the
    /// sliding-window cache's when there is one), or -1.
    pub fn seq_pos_min(&self, seq: SeqId) -> Pos {
        self.swa
            .as_ref()
            .unwrap_or(&self.base)
            .cells
            .seq_pos_min(seq)
    }

    /// The cells of both caches, to undo what follows.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot(
            self.base.cells.clone(),
            self.swa.as_ref().map(|c| c.cells.clone()),
        )
    }

    /// Puts back the cells of `snap`.
    pub fn restore(&mut self, snap: Snapshot) {
        self.base.cells = snap.0;
        if let (Some(c), Some(cells)) = (&mut self.swa, snap.1) {
            c.cells = cells;
        }
    }

    /// Chooses the cells of every ubatch (ranges of the batch) in both
    /// caches, as if each ubatch were stored before the next is placed;
    /// nothing changes. None when one does not fit.
    pub fn plan(
        &self,
        ubatches: &[Range<usize>],
        pos: &[Pos],
        seqs: &[Vec<SeqId>],
    ) -> Option<Vec<Slots>> {
        let mut base = self.base.cells.clone();
        let mut swa = self.swa.as_ref().map(|c| c.cells.clone());
        let mut out = Vec::with_capacity(ubatches.len());
        for r in ubatches {
            let (p, s) = (&pos[r.clone()], &seqs[r.clone()]);
            let b = base.find_slot(r.len())?;
            base.apply(&b, p, s);
            let w = match &mut swa {
                Some(cells) => {
                    let w = cells.find_slot(r.len())?;
                    cells.apply(&w, p, s);
                    w
                }
                None => Vec::new(),
            };
            out.push(Slots { base: b, swa: w });
        }
        Some(out)
    }

    /// Stores the ubatch of `pos`/`seqs` in the cells `slots` (from
    /// [`KvMemory::plan`]).
    pub fn apply(&mut self, slots: &Slots, pos: &[Pos], seqs: &[Vec<SeqId>]) {
        self.base.cells.apply(&slots.base, pos, seqs);
        if let Some(c) = &mut self.swa {
            c.cells.apply(&slots.swa, pos, seqs);
        }
    }
}

/// Whether the sliding-window cells of `seq` still hold every position of
/// it that the window of its next token (one past its last) reaches.
fn window_complete(base: &KvCells, swa: &KvCells, seq: SeqId) -> bool {
    let have = base.seq_positions(seq);
    let Some(&last) = have.last() else {
        return swa.seq_pos_max(seq) < 0;
    };
    let held = swa.seq_positions(seq);
    have.iter()
        .filter(|&&p| !swa.is_masked_swa(p, last + 1))
        .all(|p| held.binary_search(p).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn swa_cache_sizes() {
        // Gemma 3: window 512, one sequence, ubatch 512.
        assert_eq!(swa_cache_size(8192, 512, 1, 512), 1024);
        assert_eq!(swa_cache_size(8192, 512, 4, 512), 2560);
        assert_eq!(swa_cache_size(8192, 4096, 4, 512), 8192);
        assert_eq!(swa_cache_size(64, 4, 1, 64), 64);
        assert_eq!(swa_cache_size(4096, 16, 1, 7), 256);
    }

    #[test]
    fn window_completeness() {
        let seq = |n: usize| vec![vec![0]; n];
        let mut base = KvCells::new(16, 0);
        let mut swa = KvCells::new(6, 3);
        for k in 0..5 {
            let p = [2 * k, 2 * k + 1];
            let s = base.find_slot(2).unwrap();
            base.apply(&s, &p, &seq(2));
            let s = swa.find_slot(2).unwrap();
            swa.apply(&s, &p, &seq(2));
        }
        assert!(window_complete(&base, &swa, 0));
        let (mut b, mut w) = (base.clone(), swa.clone());
        b.seq_rm(0, 8, -1);
        w.seq_rm(0, 8, -1);
        assert!(window_complete(&b, &w, 0), "{:?}", w.seq_positions(0));
        let (mut b, mut w) = (base.clone(), swa.clone());
        b.seq_rm(0, 3, -1);
        w.seq_rm(0, 3, -1);
        assert!(!window_complete(&b, &w, 0));
        let (mut b, mut w) = (base, swa);
        b.seq_rm(0, -1, -1);
        w.seq_rm(0, -1, -1);
        assert!(window_complete(&b, &w, 0));
    }
}
