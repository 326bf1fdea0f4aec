//! SOFT_MAX with optional mask, ALiBi and attention sinks: one workgroup
//! per row.

use ggml_core::{Graph, TensorId, Type};

use super::{tn, Pc4d};
use crate::backend::VulkanBackend;
use crate::error::Result;

/// Records SOFT_MAX node `id` on `be`.
pub(super) fn record(
    be: &mut VulkanBackend,
    graph: &Graph,
    id: TensorId,
    scale: f32,
    max_bias: f32,
) -> Result<()> {
    let n = graph.node(id);
    let (a, d) = (graph.desc(n.src[0]), &n.desc);
    let rows = d.n_rows() as u64;
    let ba = be.bind(graph, n.src[0], a.ty.type_size())?;
    let bd = be.bind(graph, id, d.ty.type_size())?;
    let mut pc = Pc4d::new(rows)?.tensor(0, &ba, a).tensor(2, &bd, d);
    let (bm, mask_ty) = if n.src.len() > 1 {
        let m = graph.desc(n.src[1]);
        let bm = be.bind(graph, n.src[1], m.ty.type_size())?;
        pc = pc.tensor(1, &bm, m);
        (Some(bm), m.ty)
    } else {
        (None, Type::F32)
    };
    let mut pc = pc.params(scale, max_bias);
    // Attention sinks: the shader reads ne20 as 1 + their first element.
    let bs = match n.src.get(2) {
        Some(&s) => Some(be.bind(graph, s, 4)?),
        None => None,
    };
    pc.0[20] = bs.as_ref().map_or(0, |b| b.off + 1);
    let name = format!("soft_max_{}_{}", tn(a.ty), tn(mask_ty));
    be.dispatch(
        &name,
        [Some(&ba), bm.as_ref(), bs.as_ref()],
        &bd,
        &pc.0,
        rows,
    )
}
