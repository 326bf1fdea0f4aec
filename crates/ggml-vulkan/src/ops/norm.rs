//! RMS_NORM and NORM: one workgroup per row.

use ggml_core::{Graph, TensorId};

use super::{record_one_source, tn};
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
    let a = graph.desc(graph.node(id).src[0]);
    let rows = graph.desc(id).n_rows() as u64;
    let shader = format!("{op}_{}", tn(a.ty));
    record_one_source(be, graph, id, &shader, [rows, rows], [eps, 0.0])
}
