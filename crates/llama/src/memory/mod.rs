//! The memory of a context, behind one interface ([`SeqMemory`]): the
//! attention KV cache ([`KvMemory`], full and sliding-window), the
//! recurrent memory ([`RecurrentMemory`]: a fixed-size state per sequence
//! and layer) and the hybrid of both ([`HybridMemory`]: attention layers on
//! the KV cache, recurrent layers on the recurrent memory). [`Memory`] is
//! the one a context holds, chosen by the model's layers.

pub mod hybrid;
pub mod recurrent;
pub mod recurrent_cells;
pub mod state;

pub use hybrid::HybridMemory;
pub use recurrent::{RecurrentMemory, RsLayer};
pub use recurrent_cells::{RsCell, RsCells, RsSlot};
pub use state::{StateParts, StateReader, StateWriter};

use crate::error::Result;
use crate::kv_cells::{Pos, SeqId, MAX_SEQ};
use crate::kv_memory::{KvMemory, KvMemoryParams};
use crate::model::Model;

/// What every memory does with sequences (llama.cpp's `llama_memory_i`).
pub trait SeqMemory {
    /// Forgets every sequence.
    fn clear(&mut self);
    /// Removes positions `[p0, p1)` of `seq` (`seq < 0`: every sequence;
    /// negative bounds are open). False, with nothing changed, when the
    /// memory cannot do it (a recurrent state cannot lose its last
    /// positions); the caller then clears the sequence and decodes it
    /// again.
    #[must_use]
    fn seq_rm(&mut self, seq: SeqId, p0: Pos, p1: Pos) -> bool;
    /// Copies positions `[p0, p1)` of `src` to `dst` (a recurrent state is
    /// copied whole).
    fn seq_cp(&mut self, src: SeqId, dst: SeqId, p0: Pos, p1: Pos);
    /// Keeps only `seq`.
    fn seq_keep(&mut self, seq: SeqId);
    /// Shifts positions `[p0, p1)` of `seq` by `delta`.
    fn seq_add(&mut self, seq: SeqId, p0: Pos, p1: Pos, delta: Pos);
    /// Smallest position of `seq` every layer still holds, or -1.
    fn seq_pos_min(&self, seq: SeqId) -> Pos;
    /// Largest position of `seq`, or -1.
    fn seq_pos_max(&self, seq: SeqId) -> Pos;
    /// Whether positions can be shifted for a context shift.
    fn can_shift(&self) -> bool;
    /// Bytes of the tensors it holds.
    fn size_bytes(&self) -> usize;

    /// Largest position of every sequence (-1 where it has none).
    fn seq_pos_max_all(&self) -> [Pos; MAX_SEQ] {
        let mut out = [-1; MAX_SEQ];
        for (s, p) in out.iter_mut().enumerate() {
            *p = self.seq_pos_max(s as SeqId);
        }
        out
    }
}

impl SeqMemory for KvMemory {
    fn clear(&mut self) {
        KvMemory::clear(self)
    }
    fn seq_rm(&mut self, seq: SeqId, p0: Pos, p1: Pos) -> bool {
        KvMemory::seq_rm(self, seq, p0, p1)
    }
    fn seq_cp(&mut self, src: SeqId, dst: SeqId, p0: Pos, p1: Pos) {
        KvMemory::seq_cp(self, src, dst, p0, p1)
    }
    fn seq_keep(&mut self, seq: SeqId) {
        KvMemory::seq_keep(self, seq)
    }
    fn seq_add(&mut self, seq: SeqId, p0: Pos, p1: Pos, delta: Pos) {
        KvMemory::seq_add(self, seq, p0, p1, delta)
    }
    fn seq_pos_min(&self, seq: SeqId) -> Pos {
        KvMemory::seq_pos_min(self, seq)
    }
    fn seq_pos_max(&self, seq: SeqId) -> Pos {
        KvMemory::seq_pos_max(self, seq)
    }
    fn can_shift(&self) -> bool {
        KvMemory::can_shift(self)
    }
    fn size_bytes(&self) -> usize {
        KvMemory::size_bytes(self)
    }
    fn seq_pos_max_all(&self) -> [Pos; MAX_SEQ] {
        KvMemory::seq_pos_max_all(self)
    }
}

