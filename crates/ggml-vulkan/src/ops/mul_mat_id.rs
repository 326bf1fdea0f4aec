//! MUL_MAT_ID: for every token and slot, the matrix x vector kernel with
//! the slot's expert as its matrix (`mul_mat_vec_id_*`): one workgroup per
//! few rows x (slot, token), so only the chosen experts' rows are read.
//! The activations are rounded to the partner of the weight type first, as
//! for MUL_MAT (and as ggml's CPU backend does).

use ggml_core::{Graph, TensorDesc, TensorId, Type};

use super::mul_mat::{bind_b, mmv_shader, push_constants, MMV_ROWS};
use super::{type_name, whole_strides};
use crate::backend::VulkanBackend;
use crate::error::Result;

/// True when the shaders take experts `a`, activations `b`, ids `ids`
/// and result `d` (shapes were checked when the node was built).
pub(super) fn supports(a: &TensorDesc, b: &TensorDesc, ids: &TensorDesc, d: &TensorDesc) -> bool {
    let b_ok = b.ty == Type::F32 || (b.ty == Type::F16 && a.ty == Type::F16);
    type_name(a.ty).is_some()
        && b_ok
        && ids.ty == Type::I32
        && d.ty == Type::F32
        && a.nb[0] == a.ty.type_size()
        && a.ne[0] % a.ty.block_size() == 0
        && b.rows_contiguous()
        && d.rows_contiguous()
        && ids.rows_contiguous()
}

/// Records node `id` (a MUL_MAT_ID) on `be`.
pub(super) fn record(be: &mut VulkanBackend, graph: &Graph, id: TensorId) -> Result<()> {
    let n = graph.node(id);
    let (a, b, ids, d) = (
        graph.desc(n.src[0]),
        graph.desc(n.src[1]),
        graph.desc(n.src[2]),
        &n.desc,
    );
    let bb = bind_b(be, graph, n.src[0], n.src[1], [0, b.ne[1]])?;
    let ba = be.bind(graph, n.src[0], a.ty.type_size())?;
    let bi = be.bind(graph, n.src[2], 4)?;
    let bd = be.bind(graph, id, 4)?;
    let (sa, si, sd) = (whole_strides(a)?, whole_strides(ids)?, whole_strides(d)?);
    let sb = bb.strides;
    let (m, n_used, n_tok) = (a.ne[1], ids.ne[0], ids.ne[1]);
    let tiles_m = m.div_ceil(MMV_ROWS);
    // The fields the shader's MUL_MAT_ID path reads (see mul_mat_vec.comp):
    // ne12 = experts, r2 = b's columns per token, r3 = ids' token stride,
    // tiles_n = ids' offset.
    let pc = push_constants(
        [m, n_used, a.ne[0]],
        [ba.off, bb.bound.off, bd.off],
        [sa, sb, sd],
        [
            a.ne[2] as u32,
            b.ne[1] as u32,
            si[1],
            n_tok as u32,
            tiles_m as u32,
            bi.off,
            bb.sums,
        ],
    );
    let (name, wg) = mmv_shader(be, "mul_mat_vec_id", a.ty, b.ty);
    let groups = (tiles_m * n_used * n_tok) as u64;
    be.dispatch_spec(
        &name,
        &[wg],
        &[Some(&ba), Some(&bb.bound), Some(&bi)],
        &bd,
        &pc,
        groups,
    )
}
