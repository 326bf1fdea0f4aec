//! A plain scalar executor of every [`Op`], the oracle backends are checked
//! against (see [`crate::conformance`]).
//!
//! It reads and writes tensors only through [`Buffer::get_tensor`] and
//! [`Buffer::set_tensor`], so it works on any buffer whose bytes can be read
//! back, and it computes one element at a time in the most direct way:
//! sums in f64, every index computed from ggml's strides. Where ggml's
//! semantics fix an arithmetic detail that changes results (the f16 GELU
//! table, the f64 sums of the norms, rope's angle recurrence, the
//! activation-free reference quantizers for quantized copies), the
//! reference follows it; where they do not (the order of a dot product),
//! it computes the exact sum.
//!
//! Speed is not a goal: use it on small tensors.
//!
//! [`Buffer::get_tensor`]: crate::Buffer::get_tensor
//! [`Buffer::set_tensor`]: crate::Buffer::set_tensor

use crate::graph::{Graph, TensorId};
use crate::op::{GluOp, Op, RopeMode, RopeParams, UnaryOp};
use crate::quants;
use crate::tensor::TensorDesc;
use crate::{Error, Result, Type};

mod delta_net;
mod oai;
mod routing;
mod rwkv;
mod ssm;
#[cfg(test)]
mod test_run;

/// Computes `nodes` of `graph` in order.
pub fn compute(graph: &Graph, nodes: &[TensorId]) -> Result<()> {
    for &id in nodes {
        compute_node(graph, id)?;
    }
    Ok(())
}

/// Computes every node of `graph` that is not a leaf or a view, in order.
pub fn compute_graph(graph: &Graph) -> Result<()> {
    let ids: Vec<TensorId> = graph.compute_ids().collect();
    compute(graph, &ids)
}

/// The bytes a tensor spans, loaded from its buffer, with its layout.
struct Data {
    desc: TensorDesc,
    bytes: Vec<u8>,
}

fn load(graph: &Graph, id: TensorId) -> Result<Data> {
    let desc = graph.desc(id).clone();
    let at = graph.placement_or_err(id)?;
    let mut bytes = vec![0u8; desc.nbytes()];
    at.buffer.get_tensor(at.offset, &mut bytes)?;
    Ok(Data { desc, bytes })
}

fn store(graph: &Graph, id: TensorId, data: &Data) -> Result<()> {
    let at = graph.placement_or_err(id)?;
    at.buffer.set_tensor(at.offset, &data.bytes)
}

fn unsupported<T>(graph: &Graph, id: TensorId, why: String) -> Result<T> {
    Err(Error::Unsupported {
        backend: "reference".into(),
        op: format!("{} ({why})", graph.node(id).op.name()),
        tensor: graph.desc(id).name.clone(),
    })
}

/// Iterates all 4-d indices of a shape, dim 0 fastest.
fn indices(ne: [usize; 4]) -> impl Iterator<Item = [usize; 4]> {
    let n: usize = ne.iter().product();
    (0..n).map(move |mut k| {
        let mut i = [0; 4];
        for (d, &size) in i.iter_mut().zip(&ne) {
            *d = k % size;
            k /= size;
        }
        i
    })
}

/// Iterates the (i1, i2, i3) of all rows of a shape.
fn rows(ne: [usize; 4]) -> impl Iterator<Item = [usize; 3]> {
    indices([ne[1], ne[2], ne[3], 1]).map(|i| [i[0], i[1], i[2]])
}

impl Data {
    fn ne(&self) -> [usize; 4] {
        self.desc.ne
    }

    fn ty(&self) -> Type {
        self.desc.ty
    }

    /// Byte offset of element `i` (for block types, of its block).
    fn at(&self, i: [usize; 4]) -> usize {
        let nb = self.desc.nb;
        i[0] / self.ty().block_size() * nb[0] + i[1] * nb[1] + i[2] * nb[2] + i[3] * nb[3]
    }

