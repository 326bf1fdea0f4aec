//! Buffers of adapter tensors: one buffer per buffer type, each tensor at
//! an aligned offset, its bytes written once.

use std::collections::BTreeMap;
use std::sync::Arc;

use ggml_core::{Buffer, BufferType, BufferUsage, Placement, TensorDesc};

use crate::error::Result;
use crate::model::{Model, Weight};

/// A tensor to place: where it goes and its bytes.
pub(super) struct Pending {
    pub desc: TensorDesc,
    pub buft: Arc<dyn BufferType>,
    pub data: Vec<u8>,
}

/// The buffer type an adapter tensor of a base weight takes: the base's,
/// except that a CPU type whose layout only some ops read (repacked
/// weights) falls back to the CPU's plain memory.
pub(super) fn buft_next_to(model: &Model, base: &Weight) -> Arc<dyn BufferType> {
    let buft = base.at.buffer.buffer_type();
    let repacked = model
        .cpu
        .extra_buffer_types()
        .iter()
        .any(|e| e.name() == buft.name());
    if repacked {
        model.cpu.buffer_type()
    } else {
        buft
    }
}

/// Placed tensors: the weights in the order given and the buffers holding
/// them.
pub(super) struct Placed {
    pub weights: Vec<Weight>,
    pub buffers: Vec<Arc<dyn Buffer>>,
}

/// Allocates one buffer per buffer type for `pending` and writes every
/// tensor.
pub(super) fn place(pending: Vec<Pending>) -> Result<Placed> {
    let mut groups: BTreeMap<String, (Arc<dyn BufferType>, Vec<usize>)> = BTreeMap::new();
    for (i, p) in pending.iter().enumerate() {
        groups
            .entry(p.buft.name().to_string())
            .or_insert_with(|| (p.buft.clone(), Vec::new()))
            .1
            .push(i);
    }
    let mut at: Vec<Option<Placement>> = vec![None; pending.len()];
    let mut buffers = Vec::new();
    for (buft, members) in groups.into_values() {
        let align = buft.alignment().max(1);
        let mut offsets = Vec::with_capacity(members.len());
        let mut size = 0usize;
        for &i in &members {
            size = size.div_ceil(align) * align;
            offsets.push(size);
            size += buft.alloc_size(&pending[i].desc);
        }
        let buf = buft.alloc_buffer(size.max(align))?;
        buf.set_usage(BufferUsage::Weights);
        for (&i, &off) in members.iter().zip(&offsets) {
            buf.init_tensor(&pending[i].desc, off)?;
            buf.set_tensor(off, &pending[i].data)?;
            at[i] = Some(Placement {
                buffer: buf.clone(),
                offset: off,
            });
        }
        buffers.push(buf);
    }
    let weights = pending
        .into_iter()
        .zip(at)
        .filter_map(|(p, at)| at.map(|at| Weight { desc: p.desc, at }))
        .collect();
    Ok(Placed { weights, buffers })
}
