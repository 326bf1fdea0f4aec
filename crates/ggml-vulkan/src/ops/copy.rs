//! DUP / CONT / CPY (conversions, quantization into blocks of 32,
//! dequantization), GET_ROWS and SET_ROWS.

use ggml_core::{Graph, TensorId, Type};

use super::{is_quant_dst, record_one_source, tn, Pc4d, ELEMENTWISE_WG, QUANT_WG};
use crate::backend::VulkanBackend;
use crate::error::Result;

/// Records a copy node `id` (DUP, CONT or CPY) on `be`.
pub(super) fn record_copy(be: &mut VulkanBackend, graph: &Graph, id: TensorId) -> Result<()> {
    let n = graph.node(id);
    let (a, d) = (graph.desc(n.src[0]), &n.desc);
    let elems = d.n_elements() as u64;
    let (items, groups) = if is_quant_dst(d.ty) {
        let blocks = elems / 32;
        (blocks, blocks.div_ceil(QUANT_WG))
    } else if a.ty.block_size() > 1 {
        // Dequantized four elements per invocation.
        (elems / 4, (elems / 4).div_ceil(ELEMENTWISE_WG))
    } else {
        (elems, elems.div_ceil(ELEMENTWISE_WG))
    };
    let shader = format!("copy_{}_{}", tn(a.ty), tn(d.ty));
    record_one_source(be, graph, id, &shader, [items, groups], [0.0, 0.0])
}

/// Records GET_ROWS node `id` on `be`.
pub(super) fn record_get_rows(be: &mut VulkanBackend, graph: &Graph, id: TensorId) -> Result<()> {
    let n = graph.node(id);
    let (a, i, d) = (graph.desc(n.src[0]), graph.desc(n.src[1]), &n.desc);
    let ba = be.bind(graph, n.src[0], a.ty.type_size())?;
    let bi = be.bind(graph, n.src[1], 4)?;
    let bd = be.bind(graph, id, d.ty.type_size())?;
    let per_item = if a.ty.block_size() == 1 { 1 } else { 4 };
    let items = d.n_elements() as u64 / per_item;
    let pc = Pc4d::new(items)?
        .tensor(0, &ba, a)
        .tensor(1, &bi, i)
        .tensor(2, &bd, d);
    let name = if a.ty == Type::I32 {
        "get_rows_i32".to_string()
    } else {
        format!("get_rows_{}", tn(a.ty))
    };
    be.dispatch(
        &name,
        [Some(&ba), Some(&bi), None],
        &bd,
        &pc.0,
        items.div_ceil(ELEMENTWISE_WG),
    )
}

/// Records SET_ROWS node `id` on `be`.
pub(super) fn record_set_rows(be: &mut VulkanBackend, graph: &Graph, id: TensorId) -> Result<()> {
    let n = graph.node(id);
    // The node is a view of src0 (the destination rows).
    let (rows_d, idx, d) = (graph.desc(n.src[1]), graph.desc(n.src[2]), &n.desc);
    let br = be.bind(graph, n.src[1], rows_d.ty.type_size())?;
    let bi = be.bind(graph, n.src[2], 4)?;
    let bd = be.bind(graph, id, d.ty.type_size())?;
    let mut idx_words = idx.clone();
    // Indices are read as 32-bit words: I64 strides count two.
    idx_words.ty = Type::I32;
    let (n_items, wg) = if is_quant_dst(d.ty) {
        (rows_d.n_elements() as u64 / 32, QUANT_WG)
    } else {
        (rows_d.n_elements() as u64, ELEMENTWISE_WG)
    };
    let pc = Pc4d::new(n_items)?
        .tensor(0, &br, rows_d)
        .tensor(1, &bi, &idx_words)
        .tensor(2, &bd, d);
    let name = format!("set_rows_{}_{}", tn(rows_d.ty), tn(d.ty));
    be.dispatch(
        &name,
        [None, Some(&br), Some(&bi)],
        &bd,
        &pc.0,
        n_items.div_ceil(wg),
    )
}
