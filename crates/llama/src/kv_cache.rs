//! The KV cache: per-layer K and V tensors on the layer's device (or the CPU
//! when KV offload is off), and cells that record the position and sequences
//! of what each slot holds.

use std::collections::BTreeMap;
use std::sync::Arc;

use ggml_core::alloc::PlannedBuffer;
use ggml_core::{Buffer, BufferType, BufferUsage, Device, Placement, TensorDesc, Type};

use crate::error::{LlamaError, Result};
use crate::model::{Model, Weight};

/// A position in a sequence (llama_pos).
pub type Pos = i32;
/// A sequence id (llama_seq_id).
pub type SeqId = i32;

/// Most sequences a context can hold (bits of a cell's sequence set).
pub const MAX_SEQ: usize = 64;

/// One slot of the cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cell {
    /// Position of the token, or -1 when empty.
    pub pos: Pos,
    /// Pending position shift (applied to K by rope before the next decode).
    pub delta: Pos,
    /// Bit set of sequences the cell belongs to.
    pub seqs: u64,
}

impl Cell {
    const EMPTY: Cell = Cell {
        pos: -1,
        delta: 0,
        seqs: 0,
    };

    /// True when no sequence uses the cell.
    pub fn is_empty(&self) -> bool {
        self.seqs == 0
    }

    /// True when the cell belongs to `seq`.
    pub fn has_seq(&self, seq: SeqId) -> bool {
        (0..MAX_SEQ as i32).contains(&seq) && self.seqs & (1u64 << seq) != 0
    }
}

/// Layers sharing one buffer type: the type and each layer's K and V descriptors.
type LayerGroup = (Arc<dyn BufferType>, Vec<(usize, TensorDesc, TensorDesc)>);

/// K and V of one layer.
#[derive(Clone, Debug)]
pub struct KvLayer {
    /// Keys: [n_embd_k_gqa, size].
    pub k: Weight,
    /// Values: [n_embd_v_gqa, size], stored transposed ([size] per value
    /// dim) unless flash attention is on.
    pub v: Weight,
}

/// The cache.
pub struct KvCache {
    /// Number of cells.
    pub size: usize,
    /// Cells.
    pub cells: Vec<Cell>,
    /// Where the next search for a free slot starts.
    pub head: usize,
    /// Number of non-empty cells.
    pub used: usize,
    /// Key type.
    pub type_k: Type,
    /// Value type.
    pub type_v: Type,
    /// Whether V is stored transposed.
    pub v_trans: bool,
    /// Per-layer tensors.
    pub layers: Vec<KvLayer>,
    /// Buffers holding them (one per buffer type).
    pub buffers: Vec<Arc<dyn Buffer>>,
    /// Per buffer type: its name and the bytes of K and of V in its buffer
    /// (each tensor padded to the type's alignment; the two add up to the
    /// buffer's size).
    pub sizes: Vec<(String, usize, usize)>,
    /// A position shift is pending.
    pub has_shift: bool,
    /// Cells were changed by sequence operations since the last decode.
    pub do_defrag: bool,
}

