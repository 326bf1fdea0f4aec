//! MUL_MAT: d = a^T b with a quantized or float, b f32 (or f16 with f16 a).
//! Few columns of b go to the matrix x vector kernel (a few rows per
//! workgroup, subgroup reductions when the device has them), more to the
//! tiled kernel. Matrices too large for one storage-buffer binding are
//! computed in parts of whole rows of a and whole columns of b.
//!
//! As ggml's CPU backend does, an f32 b is first rounded to the dot-product
//! partner of a's type (Q8_0, Q8_1, Q8_K, BF16 or F16; see
//! `ggml_core::quants::vec_dot_type`): a pre-pass writes the values the
//! partner represents, as dense f32, into the backend's activation scratch,
//! and the kernels read them there. For Q8_1 it also writes, per block, how
//! far the f16 block sum the CPU's Q4_1 / Q5_1 products use is from the
//! exact one, which the kernels add times the block's min. Products sharing b (the projections of
//! one normalized input) share one pre-pass.

use ggml_core::quants::vec_dot_type;
use ggml_core::{Graph, TensorDesc, TensorId, Type};

use super::{indexable, max_span, strides, type_name, whole_strides, Pc4d};
use crate::backend::{Bound, Rounded, VulkanBackend};
use crate::error::{Error, Result};
use crate::logical::DeviceShared;

/// Largest number of b columns computed with the matrix x vector kernel.
pub(crate) const MMV_MAX_COLS: usize = 8;
/// Output tile of the tiled kernel (rows of a, columns of b).
const TILE: usize = 64;
/// Rows of a per workgroup of the matrix x vector kernel.
pub(super) const MMV_ROWS: usize = 2;
/// Subgroups per workgroup of the matrix x vector kernel: one is too few
/// loads in flight to keep a GPU's memory busy (an H100 read weights at a
/// quarter of its bandwidth with one).
const MMV_SUBGROUPS: u32 = 4;
/// Workgroup size of the matrix x vector kernel without subgroups.
pub(super) const MMV_WG: u32 = 64;

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

/// The `round_act_*` variant and block size an f32 b is rounded with for
/// weights of type `a`, if any.
fn rounding(a: Type) -> Option<(&'static str, usize)> {
    match vec_dot_type(a)? {
        Type::Q8_0 => Some(("q8_0", 32)),
        Type::Q8_1 => Some(("q8_1", 32)),
        Type::Q8_K => Some(("q8_k", 256)),
        Type::BF16 => Some(("bf16", 1)),
        Type::F16 => Some(("f16", 1)),
        _ => None,
    }
}

/// Bytes of `n` values of b rounded with `variant` in the scratch: f32
/// values, and one f32 block-sum correction per 32 values for Q8_1.
fn rounded_bytes(variant: &str, n: usize) -> usize {
    if variant == "q8_1" {
        4 * n + 4 * (n / 32)
    } else {
        4 * n
    }
}

/// Blocks per workgroup of the rounding pre-pass (`round_act.comp`): one
/// value per invocation, 256 invocations per workgroup.
fn rounding_wg(block: usize) -> u64 {
    (256 / block.clamp(1, 256)) as u64
}

/// b as the kernels read it: its binding, its strides in elements and
/// where its Q8_1 block-sum corrections start (0 when it has none).
pub(super) struct BindB {
    pub bound: Bound,
    pub strides: [u32; 4],
    pub sums: u32,
}

