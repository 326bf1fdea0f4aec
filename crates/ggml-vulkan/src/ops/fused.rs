//! Fusion: runs of consecutive nodes of a graph recorded as one dispatch.
//! The graph stays as the model built it; [`plan`] recognises, in the
//! order the nodes are computed, the matrix x vector products (few
//! columns) that share their b, with
//!
//! * before them, the RMS_NORM of b's source and the MUL by a weight
//!   vector that make b (the norm is then computed inside the products'
//!   workgroups and b is never written),
//! * up to three of them in one dispatch (the Q, K, V projections of one
//!   normalized input; the gate and up projections of an FFN),
//! * after them, the ADD of a bias or residual to a single product, or the
//!   gated unit (SWIGLU, GEGLU) of two products.
//!
//! A run is fused only when nothing else reads what it leaves unwritten
//! (the norm, the MUL's result, the products' results under an ADD or a
//! gated unit), none of those is a graph output, and the types and shapes
//! fit `mul_mat_vec_fused.comp`. Each kind can be switched off
//! ([`crate::Fusions`], `GGML_VK_DISABLE_FUSION`).

use ggml_core::{Flags, GluOp, Graph, Op, TensorDesc, TensorId, Type};

use super::mul_mat::MMV_MAX_COLS;
use super::{fits, supports, type_name, unsupported};
use crate::backend::{Bound, Span, VulkanBackend};
use crate::error::{Error, Result};
use crate::logical::DeviceShared;
use crate::options::Fusions;
use crate::pipeline::N_BINDINGS;

/// Workgroup size of the fused products (the norm sums in the order of
/// `norm.comp`, whose workgroups are this size).
const WG: u32 = 128;
/// Rows of one product per workgroup (`ROWS` in the shader).
const ROWS: usize = 4;
/// Most products in one dispatch.
const MAX_MATS: usize = 3;

/// What is recorded for a graph: nodes one by one, or fused.
pub(crate) enum Step {
    Node(TensorId),
    Mmv(FusedMmv),
    /// RMS_NORM and the MUL by a weight after it (`rms_norm_mul_f32`).
    NormMul(TensorId, TensorId),
}

/// The steps of a graph's nodes, and how many nodes were fused.
pub(crate) struct Plan {
    pub(crate) steps: Vec<Step>,
}

/// A fused run of matrix x vector products (see the module docs).
pub(crate) struct FusedMmv {
    /// Every node of the run, in graph order.
    nodes: Vec<TensorId>,
    /// RMS_NORM's source, its epsilon and the MUL's weight vector.
    norm: Option<(TensorId, f32, TensorId)>,
    /// The MUL's result, when it is also read elsewhere (or is an output)
    /// and so is written too.
    norm_out: Option<TensorId>,
    /// The products (MUL_MAT nodes), in graph order.
    mats: Vec<TensorId>,
    epi: Epilogue,
}

enum Epilogue {
    None,
    /// ADD node and its other source.
    Add(TensorId, TensorId),
    /// The gated-unit node, the indices of gate and up in `mats`, GEGLU.
    Glu(TensorId, [usize; 2], bool),
}

/// Checks every computing node of `nodes` and groups them into steps.
pub(crate) fn plan(
    s: &DeviceShared,
    graph: &Graph,
    nodes: &[TensorId],
    off: Fusions,
) -> ggml_core::Result<Plan> {
    let comp: Vec<TensorId> = nodes
        .iter()
        .copied()
        .filter(|&id| {
            let op = &graph.node(id).op;
            *op != Op::None && !op.is_view()
        })
        .collect();
    for &id in &comp {
        if !supports(s, graph, id) {
            return Err(unsupported(graph, id, s));
        }
    }
    let mut steps = Vec::with_capacity(comp.len());
    if off.all_off() {
        steps.extend(comp.iter().map(|&id| Step::Node(id)));
        return Ok(Plan { steps });
    }
    let mut readers = vec![0u32; graph.len()];
    for n in graph.nodes() {
        for &x in &n.src {
            readers[x.index()] += 1;
        }
        if let Some((base, _)) = n.view {
            readers[base.index()] += 1;
        }
    }
    let m = Matcher {
        s,
        graph,
        readers,
        off,
    };
    let mut i = 0;
    while i < comp.len() {
        if let Some((f, used)) = m.mmv(&comp[i..]) {
            steps.push(Step::Mmv(f));
            i += used;
        } else if let Some((norm, mul)) = m.norm_mul(&comp[i..]) {
            steps.push(Step::NormMul(norm, mul));
            i += 2;
        } else {
            steps.push(Step::Node(comp[i]));
            i += 1;
        }
    }
    Ok(Plan { steps })
}

