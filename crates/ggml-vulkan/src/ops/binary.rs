//! ADD, MUL, DIV with broadcasting of the second source.

use ggml_core::{Graph, TensorId};

use super::{tn, Pc4d, ELEMENTWISE_WG};
use crate::backend::VulkanBackend;
use crate::error::Result;

/// Records binary node `id` on `be` with the shader family `op` ("add",
/// "mul" or "div").
pub(super) fn record(be: &mut VulkanBackend, graph: &Graph, id: TensorId, op: &str) -> Result<()> {
    let n = graph.node(id);
    let (a, b, d) = (graph.desc(n.src[0]), graph.desc(n.src[1]), &n.desc);
    let elems = d.n_elements() as u64;
    let ba = be.bind(graph, n.src[0], a.ty.type_size())?;
    let bb = be.bind(graph, n.src[1], b.ty.type_size())?;
    let bd = be.bind(graph, id, d.ty.type_size())?;
    let pc = Pc4d::new(elems)?
        .tensor(0, &ba, a)
        .tensor(1, &bb, b)
        .tensor(2, &bd, d);
    let name = format!("{op}_{}_{}", tn(a.ty), tn(b.ty));
    be.dispatch(
        &name,
        [Some(&ba), Some(&bb), None],
        &bd,
        &pc.0,
        elems.div_ceil(ELEMENTWISE_WG),
    )
}