pub(crate) fn record(be: &mut VulkanBackend, graph: &Graph, id: TensorId) -> Result<()> {
    let n = graph.node(id);
    let (a, b, d) = (graph.desc(n.src[0]), graph.desc(n.src[1]), &n.desc);
    let s = be.shared().clone();
    let rows = per_part(&s, a, a.ne[1]);
    // d's column span covers `rows` rows of d per column.
    let mut cols = per_part(&s, b, b.ne[1]).min(per_part(&s, d, d.ne[1]));
    if let Some((variant, _)) = rounding(a.ty).filter(|_| b.ty == Type::F32 && splittable(&s, b)) {
        // The rounded columns (and Q8_1's block sums) fit one binding too.
        let per_col = rounded_bytes(variant, b.ne[0]);
        cols = cols.min((s.limits.max_storage_range / per_col).max(1));
    }
    let mut c0 = 0;
    while c0 < b.ne[1] {
        let nc = cols.min(b.ne[1] - c0);
        let bb = bind_b(be, graph, n.src[0], n.src[1], [c0, nc])?;
        let mut r0 = 0;
        while r0 < a.ne[1] {
            let m = rows.min(a.ne[1] - r0);
            record_part(be, graph, id, [r0, m], [c0, nc], &bb)?;
            r0 += m;
        }
        c0 += nc;
    }
    Ok(())
}

/// Binds columns `c0..c0 + nc` of b (`b_id`) for a product with a
/// (`a_id`): b itself, or its values rounded to the partner of a's type in
/// the activation scratch (dense).
pub(super) fn bind_b(
    be: &mut VulkanBackend,
    graph: &Graph,
    a_id: TensorId,
    b_id: TensorId,
    [c0, nc]: [usize; 2],
) -> Result<BindB> {
    let b = graph.desc(b_id);
    let bound = if c0 == 0 && nc == b.ne[1] {
        be.bind(graph, b_id, b.ty.type_size())?
    } else {
        let len = (nc - 1) * b.nb[1] + b.row_bytes();
        be.bind_part(graph, b_id, b.ty.type_size(), c0 * b.nb[1], len)?
    };
    let mut part = b.clone();
    part.ne[1] = nc;
    let round = match rounding(graph.desc(a_id).ty) {
        Some(r) if b.ty == Type::F32 => r,
        _ => {
            let strides = strides(b).ok_or_else(|| {
                Error::Other(format!("{}: strides are not whole elements", b.name))
            })?;
            return Ok(BindB {
                bound,
                strides,
                sums: 0,
            });
        }
    };
    let (variant, block) = round;
    let dense = TensorDesc::new(format!("{} (rounded)", b.name), Type::F32, &part.ne);
    let items = (dense.n_elements() / block) as u64;
    let sums = if variant == "q8_1" { items as usize } else { 0 };
    let bytes = rounded_bytes(variant, dense.n_elements());
    if bytes > be.shared().limits.max_storage_range {
        return Err(Error::Other(format!(
            "{}: {bytes} bytes of rounded activations exceed one binding",
            b.name
        )));
    }
    let dst = be.scratch(bytes)?;
    let mut pc = Pc4d::new(items)?
        .tensor(0, &bound, &part)
        .tensor(2, &dst, &dense);
    let sums_off = u32::try_from(dense.n_elements())
        .map_err(|_| Error::Other(format!("{}: too many elements", b.name)))?;
    // b's slot is unused: its offset is where the block sums go.
    pc.0[2] = sums_off;
    let shader = format!("round_act_{variant}");
    let key = Rounded {
        src: bound.span(),
        shader,
        push: pc.0.to_vec(),
    };
    if be.rounded() != Some(&key) {
        let groups = items.div_ceil(rounding_wg(block));
        be.dispatch(&key.shader, [Some(&bound), None, None], &dst, &pc.0, groups)?;
        be.set_rounded(key)?;
    }
    let strides = strides(&dense).expect("dense f32 strides are whole elements");
    Ok(BindB {
        bound: dst,
        strides,
        sums: if sums > 0 { sums_off } else { 0 },
    })
}

