//! Which ops the device runs ([`supports`]) and how each is recorded
//! ([`record`]): the shader variant, the push constants and the grid.

mod mul_mat;
mod mul_mat_id;
mod routing;

use ggml_core::{GluOp, Graph, Op, RopeMode, TensorDesc, TensorId, Type, UnaryOp};

use crate::backend::{Bound, VulkanBackend};
use crate::error::{Error, Result};
use crate::logical::DeviceShared;

/// Invocations per workgroup of the element-wise shaders.
const ELEMENTWISE_WG: u64 = 256;
/// Largest head size of the fused attention shader.
const FA_MAX_D: usize = 256;

/// Name of a type in shader variant names.
pub(crate) fn type_name(ty: Type) -> Option<&'static str> {
    Some(match ty {
        Type::F32 => "f32",
        Type::F16 => "f16",
        Type::Q4_0 => "q4_0",
        Type::Q4_1 => "q4_1",
        Type::Q5_0 => "q5_0",
        Type::Q5_1 => "q5_1",
        Type::Q8_0 => "q8_0",
        Type::Q2_K => "q2_k",
        Type::Q3_K => "q3_k",
        Type::Q4_K => "q4_k",
        Type::Q5_K => "q5_k",
        Type::Q6_K => "q6_k",
        Type::IQ4_NL => "iq4_nl",
        Type::IQ4_XS => "iq4_xs",
        Type::BF16 => "bf16",
        _ => return None,
    })
}

fn is_float(ty: Type) -> bool {
    matches!(ty, Type::F32 | Type::F16)
}

/// Types copies and row scatters quantize into (blocks of 32).
fn is_quant_dst(ty: Type) -> bool {
    matches!(
        ty,
        Type::Q8_0 | Type::Q4_0 | Type::Q4_1 | Type::Q5_0 | Type::Q5_1
    )
}

/// Quantized destinations are written a block per invocation.
const QUANT_WG: u64 = 64;

/// Strides in units of the type's element (or block) size, when whole.
fn strides(d: &TensorDesc) -> Option<[u32; 4]> {
    let unit = d.ty.type_size();
    let mut out = [0u32; 4];
    for i in 0..4 {
        if d.nb[i] % unit != 0 {
            return None;
        }
        out[i] = u32::try_from(d.nb[i] / unit).ok()?;
    }
    Some(out)
}

fn ne(d: &TensorDesc) -> [u32; 4] {
    d.ne.map(|n| n as u32)
}

/// True when the tensor's sizes and strides fit the shaders' 32-bit
/// indices.
pub(crate) fn indexable(d: &TensorDesc) -> bool {
    d.ne.iter().all(|&n| n <= u32::MAX as usize)
        && d.n_elements() <= u32::MAX as usize
        && strides(d).is_some()
}

/// Largest tensor span that always fits one storage-buffer binding,
/// whatever its offset.
pub(crate) fn max_span(s: &DeviceShared, d: &TensorDesc) -> usize {
    s.limits
        .max_storage_range
        .saturating_sub(s.limits.storage_align * d.ty.type_size())
}

/// True when the tensor is indexable and fits in one binding.
fn fits(s: &DeviceShared, d: &TensorDesc) -> bool {
    indexable(d) && d.nbytes() <= max_span(s, d)
}

