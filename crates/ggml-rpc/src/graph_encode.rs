//! Serializing our graph nodes as ggml tensors for GRAPH_COMPUTE.
//!
//! Tensor ids are node indices plus one (0 is null). As llama.cpp's client
//! does, every tensor reachable from the nodes through sources and view
//! bases is sent, each after everything it refers to.

use std::collections::HashMap;
use std::sync::Arc;

use ggml_core::{Flags, Graph, TensorDesc, TensorId};

use crate::client::RpcBuffer;
use crate::conn::Conn;
use crate::error::{Result, RpcError};
use crate::ops;
use crate::proto::{GraphMsg, RpcTensor, FLAG_COMPUTE, FLAG_INPUT, FLAG_OUTPUT, MAX_SRC};

fn wire_id(id: TensorId) -> u64 {
    id.index() as u64 + 1
}

fn u32_of(v: usize, what: &str, name: &str) -> Result<u32> {
    u32::try_from(v).map_err(|_| {
        RpcError::Unsupported(format!(
            "tensor '{name}': {what} {v} does not fit the protocol's 32 bits"
        ))
    })
}

/// A tensor with `desc`'s type and shape in `buffer` at `data`, no op.
pub fn plain_tensor(desc: &TensorDesc, buffer: u64, data: u64) -> Result<RpcTensor> {
    let mut t = RpcTensor {
        ty: desc.ty.id(),
        buffer,
        data,
        ..RpcTensor::default()
    };
    for i in 0..4 {
        t.ne[i] = u32_of(desc.ne[i], "size", &desc.name)?;
        t.nb[i] = u32_of(desc.nb[i], "stride", &desc.name)?;
    }
    t.set_name(&desc.name);
    Ok(t)
}

/// True when node `node` can be sent: its op has a ggml equivalent, and
/// every size and stride fits 32 bits.
pub fn encodable(graph: &Graph, node: TensorId) -> bool {
    let n = graph.node(node);
    n.src.len() <= MAX_SRC
        && std::iter::once(node)
            .chain(n.src.iter().copied())
            .all(|id| plain_tensor(graph.desc(id), 0, 0).is_ok())
}

/// The sources a node is computed from. A leaf has none on the wire: the
/// scheduler's input copies are leaves that remember their original as a
/// source, which the server must not see.
fn sources(graph: &Graph, id: TensorId) -> &[TensorId] {
    let node = graph.node(id);
    if node.op == ggml_core::Op::None {
        &[]
    } else {
        &node.src
    }
}

fn serialize(
    graph: &Graph,
    id: TensorId,
    conn: &Arc<Conn>,
    use_count: &HashMap<TensorId, i32>,
) -> Result<RpcTensor> {
    let node = graph.node(id);
    let (buffer, data) = match graph.placement(id) {
        Some(p) => match p.buffer.as_any().downcast_ref::<RpcBuffer>() {
            Some(b) if Arc::ptr_eq(b.conn(), conn) => (b.handle(), b.addr(p.offset)),
            _ => (0, 0),
        },
        None => (0, 0),
    };
    let computes = node.op != ggml_core::Op::None && !node.op.is_view();
    if buffer == 0 && (computes || node.op == ggml_core::Op::None) {
        return Err(RpcError::Unsupported(format!(
            "tensor '{}' ({}) has no memory on RPC server {}",
            node.desc.name,
            node.op.name(),
            conn.endpoint()
        )));
    }
    let mut t = plain_tensor(&node.desc, buffer, data)?;
    let view_off = node.view.map_or(0, |(_, o)| o);
    let (op, params) = ops::encode(&node.op, view_off);
    t.id = wire_id(id);
    t.op = op;
    t.op_params = params;
    if node.flags.contains(Flags::INPUT) {
        t.flags |= FLAG_INPUT;
    }
    if node.flags.contains(Flags::OUTPUT) {
        t.flags |= FLAG_OUTPUT;
    }
    if node.op != ggml_core::Op::None {
        // As ggml's graph builder marks every op it reaches: without the
        // mark ggml's server leaves the node uncomputed.
        t.flags |= FLAG_COMPUTE;
    }
    for (slot, s) in t.src.iter_mut().zip(sources(graph, id)) {
        *slot = wire_id(*s);
    }
    if node.op == ggml_core::Op::SetRows {
        // Ours lists (destination, rows, indices); ggml lists
        // (rows, indices, destination).
        t.src[..3].rotate_left(1);
    }
    if node.view.is_some() {
        let (base, off) = graph.view_base(id);
        t.view_src = wire_id(base);
        t.view_offs = off as u64;
    }
    t.use_count = use_count.get(&id).copied().unwrap_or(0);
    Ok(t)
}

/// The GRAPH_COMPUTE message computing `nodes` of `graph` on `device`.
pub fn encode(
    graph: &Graph,
    nodes: &[TensorId],
    device: u32,
    conn: &Arc<Conn>,
) -> Result<GraphMsg> {
    let mut use_count: HashMap<TensorId, i32> = HashMap::new();
    for &n in nodes {
        for &s in sources(graph, n) {
            *use_count.entry(s).or_default() += 1;
        }
    }
    let mut tensors = Vec::new();
    let mut seen = vec![false; graph.len()];
    // Depth-first, sources before users, with an explicit stack: (id,
    // children pushed).
    let mut stack: Vec<(TensorId, bool)> = Vec::new();
    for &root in nodes {
        if graph.node(root).src.len() > MAX_SRC {
            return Err(RpcError::Unsupported(format!(
                "node '{}' has more than {MAX_SRC} sources",
                graph.desc(root).name
            )));
        }
        stack.push((root, false));
        while let Some((id, expanded)) = stack.pop() {
            if seen[id.index()] {
                continue;
            }
            if expanded {
                seen[id.index()] = true;
                tensors.push(serialize(graph, id, conn, &use_count).map_err(|e| {
                    RpcError::Unsupported(format!(
                        "{e}, needed by node '{}' ({})",
                        graph.desc(root).name,
                        graph.node(root).op.name()
                    ))
                })?);
                continue;
            }
            stack.push((id, true));
            let node = graph.node(id);
            if node.view.is_some() {
                let (base, _) = graph.view_base(id);
                stack.push((base, false));
            }
            for &s in sources(graph, id).iter().rev() {
                if !seen[s.index()] {
                    stack.push((s, false));
                }
            }
        }
    }
    Ok(GraphMsg {
        device,
        nodes: nodes.iter().map(|&n| wire_id(n)).collect(),
        tensors,
    })
}
