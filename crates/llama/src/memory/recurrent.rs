//! The recurrent memory: per recurrent layer a convolution state tensor
//! (F32 [n_embd_r, size]) and an SSM state tensor (F32 [n_embd_s, size]) on
//! the layer's device, one row per cell, and the cells that say which
//! sequence's state each row is ([`RsCells`]). A ubatch reads the states of
//! its sequences by cell index and writes them back by cell index, in
//! place.

use std::collections::BTreeMap;
use std::sync::Arc;

use ggml_core::alloc::PlannedBuffer;
use ggml_core::{Buffer, BufferType, BufferUsage, Device, Placement, TensorDesc, Type};

use crate::error::Result;
use crate::kv_cells::{Pos, SeqId};
use crate::memory::recurrent_cells::{RsCells, RsSlot};
use crate::model::{Model, Weight};

/// The two states of one recurrent layer.
#[derive(Clone, Debug)]
pub struct RsLayer {
    /// Convolution states: F32 [n_embd_r, size].
    pub r: Weight,
    /// SSM states: F32 [n_embd_s, size].
    pub s: Weight,
}

/// The recurrent memory of a context.
pub struct RecurrentMemory {
    /// The cells.
    pub cells: RsCells,
    /// Per model layer: its states, or None for a layer that is not
    /// recurrent.
    pub layers: Vec<Option<RsLayer>>,
    /// Buffers holding them (one per buffer type).
    pub buffers: Vec<Arc<dyn Buffer>>,
}

/// Layers sharing one buffer type, with their two state descriptors.
type LayerGroup = (Arc<dyn BufferType>, Vec<(usize, TensorDesc, TensorDesc)>);

impl RecurrentMemory {
    /// Allocates `size` cells (one per sequence) of states for the
    /// recurrent layers of `model`, each on its layer's device (on the CPU
    /// without `offload`), zeroed.
    pub fn new(model: &Model, size: usize, offload: bool, planning: bool) -> Result<Self> {
        let hp = &model.hparams;
        let size = size.max(1);
        let mut groups: BTreeMap<String, LayerGroup> = BTreeMap::new();
        for il in (0..hp.n_layer).filter(|&il| hp.is_recurrent(il)) {
            let dev: &Arc<dyn Device> = if offload {
                model.layer_device(il)
            } else {
                &model.cpu
            };
            let buft = dev.buffer_type();
            let r = TensorDesc::new(format!("cache_r_l{il}"), Type::F32, &[hp.n_embd_r(), size]);
            let s = TensorDesc::new(format!("cache_s_l{il}"), Type::F32, &[hp.n_embd_s(), size]);
            groups
                .entry(buft.name().to_string())
                .or_insert_with(|| (buft.clone(), Vec::new()))
                .1
                .push((il, r, s));
        }
        let mut layers: Vec<Option<RsLayer>> = vec![None; hp.n_layer];
        let mut buffers = Vec::new();
        for (name, (buft, items)) in groups {
            let align = buft.alignment().max(1);
            let pad = |x: usize| x.div_ceil(align) * align;
            let total: usize = items
                .iter()
                .map(|(_, r, s)| pad(buft.alloc_size(r)) + pad(buft.alloc_size(s)))
                .sum();
            let buf = if planning {
                PlannedBuffer::shared(buft.clone(), total, BufferUsage::Compute)
            } else {
                let buf = buft.alloc_buffer(total)?;
                buf.set_usage(BufferUsage::Compute);
                buf.clear(0)?;
                buf
            };
            let (mut rb, mut sb, mut off) = (0usize, 0usize, 0usize);
            for (il, r, s) in items {
                let ro = off;
                off += pad(buft.alloc_size(&r));
                let so = off;
                off += pad(buft.alloc_size(&s));
                rb += r.nbytes();
                sb += s.nbytes();
                let at = |offset| Placement {
                    buffer: buf.clone(),
                    offset,
                };
                layers[il] = Some(RsLayer {
                    r: Weight {
                        desc: r,
                        at: at(ro),
                    },
                    s: Weight {
                        desc: s,
                        at: at(so),
                    },
                });
            }
            crate::info!(
                "llama_memory_recurrent: {name:>10} RS buffer size = {:8.2} MiB, R (f32): {:.2} MiB, S (f32): {:.2} MiB",
                total as f64 / 1048576.0,
                rb as f64 / 1048576.0,
                sb as f64 / 1048576.0
            );
            buffers.push(buf);
        }
        Ok(RecurrentMemory {
            cells: RsCells::new(size),
            layers,
            buffers,
        })
    }

    /// Number of cells.
    pub fn size(&self) -> usize {
        self.cells.size()
    }

    /// The states of layer `il`.
    pub fn layer(&self, il: usize) -> Option<&RsLayer> {
        self.layers.get(il).and_then(Option::as_ref)
    }

    /// Bytes of every state.
    pub fn size_bytes(&self) -> usize {
        self.layers
            .iter()
            .flatten()
            .map(|l| l.r.desc.nbytes() + l.s.desc.nbytes())
            .sum()
    }

    /// Chooses the cells of every ubatch (`ubatches[u]`: its sequence sets
    /// and the last position each reaches), as if each were stored before
    /// the next; nothing changes. None when one does not fit.
    pub fn plan(&self, ubatches: &[(Vec<Vec<SeqId>>, Vec<Pos>)]) -> Option<Vec<Vec<RsSlot>>> {
        let mut cells = self.cells.clone();
        ubatches
            .iter()
            .map(|(sets, last)| cells.place(sets, last))
            .collect()
    }

    /// Stores a ubatch: records the cells of its sequence sets (as
    /// [`RecurrentMemory::plan`] chose them) and zeroes the states of the
    /// sets that start from nothing.
    pub fn apply(&mut self, sets: &[Vec<SeqId>], last: &[Pos]) -> Result<Vec<RsSlot>> {
        let slots = self.cells.place(sets, last).ok_or_else(|| {
            crate::error::LlamaError::Decode(format!(
                "no free state cell for {} sequences ({} of {} used)",
                sets.len(),
                self.cells.used(),
                self.cells.size()
            ))
        })?;
        for slot in slots.iter().filter(|s| s.fresh) {
            self.zero_cell(slot.dst)?;
        }
        Ok(slots)
    }

    /// Zeroes row `cell` of every state tensor.
    fn zero_cell(&self, cell: usize) -> Result<()> {
        for l in self.layers.iter().flatten() {
            for w in [&l.r, &l.s] {
                let row = w.desc.nb[1];
                w.at.buffer
                    .set_tensor(w.at.offset + cell * row, &vec![0u8; row])?;
            }
        }
        Ok(())
    }
}
