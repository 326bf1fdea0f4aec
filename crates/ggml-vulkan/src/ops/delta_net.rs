//! GATED_DELTA_NET: one workgroup per state row (value index of a V head
//! of a sequence), its invocations sharing the row's elements and
//! reducing each token's two dot products in shared memory.

use ggml_core::{Graph, TensorDesc, TensorId, Type};

use super::whole_strides;
use crate::backend::VulkanBackend;
use crate::error::{Error, Result};

/// Largest head size the shader holds (8 state elements per invocation
/// of a 32-wide workgroup; Qwen3.5 uses 128).
pub(super) const GDN_MAX_HEAD: usize = 256;

/// True when `d` is F32 with adjacent elements in each row.
fn dense_f32(d: &TensorDesc) -> bool {
    d.ty == Type::F32 && (d.ne[0] <= 1 || d.nb[0] == 4)
}

/// True when the shader takes the node's sources `s` (q, k, v, g, beta,
/// states) and result `d`.
pub(super) fn supports(s: &[&TensorDesc], d: &TensorDesc) -> bool {
    s.len() == 6
        && s.iter().all(|t| dense_f32(t))
        && s[2].ne[0] <= GDN_MAX_HEAD
        && d.ty == Type::F32
        && d.is_contiguous()
}

fn u32_of(v: usize, what: &str) -> Result<u32> {
    u32::try_from(v)
        .map_err(|_| Error::Other(format!("GATED_DELTA_NET: {what} {v} exceeds 32 bits")))
}

/// Records GATED_DELTA_NET node `id`.
pub(super) fn record(be: &mut VulkanBackend, graph: &Graph, id: TensorId) -> Result<()> {
    let n = graph.node(id);
    let descs: Vec<&TensorDesc> = n.src.iter().map(|&t| graph.desc(t)).collect();
    let mut bound = Vec::with_capacity(6);
    for &t in n.src.iter() {
        bound.push(be.bind(graph, t, 4)?);
    }
    let bd = be.bind(graph, id, 4)?;
    let mut strides = Vec::with_capacity(6);
    for d in &descs {
        strides.push(whole_strides(d)?);
    }
    let [s, h_v, n_t, n_s] = descs[2].ne;
    let mut pc: Vec<u32> = bound.iter().map(|b| b.off).collect();
    pc.push(bd.off);
    for (v, what) in [
        (s, "head size"),
        (descs[0].ne[1], "Q/K heads"),
        (h_v, "V heads"),
        (n_t, "n_t"),
        (n_s, "n_s"),
        (descs[3].ne[0], "g rows"),
    ] {
        pc.push(u32_of(v, what)?);
    }
    for st in [0, 1, 2, 3, 4, 5].map(|i| strides[i]) {
        pc.extend([st[1], st[2], st[3]]);
    }
    let groups = (s * h_v * n_s) as u64;
    let srcs: Vec<Option<&_>> = bound.iter().map(Some).collect();
    be.dispatch_spec("gated_delta_net_f32", &[], &srcs, &bd, &pc, groups)
}