/// Records the product of rows `r0..r0 + m` of a and columns
/// `c0..c0 + nc` of b (bound as `bb`).
fn record_part(
    be: &mut VulkanBackend,
    graph: &Graph,
    id: TensorId,
    [r0, m]: [usize; 2],
    [c0, nc]: [usize; 2],
    bb: &BindB,
) -> Result<()> {
    let n = graph.node(id);
    let (a, b, d) = (graph.desc(n.src[0]), graph.desc(n.src[1]), &n.desc);
    let ba = if r0 == 0 && m == a.ne[1] {
        be.bind(graph, n.src[0], a.ty.type_size())?
    } else {
        let len = (m - 1) * a.nb[1] + a.row_bytes();
        be.bind_part(graph, n.src[0], a.ty.type_size(), r0 * a.nb[1], len)?
    };
    let bd = if r0 == 0 && m == d.ne[0] && c0 == 0 && nc == d.ne[1] {
        be.bind(graph, id, 4)?
    } else {
        let len = (nc - 1) * d.nb[1] + m * 4;
        be.bind_part(graph, id, 4, c0 * d.nb[1] + r0 * 4, len)?
    };
    let (sb, sums) = (bb.strides, bb.sums);
    let bb = &bb.bound;
    let (sa, sd) = (whole_strides(a)?, whole_strides(d)?);
    let k = a.ne[0];
    let n_batch = b.ne[2] * b.ne[3];
    let mmv = nc <= MMV_MAX_COLS;
    let tiles_m = if mmv {
        m.div_ceil(MMV_ROWS)
    } else {
        m.div_ceil(TILE)
    };
    let tiles_n = nc.div_ceil(TILE);
    let pc = push_constants(
        [m, nc, k],
        [ba.off, bb.off, bd.off],
        [sa, sb, sd],
        [
            b.ne[2] as u32,
            (b.ne[2] / a.ne[2]) as u32,
            (b.ne[3] / a.ne[3]) as u32,
            n_batch as u32,
            tiles_m as u32,
            tiles_n as u32,
            sums,
        ],
    );
    if mmv {
        let (name, wg) = mmv_shader(be, "mul_mat_vec", a.ty, b.ty);
        let groups = (tiles_m * nc * n_batch) as u64;
        be.dispatch_spec(&name, &[wg], &[Some(&ba), Some(bb)], &bd, &pc, groups)
    } else {
        let name = format!("mul_mat_{}_{}", a_name(a.ty), b_name(b.ty));
        let groups = (tiles_m * tiles_n * n_batch) as u64;
        be.dispatch(&name, [Some(&ba), Some(bb), None], &bd, &pc, groups)
    }
}

/// Shader name of a's type (the weights).
fn a_name(ty: Type) -> &'static str {
    type_name(ty).unwrap_or("f32")
}

/// Shader name of b's type (the activations: F16, else read as F32).
fn b_name(ty: Type) -> &'static str {
    if ty == Type::F16 {
        "f16"
    } else {
        "f32"
    }
}

/// The matrix x vector shader `{kind}_{a}_{b}` (`kind`: "mul_mat_vec" or
/// "mul_mat_vec_id") and its workgroup size: with subgroup arithmetic,
/// [`MMV_SUBGROUPS`] subgroups per workgroup (subgroup reductions, then one
/// across them in shared memory).
pub(super) fn mmv_shader(be: &VulkanBackend, kind: &str, a: Type, b: Type) -> (String, u32) {
    let lim = be.shared().limits;
    let (sg, wg) = if lim.subgroup_arith {
        let sg = lim.subgroup_size.clamp(4, 128).next_power_of_two();
        ("_sg", (sg * MMV_SUBGROUPS).min(256))
    } else {
        ("", MMV_WG)
    };
    (format!("{kind}_{}_{}{sg}", a_name(a), b_name(b)), wg)
}