struct Matcher<'a> {
    s: &'a DeviceShared,
    graph: &'a Graph,
    readers: Vec<u32>,
    off: Fusions,
}

impl Matcher<'_> {
    /// True when `id` is read by exactly one node and is not an output.
    fn private(&self, id: TensorId) -> bool {
        self.readers[id.index()] == 1 && !self.graph.node(id).flags.contains(Flags::OUTPUT)
    }

    fn desc(&self, id: TensorId) -> &TensorDesc {
        self.graph.desc(id)
    }

    /// The fused run that starts `c` (computing nodes in order), and how
    /// many nodes it takes.
    fn mmv(&self, c: &[TensorId]) -> Option<(FusedMmv, usize)> {
        let g = self.graph;
        let mut j = 0;
        let mut norm = None;
        if !self.off.rms_norm && c.len() >= 3 {
            if let (Op::RmsNorm { eps }, Op::Mul) = (&g.node(c[0]).op, &g.node(c[1]).op) {
                let mul = g.node(c[1]);
                if mul.src[0] == c[0] && mul.src[1] != c[0] && self.private(c[0]) {
                    norm = Some((g.node(c[0]).src[0], *eps, mul.src[1]));
                    j = 2;
                }
            }
        }
        let b = match norm {
            Some(_) => c[1],
            None => {
                let n = g.node(c[0]);
                if n.op != Op::MulMat {
                    return None;
                }
                n.src[1]
            }
        };
        let max = if self.off.multi { 1 } else { MAX_MATS };
        let mut mats: Vec<TensorId> = Vec::new();
        while j < c.len() && mats.len() < max {
            let n = g.node(c[j]);
            if n.op != Op::MulMat || n.src[1] != b || !self.product_fits(c[j]) {
                break;
            }
            if let Some(&first) = mats.first() {
                let (a0, a1) = (self.desc(g.node(first).src[0]), self.desc(n.src[0]));
                if a0.ty != a1.ty || a0.ne[0] != a1.ne[0] {
                    break;
                }
            }
            mats.push(c[j]);
            j += 1;
        }
        let first = *mats.first()?;
        let mut norm_out = None;
        if let Some((x, _, w)) = norm {
            if !self.norm_fits(x, w, b, first) {
                return None;
            }
            // The MUL's result is written too when anything else reads it.
            let all = self.readers[b.index()] as usize == mats.len()
                && !g.node(b).flags.contains(Flags::OUTPUT);
            if !all {
                norm_out = Some(b);
            }
        }
        let mut epi = Epilogue::None;
        if let Some(&next) = c.get(j) {
            let n = g.node(next);
            match n.op {
                Op::Glu { op, swapped: false }
                    if !self.off.glu && mats.len() == 2 && n.src.len() == 2 =>
                {
                    let at = |t: TensorId| mats.iter().position(|&m| m == t);
                    if let (Some(gi), Some(ui)) = (at(n.src[0]), at(n.src[1])) {
                        let d = &n.desc;
                        if gi != ui
                            && mats.iter().all(|&m| self.private(m))
                            && matches!(op, GluOp::Swiglu | GluOp::Geglu)
                            && d.ty == Type::F32
                            && d.nb[0] == 4
                            && d.ne[2] == 1
                            && d.ne[3] == 1
                            && fits(self.s, d)
                        {
                            epi = Epilogue::Glu(next, [gi, ui], op == GluOp::Geglu);
                        }
                    }
                }
                Op::Add if !self.off.add && mats.len() == 1 && n.src.len() == 2 => {
                    let other = if n.src[0] == first {
                        Some(n.src[1])
                    } else if n.src[1] == first {
                        Some(n.src[0])
                    } else {
                        None
                    };
                    if let Some(cid) = other.filter(|&o| o != first) {
                        if self.private(first) && self.add_fits(first, cid, next) {
                            epi = Epilogue::Add(next, cid);
                        }
                    }
                }
                _ => {}
            }
        }
        if !matches!(epi, Epilogue::None) {
            j += 1;
        }
        if norm.is_none() && matches!(epi, Epilogue::None) && mats.len() == 1 {
            return None;
        }
        let nodes = c[..j].to_vec();
        Some((
            FusedMmv {
                nodes,
                norm,
                norm_out,
                mats,
                epi,
            },
            j,
        ))
    }

    /// RMS_NORM then MUL of its result by a weight that MUL broadcasts, in
    /// f32, when nothing else reads the norm.
    fn norm_mul(&self, c: &[TensorId]) -> Option<(TensorId, TensorId)> {
        if self.off.rms_norm || c.len() < 2 {
            return None;
        }
        let g = self.graph;
        let (n, m) = (g.node(c[0]), g.node(c[1]));
        if !matches!(n.op, Op::RmsNorm { .. })
            || m.op != Op::Mul
            || m.src[0] != c[0]
            || m.src[1] == c[0]
            || !self.private(c[0])
        {
            return None;
        }
        let (x, w) = (self.desc(n.src[0]), self.desc(m.src[1]));
        let ok = x.ty == Type::F32
            && n.desc.ty == Type::F32
            && m.desc.ty == Type::F32
            && w.ty == Type::F32;
        ok.then_some((c[0], c[1]))
    }

    /// True when MUL_MAT node `id` fits the fused kernel: a matrix of a
    /// type with a variant, in one binding; b f32, dense rows, at most
    /// [`MMV_MAX_COLS`] columns; d f32; b fits shared memory.
    fn product_fits(&self, id: TensorId) -> bool {
        let n = self.graph.node(id);
        let (a, b, d) = (self.desc(n.src[0]), self.desc(n.src[1]), &n.desc);
        let Some(an) = type_name(a.ty) else {
            return false;
        };
        let flat = |t: &TensorDesc| t.ne[2] == 1 && t.ne[3] == 1;
        let k = a.ne[0];
        flat(a)
            && flat(b)
            && flat(d)
            && a.nb[0] == a.ty.type_size()
            && k % a.ty.block_size() == 0
            && k > 0
            && a.ne[1] > 0
            && (1..=MMV_MAX_COLS).contains(&b.ne[1])
            && b.ty == Type::F32
            && b.nb[0] == 4
            && d.ty == Type::F32
            && d.nb[0] == 4
            && fits(self.s, a)
            && fits(self.s, b)
            && fits(self.s, d)
            && shared_bytes(k) <= self.s.limits.max_shared
            && shaders::get(&shader_name(self.s, an)).is_some()
    }

    /// True when the norm's source `x` and weight `w` fit: f32, `x` of b's
    /// shape with dense rows, `w` one dense row of K.
    fn norm_fits(&self, x: TensorId, w: TensorId, b: TensorId, first: TensorId) -> bool {
        let (xd, wd, bd) = (self.desc(x), self.desc(w), self.desc(b));
        let k = self.desc(self.graph.node(first).src[0]).ne[0];
        xd.ty == Type::F32
            && xd.nb[0] == 4
            && xd.ne == bd.ne
            && bd.ty == Type::F32
            && bd.nb[0] == 4
            && fits(self.s, bd)
            && xd.ne[0] == k
            && fits(self.s, xd)
            && wd.ty == Type::F32
            && wd.nb[0] == 4
            && wd.ne == [k, 1, 1, 1]
            && fits(self.s, wd)
    }

    /// True when the ADD `add` of product `mm` and `c` fits: its result
    /// of the product's shape, f32 with dense rows; `c` f32 of the same
    /// shape or one column broadcast (a bias).
    fn add_fits(&self, mm: TensorId, c: TensorId, add: TensorId) -> bool {
        let (md, cd, ad) = (self.desc(mm), self.desc(c), self.desc(add));
        ad.ne == md.ne
            && ad.ty == Type::F32
            && ad.nb[0] == 4
            && fits(self.s, ad)
            && cd.ty == Type::F32
            && cd.ne[0] == md.ne[0]
            && (cd.ne[1] == md.ne[1] || cd.ne[1] == 1)
            && cd.ne[2] == 1
            && cd.ne[3] == 1
            && cd.nb[0] % 4 == 0
            && cd.nb[1] % 4 == 0
            && fits(self.s, cd)
    }
}

