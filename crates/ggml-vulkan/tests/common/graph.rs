//! Graphs built by hand for the backend's own tests: leaves with given
//! data and ops, placed in one buffer of a device, computed on a backend
//! (possibly several times) and read back.

use std::sync::Arc;

use ggml_core::{Backend, Buffer, Device, Graph, Placement, TensorId};
use ggml_vulkan::{VulkanBackend, VulkanDevice};

/// Deterministic values in [-1, 1).
pub fn values(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(7);
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s >> 8) as f32 / (1u32 << 23) as f32 - 1.0
        })
        .collect()
}

/// A graph built by a test: leaves with their data, and the results.
pub struct Built {
    pub g: Graph,
    pub data: Vec<(TensorId, Vec<u8>)>,
    pub outs: Vec<TensorId>,
}

impl Built {
    pub fn new() -> Built {
        Built {
            g: Graph::new(),
            data: Vec::new(),
            outs: Vec::new(),
        }
    }
}

/// A built graph with every leaf and computed node in one buffer of a
/// device, the leaves filled.
pub struct Placed {
    pub g: Graph,
    pub outs: Vec<TensorId>,
    _buf: Arc<dyn Buffer>,
}

impl Placed {
    pub fn new(dev: &Arc<VulkanDevice>, built: Built) -> Placed {
        let Built { mut g, data, outs } = built;
        let buft = dev.buffer_type();
        let align = buft.alignment().max(1);
        let mut at = Vec::new();
        let mut total = 0usize;
        for id in g.ids() {
            let n = g.node(id);
            if n.view.is_some() || n.op.is_view() || n.at.is_some() {
                continue;
            }
            total = total.div_ceil(align) * align;
            at.push((id, total));
            total += buft.alloc_size(&n.desc).max(1);
        }
        let buf = buft.alloc_buffer(total.max(1)).unwrap();
        for (id, offset) in at {
            g.node_mut(id).at = Some(Placement {
                buffer: buf.clone(),
                offset,
            });
        }
        let placed = Placed { g, outs, _buf: buf };
        for (id, bytes) in &data {
            placed.write(*id, bytes);
        }
        placed
    }

    /// Writes the bytes of leaf `id`.
    pub fn write(&self, id: TensorId, bytes: &[u8]) {
        let p = self.g.placement(id).unwrap();
        p.buffer.set_tensor(p.offset, bytes).unwrap();
    }

    /// Computes every node on `be`: the dispatches it recorded.
    pub fn compute(&self, be: &mut VulkanBackend) -> u64 {
        let ids: Vec<TensorId> = self.g.compute_ids().collect();
        let before = be.dispatches();
        be.graph_compute(&self.g, &ids).unwrap();
        be.synchronize().unwrap();
        be.dispatches() - before
    }

    /// The f32 values of every result.
    pub fn outputs(&self) -> Vec<Vec<f32>> {
        self.outs
            .iter()
            .map(|&o| {
                let p = self.g.placement(o).unwrap();
                let mut bytes = vec![0u8; self.g.desc(o).nbytes()];
                p.buffer.get_tensor(p.offset, &mut bytes).unwrap();
                bytes
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
                    .collect()
            })
            .collect()
    }
}
