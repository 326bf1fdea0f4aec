//! Rebuilding a graph received in GRAPH_COMPUTE with ggml-core's builders.
//!
//! Every node is built by the same builder the engine uses, so its shape
//! rules are checked; the builder's type, sizes and strides must then equal
//! what the message says, and every tensor with memory must lie inside a
//! buffer of this session. A message that breaks any rule is rejected
//! before anything is computed.

use std::collections::HashMap;
use std::sync::Arc;

use ggml_core::{Buffer, Flags, Graph, Op, Placement, TensorDesc, TensorId};

use crate::error::{Result, RpcError};
use crate::ops::{self, Decoded};
use crate::proto::{GraphMsg, RpcTensor, FLAG_COMPUTE, FLAG_INPUT, FLAG_OUTPUT};

/// A tensor of a message checked against the session's buffers.
pub struct Resolved {
    /// Type, sizes and strides.
    pub desc: TensorDesc,
    /// Its buffer and byte offset, when it has memory on this server.
    pub at: Option<Placement>,
}

/// Builds the graph of `msg`; returns it with the nodes to compute, in order.
pub fn build(
    msg: &GraphMsg,
    resolve: impl Fn(&RpcTensor) -> Result<Resolved>,
) -> Result<(Graph, Vec<TensorId>)> {
    let mut g = Graph::new();
    let mut ids: HashMap<u64, TensorId> = HashMap::with_capacity(msg.tensors.len());
    for t in &msg.tensors {
        if t.id == 0 || ids.contains_key(&t.id) {
            return Err(RpcError::Malformed(format!(
                "tensor id {:#x} is null or repeated",
                t.id
            )));
        }
        let id = build_one(&mut g, &ids, t, &resolve)?;
        ids.insert(t.id, id);
    }
    let marked: HashMap<u64, bool> = msg
        .tensors
        .iter()
        .map(|t| (t.id, t.flags & FLAG_COMPUTE != 0))
        .collect();
    let mut compute = Vec::with_capacity(msg.nodes.len());
    for &n in &msg.nodes {
        if n == 0 {
            continue;
        }
        let id = *ids.get(&n).ok_or_else(|| {
            RpcError::Malformed(format!("graph node {n:#x} is not among the tensors"))
        })?;
        let op = &g.node(id).op;
        // ggml runs only the nodes marked for computation.
        if *op != Op::None && !op.is_view() && marked.get(&n).copied().unwrap_or(false) {
            compute.push(id);
        }
    }
    Ok((g, compute))
}

fn src_of(ids: &HashMap<u64, TensorId>, t: &RpcTensor, i: usize) -> Result<Option<TensorId>> {
    match t.src[i] {
        0 => Ok(None),
        s => ids.get(&s).copied().map(Some).ok_or_else(|| {
            RpcError::Malformed(format!(
                "tensor '{}': source {i} ({s:#x}) is not listed before it",
                t.name_str()
            ))
        }),
    }
}

fn same_buffer(a: &Arc<dyn Buffer>, b: &Arc<dyn Buffer>) -> bool {
    std::ptr::eq(Arc::as_ptr(a) as *const u8, Arc::as_ptr(b) as *const u8)
}