/// The shader of weights named `an` (see `shaders::variants`): with
/// integer dot products where the device has them and the type has the
/// variant, with subgroup reductions where the device has them.
fn shader_name(s: &DeviceShared, an: &str) -> String {
    let idot = s.limits.integer_dot && shaders::variants::INT_DOT_TYPES.contains(&an);
    // Subgroup reductions when the workgroup is whole subgroups.
    let sg = s.limits.subgroup_arith
        && s.limits.subgroup_size.is_power_of_two()
        && (4..=WG).contains(&s.limits.subgroup_size);
    format!(
        "mul_mat_vec_fused_{an}_{}{}{}",
        shaders::variants::fused_rounding(an),
        if idot { "_idot" } else { "" },
        if sg { "_sg" } else { "" }
    )
}

/// Floats of b staged in shared memory for rows of `k`.
fn staged(k: usize) -> usize {
    k.next_multiple_of(256)
}

/// Bytes of shared memory of the fused kernel for rows of `k`.
fn shared_bytes(k: usize) -> usize {
    let bk = staged(k);
    // b, its block sums, the reductions; packed b and its block scales
    // with integer dot products.
    4 * (bk + bk / 32 + WG as usize * (1 + ROWS)) + bk + 4 * (bk / 32)
}

fn u32_of(v: usize, what: &str) -> Result<u32> {
    u32::try_from(v).map_err(|_| Error::Other(format!("{what}: {v} exceeds 32 bits")))
}

