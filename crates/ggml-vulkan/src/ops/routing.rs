//! ARGSORT and SUM_ROWS: one workgroup per row.

use ggml_core::{Graph, TensorDesc, TensorId, Type};

use super::Pc4d;
use crate::backend::VulkanBackend;
use crate::error::Result;

/// Longest row the sorting shader holds in shared memory.
const ARGSORT_MAX_COLS: usize = 1024;

/// True when the shaders take a row op from `a` into `d`.
pub(super) fn supports(a: &TensorDesc, d: &TensorDesc) -> bool {
    match d.ty {
        Type::I32 => a.ty == Type::F32 && a.ne[0] <= ARGSORT_MAX_COLS,
        Type::F32 => a.ty == Type::F32,
        _ => false,
    }
}

/// Records node `id` (ARGSORT or SUM_ROWS) on `be` with the shader `name`;
/// `desc` sorts in descending order.
pub(super) fn record(
    be: &mut VulkanBackend,
    graph: &Graph,
    id: TensorId,
    name: &str,
    desc: bool,
) -> Result<()> {
    let n = graph.node(id);
    let (a, d) = (graph.desc(n.src[0]), &n.desc);
    let ba = be.bind(graph, n.src[0], 4)?;
    let bd = be.bind(graph, id, 4)?;
    let rows = a.n_rows() as u64;
    let pc = Pc4d::new(rows)?
        .tensor(0, &ba, a)
        .tensor(2, &bd, d)
        .params(if desc { 1.0 } else { 0.0 }, 0.0);
    be.dispatch(name, [Some(&ba), None, None], &bd, &pc.0, rows)
}