/// True when the device can compute node `id` of `graph`. The node's
/// sources and shapes are checked by ggml-core ([`Graph::validate`]) before
/// anything else, so the sources indexed below are there; this checks the
/// types, layouts and sizes the shaders take.
pub(crate) fn supports(s: &DeviceShared, graph: &Graph, id: TensorId) -> bool {
    if graph.validate(id).is_err() {
        return false;
    }
    let n = graph.node(id);
    if n.op == Op::None || n.op.is_view() {
        return true;
    }
    let d = &n.desc;
    let src = |i: usize| graph.desc(n.src[i]);
    // MUL_MAT binds matrices too large for one binding in parts.
    let split = |t: &TensorDesc| n.op == Op::MulMat && mul_mat::splittable(s, t);
    let all_fit = (fits(s, d) || split(d))
        && n.src.iter().all(|&x| {
            let t = graph.desc(x);
            fits(s, t) || split(t)
        });
    if !all_fit {
        return false;
    }
    match &n.op {
        Op::Dup | Op::Cont | Op::Cpy => {
            let a = src(0);
            (is_float(a.ty) && (is_float(d.ty) || d.ty == Type::BF16))
                || (a.ty == Type::I32 && d.ty == Type::I32)
                || (is_float(a.ty) && is_quant_dst(d.ty) && d.nb[0] == d.ty.type_size())
                || (a.ty.block_size() > 1
                    && type_name(a.ty).is_some()
                    && is_float(d.ty)
                    && a.nb[0] == a.ty.type_size()
                    && d.ne[0] % 4 == 0)
        }
        Op::Add | Op::Mul | Op::Div => {
            let (a, b) = (src(0), src(1));
            is_float(a.ty) && is_float(b.ty) && d.ty == a.ty
        }
        Op::Scale(_) | Op::Unary(_) | Op::RmsNorm { .. } | Op::Norm { .. } | Op::Clamp { .. } => {
            is_float(src(0).ty) && d.ty == src(0).ty
        }
        Op::MulMatId => mul_mat_id::supports(src(0), src(1), src(2), d),
        Op::Argsort(_) | Op::SumRows => routing::supports(src(0), d),
        Op::Glu { .. } => {
            let a = src(0);
            is_float(a.ty) && d.ty == a.ty && (n.src.len() == 1 || src(1).ty == a.ty)
        }
        Op::GetRows => {
            let (a, i) = (src(0), src(1));
            i.ty == Type::I32
                && ((type_name(a.ty).is_some() && d.ty == Type::F32)
                    || (a.ty == Type::I32 && d.ty == Type::I32))
                && (a.ty.block_size() == 1 || a.ne[0] % 4 == 0)
        }
        Op::MulMat => mul_mat::supports(src(0), src(1), d),
        Op::Rope(p) => {
            let a = src(0);
            is_float(a.ty)
                && d.ty == a.ty
                && a.rows_contiguous()
                && d.rows_contiguous()
                && a.ne[0] % 2 == 0
                && src(1).ty == Type::I32
                && (n.src.len() < 3 || src(2).ty == Type::F32)
                && matches!(p.mode, RopeMode::Normal | RopeMode::Neox)
        }
        Op::SoftMax { .. } => {
            is_float(src(0).ty) && d.ty == Type::F32 && (n.src.len() < 2 || is_float(src(1).ty))
        }
        Op::SetRows => {
            let (dst, rows, idx) = (src(0), src(1), src(2));
            (is_float(dst.ty) || dst.ty == Type::BF16 || is_quant_dst(dst.ty))
                && is_float(rows.ty)
                && matches!(idx.ty, Type::I32 | Type::I64)
        }
        Op::Argmax => src(0).ty == Type::F32,
        Op::FlashAttnExt { .. } => {
            let (q, k, v) = (src(0), src(1), src(2));
            q.ty == Type::F32
                && is_float(k.ty)
                && v.ty == k.ty
                && (n.src.len() < 4 || is_float(src(3).ty))
                && q.rows_contiguous()
                && k.rows_contiguous()
                && v.rows_contiguous()
                && d.is_contiguous()
                && q.ne[0] <= FA_MAX_D
                && v.ne[0] <= FA_MAX_D
        }
        _ => false,
    }
}

fn unsupported(graph: &Graph, id: TensorId, s: &DeviceShared) -> ggml_core::Error {
    let n = graph.node(id);
    ggml_core::Error::Unsupported {
        backend: s.name.clone(),
        op: n.op.name().to_string(),
        tensor: n.desc.name.clone(),
    }
}

/// Push constants of the element-wise shaders (`pc_4d.glsl`).
struct Pc4d([u32; 30]);

impl Pc4d {
    fn new(n: u64) -> Result<Pc4d> {
        let n =
            u32::try_from(n).map_err(|_| Error::Other(format!("{n} work items exceed 32 bits")))?;
        let mut w = [0u32; 30];
        w[0] = n;
        Ok(Pc4d(w))
    }
    /// Sets tensor slot `k` (0 = a, 1 = b, 2 = d).
    fn tensor(mut self, k: usize, b: &Bound, d: &TensorDesc) -> Pc4d {
        self.0[1 + k] = b.off;
        self.0[4 + 8 * k..8 + 8 * k].copy_from_slice(&ne(d));
        self.0[8 + 8 * k..12 + 8 * k].copy_from_slice(&strides(d).unwrap_or_default());
        self
    }
    fn params(mut self, p0: f32, p1: f32) -> Pc4d {
        self.0[28] = p0.to_bits();
        self.0[29] = p1.to_bits();
        self
    }
}

