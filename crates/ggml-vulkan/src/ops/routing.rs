//! ARGSORT and SUM_ROWS: one workgroup per row.

use ggml_core::{Graph, TensorDesc, TensorId, Type};

use super::record_one_source;
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
    let rows = graph.desc(graph.node(id).src[0]).n_rows() as u64;
    let p0 = if desc { 1.0 } else { 0.0 };
    record_one_source(be, graph, id, name, [rows, rows], [p0, 0.0])
}
