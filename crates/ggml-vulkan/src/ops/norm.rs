//! RMS_NORM and NORM: one workgroup per row.

use ggml_core::{Graph, TensorId};

use super::{tn, Pc4d};
use crate::backend::VulkanBackend;
use crate::error::Result;

/// Records normalization node `id` on `be` with the shader family `op`
/// ("rms_norm" or "norm").
pub(super) fn record(
    be: &mut VulkanBackend,
    graph: &Graph,
    id: TensorId,
    op: &str,
    eps: f32,
) -> Result<()> {
    let n = graph.node(id);
    let (a, d) = (graph.desc(n.src[0]), &n.desc);
    let rows = d.n_rows() as u64;
    let ba = be.bind(graph, n.src[0], a.ty.type_size())?;
    let bd = be.bind(graph, id, d.ty.type_size())?;
    let pc = Pc4d::new(rows)?
        .tensor(0, &ba, a)
        .tensor(2, &bd, d)
        .params(eps, 0.0);
    be.dispatch(
        &format!("{op}_{}", tn(a.ty)),
        [Some(&ba), None, None],
        &bd,
        &pc.0,
        rows,
    )
}