/// The bytes of tensor `id`: its buffer (by address) and range.
fn bytes_of(graph: &Graph, id: TensorId) -> Option<(usize, usize, usize)> {
    let p = graph.placement(id)?;
    let key = std::sync::Arc::as_ptr(&p.buffer) as *const () as usize;
    Some((key, p.offset, p.offset + graph.desc(id).nbytes()))
}

/// True when the byte ranges `a` and `b` intersect (ranges not placed do
/// not: their binding fails later with a clear error).
fn hit(a: Option<(usize, usize, usize)>, b: Option<(usize, usize, usize)>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a.0 == b.0 && a.1 < b.2 && b.1 < a.2,
        _ => false,
    }
}

/// True when a result of run `f` may share memory with what the run
/// reads (the allocator may give a result the memory of a source whose
/// last reader came earlier in the graph): every workgroup reads all of b,
/// so such a run is recorded node by node. A result in the exact place of
/// the addend is fine (each element is read, then written, by one
/// invocation).
fn overlaps(graph: &Graph, f: &FusedMmv) -> bool {
    let first = graph.node(f.mats[0]);
    let mut reads = match f.norm {
        Some((x, _, w)) => vec![x, w],
        None => vec![first.src[1]],
    };
    reads.extend(f.mats.iter().map(|&m| graph.node(m).src[0]));
    let (mut outs, addend) = match f.epi {
        Epilogue::None => (f.mats.clone(), None),
        Epilogue::Add(n, c) => (vec![n], Some(c)),
        Epilogue::Glu(n, ..) => (vec![n], None),
    };
    outs.extend(f.norm_out);
    let span = |id| bytes_of(graph, id);
    outs.iter().any(|&o| {
        reads.iter().any(|&r| hit(span(o), span(r)))
            || addend.is_some_and(|c| span(c) != span(o) && hit(span(o), span(c)))
    }) || (outs.len() > 1
        && outs
            .iter()
            .enumerate()
            .any(|(i, &a)| outs[i + 1..].iter().any(|&b| hit(span(a), span(b)))))
}

