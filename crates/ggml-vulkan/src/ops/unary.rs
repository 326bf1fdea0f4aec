//! Element-wise ops of one source (SCALE, CLAMP, the unary functions), the
//! gated units (GLU) and ARGMAX.

use ggml_core::{GluOp, Graph, TensorId, UnaryOp};

use super::{record_one_source, tn, Pc4d, ELEMENTWISE_WG};
use crate::backend::VulkanBackend;
use crate::error::Result;

/// The shader family of a unary function. Every function is named here,
/// so that a new one does not compile until its shader is chosen.
pub(super) fn name(u: UnaryOp) -> &'static str {
    match u {
        UnaryOp::Silu => "silu",
        UnaryOp::Gelu => "gelu",
        UnaryOp::Relu => "relu",
        UnaryOp::Neg => "neg",
        UnaryOp::Tanh => "tanh",
        UnaryOp::Sigmoid => "sigmoid",
        UnaryOp::Exp => "exp",
        UnaryOp::Softplus => "softplus",
    }
}

/// Records element-wise node `id` on `be` with the shader family `op` and
/// its two parameters (the scale, the clamp bounds; zeros otherwise).
pub(super) fn record(
    be: &mut VulkanBackend,
    graph: &Graph,
    id: TensorId,
    op: &str,
    [p0, p1]: [f32; 2],
) -> Result<()> {
    let n = graph.node(id);
    let (a, d) = (graph.desc(n.src[0]), &n.desc);
    let elems = d.n_elements() as u64;
    let shader = format!("{op}_{}", tn(a.ty));
    let grid = [elems, elems.div_ceil(ELEMENTWISE_WG)];
    record_one_source(be, graph, id, &shader, grid, [p0, p1])
}

/// Records GLU node `id` on `be`: gate and up from two sources, or from
/// the two halves of each row of one (`swapped`: the up half first).
pub(super) fn record_glu(
    be: &mut VulkanBackend,
    graph: &Graph,
    id: TensorId,
    op: GluOp,
    swapped: bool,
) -> Result<()> {
    let n = graph.node(id);
    let (a, d) = (graph.desc(n.src[0]), &n.desc);
    let elems = d.n_elements() as u64;
    let es = a.ty.type_size();
    let bd = be.bind(graph, id, d.ty.type_size())?;
    let (bg, bu, gd, ud) = if n.src.len() > 1 {
        let bg = be.bind(graph, n.src[0], es)?;
        let bu = be.bind(graph, n.src[1], es)?;
        (bg, bu, a.clone(), graph.desc(n.src[1]).clone())
    } else {
        // The two halves of each row of one tensor.
        let whole = be.bind(graph, n.src[0], es)?;
        let half = d.ne[0] as u32;
        let (mut first, mut second) = (whole, whole);
        second.off += half;
        if swapped {
            std::mem::swap(&mut first, &mut second);
        }
        let mut hd = a.clone();
        hd.ne[0] = d.ne[0];
        (first, second, hd.clone(), hd)
    };
    let pc = Pc4d::new(elems)?
        .tensor(0, &bg, &gd)
        .tensor(1, &bu, &ud)
        .tensor(2, &bd, d);
    let name = match op {
        GluOp::Swiglu => "swiglu",
        GluOp::Geglu => "geglu",
    };
    be.dispatch(
        &format!("{name}_{}", tn(a.ty)),
        [Some(&bg), Some(&bu), None],
        &bd,
        &pc.0,
        elems.div_ceil(ELEMENTWISE_WG),
    )
}

/// Records ARGMAX node `id` on `be`: one workgroup per row.
pub(super) fn record_argmax(be: &mut VulkanBackend, graph: &Graph, id: TensorId) -> Result<()> {
    let rows = graph.desc(graph.node(id).src[0]).n_rows() as u64;
    record_one_source(be, graph, id, "argmax_f32", [rows, rows], [0.0, 0.0])
}
