//! The hybrid memory: the attention layers of a model on a KV cache, its
//! recurrent layers on a recurrent memory; sequence operations go to both
//! and succeed only when both can do them.

use crate::kv_cells::{Pos, SeqId};
use crate::kv_memory::KvMemory;
use crate::memory::{RecurrentMemory, SeqMemory};

/// A KV cache and a recurrent memory, one per kind of layer.
pub struct HybridMemory {
    /// The cache of the attention layers.
    pub attn: KvMemory,
    /// The states of the recurrent layers.
    pub rs: RecurrentMemory,
}

impl SeqMemory for HybridMemory {
    fn clear(&mut self) {
        self.attn.clear();
        self.rs.cells.clear();
    }
    fn seq_rm(&mut self, seq: SeqId, p0: Pos, p1: Pos) -> bool {
        // Try the recurrent cells on a copy first: the KV cache changes
        // only when both can.
        let mut cells = self.rs.cells.clone();
        if !cells.seq_rm(seq, p0, p1) {
            return false;
        }
        if !self.attn.seq_rm(seq, p0, p1) {
            return false;
        }
        self.rs.cells = cells;
        true
    }
    fn seq_cp(&mut self, src: SeqId, dst: SeqId, p0: Pos, p1: Pos) {
        self.attn.seq_cp(src, dst, p0, p1);
        self.rs.cells.seq_cp(src, dst);
    }
    fn seq_keep(&mut self, seq: SeqId) {
        self.attn.seq_keep(seq);
        self.rs.cells.seq_keep(seq);
    }
    fn seq_add(&mut self, seq: SeqId, p0: Pos, p1: Pos, delta: Pos) {
        self.attn.seq_add(seq, p0, p1, delta);
        self.rs.cells.seq_add(seq, p0, p1, delta);
    }
    fn seq_pos_min(&self, seq: SeqId) -> Pos {
        self.attn.seq_pos_min(seq).max(self.rs.cells.seq_pos(seq))
    }
    fn seq_pos_max(&self, seq: SeqId) -> Pos {
        self.attn.seq_pos_max(seq).min(self.rs.cells.seq_pos(seq))
    }
    fn can_shift(&self) -> bool {
        self.attn.can_shift()
    }
    fn size_bytes(&self) -> usize {
        self.attn.size_bytes() + self.rs.size_bytes()
    }
}