/// Records fused run `f` of `graph`.
pub(crate) fn record(be: &mut VulkanBackend, graph: &Graph, f: &FusedMmv) -> Result<()> {
    if overlaps(graph, f) {
        for &id in &f.nodes {
            super::record_node(be, graph, id).map_err(|e| Error::Other(e.to_string()))?;
        }
        return Ok(());
    }
    let mats: Vec<TensorId> = match f.epi {
        Epilogue::Glu(_, [gi, ui], _) => vec![f.mats[gi], f.mats[ui]],
        _ => f.mats.clone(),
    };
    if record_group(be, graph, f, &mats, true)? {
        return Ok(());
    }
    // The weights cannot share one binding: one dispatch per product,
    // each with the norm; the gated unit then runs on its own.
    for &m in &mats {
        if !record_group(be, graph, f, &[m], false)? {
            return Err(Error::Other(format!(
                "{}: the weights cannot be bound",
                graph.desc(m).name
            )));
        }
    }
    match f.epi {
        Epilogue::None => Ok(()),
        Epilogue::Glu(node, ..) | Epilogue::Add(node, _) => {
            super::record_node(be, graph, node).map_err(|e| Error::Other(e.to_string()))
        }
    }
}

/// Records products `mats` of run `f` in one dispatch, with the run's
/// epilogue when `epi`; false when their weights cannot share a binding.
fn record_group(
    be: &mut VulkanBackend,
    graph: &Graph,
    f: &FusedMmv,
    mats: &[TensorId],
    epi: bool,
) -> Result<bool> {
    let a_ids: Vec<TensorId> = mats.iter().map(|&m| graph.node(m).src[0]).collect();
    let a = graph.desc(a_ids[0]).clone();
    // Q4_0 and Q8_0 rows are addressed in 16-bit words (see the shader).
    let unit = if matches!(a.ty, Type::Q4_0 | Type::Q8_0) {
        2
    } else {
        a.ty.type_size()
    };
    let Some((wa, offs)) = be.bind_window(graph, &a_ids, unit)? else {
        return Ok(false);
    };
    let first = graph.node(mats[0]);
    let b_id = match f.norm {
        Some((x, _, _)) => x,
        None => first.src[1],
    };
    let bd = graph.desc(b_id);
    let k = a.ne[0];
    let n_cols = bd.ne[1];
    let bb = be.bind(graph, b_id, 4)?;
    let bw = match f.norm {
        Some((_, _, w)) => Some(be.bind(graph, w, 4)?),
        None => None,
    };
    let epi = if epi { &f.epi } else { &Epilogue::None };
    let (mode, glu) = match epi {
        Epilogue::None => (0u32, false),
        Epilogue::Add(..) => (1, false),
        Epilogue::Glu(_, _, geglu) => (if *geglu { 3 } else { 2 }, true),
    };
    // Where the results go: the products', the ADD's or the gated unit's.
    let outs: Vec<TensorId> = match epi {
        Epilogue::None => mats.to_vec(),
        Epilogue::Add(node, _) | Epilogue::Glu(node, ..) => vec![*node],
    };
    let mut bd_out: Vec<Bound> = Vec::with_capacity(outs.len());
    for &o in &outs {
        bd_out.push(be.bind(graph, o, 4)?);
    }
    let bc = match epi {
        Epilogue::Add(_, c) => Some((be.bind(graph, *c, 4)?, graph.desc(*c).clone())),
        _ => None,
    };
    let bn = match f.norm_out {
        Some(n) => Some((be.bind(graph, n, 4)?, graph.desc(n).clone())),
        None => None,
    };
    let mut pc = [0u32; 30];
    if let Some((n, nd)) = &bn {
        pc[27] = 1;
        pc[28] = n.off;
        pc[29] = u32_of(nd.nb[1] / 4, &nd.name)?;
    }
    pc[0] = u32_of(k, &a.name)?;
    pc[1] = u32_of(n_cols, &bd.name)?;
    pc[2] = mats.len() as u32;
    pc[3] = mode;
    if let Some((_, eps, _)) = f.norm {
        pc[4] = 1;
        pc[5] = eps.to_bits();
    }
    pc[6] = bb.off;
    pc[7] = u32_of(bd.nb[1] / 4, &bd.name)?;
    pc[8] = bw.as_ref().map_or(0, |w| w.off);
    if let Some((c, cd)) = &bc {
        pc[9] = c.off;
        pc[10] = u32_of(cd.nb[0] / 4, &cd.name)?;
        pc[11] = if cd.ne[1] == 1 {
            0
        } else {
            u32_of(cd.nb[1] / 4, &cd.name)?
        };
    }
    let mut groups = 0u64;
    for (i, &m) in mats.iter().enumerate() {
        let ad = graph.desc(a_ids[i]);
        let rows = ad.ne[1];
        pc[12 + i] = u32_of(rows, &ad.name)?;
        pc[15 + i] = offs[i];
        pc[18 + i] = u32_of(ad.nb[1] / unit, &ad.name)?;
        let per = if glu { ROWS / 2 } else { ROWS };
        if !glu || i == 0 {
            groups += rows.div_ceil(per) as u64;
        }
        let (o, od) = if glu || !matches!(epi, Epilogue::None) {
            (&bd_out[0], graph.desc(outs[0]))
        } else {
            (&bd_out[i], graph.desc(m))
        };
        pc[21 + i] = o.off;
        pc[24 + i] = u32_of(od.nb[1] / 4, &od.name)?;
    }
    groups *= n_cols as u64;
    let d0 = &bd_out[0];
    let c_slot = bc.as_ref().map_or(d0, |c| &c.0);
    let slots: [&Bound; N_BINDINGS as usize] = [
        &wa,
        &bb,
        bw.as_ref().unwrap_or(&bb),
        d0,
        bd_out.get(1).unwrap_or(d0),
        bd_out.get(2).unwrap_or(d0),
        c_slot,
        bn.as_ref().map_or(d0, |n| &n.0),
    ];
    let mut reads: Vec<Span> = vec![wa.span(), bb.span()];
    reads.extend(bw.as_ref().map(|w| w.span()));
    reads.extend(bc.as_ref().map(|c| c.0.span()));
    let mut writes: Vec<Span> = bd_out.iter().map(|b| b.span()).collect();
    writes.extend(bn.as_ref().map(|n| n.0.span()));
    let an = type_name(a.ty).expect("checked by the plan");
    let spec = [WG, u32_of(staged(k), &a.name)?];
    let name = shader_name(be.shared(), an);
    be.dispatch_slots(&name, &spec, slots, &reads, &writes, &pc, groups)?;
    Ok(true)
}