    fn raw(&self, i: [usize; 4]) -> &[u8] {
        let o = self.at(i);
        &self.bytes[o..o + self.ty().type_size()]
    }

    /// Element `i` of a non-block type as f32.
    fn get(&self, i: [usize; 4]) -> f32 {
        let b = self.raw(i);
        match self.ty() {
            Type::F32 => f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            Type::F16 => quants::fp16_to_fp32(u16::from_le_bytes([b[0], b[1]])),
            Type::BF16 => quants::bf16_to_fp32(u16::from_le_bytes([b[0], b[1]])),
            Type::I32 => i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f32,
            _ => f32::NAN,
        }
    }

    /// Element `i` of an integer type.
    fn get_int(&self, i: [usize; 4]) -> i64 {
        let b = self.raw(i);
        match self.ty() {
            Type::I32 => i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            Type::I64 => i64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]),
            _ => i64::MIN,
        }
    }

    /// Stores element `i` of a non-block type.
    fn set(&mut self, i: [usize; 4], v: f32) {
        let o = self.at(i);
        let ty = self.ty();
        let b = &mut self.bytes[o..o + ty.type_size()];
        match ty {
            Type::F32 => b.copy_from_slice(&v.to_le_bytes()),
            Type::F16 => b.copy_from_slice(&quants::fp32_to_fp16(v).to_le_bytes()),
            Type::BF16 => b.copy_from_slice(&quants::fp32_to_bf16(v).to_le_bytes()),
            Type::I32 => b.copy_from_slice(&(v as i32).to_le_bytes()),
            _ => {}
        }
    }

    /// Row (i1, i2, i3) as f32 (dequantized for block types).
    fn row(&self, r: [usize; 3]) -> Result<Vec<f32>> {
        let n = self.ne()[0];
        if self.ty().is_quantized() {
            let o = self.at([0, r[0], r[1], r[2]]);
            let len = n / self.ty().block_size() * self.ty().type_size();
            let mut out = vec![0f32; n];
            quants::dequantize_row(self.ty(), &self.bytes[o..o + len], &mut out)?;
            return Ok(out);
        }
        Ok((0..n).map(|i0| self.get([i0, r[0], r[1], r[2]])).collect())
    }

    /// Stores row (i1, i2, i3) from f32 (quantized for block types).
    fn set_row(&mut self, r: [usize; 3], vals: &[f32]) -> Result<()> {
        if self.ty().is_quantized() {
            let o = self.at([0, r[0], r[1], r[2]]);
            let len = vals.len() / self.ty().block_size() * self.ty().type_size();
            return quants::quantize_row(self.ty(), vals, &mut self.bytes[o..o + len]);
        }
        for (i0, &v) in vals.iter().enumerate() {
            self.set([i0, r[0], r[1], r[2]], v);
        }
        Ok(())
    }

    /// All elements in logical order as f32.
    fn flat(&self) -> Result<Vec<f32>> {
        let mut out = Vec::with_capacity(self.desc.n_elements());
        for r in rows(self.ne()) {
            out.extend(self.row(r)?);
        }
        Ok(out)
    }
}