fn build_one(
    g: &mut Graph,
    ids: &HashMap<u64, TensorId>,
    t: &RpcTensor,
    resolve: &impl Fn(&RpcTensor) -> Result<Resolved>,
) -> Result<TensorId> {
    let name = t.name_str();
    let r = resolve(t)?;
    let decoded = ops::decode(t.op, &t.op_params)?;
    let mut flags = Flags::default();
    if t.flags & FLAG_INPUT != 0 {
        flags.insert(Flags::INPUT);
    }
    if t.flags & FLAG_OUTPUT != 0 {
        flags.insert(Flags::OUTPUT);
    }
    let (op, view_off) = match decoded {
        Decoded::Leaf => {
            if t.src.iter().any(|&s| s != 0) {
                return Err(RpcError::Malformed(format!("leaf '{name}' has sources")));
            }
            let at = r.at.ok_or_else(|| {
                RpcError::Rejected(format!("leaf tensor '{name}' has no buffer on this server"))
            })?;
            let mut desc = r.desc;
            desc.name = name;
            return Ok(g.import(desc, at, flags));
        }
        Decoded::Op(op, off) => (op, off),
    };
    let id = build_op(g, ids, t, &op, view_off, &r.desc, &name)?;
    let built = g.desc(id).clone();
    if built.ty != r.desc.ty || built.ne != r.desc.ne || built.nb != r.desc.nb {
        return Err(RpcError::Malformed(format!(
            "tensor '{name}' ({}): message says {} {:?} {:?}, the op gives {} {:?} {:?}",
            op.name(),
            r.desc.ty,
            r.desc.ne,
            r.desc.nb,
            built.ty,
            built.ne,
            built.nb
        )));
    }
    let shares_memory = op.is_view() || op.writes_into_source();
    if shares_memory {
        // Its memory is its source's; the message must agree when it says.
        if let (Some(claimed), Some(derived)) = (&r.at, g.placement(id)) {
            if !same_buffer(&claimed.buffer, &derived.buffer) || claimed.offset != derived.offset {
                return Err(RpcError::Malformed(format!(
                    "view '{name}' claims memory other than its source's"
                )));
            }
        }
    } else {
        let at = r.at.ok_or_else(|| {
            RpcError::Rejected(format!("node '{name}' has no buffer on this server"))
        })?;
        g.node_mut(id).at = Some(at);
    }
    g.set_name(id, name);
    g.node_mut(id).flags = flags;
    Ok(id)
}