/// Records RMS_NORM node `norm` and the MUL node `mul` after it as one
/// dispatch: one workgroup per row, the weight read as MUL reads it.
pub(crate) fn record_norm_mul(
    be: &mut VulkanBackend,
    graph: &Graph,
    norm: TensorId,
    mul: TensorId,
) -> Result<()> {
    let Op::RmsNorm { eps } = graph.node(norm).op else {
        return Err(Error::Other(format!(
            "{}: not an RMS_NORM",
            graph.desc(norm).name
        )));
    };
    let x_id = graph.node(norm).src[0];
    let w_id = graph.node(mul).src[1];
    // The result in the memory of the source, but not in its place (the
    // source's last reader being the norm): node by node.
    let (sx, sd, sw) = (
        bytes_of(graph, x_id),
        bytes_of(graph, mul),
        bytes_of(graph, w_id),
    );
    if (sx != sd && hit(sx, sd)) || hit(sw, sd) {
        super::record_node(be, graph, norm).map_err(|e| Error::Other(e.to_string()))?;
        return super::record_node(be, graph, mul).map_err(|e| Error::Other(e.to_string()));
    }
    let (x, w, d) = (graph.desc(x_id), graph.desc(w_id), graph.desc(mul));
    let bx = be.bind(graph, x_id, 4)?;
    let bw = be.bind(graph, w_id, 4)?;
    let bd = be.bind(graph, mul, 4)?;
    let rows = d.n_rows() as u64;
    let pc = super::Pc4d::new(rows)?
        .tensor(0, &bx, x)
        .tensor(1, &bw, w)
        .tensor(2, &bd, d)
        .params(eps, 0.0);
    be.dispatch(
        "rms_norm_mul_f32",
        [Some(&bx), Some(&bw), None],
        &bd,
        &pc.0,
        rows,
    )
}