/// Computes one node. Leaves and views are no-ops.
pub fn compute_node(graph: &Graph, id: TensorId) -> Result<()> {
    let node = graph.node(id);
    if node.op == Op::None || node.op.is_view() {
        return Ok(());
    }
    let src: Vec<TensorId> = node.src.to_vec();
    let need = |n: usize| -> Result<()> {
        if src.len() < n {
            return unsupported(graph, id, format!("needs {n} sources"));
        }
        Ok(())
    };
    match &node.op {
        Op::None | Op::View | Op::Reshape | Op::Permute(_) | Op::Transpose => Ok(()),
        Op::Dup | Op::Cont | Op::Cpy => {
            need(1)?;
            let a = load(graph, src[0])?;
            let mut d = load(graph, id)?;
            copy(&a, &mut d)?;
            store(graph, id, &d)
        }
        Op::Add | Op::Mul | Op::Div => {
            need(2)?;
            let (a, b) = (load(graph, src[0])?, load(graph, src[1])?);
            let mut d = load(graph, id)?;
            for i in indices(d.ne()) {
                let bi = [0, 1, 2, 3].map(|k| i[k] % b.ne()[k]);
                let (x, y) = (a.get(i), b.get(bi));
                d.set(
                    i,
                    match node.op {
                        Op::Add => x + y,
                        Op::Mul => x * y,
                        _ => x / y,
                    },
                );
            }
            store(graph, id, &d)
        }
        Op::Scale(s) => map(graph, id, src[0], |x| x * s),
        Op::Unary(u) => {
            let f: fn(f32) -> f32 = match u {
                UnaryOp::Silu => silu,
                UnaryOp::Gelu => gelu,
                UnaryOp::Relu => |x| if x > 0.0 { x } else { 0.0 },
                UnaryOp::Neg => |x| -x,
                UnaryOp::Tanh => f32::tanh,
                UnaryOp::Sigmoid => |x| 1.0 / (1.0 + (-x).exp()),
                UnaryOp::Exp => f32::exp,
                UnaryOp::Softplus => softplus,
            };
            map(graph, id, src[0], f)
        }
        Op::Glu { op, swapped } => {
            need(1)?;
            let f: fn(f32) -> f32 = match op {
                GluOp::Swiglu => silu,
                GluOp::Geglu => gelu,
            };
            let a = load(graph, src[0])?;
            let b = if src.len() > 1 {
                Some(load(graph, src[1])?)
            } else {
                None
            };
            let mut d = load(graph, id)?;
            let n = d.ne()[0];
            for i in indices(d.ne()) {
                let (g, u) = match &b {
                    Some(b) => (a.get(i), b.get(i)),
                    None => {
                        let lo = a.get(i);
                        let hi = a.get([i[0] + n, i[1], i[2], i[3]]);
                        if *swapped {
                            (hi, lo)
                        } else {
                            (lo, hi)
                        }
                    }
                };
                d.set(i, f(g) * u);
            }
            store(graph, id, &d)
        }
        Op::GetRows => {
            need(2)?;
            let (a, idx) = (load(graph, src[0])?, load(graph, src[1])?);
            let mut d = load(graph, id)?;
            for r in rows(d.ne()) {
                let row = idx.get_int([r[0], r[1], r[2], 0]);
                if row < 0 || row as usize >= a.ne()[1] {
                    return unsupported(graph, id, format!("row index {row} out of range"));
                }
                let ar = [row as usize, r[1], r[2]];
                if a.ty() == Type::I32 {
                    for i0 in 0..a.ne()[0] {
                        let v = a.raw([i0, ar[0], ar[1], ar[2]]).to_vec();
                        let o = d.at([i0, r[0], r[1], r[2]]);
                        d.bytes[o..o + 4].copy_from_slice(&v);
                    }
                } else {
                    let v = a.row(ar)?;
                    d.set_row(r, &v)?;
                }
            }
            store(graph, id, &d)
        }
        Op::SetRows => {
            need(3)?;
            let (s, idx) = (load(graph, src[1])?, load(graph, src[2])?);
            let mut d = load(graph, id)?;
            for r in rows(s.ne()) {
                let ii = [r[0], r[1] % idx.ne()[1], r[2] % idx.ne()[2], 0];
                let t = idx.get_int(ii);
                if t < 0 || t as usize >= d.ne()[1] {
                    return unsupported(graph, id, format!("row index {t} out of range"));
                }
                let v = s.row(r)?;
                d.set_row([t as usize, r[1], r[2]], &v)?;
            }
            store(graph, id, &d)
        }
        Op::RmsNorm { eps } => rowwise(graph, id, src[0], |x| {
            let sum: f64 = x.iter().map(|&v| f64::from(v * v)).sum();
            let mean = (sum / x.len() as f64) as f32;
            let scale = 1.0 / (mean + eps).sqrt();
            x.iter().map(|&v| v * scale).collect()
        }),
        Op::Norm { eps } => rowwise(graph, id, src[0], |x| {
            let n = x.len() as f64;
            let mean = (x.iter().map(|&v| f64::from(v)).sum::<f64>() / n) as f32;
            let c: Vec<f32> = x.iter().map(|&v| v - mean).collect();
            let var = (c.iter().map(|&v| f64::from(v * v)).sum::<f64>() / n) as f32;
            let scale = 1.0 / (var + eps).sqrt();
            c.iter().map(|&v| v * scale).collect()
        }),
        Op::L2Norm { eps } => rowwise(graph, id, src[0], |x| {
            let sum: f64 = x.iter().map(|&v| f64::from(v * v)).sum();
            let scale = 1.0 / (sum as f32).sqrt().max(*eps);
            x.iter().map(|&v| v * scale).collect()
        }),
        Op::MulMat => {
            need(2)?;
            let (a, b) = (load(graph, src[0])?, load(graph, src[1])?);
            let mut d = load(graph, id)?;
            let (r2, r3) = (b.ne()[2] / a.ne()[2], b.ne()[3] / a.ne()[3]);
            for i3 in 0..d.ne()[3] {
                for i2 in 0..d.ne()[2] {
                    let arows: Vec<Vec<f32>> = (0..a.ne()[1])
                        .map(|i1| a.row([i1, i2 / r2, i3 / r3]))
                        .collect::<Result<_>>()?;
                    for j in 0..d.ne()[1] {
                        let y = b.row([j, i2, i3])?;
                        for (i, x) in arows.iter().enumerate() {
                            let s: f64 = x
                                .iter()
                                .zip(&y)
                                .map(|(&p, &q)| f64::from(p) * f64::from(q))
                                .sum();
                            d.set([i, j, i2, i3], s as f32);
                        }
                    }
                }
            }
            store(graph, id, &d)
        }
        Op::Rope(p) => {
            need(2)?;
            let (a, pos) = (load(graph, src[0])?, load(graph, src[1])?);
            let ff = match src.get(2) {
                Some(&f) => Some(load(graph, f)?.row([0, 0, 0])?),
                None => None,
            };
            let mut d = load(graph, id)?;
            for r in rows(d.ne()) {
                let x = a.row(r)?;
                let p_i = pos.get_int([r[1], 0, 0, 0]) as f32;
                let y = rope_row(p, p_i, ff.as_deref(), &x);
                d.set_row(r, &y)?;
            }
            store(graph, id, &d)
        }
        Op::SoftMax { scale, max_bias } => {
            need(1)?;
            let a = load(graph, src[0])?;
            let m = match src.get(1) {
                Some(&m) => Some(load(graph, m)?),
                None => None,
            };
            let sinks = oai::sinks(graph, &src, 2)?;
            let mut d = load(graph, id)?;
            let n_head = a.ne()[2];
            for r in rows(d.ne()) {
                let x = a.row(r)?;
                let slope = alibi_slope(*max_bias, n_head, r[1]);
                let mut w: Vec<f32> = x.iter().map(|&v| v * scale).collect();
                if let Some(m) = &m {
                    let mr = m.row([r[0], r[1] % m.ne()[2], r[2] % m.ne()[3]])?;
                    for (wv, mv) in w.iter_mut().zip(mr) {
                        *wv += slope * mv;
                    }
                }
                let sink = sinks.as_ref().map(|k| k[r[1]]);
                let max = w
                    .iter()
                    .chain(&sink)
                    .fold(f32::NEG_INFINITY, |a, &b| a.max(b));
                let e: Vec<f64> = w.iter().map(|&v| f64::from(v - max).exp()).collect();
                let sum: f64 =
                    e.iter().sum::<f64>() + sink.map_or(0.0, |k| f64::from(k - max).exp());
                let y: Vec<f32> = e.iter().map(|&v| (v / sum) as f32).collect();
                d.set_row(r, &y)?;
            }
            store(graph, id, &d)
        }
        Op::Argmax => {
            need(1)?;
            let a = load(graph, src[0])?;
            let mut d = load(graph, id)?;
            for (k, r) in rows(a.ne()).enumerate() {
                let x = a.row(r)?;
                let mut best = 0;
                for (i, &v) in x.iter().enumerate() {
                    if v > x[best] {
                        best = i;
                    }
                }
                let o = d.at([k, 0, 0, 0]);
                d.bytes[o..o + 4].copy_from_slice(&(best as i32).to_le_bytes());
            }
            store(graph, id, &d)
        }
        Op::MulMatId => {
            need(3)?;
            routing::mul_mat_id(graph, id, &src)
        }
        Op::Argsort(order) => {
            need(1)?;
            routing::argsort(graph, id, src[0], *order)
        }
        Op::SumRows => {
            need(1)?;
            routing::sum_rows(graph, id, src[0])
        }
        Op::Clamp { min, max } => map(graph, id, src[0], |x| x.clamp(*min, *max)),
        Op::Concat { dim } => {
            need(2)?;
            ssm::concat(graph, id, &src, *dim)
        }
        Op::SsmConv => {
            need(2)?;
            ssm::ssm_conv(graph, id, &src)
        }
        Op::SsmScan => {
            need(7)?;
            ssm::ssm_scan(graph, id, &src)
        }
        Op::RwkvWkv6 => {
            need(6)?;
            rwkv::wkv6(graph, id, &src)
        }
        Op::RwkvWkv7 => {
            need(7)?;
            rwkv::wkv7(graph, id, &src)
        }
        Op::GatedDeltaNet => {
            need(6)?;
            delta_net::gated_delta_net(graph, id, &src)
        }
        Op::AddId => {
            need(3)?;
            oai::add_id(graph, id, &src)
        }
        Op::SwigluOai { alpha, limit } => {
            need(2)?;
            oai::swiglu_oai(graph, id, &src, *alpha, *limit)
        }
        Op::FlashAttnExt {
            scale,
            max_bias,
            softcap,
        } => {
            need(3)?;
            let (q, k, v) = (
                load(graph, src[0])?,
                load(graph, src[1])?,
                load(graph, src[2])?,
            );
            let m = match src.get(3) {
                Some(&m) => Some(load(graph, m)?),
                None => None,
            };
            let sinks = oai::sinks(graph, &src, 4)?;
            let mut d = load(graph, id)?;
            let (n_kv, n_head) = (k.ne()[1], q.ne()[2]);
            let (rk2, rk3) = (q.ne()[2] / k.ne()[2], q.ne()[3] / k.ne()[3]);
            for iq3 in 0..q.ne()[3] {
                for ih in 0..n_head {
                    for iq1 in 0..q.ne()[1] {
                        let qr = q.row([iq1, ih, iq3])?;
                        let (k2, k3) = (ih / rk2, iq3 / rk3);
                        let slope = alibi_slope(*max_bias, n_head, ih);
                        let mr = match &m {
                            Some(m) => Some(m.row([iq1, ih % m.ne()[2], iq3 % m.ne()[3]])?),
                            None => None,
                        };
                        let mut s = Vec::with_capacity(n_kv);
                        for ic in 0..n_kv {
                            let kr = k.row([ic, k2, k3])?;
                            let dot: f64 = qr
                                .iter()
                                .zip(&kr)
                                .map(|(&a, &b)| f64::from(a) * f64::from(b))
                                .sum();
                            let mut x = dot * f64::from(*scale);
                            if *softcap != 0.0 {
                                x = f64::from(*softcap) * (x / f64::from(*softcap)).tanh();
                            }
                            if let Some(mr) = &mr {
                                x += f64::from(slope * mr[ic]);
                            }
                            s.push(x);
                        }
                        let sink = sinks.as_ref().map(|k| f64::from(k[ih]));
                        let max = s
                            .iter()
                            .chain(&sink)
                            .fold(f64::NEG_INFINITY, |a, &b| a.max(b));
                        let mut out = vec![0f64; v.ne()[0]];
                        let mut sum = sink.map_or(0.0, |k| (k - max).exp());
                        if max > f64::NEG_INFINITY {
                            for (ic, &x) in s.iter().enumerate() {
                                let p = (x - max).exp();
                                sum += p;
                                for (o, vv) in out.iter_mut().zip(v.row([ic, k2, k3])?) {
                                    *o += p * f64::from(vv);
                                }
                            }
                        }
                        let y: Vec<f32> = out
                            .iter()
                            .map(|&o| if sum > 0.0 { (o / sum) as f32 } else { 0.0 })
                            .collect();
                        d.set_row([ih, iq1, iq3], &y)?;
                    }
                }
            }
            store(graph, id, &d)
        }
    }
}