impl SeqMemory for RecurrentMemory {
    fn clear(&mut self) {
        self.cells.clear()
    }
    fn seq_rm(&mut self, seq: SeqId, p0: Pos, p1: Pos) -> bool {
        self.cells.seq_rm(seq, p0, p1)
    }
    fn seq_cp(&mut self, src: SeqId, dst: SeqId, _p0: Pos, _p1: Pos) {
        self.cells.seq_cp(src, dst)
    }
    fn seq_keep(&mut self, seq: SeqId) {
        self.cells.seq_keep(seq)
    }
    fn seq_add(&mut self, seq: SeqId, p0: Pos, p1: Pos, delta: Pos) {
        self.cells.seq_add(seq, p0, p1, delta)
    }
    fn seq_pos_min(&self, seq: SeqId) -> Pos {
        self.cells.seq_pos(seq)
    }
    fn seq_pos_max(&self, seq: SeqId) -> Pos {
        self.cells.seq_pos(seq)
    }
    fn can_shift(&self) -> bool {
        true
    }
    fn size_bytes(&self) -> usize {
        RecurrentMemory::size_bytes(self)
    }
}

/// The memory of a context.
pub enum Memory {
    /// Attention layers only.
    Attention(KvMemory),
    /// Recurrent layers only.
    Recurrent(RecurrentMemory),
    /// Both.
    Hybrid(HybridMemory),
}

impl Memory {
    /// The memory `model`'s layers need: a KV cache for attention layers
    /// (`p`), `p.n_seq_max` recurrent cells for recurrent layers, or both.
    pub fn new(model: &Model, p: KvMemoryParams) -> Result<Memory> {
        let hp = &model.hparams;
        let rs = || RecurrentMemory::new(model, p.n_seq_max, p.offload, p.planning);
        Ok(match (hp.has_attention(), hp.has_recurrent()) {
            (_, false) => Memory::Attention(KvMemory::new(model, p)?),
            (false, true) => Memory::Recurrent(rs()?),
            (true, true) => Memory::Hybrid(HybridMemory {
                attn: KvMemory::new(model, p)?,
                rs: rs()?,
            }),
        })
    }

    /// The attention KV cache, if the model has attention layers.
    pub fn kv(&self) -> Option<&KvMemory> {
        match self {
            Memory::Attention(kv) => Some(kv),
            Memory::Hybrid(h) => Some(&h.attn),
            Memory::Recurrent(_) => None,
        }
    }

    /// The attention KV cache, mutable.
    pub fn kv_mut(&mut self) -> Option<&mut KvMemory> {
        match self {
            Memory::Attention(kv) => Some(kv),
            Memory::Hybrid(h) => Some(&mut h.attn),
            Memory::Recurrent(_) => None,
        }
    }

    /// The recurrent memory, if the model has recurrent layers.
    pub fn rs(&self) -> Option<&RecurrentMemory> {
        match self {
            Memory::Recurrent(rs) => Some(rs),
            Memory::Hybrid(h) => Some(&h.rs),
            Memory::Attention(_) => None,
        }
    }

    /// The recurrent memory, mutable.
    pub fn rs_mut(&mut self) -> Option<&mut RecurrentMemory> {
        match self {
            Memory::Recurrent(rs) => Some(rs),
            Memory::Hybrid(h) => Some(&mut h.rs),
            Memory::Attention(_) => None,
        }
    }

    /// Whether ubatches must advance every sequence by the same number of
    /// tokens (recurrent layers scan each sequence's tokens as one block).
    pub fn needs_equal_split(&self) -> bool {
        self.rs().is_some()
    }

    fn inner(&self) -> &dyn SeqMemory {
        match self {
            Memory::Attention(m) => m,
            Memory::Recurrent(m) => m,
            Memory::Hybrid(m) => m,
        }
    }

    fn inner_mut(&mut self) -> &mut dyn SeqMemory {
        match self {
            Memory::Attention(m) => m,
            Memory::Recurrent(m) => m,
            Memory::Hybrid(m) => m,
        }
    }
}

impl SeqMemory for Memory {
    fn clear(&mut self) {
        self.inner_mut().clear()
    }
    fn seq_rm(&mut self, seq: SeqId, p0: Pos, p1: Pos) -> bool {
        self.inner_mut().seq_rm(seq, p0, p1)
    }
    fn seq_cp(&mut self, src: SeqId, dst: SeqId, p0: Pos, p1: Pos) {
        self.inner_mut().seq_cp(src, dst, p0, p1)
    }
    fn seq_keep(&mut self, seq: SeqId) {
        self.inner_mut().seq_keep(seq)
    }
    fn seq_add(&mut self, seq: SeqId, p0: Pos, p1: Pos, delta: Pos) {
        self.inner_mut().seq_add(seq, p0, p1, delta)
    }
    fn seq_pos_min(&self, seq: SeqId) -> Pos {
        self.inner().seq_pos_min(seq)
    }
    fn seq_pos_max(&self, seq: SeqId) -> Pos {
        self.inner().seq_pos_max(seq)
    }
    fn can_shift(&self) -> bool {
        self.inner().can_shift()
    }
    fn size_bytes(&self) -> usize {
        self.inner().size_bytes()
    }
    fn seq_pos_max_all(&self) -> [Pos; MAX_SEQ] {
        self.inner().seq_pos_max_all()
    }
}
