//! CONCAT, SSM_CONV and SSM_SCAN: the ops of Mamba's mixer.
//!
//! CONCAT and SSM_CONV run one invocation per result element; SSM_SCAN runs
//! one workgroup per state row (row of a head of a sequence), its
//! invocations sharing the row's state elements and reducing each token's
//! output in shared memory.

use ggml_core::{Graph, TensorDesc, TensorId, Type};

use super::{whole_strides, Pc4d, ELEMENTWISE_WG};
use crate::backend::VulkanBackend;
use crate::error::{Error, Result};

/// Most state elements of one row the scan shader holds (8 per invocation
/// of a 32-wide workgroup; Mamba and Mamba-2 use 16 and 128).
pub(super) const SCAN_MAX_STATE: usize = 256;

/// True when `d` is F32 with adjacent elements in each row.
fn dense_f32(d: &TensorDesc) -> bool {
    d.ty == Type::F32 && (d.ne[0] <= 1 || d.nb[0] == 4)
}

/// True when the CONCAT shader copies `a` and `b` into `d`.
pub(super) fn supports_concat(a: &TensorDesc, b: &TensorDesc, d: &TensorDesc) -> bool {
    matches!(d.ty, Type::F32 | Type::F16 | Type::BF16 | Type::I32) && a.ty == d.ty && b.ty == d.ty
}

/// True when the SSM_CONV shader takes `sx` and the kernel `c`.
pub(super) fn supports_conv(sx: &TensorDesc, c: &TensorDesc, d: &TensorDesc) -> bool {
    sx.ty == Type::F32 && c.ty == Type::F32 && d.ty == Type::F32
}

/// True when the SSM_SCAN shader takes the node's sources `s` (states, x,
/// dt, A, B, C, ids) and result `d`.
pub(super) fn supports_scan(s: &[&TensorDesc], d: &TensorDesc) -> bool {
    s.len() == 7
        && [0, 1, 2, 3, 4, 5].iter().all(|&i| dense_f32(s[i]))
        && s[6].ty == Type::I32
        && (s[6].ne[0] <= 1 || s[6].nb[0] == 4)
        && s[0].ne[0] <= SCAN_MAX_STATE
        && d.ty == Type::F32
        && d.is_contiguous()
}

/// Records CONCAT node `id` along axis `dim`.
pub(super) fn record_concat(
    be: &mut VulkanBackend,
    graph: &Graph,
    id: TensorId,
    dim: usize,
) -> Result<()> {
    let n = graph.node(id);
    let (a, b, d) = (graph.desc(n.src[0]), graph.desc(n.src[1]), &n.desc);
    let es = d.ty.type_size();
    let ba = be.bind(graph, n.src[0], es)?;
    let bb = be.bind(graph, n.src[1], es)?;
    let bd = be.bind(graph, id, es)?;
    let items = d.n_elements() as u64;
    let mut pc = Pc4d::new(items)?
        .tensor(0, &ba, a)
        .tensor(1, &bb, b)
        .tensor(2, &bd, d);
    pc.0[28] = (dim as f32).to_bits();
    let shader = if es == 4 { "concat_b32" } else { "concat_b16" };
    be.dispatch(
        shader,
        [Some(&ba), Some(&bb), None],
        &bd,
        &pc.0,
        items.div_ceil(ELEMENTWISE_WG),
    )
}

/// Records SSM_CONV node `id`.
pub(super) fn record_conv(be: &mut VulkanBackend, graph: &Graph, id: TensorId) -> Result<()> {
    let n = graph.node(id);
    let (sx, c, d) = (graph.desc(n.src[0]), graph.desc(n.src[1]), &n.desc);
    let bs = be.bind(graph, n.src[0], 4)?;
    let bc = be.bind(graph, n.src[1], 4)?;
    let bd = be.bind(graph, id, 4)?;
    let items = d.n_elements() as u64;
    let pc = Pc4d::new(items)?
        .tensor(0, &bs, sx)
        .tensor(1, &bc, c)
        .tensor(2, &bd, d);
    be.dispatch(
        "ssm_conv_f32",
        [Some(&bs), Some(&bc), None],
        &bd,
        &pc.0,
        items.div_ceil(ELEMENTWISE_WG),
    )
}

fn u32_of(v: usize, what: &str) -> Result<u32> {
    u32::try_from(v).map_err(|_| Error::Other(format!("SSM_SCAN: {what} {v} exceeds 32 bits")))
}

/// Records SSM_SCAN node `id`.
pub(super) fn record_scan(be: &mut VulkanBackend, graph: &Graph, id: TensorId) -> Result<()> {
    let n = graph.node(id);
    let descs: Vec<&TensorDesc> = n.src.iter().map(|&t| graph.desc(t)).collect();
    let (s, x, dt, a, b, c) = (descs[0], descs[1], descs[2], descs[3], descs[4], descs[5]);
    let mut bound = Vec::with_capacity(7);
    for &t in n.src.iter() {
        bound.push(be.bind(graph, t, 4)?);
    }
    let bd = be.bind(graph, id, 4)?;
    let [ss, sx, sdt, sa, sb, sc] = [s, x, dt, a, b, c].map(whole_strides);
    let (ss, sx, sdt, sa, sb, sc) = (ss?, sx?, sdt?, sa?, sb?, sc?);
    let [d_state, head_dim, n_head, n_slots] = s.ne;
    let [_, _, n_t, n_s] = x.ne;
    let mut pc = vec![
        bound[0].off,
        bound[1].off,
        bound[2].off,
        bound[3].off,
        bound[4].off,
        bound[5].off,
        bound[6].off,
        bd.off,
    ];
    for (v, what) in [
        (d_state, "d_state"),
        (head_dim, "head_dim"),
        (n_head, "n_head"),
        (b.ne[1], "n_group"),
        (n_t, "n_t"),
        (n_s, "n_s"),
        (n_slots, "n_slots"),
        (a.ne[0], "A rows"),
    ] {
        pc.push(u32_of(v, what)?);
    }
    pc.extend([ss[1], ss[2], ss[3]]);
    pc.extend([sx[1], sx[2], sx[3]]);
    pc.extend([sdt[1], sdt[2]]);
    pc.push(sa[1]);
    pc.extend([sb[1], sb[2], sb[3]]);
    pc.extend([sc[1], sc[2], sc[3]]);
    let groups = (head_dim * n_head * n_s) as u64;
    let srcs: Vec<Option<&_>> = bound.iter().map(Some).collect();
    be.dispatch_spec("ssm_scan_f32", &[], &srcs, &bd, &pc, groups)
}
