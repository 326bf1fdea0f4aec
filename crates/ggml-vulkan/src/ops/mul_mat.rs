//! MUL_MAT: d = a^T b with a quantized or float, b f32 (or f16 with f16 a).
//! Few columns of b go to the matrix x vector kernel (a few rows per
//! workgroup, subgroup reductions when the device has them), more to the
//! tiled kernel. Matrices too large for one storage-buffer binding are
//! computed in parts of whole rows of a and whole columns of b.

use ggml_core::{Graph, TensorDesc, TensorId, Type};

use super::{indexable, max_span, strides, type_name};
use crate::backend::VulkanBackend;
use crate::error::{Error, Result};
use crate::logical::DeviceShared;

/// Largest number of b columns computed with the matrix x vector kernel.
pub(crate) const MMV_MAX_COLS: usize = 8;
/// Output tile of the tiled kernel (rows of a, columns of b).
const TILE: usize = 64;
/// Rows of a per workgroup of the matrix x vector kernel.
const MMV_ROWS: usize = 2;
/// Workgroup size of the matrix x vector kernel without subgroups.
const MMV_WG: u32 = 64;

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

/// Fewest rows of a (columns of b and d) in a part.
const MIN_PART: usize = 8;

/// True when `t` (a, b or d of a product), too large for one binding, can
/// be bound in parts: a single matrix whose rows (a) or columns (b, d) fit
/// a binding several times.
pub(crate) fn splittable(s: &DeviceShared, t: &TensorDesc) -> bool {
    indexable(t) && t.ne[2] == 1 && t.ne[3] == 1 && t.nb[1] * MIN_PART <= max_span(s, t)
}

/// How many of the `n` rows of `t` (stride `t.nb[1]`) fit one binding; a
/// multiple of the tiled kernel's tile when at least one tile fits.
fn per_part(s: &DeviceShared, t: &TensorDesc, n: usize) -> usize {
    if t.nbytes() <= max_span(s, t) {
        return n;
    }
    let fit = (max_span(s, t) / t.nb[1]).max(1);
    if fit >= TILE {
        fit / TILE * TILE
    } else {
        fit
    }
}

pub(crate) fn record(be: &mut VulkanBackend, graph: &Graph, id: TensorId) -> Result<()> {
    let n = graph.node(id);
    let (a, b, d) = (graph.desc(n.src[0]), graph.desc(n.src[1]), &n.desc);
    let s = be.shared().clone();
    let rows = per_part(&s, a, a.ne[1]);
    // d's column span covers `rows` rows of d per column.
    let cols = per_part(&s, b, b.ne[1]).min(per_part(&s, d, d.ne[1]));
    let mut r0 = 0;
    while r0 < a.ne[1] {
        let m = rows.min(a.ne[1] - r0);
        let mut c0 = 0;
        while c0 < b.ne[1] {
            let nc = cols.min(b.ne[1] - c0);
            record_part(be, graph, id, [r0, m], [c0, nc])?;
            c0 += nc;
        }
        r0 += m;
    }
    Ok(())
}

/// Records the product of rows `r0..r0 + m` of a and columns
/// `c0..c0 + nc` of b.
fn record_part(
    be: &mut VulkanBackend,
    graph: &Graph,
    id: TensorId,
    [r0, m]: [usize; 2],
    [c0, nc]: [usize; 2],
) -> Result<()> {
    let n = graph.node(id);
    let (a, b, d) = (graph.desc(n.src[0]), graph.desc(n.src[1]), &n.desc);
    let ba = if r0 == 0 && m == a.ne[1] {
        be.bind(graph, n.src[0], a.ty.type_size())?
    } else {
        let len = (m - 1) * a.nb[1] + a.row_bytes();
        be.bind_part(graph, n.src[0], a.ty.type_size(), r0 * a.nb[1], len)?
    };
    let bb = if c0 == 0 && nc == b.ne[1] {
        be.bind(graph, n.src[1], b.ty.type_size())?
    } else {
        let len = (nc - 1) * b.nb[1] + b.row_bytes();
        be.bind_part(graph, n.src[1], b.ty.type_size(), c0 * b.nb[1], len)?
    };
    let bd = if r0 == 0 && m == d.ne[0] && c0 == 0 && nc == d.ne[1] {
        be.bind(graph, id, 4)?
    } else {
        let len = (nc - 1) * d.nb[1] + m * 4;
        be.bind_part(graph, id, 4, c0 * d.nb[1] + r0 * 4, len)?
    };
    let (sa, sb, sd) = match (strides(a), strides(b), strides(d)) {
        (Some(x), Some(y), Some(z)) => (x, y, z),
        _ => {
            return Err(Error::Other(format!(
                "{}: strides are not whole elements",
                d.name
            )))
        }
    };
    let k = a.ne[0];
    let n_batch = b.ne[2] * b.ne[3];
    let mmv = nc <= MMV_MAX_COLS;
    let tiles_m = if mmv {
        m.div_ceil(MMV_ROWS)
    } else {
        m.div_ceil(TILE)
    };
    let tiles_n = nc.div_ceil(TILE);
    let pc: [u32; 21] = [
        m as u32,
        nc as u32,
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
    if mmv {
        let lim = be.shared().limits;
        // With subgroups, one subgroup per workgroup: a single reduction.
        let (sg, wg) = if lim.subgroup_arith {
            ("_sg", lim.subgroup_size.clamp(4, 128).next_power_of_two())
        } else {
            ("", MMV_WG)
        };
        let name = format!("mul_mat_vec_{an}_{bn}{sg}");
        let groups = (tiles_m * nc * n_batch) as u64;
        be.dispatch_spec(&name, &[wg], &[Some(&ba), Some(&bb)], &bd, &pc, groups)
    } else {
        let name = format!("mul_mat_{an}_{bn}");
        let groups = (tiles_m * tiles_n * n_batch) as u64;
        be.dispatch(&name, [Some(&ba), Some(&bb), None], &bd, &pc, groups)
    }
}
