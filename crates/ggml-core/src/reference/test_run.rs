//! For the reference kernels' own tests: runs a graph on the reference
//! backend in one host buffer.

use crate::backend::{BufferType, Placement};
use crate::graph::{Graph, TensorId};
use crate::host::{HostBufferType, HOST_ALIGNMENT};
use crate::reference;

/// Little-endian bytes of F32 values.
pub(crate) fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// [`run_bytes`] with F32 values for every leaf.
pub(crate) fn run(g: &mut Graph, data: &[(TensorId, Vec<f32>)], out: TensorId) -> Vec<f32> {
    let data: Vec<(TensorId, Vec<u8>)> = data.iter().map(|(i, v)| (*i, f32_bytes(v))).collect();
    run_bytes(g, &data, out)
}

/// Places every node of `g` in one host buffer, writes `data` into the
/// leaves it names, computes the graph and reads `out`.
pub(crate) fn run_bytes(g: &mut Graph, data: &[(TensorId, Vec<u8>)], out: TensorId) -> Vec<f32> {
    let buft = HostBufferType::new("test", HOST_ALIGNMENT, usize::MAX);
    let ids: Vec<TensorId> = g.ids().filter(|&i| g.node(i).view.is_none()).collect();
    let sizes: Vec<usize> = ids.iter().map(|&i| g.desc(i).nbytes().max(1)).collect();
    let buf = buft
        .alloc_buffer(sizes.iter().map(|s| s + 64).sum())
        .unwrap();
    let mut at = 0;
    for (&i, &s) in ids.iter().zip(&sizes) {
        g.node_mut(i).at = Some(Placement {
            buffer: buf.clone(),
            offset: at,
        });
        at += s.div_ceil(64) * 64;
    }
    for (i, bytes) in data {
        let p = g.placement(*i).unwrap();
        p.buffer.set_tensor(p.offset, bytes).unwrap();
    }
    reference::compute_graph(g).unwrap();
    reference::read_f32(g, out).unwrap()
}