impl KvCache {
    /// Allocates the cache for `model`: `size` cells per layer, each layer on
    /// its device's buffer type when `offload` is set, else in CPU memory.
    /// With `planning` the buffers are planned ones that hold no memory.
    pub fn new(
        model: &Model,
        size: usize,
        type_k: Type,
        type_v: Type,
        v_trans: bool,
        offload: bool,
        planning: bool,
    ) -> Result<KvCache> {
        let hp = &model.hparams;
        for (what, ty, width) in [
            ("K", type_k, hp.n_embd_head_k),
            ("V", type_v, hp.n_embd_head_v),
        ] {
            if width % ty.block_size() != 0 {
                return Err(LlamaError::InvalidParam(format!(
                    "{what} cache type {ty} needs head width {width} to be a multiple of {}",
                    ty.block_size()
                )));
            }
        }
        if v_trans && type_v.is_quantized() {
            return Err(LlamaError::InvalidParam(format!(
                "V cache type {type_v} needs flash attention (the V cache is stored transposed without it)"
            )));
        }
        // Group layers by buffer type so each gets one buffer.
        let mut descs: BTreeMap<String, LayerGroup> = BTreeMap::new();
        for il in 0..hp.n_layer {
            let dev: &Arc<dyn Device> = if offload {
                model.layer_device(il)
            } else {
                &model.cpu
            };
            let buft = dev.buffer_type();
            let k = TensorDesc::new(
                format!("cache_k_l{il}"),
                type_k,
                &[hp.n_embd_k_gqa(il), size],
            );
            let v = TensorDesc::new(
                format!("cache_v_l{il}"),
                type_v,
                &[hp.n_embd_v_gqa(il), size],
            );
            descs
                .entry(buft.name().to_string())
                .or_insert_with(|| (buft.clone(), Vec::new()))
                .1
                .push((il, k, v));
        }
        let mut layers: Vec<Option<KvLayer>> = vec![None; hp.n_layer];
        let mut buffers = Vec::new();
        let mut sizes = Vec::new();
        for (name, (buft, items)) in descs {
            let align = buft.alignment().max(1);
            let pad = |x: usize| x.div_ceil(align) * align;
            let total: usize = items
                .iter()
                .map(|(_, k, v)| pad(buft.alloc_size(k)) + pad(buft.alloc_size(v)))
                .sum();
            let buf = if planning {
                PlannedBuffer::shared(buft.clone(), total, BufferUsage::Compute)
            } else {
                let buf = buft.alloc_buffer(total)?;
                buf.set_usage(BufferUsage::Compute);
                // Empty cells must hold zeros: masked attention still
                // multiplies them.
                buf.clear(0)?;
                buf
            };
            let (mut kb, mut vb) = (0usize, 0usize);
            let (mut kp, mut vp) = (0usize, 0usize);
            let mut off = 0;
            for (il, k, v) in items {
                let ko = off;
                off += pad(buft.alloc_size(&k));
                let vo = off;
                off += pad(buft.alloc_size(&v));
                kp += vo - ko;
                vp += off - vo;
                kb += k.nbytes();
                vb += v.nbytes();
                layers[il] = Some(KvLayer {
                    k: Weight {
                        desc: k,
                        at: Placement {
                            buffer: buf.clone(),
                            offset: ko,
                        },
                    },
                    v: Weight {
                        desc: v,
                        at: Placement {
                            buffer: buf.clone(),
                            offset: vo,
                        },
                    },
                });
            }
            crate::info!(
                "llama_kv_cache_init: {name:>10} KV buffer size = {:8.2} MiB (K ({type_k}): {:.2} MiB, V ({type_v}): {:.2} MiB)",
                total as f64 / 1048576.0,
                kb as f64 / 1048576.0,
                vb as f64 / 1048576.0
            );
            sizes.push((name, kp, vp));
            buffers.push(buf);
        }
        let layers = layers
            .into_iter()
            .map(|l| l.ok_or_else(|| LlamaError::InvalidParam("KV cache layer missing".into())))
            .collect::<Result<Vec<_>>>()?;
        Ok(KvCache {
            size,
            cells: vec![Cell::EMPTY; size],
            head: 0,
            used: 0,
            type_k,
            type_v,
            v_trans,
            layers,
            buffers,
            sizes,
            has_shift: false,
            do_defrag: false,
        })
    }

    /// Empties every cell (the data stays; masks hide it).
    pub fn clear(&mut self) {
        self.cells.fill(Cell::EMPTY);
        self.head = 0;
        self.used = 0;
        self.has_shift = false;
    }

    /// One past the last non-empty cell.
    pub fn cell_max(&self) -> usize {
        self.cells
            .iter()
            .rposition(|c| !c.is_empty())
            .map_or(0, |i| i + 1)
    }

    /// Finds `n` consecutive empty cells, starting at `head` and wrapping.
    pub fn find_slot(&self, n: usize) -> Option<usize> {
        if n == 0 || n > self.size {
            return None;
        }
        let mut start = if self.head + n > self.size {
            0
        } else {
            self.head
        };
        let mut tried = 0;
        while tried < self.size {
            if start + n > self.size {
                tried += self.size - start;
                start = 0;
                continue;
            }
            match self.cells[start..start + n]
                .iter()
                .position(|c| !c.is_empty())
            {
                None => return Some(start),
                Some(busy) => {
                    tried += busy + 1;
                    start += busy + 1;
                }
            }
        }
        None
    }

    /// Records tokens at `pos` of sequences `seqs` in cells `slot..`.
    pub fn occupy(&mut self, slot: usize, pos: &[Pos], seqs: &[&[SeqId]]) {
        for (i, (&p, ss)) in pos.iter().zip(seqs).enumerate() {
            let c = &mut self.cells[slot + i];
            if c.is_empty() {
                self.used += 1;
            }
            c.pos = p;
            c.delta = 0;
            for &s in ss.iter() {
                if (0..MAX_SEQ as i32).contains(&s) {
                    c.seqs |= 1u64 << s;
                }
            }
        }
        self.head = slot + pos.len();
        if self.head >= self.size {
            self.head = 0;
        }
    }

    fn release(&mut self, i: usize, mask: u64) {
        let c = &mut self.cells[i];
        let was = !c.is_empty();
        c.seqs &= !mask;
        if was && c.is_empty() {
            c.pos = -1;
            c.delta = 0;
            self.used -= 1;
            if i < self.head {
                self.head = i;
            }
        }
    }