/// Element-wise map of src into the node.
fn map(graph: &Graph, id: TensorId, src: TensorId, f: impl Fn(f32) -> f32) -> Result<()> {
    let a = load(graph, src)?;
    let mut d = load(graph, id)?;
    for i in indices(d.ne()) {
        d.set(i, f(a.get(i)));
    }
    store(graph, id, &d)
}

/// Row-wise map of src into the node.
fn rowwise(
    graph: &Graph,
    id: TensorId,
    src: TensorId,
    f: impl Fn(&[f32]) -> Vec<f32>,
) -> Result<()> {
    let a = load(graph, src)?;
    let mut d = load(graph, id)?;
    for r in rows(d.ne()) {
        let y = f(&a.row(r)?);
        d.set_row(r, &y)?;
    }
    store(graph, id, &d)
}

/// Copies all elements of `a` into `d` in logical order, converting.
fn copy(a: &Data, d: &mut Data) -> Result<()> {
    if a.ty() == d.ty() && a.desc.is_contiguous() && d.desc.is_contiguous() {
        // Same type, both dense: the same bytes (ggml's memcpy path).
        let n = d.bytes.len().min(a.bytes.len());
        d.bytes[..n].copy_from_slice(&a.bytes[..n]);
        return Ok(());
    }
    if a.ty() == d.ty() && !a.ty().is_quantized() {
        let es = a.ty().type_size();
        let src: Vec<[usize; 4]> = indices(a.ne()).collect();
        for (si, di) in src.into_iter().zip(indices(d.ne())) {
            let v = a.raw(si).to_vec();
            let o = d.at(di);
            d.bytes[o..o + es].copy_from_slice(&v);
        }
        return Ok(());
    }
    if a.ty() == d.ty() && a.ne()[0] == d.ne()[0] {
        let rb = a.ne()[0] / a.ty().block_size() * a.ty().type_size();
        let src: Vec<[usize; 3]> = rows(a.ne()).collect();
        for (sr, dr) in src.into_iter().zip(rows(d.ne())) {
            let so = a.at([0, sr[0], sr[1], sr[2]]);
            let o = d.at([0, dr[0], dr[1], dr[2]]);
            let v = a.bytes[so..so + rb].to_vec();
            d.bytes[o..o + rb].copy_from_slice(&v);
        }
        return Ok(());
    }
    let flat = a.flat()?;
    let n0 = d.ne()[0];
    for (k, r) in rows(d.ne()).enumerate() {
        d.set_row(r, &flat[k * n0..(k + 1) * n0])?;
    }
    Ok(())
}