/// The push constants of the product shaders (`mul_mat*.comp`): the sizes
/// m, n, k, the offsets of a, b and d, their strides (1, then a's 2 and 3,
/// b's, d's), then seven words that differ between MUL_MAT (batches and
/// broadcasts, tiles, block sums) and MUL_MAT_ID (see its `record`).
pub(super) fn push_constants(
    [m, n, k]: [usize; 3],
    [oa, ob, od]: [u32; 3],
    [sa, sb, sd]: [[u32; 4]; 3],
    tail: [u32; 7],
) -> [u32; 22] {
    let head = [
        m as u32, n as u32, k as u32, oa, ob, od, sa[1], sb[1], sd[1], sa[2], sa[3], sb[2], sb[3],
        sd[2], sd[3],
    ];
    let mut pc = [0u32; 22];
    pc[..15].copy_from_slice(&head);
    pc[15..].copy_from_slice(&tail);
    pc
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use ggml_core::quants::{self, fp32_to_bf16};
    use ggml_core::{Backend, Buffer, Device, Flags, Placement};
    use half::f16;

    use super::*;
    use crate::{Options, VulkanReg};

    /// Random f32 values: blocks of 32 with scales from 2^-20 to 2^10 (f16
    /// scales of Q8_0 down to subnormals), blocks of exact rounding ties
    /// (a whole Q8_K block first), zero blocks, and raw bit patterns around
    /// f16's range.
    fn data(n: usize, seed: u32) -> Vec<f32> {
        let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            s
        };
        let mut x = Vec::with_capacity(n);
        while x.len() < n {
            let block = x.len() / 32;
            let scale = (2f32).powi((next() % 31) as i32 - 20);
            for j in 0..32 {
                let r = next();
                x.push(match block % 8 {
                    // The largest magnitude 127 / 16 (the first 256 values
                    // negative): the scaled values are exact halves.
                    _ if j == 0 && (block % 8 == 0 || x.len() < 256) => {
                        if x.len() < 256 {
                            -127.0 / 16.0
                        } else {
                            127.0 / 16.0
                        }
                    }
                    _ if x.len() < 256 => ((r % 254) as f32 - 126.5) / 16.0,
                    0 => ((r % 254) as f32 - 126.5) / 16.0,
                    // Ties in the f16 and bf16 mantissas.
                    1 => f32::from_bits((r & 0x8000_0000) | ((r % 50 + 100) << 23) | 0x1000),
                    2 => f32::from_bits((r & 0x8000_0000) | ((r % 50 + 100) << 23) | 0x8000),
                    3 => 0.0,
                    4 => f32::from_bits(
                        (r & 0x8000_0000) | ((r % 60 + 95) << 23) | (r & 0x7fffff) >> 9,
                    ),
                    _ => (r as f32 / u32::MAX as f32 * 2.0 - 1.0) * scale,
                });
            }
        }
        x
    }

    /// Q8_0 (and Q8_1) values as ggml's x86 CPU backend makes them:
    /// `d = amax / 127` as f16, `q = round_half_even(x * (127 / amax))`;
    /// with `sums`, then per block the Q8_1 sum `s = (amax / 127) * sum(q)`
    /// as f16 less `d * sum(q)`.
    fn q8_values(x: &[f32], sums: bool) -> Vec<f32> {
        let mut out = Vec::with_capacity(x.len());
        let mut corr = Vec::new();
        for b in x.chunks_exact(32) {
            let amax = b.iter().fold(0f32, |m, v| m.max(v.abs()));
            let d32 = amax / 127.0;
            let d = f16::from_f32(d32).to_f32();
            let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
            let q: Vec<i32> = b
                .iter()
                .map(|&v| ((v * id).round_ties_even() as i32).clamp(-128, 127))
                .collect();
            let sum = q.iter().sum::<i32>() as f32;
            out.extend(q.iter().map(|&q| d * q as f32));
            corr.push(f16::from_f32(d32 * sum).to_f32() - d * sum);
        }
        if sums {
            out.extend(corr);
        }
        out
    }

    fn expected(variant: &str, x: &[f32]) -> Vec<f32> {
        let via = |ty: Type| {
            let mut q = vec![0u8; x.len() / ty.block_size() * ty.type_size()];
            quants::quantize_row(ty, x, &mut q).unwrap();
            let mut y = vec![0f32; x.len()];
            quants::dequantize_row(ty, &q, &mut y).unwrap();
            y
        };
        match variant {
            "q8_0" => q8_values(x, false),
            "q8_1" => q8_values(x, true),
            "q8_k" => via(Type::Q8_K),
            "bf16" => x
                .iter()
                .map(|&v| f32::from_bits(u32::from(fp32_to_bf16(v)) << 16))
                .collect(),
            _ => x.iter().map(|&v| f16::from_f32(v).to_f32()).collect(),
        }
    }

    /// A registry with `opts` and validation on, when it has a device
    /// (required with `REQUIRE_VULKAN=1`).
    fn registry(opts: Options) -> Option<VulkanReg> {
        let reg = VulkanReg::new(&Options {
            validation: true,
            ..opts
        });
        if reg.vulkan_devices().is_empty() {
            let required = std::env::var("REQUIRE_VULKAN").is_ok_and(|v| v == "1");
            assert!(!required, "REQUIRE_VULKAN=1 but there is no Vulkan device");
            return None;
        }
        Some(reg)
    }

    fn assert_no_validation_errors() {
        let errors = crate::take_validation_errors();
        assert!(
            errors.is_empty(),
            "validation errors:\n{}",
            errors.join("\n")
        );
    }

    /// The rounding pre-pass gives the CPU's values bit for bit, for every
    /// weight type's partner, on a strided b.
    #[test]
    fn rounding_matches_the_cpu() {
        let Some(reg) = registry(Options::from_env()) else {
            return;
        };
        let dev = reg.vulkan_devices()[0].clone();
        let mut be = dev.new_backend().unwrap();
        let (k, n, pad) = (512usize, 6usize, 64usize);
        let x = data((k + pad) * n, 7);
        let bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
        let buf: Arc<dyn Buffer> = dev.buffer_type().alloc_buffer(2 * bytes.len()).unwrap();
        buf.set_tensor(0, &bytes).unwrap();
        // b: [k, n] rows of a [k + pad, n] matrix.
        let mut desc = TensorDesc::new("b", Type::F32, &[k, n]);
        desc.nb[1] = (k + pad) * 4;
        desc.nb[2] = desc.nb[1] * n;
        desc.nb[3] = desc.nb[2];
        let at = |offset| Placement {
            buffer: buf.clone(),
            offset,
        };
        let rows: Vec<f32> = x
            .chunks_exact(k + pad)
            .flat_map(|r| &r[..k])
            .copied()
            .collect();
        for (a_ty, variant) in [
            (Type::Q8_0, "q8_0"),
            (Type::Q5_1, "q8_1"),
            (Type::Q4_K, "q8_k"),
            (Type::BF16, "bf16"),
            (Type::F16, "f16"),
        ] {
            assert_eq!(rounding(a_ty).map(|r| r.0), Some(variant));
            let mut g = Graph::new();
            let b = g.import(desc.clone(), at(0), Flags::default());
            let a = g.new_tensor("a", a_ty, &[k, 1]);
            let bb = bind_b(&mut be, &g, a, b, [0, n]).unwrap();
            // The values, then the block sums of Q8_1.
            let len = if bb.sums > 0 {
                k * n + k * n / 32
            } else {
                k * n
            };
            assert_eq!(bb.sums as usize, if variant == "q8_1" { k * n } else { 0 });
            let out_desc = TensorDesc::new("out", Type::F32, &[len]);
            let out = g.import(out_desc.clone(), at(bytes.len()), Flags::default());
            let bo = be.bind(&g, out, 4).unwrap();
            let items = len as u64;
            let pc = Pc4d::new(items)
                .unwrap()
                .tensor(0, &bb.bound, &out_desc)
                .tensor(2, &bo, &out_desc);
            be.dispatch(
                "copy_f32_f32",
                [Some(&bb.bound), None, None],
                &bo,
                &pc.0,
                items.div_ceil(256),
            )
            .unwrap();
            be.synchronize().unwrap();
            let mut got = vec![0u8; len * 4];
            buf.get_tensor(bytes.len(), &mut got).unwrap();
            let want = expected(variant, &rows);
            assert_eq!(want.len(), len);
            for (i, (g, w)) in got.chunks_exact(4).zip(&want).enumerate() {
                let g = f32::from_le_bytes([g[0], g[1], g[2], g[3]]);
                assert_eq!(
                    g.to_bits(),
                    w.to_bits(),
                    "{a_ty} ({variant}): value {i}: {g:e} instead of {w:e}"
                );
            }
        }
        assert_no_validation_errors();
    }

    /// Q4_1 products add the Q8_1 block-sum corrections at the right
    /// blocks in both kernels, also when a is bound in parts: the result is
    /// the dot product of the rounded values plus min x correction per
    /// block (which moves it by far more than the summation order does).
    #[test]
    fn q8_1_block_sums_are_added() {
        let Some(reg) = registry(Options {
            max_binding_size: Some(32 * 1024),
            ..Options::from_env()
        }) else {
            return;
        };
        let dev = reg.vulkan_devices()[0].clone();
        let mut be = dev.new_backend().unwrap();
        // 300 rows of 160 bytes: two parts of a.
        let (k, rows) = (256usize, 300usize);
        let row_bytes = k / 32 * 20;
        // Values in [-1, 1] (the generator's extremes overflow f16 scales).
        let unit = |n, seed| -> Vec<f32> { data(n, seed).iter().map(|v| v.sin()).collect() };
        let wa = unit(k * rows, 3);
        let mut a_bytes = vec![0u8; row_bytes * rows];
        quants::quantize_row(Type::Q4_1, &wa, &mut a_bytes).unwrap();
        let mut a_deq = vec![0f32; k * rows];
        quants::dequantize_row(Type::Q4_1, &a_bytes, &mut a_deq).unwrap();
        let mins: Vec<f32> = a_bytes
            .chunks_exact(20)
            .map(|b| f16::from_le_bytes([b[2], b[3]]).to_f32())
            .collect();
        for cols in [3usize, 70] {
            let x = unit(k * cols, 11);
            let rounded = q8_values(&x, true);
            let (vals, corr) = rounded.split_at(k * cols);
            let b_off = a_bytes.len().next_multiple_of(256);
            let d_off = (b_off + 4 * x.len()).next_multiple_of(256);
            let buf: Arc<dyn Buffer> = dev
                .buffer_type()
                .alloc_buffer(d_off + 4 * rows * cols)
                .unwrap();
            buf.set_tensor(0, &a_bytes).unwrap();
            let xb: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
            buf.set_tensor(b_off, &xb).unwrap();
            let at = |offset| Placement {
                buffer: buf.clone(),
                offset,
            };
            let mut g = Graph::new();
            let a = g.import(
                TensorDesc::new("a", Type::Q4_1, &[k, rows]),
                at(0),
                Flags::WEIGHT,
            );
            let b = g.import(
                TensorDesc::new("b", Type::F32, &[k, cols]),
                at(b_off),
                Flags::INPUT,
            );
            let d = g.mul_mat(a, b).unwrap();
            g.node_mut(d).at = Some(at(d_off));
            be.graph_compute(&g, &[d]).unwrap();
            let mut got = vec![0u8; 4 * rows * cols];
            buf.get_tensor(d_off, &mut got).unwrap();
            let mut moved = 0f64;
            for j in 0..cols {
                for i in 0..rows {
                    let mut plain = 0f64;
                    let mut sums = 0f64;
                    for blk in 0..k / 32 {
                        for e in blk * 32..blk * 32 + 32 {
                            plain += f64::from(a_deq[i * k + e]) * f64::from(vals[j * k + e]);
                        }
                        sums +=
                            f64::from(mins[i * k / 32 + blk]) * f64::from(corr[j * k / 32 + blk]);
                    }
                    let want = plain + sums;
                    moved = moved.max(sums.abs());
                    let o = 4 * (j * rows + i);
                    let g = f32::from_le_bytes([got[o], got[o + 1], got[o + 2], got[o + 3]]);
                    assert!(
                        (f64::from(g) - want).abs() <= 1e-4,
                        "{cols} columns: d[{i}, {j}] = {g}, want {want} ({plain} without the sums)"
                    );
                }
            }
            assert!(moved > 5e-4, "the sums move the results by {moved} only");
        }
        assert_no_validation_errors();
    }
}
