//! L2_NORM, RWKV_WKV6 and RWKV_WKV7: the ops of RWKV-6 and RWKV-7.
//!
//! L2_NORM runs one workgroup per row. A WKV op runs one workgroup per
//! head of a sequence, one invocation per state row (WKV7) or column
//! (WKV6), which keeps it in registers through the sequence's tokens.

use ggml_core::{Graph, Op, TensorDesc, TensorId, Type};

use super::indexable;
use crate::backend::VulkanBackend;
use crate::error::{Error, Result};

/// Largest head size the WKV shaders hold (RWKV models use 64).
pub(super) const WKV_MAX_HEAD: usize = 128;

/// True when the WKV shaders take the node's sources `s` and result `d`:
/// every tensor contiguous F32, heads of at most [`WKV_MAX_HEAD`].
pub(super) fn supports_wkv(s: &[&TensorDesc], d: &TensorDesc) -> bool {
    s.iter()
        .chain(std::iter::once(&d))
        .all(|t| t.ty == Type::F32 && t.is_contiguous() && indexable(t))
        && s.first().is_some_and(|t| t.ne[0] <= WKV_MAX_HEAD)
}

fn u32_of(v: usize, what: &str) -> Result<u32> {
    u32::try_from(v).map_err(|_| Error::Other(format!("RWKV WKV: {what} {v} exceeds 32 bits")))
}

/// Records RWKV_WKV6 or RWKV_WKV7 node `id`.
pub(super) fn record_wkv(be: &mut VulkanBackend, graph: &Graph, id: TensorId) -> Result<()> {
    let n = graph.node(id);
    let (shader, k_at) = match n.op {
        Op::RwkvWkv6 => ("wkv6_f32", 0),
        _ => ("wkv7_f32", 2),
    };
    let k = graph.desc(n.src[k_at]);
    let state = graph.desc(*n.src.last().expect("a WKV node has sources"));
    let mut bound = Vec::with_capacity(n.src.len());
    for &t in n.src.iter() {
        bound.push(be.bind(graph, t, 4)?);
    }
    let bd = be.bind(graph, id, 4)?;
    let mut pc: Vec<u32> = bound.iter().map(|b| b.off).collect();
    pc.push(bd.off);
    let [hs, nh, nt, _] = k.ne;
    let n_s = state.ne[1];
    for (v, what) in [
        (hs, "head size"),
        (nh, "heads"),
        (nt, "tokens"),
        (n_s, "sequences"),
    ] {
        pc.push(u32_of(v, what)?);
    }
    let srcs: Vec<Option<&_>> = bound.iter().map(Some).collect();
    be.dispatch_spec(shader, &[], &srcs, &bd, &pc, (nh * n_s) as u64)
}