/// Records node `id` of `graph` on `be`.
pub(crate) fn record(be: &mut VulkanBackend, graph: &Graph, id: TensorId) -> ggml_core::Result<()> {
    if !supports(be.shared(), graph, id) {
        return Err(unsupported(graph, id, be.shared()));
    }
    let n = graph.node(id);
    if n.desc.n_elements() == 0 {
        return Ok(());
    }
    let d = &n.desc;
    let src = |i: usize| graph.desc(n.src[i]);
    let unit = |i: usize| graph.desc(n.src[i]).ty.type_size();
    let tn = |ty: Type| type_name(ty).unwrap_or("i32");
    let elems = d.n_elements() as u64;
    let groups = elems.div_ceil(ELEMENTWISE_WG);
    let rows = d.n_rows() as u64;
    match &n.op {
        Op::Dup | Op::Cont | Op::Cpy => {
            let a = src(0);
            let ba = be.bind(graph, n.src[0], unit(0))?;
            let bd = be.bind(graph, id, d.ty.type_size())?;
            let (items, groups) = if is_quant_dst(d.ty) {
                let blocks = elems / 32;
                (blocks, blocks.div_ceil(QUANT_WG))
            } else if a.ty.block_size() > 1 {
                // Dequantized four elements per invocation.
                (elems / 4, (elems / 4).div_ceil(ELEMENTWISE_WG))
            } else {
                (elems, groups)
            };
            let pc = Pc4d::new(items)?.tensor(0, &ba, a).tensor(2, &bd, d);
            let name = format!("copy_{}_{}", tn(a.ty), tn(d.ty));
            be.dispatch(&name, [Some(&ba), None, None], &bd, &pc.0, groups)?;
        }
        Op::Add | Op::Mul | Op::Div => {
            let (a, b) = (src(0), src(1));
            let ba = be.bind(graph, n.src[0], unit(0))?;
            let bb = be.bind(graph, n.src[1], unit(1))?;
            let bd = be.bind(graph, id, d.ty.type_size())?;
            let pc = Pc4d::new(elems)?
                .tensor(0, &ba, a)
                .tensor(1, &bb, b)
                .tensor(2, &bd, d);
            let op = match n.op {
                Op::Add => "add",
                Op::Mul => "mul",
                _ => "div",
            };
            let name = format!("{op}_{}_{}", tn(a.ty), tn(b.ty));
            be.dispatch(&name, [Some(&ba), Some(&bb), None], &bd, &pc.0, groups)?;
        }
        Op::Scale(_) | Op::Unary(_) | Op::Clamp { .. } => {
            let a = src(0);
            let (op, scale, p1) = match n.op {
                Op::Scale(s) => ("scale", s, 0.0),
                Op::Clamp { min, max } => ("clamp", min, max),
                Op::Unary(UnaryOp::Silu) => ("silu", 0.0, 0.0),
                Op::Unary(UnaryOp::Gelu) => ("gelu", 0.0, 0.0),
                Op::Unary(UnaryOp::Relu) => ("relu", 0.0, 0.0),
                Op::Unary(UnaryOp::Sigmoid) => ("sigmoid", 0.0, 0.0),
                Op::Unary(UnaryOp::Tanh) => ("tanh", 0.0, 0.0),
                _ => ("neg", 0.0, 0.0),
            };
            let ba = be.bind(graph, n.src[0], unit(0))?;
            let bd = be.bind(graph, id, d.ty.type_size())?;
            let pc = Pc4d::new(elems)?
                .tensor(0, &ba, a)
                .tensor(2, &bd, d)
                .params(scale, p1);
            be.dispatch(
                &format!("{op}_{}", tn(a.ty)),
                [Some(&ba), None, None],
                &bd,
                &pc.0,
                groups,
            )?;
        }
        Op::RmsNorm { eps } | Op::Norm { eps } => {
            let a = src(0);
            let op = if matches!(n.op, Op::RmsNorm { .. }) {
                "rms_norm"
            } else {
                "norm"
            };
            let ba = be.bind(graph, n.src[0], unit(0))?;
            let bd = be.bind(graph, id, d.ty.type_size())?;
            let pc = Pc4d::new(rows)?
                .tensor(0, &ba, a)
                .tensor(2, &bd, d)
                .params(*eps, 0.0);
            be.dispatch(
                &format!("{op}_{}", tn(a.ty)),
                [Some(&ba), None, None],
                &bd,
                &pc.0,
                rows,
            )?;
        }
        Op::SoftMax { scale, max_bias } => {
            let a = src(0);
            let ba = be.bind(graph, n.src[0], unit(0))?;
            let bd = be.bind(graph, id, d.ty.type_size())?;
            let mut pc = Pc4d::new(rows)?.tensor(0, &ba, a).tensor(2, &bd, d);
            let (bm, mask_ty) = if n.src.len() > 1 {
                let m = src(1);
                let bm = be.bind(graph, n.src[1], unit(1))?;
                pc = pc.tensor(1, &bm, m);
                (Some(bm), m.ty)
            } else {
                (None, Type::F32)
            };
            let pc = pc.params(*scale, *max_bias);
            let name = format!("soft_max_{}_{}", tn(a.ty), tn(mask_ty));
            be.dispatch(&name, [Some(&ba), bm.as_ref(), None], &bd, &pc.0, rows)?;
        }
        Op::Glu { op, swapped } => {
            let a = src(0);
            let es = a.ty.type_size();
            let bd = be.bind(graph, id, d.ty.type_size())?;
            let (bg, bu, gd, ud) = if n.src.len() > 1 {
                let bg = be.bind(graph, n.src[0], es)?;
                let bu = be.bind(graph, n.src[1], es)?;
                (bg, bu, a.clone(), src(1).clone())
            } else {
                // The two halves of each row of one tensor.
                let whole = be.bind(graph, n.src[0], es)?;
                let half = d.ne[0] as u32;
                let (mut first, mut second) = (whole, whole);
                second.off += half;
                if *swapped {
                    std::mem::swap(&mut first, &mut second);
                }
                let mut hd = a.clone();
                hd.ne[0] = d.ne[0];
                (first, second, hd.clone(), hd)
            };
            let pc = Pc4d::new(elems)?
                .tensor(0, &bg, &gd)
                .tensor(1, &bu, &ud)
                .tensor(2, &bd, d);
            let name = match op {
                GluOp::Swiglu => "swiglu",
                GluOp::Geglu => "geglu",
            };
            be.dispatch(
                &format!("{name}_{}", tn(a.ty)),
                [Some(&bg), Some(&bu), None],
                &bd,
                &pc.0,
                groups,
            )?;
        }
        Op::GetRows => {
            let (a, i) = (src(0), src(1));
            let ba = be.bind(graph, n.src[0], unit(0))?;
            let bi = be.bind(graph, n.src[1], 4)?;
            let bd = be.bind(graph, id, d.ty.type_size())?;
            let per_item = if a.ty.block_size() == 1 { 1 } else { 4 };
            let items = elems / per_item;
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
            )?;
        }
        Op::SetRows => {
            // The node is a view of src0 (the destination rows).
            let (rows_d, idx) = (src(1), src(2));
            let br = be.bind(graph, n.src[1], unit(1))?;
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
            )?;
        }
        Op::Argmax => {
            let a = src(0);
            let ba = be.bind(graph, n.src[0], 4)?;
            let bd = be.bind(graph, id, 4)?;
            let r = a.n_rows() as u64;
            let pc = Pc4d::new(r)?.tensor(0, &ba, a).tensor(2, &bd, d);
            be.dispatch("argmax_f32", [Some(&ba), None, None], &bd, &pc.0, r)?;
        }
        Op::Rope(p) => record_rope(be, graph, id, p)?,
        Op::FlashAttnExt {
            scale,
            max_bias,
            softcap,
        } => record_flash_attn(be, graph, id, [*scale, *max_bias, *softcap])?,
        Op::MulMat => mul_mat::record(be, graph, id)?,
        Op::MulMatId => mul_mat_id::record(be, graph, id)?,
        Op::Argsort(_) | Op::SumRows => routing::record(be, graph, id)?,
        _ => return Err(unsupported(graph, id, be.shared())),
    }
    Ok(())
}

