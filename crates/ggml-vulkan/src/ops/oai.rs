//! ADD_ID (per-expert biases, `add_id.comp`) and SWIGLU_OAI (gpt-oss's
//! clamped SwiGLU, a variant of `glu.comp`).

use ggml_core::{Graph, TensorDesc, TensorId, Type};

use super::{strides, Pc4d, ELEMENTWISE_WG};
use crate::backend::VulkanBackend;
use crate::error::Result;

/// Whether the device runs ADD_ID of these F32 tensors (the ids' elements
/// adjacent, as the shader reads them).
pub(super) fn supports_add_id(
    a: &TensorDesc,
    b: &TensorDesc,
    ids: &TensorDesc,
    d: &TensorDesc,
) -> bool {
    a.ty == Type::F32
        && b.ty == Type::F32
        && d.ty == Type::F32
        && ids.ty == Type::I32
        && ids.nb[0] == 4
        && strides(a).is_some()
        && strides(b).is_some()
        && strides(ids).is_some()
}

/// Records ADD_ID node `id` on `be`.
pub(super) fn record_add_id(be: &mut VulkanBackend, graph: &Graph, id: TensorId) -> Result<()> {
    let n = graph.node(id);
    let (a, b, ids, d) = (
        graph.desc(n.src[0]),
        graph.desc(n.src[1]),
        graph.desc(n.src[2]),
        &n.desc,
    );
    let elems = d.n_elements() as u64;
    let ba = be.bind(graph, n.src[0], 4)?;
    let bb = be.bind(graph, n.src[1], 4)?;
    let bi = be.bind(graph, n.src[2], 4)?;
    let bd = be.bind(graph, id, 4)?;
    let mut pc = Pc4d::new(elems)?
        .tensor(0, &ba, a)
        .tensor(1, &bb, b)
        .tensor(2, &bd, d);
    // b is 2-d: its ne12 and ne13 carry the ids' first element and row
    // stride (add_id.comp).
    pc.0[14] = bi.off;
    pc.0[15] = strides(ids).unwrap_or_default()[1];
    be.dispatch(
        "add_id_f32",
        [Some(&ba), Some(&bb), Some(&bi)],
        &bd,
        &pc.0,
        elems.div_ceil(ELEMENTWISE_WG),
    )
}

/// Records SWIGLU_OAI node `id` (gate src0, up src1, F32) on `be`.
pub(super) fn record_swiglu_oai(
    be: &mut VulkanBackend,
    graph: &Graph,
    id: TensorId,
    [alpha, limit]: [f32; 2],
) -> Result<()> {
    let n = graph.node(id);
    let (g, u, d) = (graph.desc(n.src[0]), graph.desc(n.src[1]), &n.desc);
    let elems = d.n_elements() as u64;
    let bg = be.bind(graph, n.src[0], 4)?;
    let bu = be.bind(graph, n.src[1], 4)?;
    let bd = be.bind(graph, id, 4)?;
    let pc = Pc4d::new(elems)?
        .tensor(0, &bg, g)
        .tensor(1, &bu, u)
        .tensor(2, &bd, d)
        .params(alpha, limit);
    be.dispatch(
        "swiglu_oai_f32",
        [Some(&bg), Some(&bu), None],
        &bd,
        &pc.0,
        elems.div_ceil(ELEMENTWISE_WG),
    )
}