/// x * sigmoid(x).
/// ggml's softplus: `x` above 20, else `ln(1 + e^x)`.
fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        (1.0 + x.exp()).ln()
    }
}

fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// GELU as ggml's CPU backend defines it: the tanh approximation evaluated
/// at the f16 rounding of x and rounded to f16, 0 below -10, x above 10.
fn gelu(x: f32) -> f32 {
    const GELU_COEF_A: f32 = 0.044715;
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    if x <= -10.0 {
        return 0.0;
    }
    if x >= 10.0 {
        return x;
    }
    let h = quants::fp16_to_fp32(quants::fp32_to_fp16(x));
    let g = 0.5 * h * (1.0 + (SQRT_2_OVER_PI * h * (1.0 + GELU_COEF_A * h * h)).tanh());
    quants::fp16_to_fp32(quants::fp32_to_fp16(g))
}

/// ALiBi slope of head `h` (ggml: powers of m0 for the first 2^floor(log2
/// n_head) heads, odd powers of m1 after).
fn alibi_slope(max_bias: f32, n_head: usize, h: usize) -> f32 {
    if max_bias <= 0.0 {
        return 1.0;
    }
    let mut n_log2 = 1usize;
    while n_log2 * 2 <= n_head {
        n_log2 *= 2;
    }
    let m0 = 2f32.powf(-max_bias / n_log2 as f32);
    let m1 = 2f32.powf(-(max_bias / 2.0) / n_log2 as f32);
    if h < n_log2 {
        m0.powf((h + 1) as f32)
    } else {
        m1.powf((2 * (h - n_log2) + 1) as f32)
    }
}