/// YaRN correction range (ggml_rope_yarn_corr_dims).
fn yarn_corr_dims(
    n_dims: usize,
    n_ctx_orig: usize,
    base: f32,
    beta_fast: f32,
    beta_slow: f32,
) -> [f32; 2] {
    let corr = |n_rot: f32| {
        n_dims as f32 * (n_ctx_orig as f32 / (n_rot * 2.0 * std::f32::consts::PI)).ln()
            / (2.0 * base.ln())
    };
    let start = corr(beta_fast).floor();
    let end = corr(beta_slow).ceil();
    [start.max(0.0), end.min(n_dims as f32 - 1.0)]
}

fn record_rope(
    be: &mut VulkanBackend,
    graph: &Graph,
    id: TensorId,
    p: &ggml_core::RopeParams,
) -> Result<()> {
    let n = graph.node(id);
    let d = &n.desc;
    let a = graph.desc(n.src[0]);
    let es = a.ty.type_size();
    let ba = be.bind(graph, n.src[0], es)?;
    let bp = be.bind(graph, n.src[1], 4)?;
    let bf = if n.src.len() > 2 {
        Some(be.bind(graph, n.src[2], 4)?)
    } else {
        None
    };
    let bd = be.bind(graph, id, d.ty.type_size())?;
    let sa = strides(a).unwrap_or_default();
    let sd = strides(d).unwrap_or_default();
    let pairs = (d.n_elements() / 2) as u64;
    let corr = yarn_corr_dims(
        p.n_dims,
        p.n_ctx_orig,
        p.freq_base,
        p.beta_fast,
        p.beta_slow,
    );
    let theta_scale = p.freq_base.powf(-2.0 / p.n_dims as f32);
    let pc: [u32; 22] = [
        u32::try_from(pairs).map_err(|_| Error::Other("rope: too many elements".into()))?,
        a.ne[0] as u32,
        a.ne[1] as u32,
        a.ne[2] as u32,
        sa[1],
        sa[2],
        sa[3],
        sd[1],
        sd[2],
        sd[3],
        ba.off,
        bp.off,
        bf.as_ref().map_or(0, |b| b.off),
        bd.off,
        p.n_dims as u32,
        u32::from(bf.is_some()),
        theta_scale.to_bits(),
        p.freq_scale.to_bits(),
        p.ext_factor.to_bits(),
        p.attn_factor.to_bits(),
        corr[0].to_bits(),
        corr[1].to_bits(),
    ];
    let mode = match p.mode {
        RopeMode::Normal => "normal",
        RopeMode::Neox => "neox",
    };
    let name = format!("rope_{mode}_{}", type_name(a.ty).unwrap_or("f32"));
    be.dispatch(
        &name,
        [Some(&ba), Some(&bp), bf.as_ref()],
        &bd,
        &pc,
        pairs.div_ceil(ELEMENTWISE_WG),
    )
}