/// Builds the node of `t` for `op` (not a leaf) from its sources with
/// ggml-core's builder, after checking it uses no source the op lacks.
fn build_op(
    g: &mut Graph,
    ids: &HashMap<u64, TensorId>,
    t: &RpcTensor,
    op: &Op,
    view_off: u64,
    desc: &TensorDesc,
    name: &str,
) -> Result<TensorId> {
    let s = |i: usize| src_of(ids, t, i);
    let need = |i: usize| -> Result<TensorId> {
        s(i)?.ok_or_else(|| {
            RpcError::Malformed(format!("tensor '{name}' ({}) lacks source {i}", op.name()))
        })
    };
    let n_src = match op {
        Op::SsmScan | Op::RwkvWkv7 => 7,
        Op::RwkvWkv6 | Op::GatedDeltaNet => 6,
        Op::L2Norm { .. } => 1,
        Op::FlashAttnExt { .. } => 5,
        Op::Rope(_) | Op::SetRows | Op::MulMatId | Op::AddId | Op::SoftMax { .. } => 3,
        Op::Dup | Op::Cont | Op::Scale(_) | Op::RmsNorm { .. } | Op::Norm { .. } => 1,
        Op::View | Op::Reshape | Op::Permute(_) | Op::Transpose | Op::Unary(_) | Op::Argmax => 1,
        Op::Argsort(_) | Op::SumRows | Op::Clamp { .. } => 1,
        _ => 2,
    };
    if let Some(i) = (n_src..t.src.len()).find(|&i| t.src[i] != 0) {
        return Err(RpcError::Unsupported(format!(
            "tensor '{name}' ({}) uses source {i}, which is not supported",
            op.name()
        )));
    }
    let ne = desc.ne;
    let id = match op {
        Op::None => {
            return Err(RpcError::Malformed(format!(
                "tensor '{name}' is a leaf, not an op"
            )))
        }
        Op::View => {
            // Bounded first, so that the builder's bounds arithmetic cannot wrap.
            let off = usize::try_from(view_off)
                .ok()
                .filter(|&o| o as u64 <= crate::server::MAX_TENSOR_BYTES)
                .ok_or_else(|| RpcError::Malformed(format!("VIEW offset {view_off}")))?;
            g.view(need(0)?, &ne, &desc.nb[1..], off)?
        }
        Op::Reshape => g.reshape(need(0)?, &ne)?,
        Op::Permute(axes) => g.permute(need(0)?, *axes)?,
        Op::Transpose => g.transpose(need(0)?)?,
        Op::Dup => g.dup(need(0)?)?,
        Op::Cont => g.cont_shape(need(0)?, &ne)?,
        Op::Cpy => g.cpy(need(0)?, need(1)?)?,
        Op::Add => g.add_op(need(0)?, need(1)?)?,
        Op::Mul => g.mul(need(0)?, need(1)?)?,
        Op::Scale(v) => g.scale(need(0)?, *v)?,
        Op::GetRows => g.get_rows(need(0)?, need(1)?)?,
        Op::RmsNorm { eps } => g.rms_norm(need(0)?, *eps)?,
        Op::Norm { eps } => g.norm(need(0)?, *eps)?,
        Op::MulMat => g.mul_mat(need(0)?, need(1)?)?,
        Op::Rope(p) => g.rope_ext(need(0)?, need(1)?, s(2)?, *p)?,
        Op::SoftMax { scale, max_bias } => {
            let sm = g.soft_max_ext(need(0)?, s(1)?, *scale, *max_bias)?;
            match s(2)? {
                Some(sinks) => g.add_sinks(sm, sinks)?,
                None => sm,
            }
        }
        Op::AddId => g.add_id(need(0)?, need(1)?, need(2)?)?,
        Op::SwigluOai { alpha, limit } => g.swiglu_oai(need(0)?, need(1)?, *alpha, *limit)?,
        // ggml orders SET_ROWS sources as rows, indices, destination.
        Op::SetRows => g.set_rows(need(2)?, need(0)?, need(1)?)?,
        Op::Unary(u) => g.unary(need(0)?, *u)?,
        Op::Glu { op: gop, swapped } => match s(1)? {
            Some(up) if !*swapped => g.glu_split(need(0)?, up, *gop)?,
            Some(_) => {
                return Err(RpcError::Unsupported(format!(
                    "split GLU '{name}' with swapped halves is not supported"
                )))
            }
            None => g.glu(need(0)?, *gop, *swapped)?,
        },
        Op::Argmax => g.argmax(need(0)?)?,
        Op::MulMatId => g.mul_mat_id(need(0)?, need(1)?, need(2)?)?,
        Op::Argsort(order) => g.argsort(need(0)?, *order)?,
        Op::SumRows => g.sum_rows(need(0)?)?,
        Op::Div => g.div(need(0)?, need(1)?)?,
        Op::Clamp { min, max } => g.clamp(need(0)?, *min, *max)?,
        Op::Concat { dim } => g.concat(need(0)?, need(1)?, *dim)?,
        Op::SsmConv => g.ssm_conv(need(0)?, need(1)?)?,
        Op::SsmScan => g.ssm_scan(
            need(0)?,
            need(1)?,
            need(2)?,
            need(3)?,
            need(4)?,
            need(5)?,
            need(6)?,
        )?,
        Op::L2Norm { eps } => g.l2_norm(need(0)?, *eps)?,
        Op::RwkvWkv6 => g.rwkv_wkv6(need(0)?, need(1)?, need(2)?, need(3)?, need(4)?, need(5)?)?,
        Op::RwkvWkv7 => g.rwkv_wkv7(
            need(0)?,
            need(1)?,
            need(2)?,
            need(3)?,
            need(4)?,
            need(5)?,
            need(6)?,
        )?,
        Op::GatedDeltaNet => {
            g.gated_delta_net(need(0)?, need(1)?, need(2)?, need(3)?, need(4)?, need(5)?)?
        }
        Op::FlashAttnExt {
            scale,
            max_bias,
            softcap,
        } => {
            let fa = g.flash_attn_ext(
                need(0)?,
                need(1)?,
                need(2)?,
                s(3)?,
                *scale,
                *max_bias,
                *softcap,
            )?;
            match s(4)? {
                Some(sinks) => g.add_sinks(fa, sinks)?,
                None => fa,
            }
        }
    };
    Ok(id)
}