    fn seq_mask(seq: SeqId) -> u64 {
        if seq < 0 {
            u64::MAX
        } else if (seq as usize) < MAX_SEQ {
            1u64 << seq
        } else {
            0
        }
    }

    fn in_range(p: Pos, p0: Pos, p1: Pos) -> bool {
        let p0 = if p0 < 0 { 0 } else { p0 };
        let p1 = if p1 < 0 { Pos::MAX } else { p1 };
        p >= p0 && p < p1
    }

    /// Removes positions `[p0, p1)` of `seq` (`seq < 0`: every sequence;
    /// negative bounds are open).
    pub fn seq_rm(&mut self, seq: SeqId, p0: Pos, p1: Pos) {
        let mask = Self::seq_mask(seq);
        for i in 0..self.size {
            let c = self.cells[i];
            if c.seqs & mask != 0 && Self::in_range(c.pos, p0, p1) {
                self.release(i, mask);
            }
        }
    }

    /// Adds `dst` to the cells of `src` in `[p0, p1)`.
    pub fn seq_cp(&mut self, src: SeqId, dst: SeqId, p0: Pos, p1: Pos) {
        if src == dst {
            return;
        }
        let (sm, dm) = (Self::seq_mask(src), Self::seq_mask(dst));
        for c in self.cells.iter_mut() {
            if c.seqs & sm != 0 && Self::in_range(c.pos, p0, p1) {
                c.seqs |= dm;
            }
        }
    }

    /// Keeps only `seq`.
    pub fn seq_keep(&mut self, seq: SeqId) {
        let keep = Self::seq_mask(seq);
        for i in 0..self.size {
            let c = self.cells[i];
            if !c.is_empty() && c.seqs & keep == 0 {
                self.release(i, u64::MAX);
            } else if !c.is_empty() {
                self.cells[i].seqs &= keep;
            }
        }
    }

    /// Shifts positions `[p0, p1)` of `seq` by `delta`; cells that move below
    /// zero are removed. K is re-rotated before the next decode.
    pub fn seq_add(&mut self, seq: SeqId, p0: Pos, p1: Pos, delta: Pos) {
        if delta == 0 {
            return;
        }
        let mask = Self::seq_mask(seq);
        for i in 0..self.size {
            let c = self.cells[i];
            if c.seqs & mask != 0 && Self::in_range(c.pos, p0, p1) {
                self.has_shift = true;
                let cell = &mut self.cells[i];
                cell.pos += delta;
                cell.delta += delta;
                if cell.pos < 0 {
                    self.release(i, u64::MAX);
                }
            }
        }
    }

    /// Largest position of `seq`, or -1.
    pub fn seq_pos_max(&self, seq: SeqId) -> Pos {
        self.cells
            .iter()
            .filter(|c| c.has_seq(seq))
            .map(|c| c.pos)
            .max()
            .unwrap_or(-1)
    }

    /// Bytes of K and V.
    pub fn size_bytes(&self) -> usize {
        self.layers
            .iter()
            .map(|l| l.k.desc.nbytes() + l.v.desc.nbytes())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(size: usize) -> KvCache {
        KvCache {
            size,
            cells: vec![Cell::EMPTY; size],
            head: 0,
            used: 0,
            type_k: Type::F16,
            type_v: Type::F16,
            v_trans: true,
            layers: Vec::new(),
            buffers: Vec::new(),
            sizes: Vec::new(),
            has_shift: false,
            do_defrag: false,
        }
    }

    #[test]
    fn cells_and_sequences() {
        let mut kv = cache(8);
        let s0: &[SeqId] = &[0];
        assert_eq!(kv.find_slot(3), Some(0));
        kv.occupy(0, &[0, 1, 2], &[s0, s0, s0]);
        assert_eq!(kv.used, 3);
        assert_eq!(kv.find_slot(5), Some(3));
        assert_eq!(kv.find_slot(6), None);
        kv.seq_cp(0, 1, 1, 3);
        assert!(kv.cells[1].has_seq(1) && !kv.cells[0].has_seq(1));
        kv.seq_rm(0, 2, -1);
        assert!(kv.cells[2].has_seq(1) && !kv.cells[2].has_seq(0));
        assert_eq!(kv.used, 3);
        kv.seq_keep(1);
        assert_eq!(kv.used, 2);
        assert_eq!(kv.seq_pos_max(1), 2);
        kv.seq_add(1, 0, -1, -2);
        assert!(kv.has_shift);
        assert_eq!(kv.used, 1);
        assert_eq!(kv.cells[2].pos, 0);
        assert_eq!(kv.cells[2].delta, -2);
        assert_eq!(kv.cell_max(), 3);
        kv.clear();
        assert_eq!(kv.used, 0);
        assert_eq!(kv.cell_max(), 0);
    }
}
