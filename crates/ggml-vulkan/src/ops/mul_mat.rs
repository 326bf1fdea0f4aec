//! MUL_MAT: d = a^T b with a quantized or float, b f32 (or f16 with f16 a).
//! Few columns of b go to the matrix x vector kernel (one workgroup per
//! output, subgroup reductions when the device has them), more to the tiled
//! kernel.

use ggml_core::{Graph, TensorDesc, TensorId, Type};

use super::{strides, type_name};
use crate::backend::VulkanBackend;
use crate::error::{Error, Result};

/// Largest number of b columns computed with the matrix x vector kernel.
pub(crate) const MMV_MAX_COLS: usize = 8;
/// Output tile of the tiled kernel (rows of a, columns of b).
const TILE: usize = 64;

/// True when the shaders take a of type `a.ty` with b and d as given.
pub(crate) fn supports(a: &TensorDesc, b: &TensorDesc, d: &TensorDesc) -> bool {
    let b_ok = b.ty == Type::F32 || (b.ty == Type::F16 && a.ty == Type::F16);
    type_name(a.ty).is_some()
        && b_ok
        && d.ty == Type::F32
        && a.nb[0] == a.ty.type_size()
        && a.ne[0] % a.ty.block_size() == 0
        && b.rows_contiguous()
        && d.rows_contiguous()
        && b.ne[2] % a.ne[2] == 0
        && b.ne[3] % a.ne[3] == 0
}

pub(crate) fn record(be: &mut VulkanBackend, graph: &Graph, id: TensorId) -> Result<()> {
    let n = graph.node(id);
    let (a, b, d) = (graph.desc(n.src[0]), graph.desc(n.src[1]), &n.desc);
    let ba = be.bind(graph, n.src[0], a.ty.type_size())?;
    let bb = be.bind(graph, n.src[1], b.ty.type_size())?;
    let bd = be.bind(graph, id, 4)?;
    let (sa, sb, sd) = match (strides(a), strides(b), strides(d)) {
        (Some(x), Some(y), Some(z)) => (x, y, z),
        _ => {
            return Err(Error::Other(format!(
                "{}: strides are not whole elements",
                d.name
            )))
        }
    };
    let (m, cols, k) = (a.ne[1], b.ne[1], a.ne[0]);
    let n_batch = b.ne[2] * b.ne[3];
    let tiles_m = m.div_ceil(TILE);
    let tiles_n = cols.div_ceil(TILE);
    let pc: [u32; 21] = [
        m as u32,
        cols as u32,
        k as u32,
        ba.off,
        bb.off,
        bd.off,
        sa[1],
        sb[1],
        sd[1],
        sa[2],
        sa[3],
        sb[2],
        sb[3],
        sd[2],
        sd[3],
        b.ne[2] as u32,
        (b.ne[2] / a.ne[2]) as u32,
        (b.ne[3] / a.ne[3]) as u32,
        n_batch as u32,
        tiles_m as u32,
        tiles_n as u32,
    ];
    let an = type_name(a.ty).unwrap_or("f32");
    let bn = if b.ty == Type::F16 { "f16" } else { "f32" };
    let (name, groups) = if cols <= MMV_MAX_COLS {
        let sg = if be.shared().limits.subgroup_arith {
            "_sg"
        } else {
            ""
        };
        (format!("mul_mat_vec_{an}_{bn}{sg}"), m * cols * n_batch)
    } else {
        (format!("mul_mat_{an}_{bn}"), tiles_m * tiles_n * n_batch)
    };
    be.dispatch(&name, [Some(&ba), Some(&bb), None], &bd, &pc, groups as u64)
}