/// Rotates one row at position `pos` (ggml's rope with YaRN; the angle of
/// pair i is `pos * base^(-2i/n_dims)` advanced by repeated f32
/// multiplication, as ggml does).
fn rope_row(p: &RopeParams, pos: f32, ff: Option<&[f32]>, x: &[f32]) -> Vec<f32> {
    let nd = p.n_dims;
    let corr = |beta: f32| {
        nd as f32 * (p.n_ctx_orig as f32 / (beta * 2.0 * std::f32::consts::PI)).ln()
            / (2.0 * p.freq_base.ln())
    };
    let low = corr(p.beta_fast).floor().max(0.0);
    let high = corr(p.beta_slow).ceil().min(nd as f32 - 1.0);
    let theta_scale = p.freq_base.powf(-2.0 / nd as f32);
    let mut y = x.to_vec();
    let mut theta_base = pos;
    for i in 0..nd / 2 {
        let theta_extrap = theta_base / ff.map_or(1.0, |f| f[i]);
        let theta_interp = p.freq_scale * theta_extrap;
        let (mut theta, mut mscale) = (theta_interp, p.attn_factor);
        if p.ext_factor != 0.0 {
            let ramp = 1.0 - ((i as f32 - low) / (high - low).max(0.001)).clamp(0.0, 1.0);
            let mix = ramp * p.ext_factor;
            theta = theta_interp * (1.0 - mix) + theta_extrap * mix;
            mscale *= 1.0 + 0.1 * (1.0 / p.freq_scale).ln();
        }
        let (c, s) = (theta.cos() * mscale, theta.sin() * mscale);
        let (a, b) = match p.mode {
            RopeMode::Normal => (2 * i, 2 * i + 1),
            RopeMode::Neox => (i, i + nd / 2),
        };
        y[a] = x[a] * c - x[b] * s;
        y[b] = x[a] * s + x[b] * c;
        theta_base *= theta_scale;
    }
    y
}

/// All elements of a tensor in logical order (dim 0 fastest) as f32:
/// dequantized for block types, converted for F16/BF16/I32/I64.
pub fn read_f32(graph: &Graph, id: TensorId) -> Result<Vec<f32>> {
    let d = load(graph, id)?;
    if d.ty() == Type::I64 {
        return Ok(indices(d.ne()).map(|i| d.get_int(i) as f32).collect());
    }
    d.flat()
}
