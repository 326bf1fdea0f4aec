//! Which ops the device runs ([`supports`]) and how each is recorded
//! ([`record`]): the shader variant, the push constants and the grid.

mod binary;
mod copy;
mod delta_net;
mod flash_attn;
pub(crate) mod fused;
mod mul_mat;
mod mul_mat_id;
mod norm;
mod oai;
mod rope;
mod routing;
mod rwkv;
mod softmax;
mod ssm;
mod unary;

use ggml_core::{Graph, Op, RopeMode, SortOrder, TensorDesc, TensorId, Type};

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
        Type::MXFP4 => "mxfp4",
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

/// [`strides`], or an error naming the tensor when they are not whole
/// elements.
fn whole_strides(d: &TensorDesc) -> Result<[u32; 4]> {
    strides(d).ok_or_else(|| Error::Other(format!("{}: strides are not whole elements", d.name)))
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
        Op::Scale(_)
        | Op::Unary(_)
        | Op::RmsNorm { .. }
        | Op::Norm { .. }
        | Op::L2Norm { .. }
        | Op::Clamp { .. } => is_float(src(0).ty) && d.ty == src(0).ty,
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
            is_float(src(0).ty)
                && d.ty == Type::F32
                && (n.src.len() < 2 || is_float(src(1).ty))
                && (n.src.len() < 3 || src(2).ty == Type::F32)
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
                && (n.src.len() < 5 || src(4).ty == Type::F32)
                && q.rows_contiguous()
                && k.rows_contiguous()
                && v.rows_contiguous()
                && d.is_contiguous()
                && q.ne[0] <= FA_MAX_D
                && v.ne[0] <= FA_MAX_D
        }
        Op::Concat { .. } => ssm::supports_concat(src(0), src(1), d),
        Op::SsmConv => ssm::supports_conv(src(0), src(1), d),
        Op::SsmScan => {
            let s: Vec<&TensorDesc> = (0..n.src.len()).map(src).collect();
            ssm::supports_scan(&s, d)
        }
        Op::RwkvWkv6 | Op::RwkvWkv7 => {
            let s: Vec<&TensorDesc> = (0..n.src.len()).map(src).collect();
            rwkv::supports_wkv(&s, d)
        }
        Op::GatedDeltaNet => {
            let s: Vec<&TensorDesc> = (0..n.src.len()).map(src).collect();
            delta_net::supports(&s, d)
        }
        Op::AddId => oai::supports_add_id(src(0), src(1), src(2), d),
        Op::SwigluOai { .. } => {
            src(0).ty == Type::F32 && src(1).ty == Type::F32 && d.ty == Type::F32
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
pub(crate) struct Pc4d(pub(crate) [u32; 30]);

impl Pc4d {
    pub(crate) fn new(n: u64) -> Result<Pc4d> {
        let n =
            u32::try_from(n).map_err(|_| Error::Other(format!("{n} work items exceed 32 bits")))?;
        let mut w = [0u32; 30];
        w[0] = n;
        Ok(Pc4d(w))
    }
    /// Sets tensor slot `k` (0 = a, 1 = b, 2 = d).
    pub(crate) fn tensor(mut self, k: usize, b: &Bound, d: &TensorDesc) -> Pc4d {
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

/// Records node `id` with the one-source shader `shader` (element-wise or
/// per row, `pc_4d.glsl` push constants): `items` work items in `groups`
/// workgroups, with the parameters `p`.
fn record_one_source(
    be: &mut VulkanBackend,
    graph: &Graph,
    id: TensorId,
    shader: &str,
    [items, groups]: [u64; 2],
    [p0, p1]: [f32; 2],
) -> Result<()> {
    let n = graph.node(id);
    let (a, d) = (graph.desc(n.src[0]), &n.desc);
    let ba = be.bind(graph, n.src[0], a.ty.type_size())?;
    let bd = be.bind(graph, id, d.ty.type_size())?;
    let pc = Pc4d::new(items)?
        .tensor(0, &ba, a)
        .tensor(2, &bd, d)
        .params(p0, p1);
    be.dispatch(shader, [Some(&ba), None, None], &bd, &pc.0, groups)
}

/// Records node `id` of `graph` on `be`; the node was checked by
/// [`supports`] (see [`fused::plan`]).
pub(crate) fn record_node(
    be: &mut VulkanBackend,
    graph: &Graph,
    id: TensorId,
) -> ggml_core::Result<()> {
    let n = graph.node(id);
    if n.desc.n_elements() == 0 {
        return Ok(());
    }
    match &n.op {
        Op::Dup | Op::Cont | Op::Cpy => copy::record_copy(be, graph, id)?,
        Op::GetRows => copy::record_get_rows(be, graph, id)?,
        Op::SetRows => copy::record_set_rows(be, graph, id)?,
        Op::Add => binary::record(be, graph, id, "add")?,
        Op::Mul => binary::record(be, graph, id, "mul")?,
        Op::Div => binary::record(be, graph, id, "div")?,
        Op::Scale(s) => unary::record(be, graph, id, "scale", [*s, 0.0])?,
        Op::Clamp { min, max } => unary::record(be, graph, id, "clamp", [*min, *max])?,
        Op::Unary(u) => unary::record(be, graph, id, unary::name(*u), [0.0, 0.0])?,
        Op::Glu { op, swapped } => unary::record_glu(be, graph, id, *op, *swapped)?,
        Op::Argmax => unary::record_argmax(be, graph, id)?,
        Op::RmsNorm { eps } => norm::record(be, graph, id, "rms_norm", *eps)?,
        Op::Norm { eps } => norm::record(be, graph, id, "norm", *eps)?,
        Op::L2Norm { eps } => norm::record(be, graph, id, "l2_norm", *eps)?,
        Op::SoftMax { scale, max_bias } => softmax::record(be, graph, id, *scale, *max_bias)?,
        Op::Rope(p) => rope::record(be, graph, id, p)?,
        Op::FlashAttnExt {
            scale,
            max_bias,
            softcap,
        } => flash_attn::record(be, graph, id, [*scale, *max_bias, *softcap])?,
        Op::MulMat => mul_mat::record(be, graph, id)?,
        Op::MulMatId => mul_mat_id::record(be, graph, id)?,
        Op::Argsort(o) => routing::record(be, graph, id, "argsort_f32", *o == SortOrder::Desc)?,
        Op::SumRows => routing::record(be, graph, id, "sum_rows_f32", false)?,
        Op::Concat { dim } => ssm::record_concat(be, graph, id, *dim)?,
        Op::SsmConv => ssm::record_conv(be, graph, id)?,
        Op::SsmScan => ssm::record_scan(be, graph, id)?,
        Op::RwkvWkv6 | Op::RwkvWkv7 => rwkv::record_wkv(be, graph, id)?,
        Op::GatedDeltaNet => delta_net::record(be, graph, id)?,
        Op::AddId => oai::record_add_id(be, graph, id)?,
        Op::SwigluOai { alpha, limit } => oai::record_swiglu_oai(be, graph, id, [*alpha, *limit])?,
        _ => return Err(unsupported(graph, id, be.shared())),
    }
    Ok(())
}

/// The shader name of a type's variant, for types that have one; indices
/// (I32) otherwise.
fn tn(ty: Type) -> &'static str {
    type_name(ty).unwrap_or("i32")
}