fn record_flash_attn(
    be: &mut VulkanBackend,
    graph: &Graph,
    id: TensorId,
    [scale, max_bias, softcap]: [f32; 3],
) -> Result<()> {
    let n = graph.node(id);
    let (q, k, v) = (
        graph.desc(n.src[0]),
        graph.desc(n.src[1]),
        graph.desc(n.src[2]),
    );
    let bq = be.bind(graph, n.src[0], 4)?;
    let bk = be.bind(graph, n.src[1], k.ty.type_size())?;
    let bv = be.bind(graph, n.src[2], v.ty.type_size())?;
    let mask = n.src.get(3).map(|&m| (m, graph.desc(m)));
    let bm = match mask {
        Some((m, md)) => Some(be.bind(graph, m, md.ty.type_size())?),
        None => None,
    };
    let bd = be.bind(graph, id, 4)?;
    let sq = strides(q).unwrap_or_default();
    let sk = strides(k).unwrap_or_default();
    let sv = strides(v).unwrap_or_default();
    let (sm, mne) = mask.map_or(([0; 4], [1, 1, 1, 1]), |(_, md)| {
        (strides(md).unwrap_or_default(), ne(md))
    });
    let pc: [u32; 30] = [
        q.ne[1] as u32,
        q.ne[2] as u32,
        q.ne[0] as u32,
        v.ne[0] as u32,
        k.ne[1] as u32,
        bq.off,
        bk.off,
        bv.off,
        bm.as_ref().map_or(0, |b| b.off),
        bd.off,
        sq[1],
        sq[2],
        sq[3],
        sk[1],
        sk[2],
        sk[3],
        sv[1],
        sv[2],
        sv[3],
        sm[1],
        sm[2],
        sm[3],
        mne[2],
        mne[3],
        (q.ne[2] / k.ne[2]) as u32,
        (q.ne[3] / k.ne[3]) as u32,
        u32::from(bm.is_some()),
        scale.to_bits(),
        max_bias.to_bits(),
        softcap.to_bits(),
    ];
    let mt = mask.map_or(Type::F16, |(_, md)| md.ty);
    let name = format!(
        "flash_attn_{}_{}",
        type_name(k.ty).unwrap_or("f16"),
        type_name(mt).unwrap_or("f16")
    );
    let groups = (q.ne[1] * q.ne[2] * q.ne[3]) as u64;
    be.dispatch_spec(
        &name,
        &[],
        &[Some(&bq), Some(&bk), Some(&bv), bm.as_ref()],
        &bd,
        &pc,
        groups,
    )
}
