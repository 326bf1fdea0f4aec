//! Graph execution: per node, resolve memory, check what the kernels rely
//! on, protect sources that share memory with the result, and dispatch.

use std::borrow::Cow;
use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicU8, Ordering};

use ggml_core::backend::Placement;
use ggml_core::graph::{Graph, Revision, TensorId};
use ggml_core::{Error, Op, Result, TensorDesc, Type};
use smallvec::SmallVec;

use crate::fuse::{self, Fusion, Stored};
use crate::matmul;
use crate::ops;
use crate::pool;
use crate::profile;
use crate::repack::{self, RepackBuffer, REPACK_NAME};
use crate::simd::Gemm;
use crate::tensor::{AlignedBytes, View};

/// Units of work (elements, weighted per op) below which a node runs on
/// the calling thread: handing it to the team costs more than it saves.
/// Measured with `benches/split.rs` on 2 threads (fastest runs): at 512
/// to 1,024 units one thread was faster (add 0.44 against 0.53 us,
/// rms_norm 0.82 against 0.88); from 2,048 to 8,192 splitting was as fast
/// or faster (add of 4,096: 1.72 against 1.92 us; one-query attention of
/// 2,048: 2.67 against 2.92); from 18,000 it was 1.5 to 1.9 times faster.
const SERIAL_WORK: usize = 4 * 1024;

/// How nodes choose between the calling thread and the team: by their
/// work (0), or, for the benches that measure the thresholds, every node
/// on the calling thread (1) or every node split (2).
static SPLIT_MODE: AtomicU8 = AtomicU8::new(0);

/// Sets [`SPLIT_MODE`]: `None` lets the work decide, `Some(split)` forces.
pub(crate) fn force_split(split: Option<bool>) {
    let mode = match split {
        None => 0,
        Some(false) => 1,
        Some(true) => 2,
    };
    SPLIT_MODE.store(mode, Ordering::Relaxed);
}

/// True when a node of `work` units should be split across the team,
/// `serial` being the work below which splitting costs more than it saves.
#[inline]
pub(crate) fn split_pays(work: usize, serial: usize) -> bool {
    match SPLIT_MODE.load(Ordering::Relaxed) {
        0 => work >= serial,
        1 => false,
        _ => true,
    }
}

/// Memory reused across nodes and graphs (quantized activations of MUL_MAT).
#[derive(Default, Debug)]
pub(crate) struct Workspace {
    /// Activation rows converted to a weight type's partner.
    pub act: Vec<u8>,
    /// SET_ROWS nodes whose rows a fused node stored in this run.
    pub stored: Stored,
    /// Activation columns prepared for a panel kernel.
    pub prep: Vec<u8>,
}

/// Per-task scratch rows.
#[derive(Default, Debug)]
pub(crate) struct Scratch {
    pub a: Vec<f32>,
    pub b: Vec<f32>,
    pub c: Vec<f32>,
    pub d: Vec<f32>,
}

/// One entry per source of a node, without a heap allocation for the
/// usual counts (a node is computed in microseconds; three allocations
/// for its source lists were a visible share of it).
pub(crate) type Srcs<T> = SmallVec<[T; 4]>;

/// Everything a kernel needs about one node.
pub(crate) struct NodeCtx<'g> {
    /// The graph.
    pub graph: &'g Graph,
    /// The node.
    pub id: TensorId,
    /// The result's memory.
    pub dst: View,
    /// Sources in the node's order (for CPY and SET_ROWS the destination
    /// source is included, but never read through this list): the resolved
    /// views, or copies of those that overlap the result.
    pub src: Cow<'g, [View]>,
    /// `alias[i]`: source i has exactly the result's layout (an in-place
    /// op): its rows must be copied before the result row is written.
    pub alias: &'g [bool],
    /// For MUL_MAT / MUL_MAT_ID weights stored repacked (`CPU_REPACK`): the panel kernel
    /// whose layout they have.
    pub packed: Option<&'static Gemm>,
    /// What the node does differently in a fused list.
    pub fusion: Option<&'g Fusion>,
}

impl NodeCtx<'_> {
    /// The node's name.
    pub fn name(&self) -> &str {
        &self.graph.desc(self.id).name
    }

    /// An error naming this node.
    pub fn err(&self, msg: impl std::fmt::Display) -> Error {
        Error::Invalid(format!(
            "CPU: {} '{}': {msg}",
            self.graph.node(self.id).op.name(),
            self.name()
        ))
    }
}

/// Sources an op reads (indices into `node.src`).
fn read_sources(op: &Op, n_src: usize) -> Range<usize> {
    match op {
        Op::Cpy => 0..1,
        Op::SetRows => 1..n_src,
        _ => 0..n_src,
    }
}

/// Ops whose result row `r` depends only on row `r` of an aliased source
/// with the same layout, read before the row is written: every op that
/// may run in place, and a few more.
fn row_local(op: &Op) -> bool {
    op.can_inplace()
        || matches!(
            op,
            Op::Div | Op::Clamp { .. } | Op::Dup | Op::Cont | Op::Cpy
        )
}

/// A node ready to compute: everything its kernel needs that depends on
/// the graph alone (memory, checks, kernel layout), not on the data, so
/// that a graph computed again unchanged (see [`Plans`]) skips it.
pub(crate) struct Resolved {
    pub(crate) dst: View,
    pub(crate) src: Srcs<View>,
    alias: Srcs<bool>,
    /// Sources that overlap the result in a way that is not a plain
    /// in-place update: copied before each run.
    copy: Srcs<bool>,
    packed: Option<&'static Gemm>,
    /// Set by [`fuse::plan`] for nodes of a fused pattern.
    pub(crate) fusion: Option<Fusion>,
}

/// Checks node `id` and resolves its memory; `None` when there is nothing
/// to compute (a leaf, a view, an empty result).
pub(crate) fn resolve(graph: &Graph, id: TensorId) -> Result<Option<Resolved>> {
    let node = graph.node(id);
    if node.op == Op::None || node.op.is_view() {
        return Ok(None);
    }
    validate(graph, id)?;
    // Each tensor's placement is resolved once, for the repacked-weights
    // check and for its view.
    let dst_at = graph.placement(id);
    let src_at: Srcs<Option<Placement>> = node.src.iter().map(|&s| graph.placement(s)).collect();
    let packed = repacked_weights(graph, id, dst_at.as_ref(), &src_at)?;
    let dst = View::of(graph, id, placed(graph, id, dst_at.as_ref())?, true)?;
    if dst.n_rows() == 0 || dst.ne[0] == 0 {
        return Ok(None);
    }
    if !dst.is_non_overlapping() {
        return Err(Error::Invalid(format!(
            "CPU: {} '{}': result layout ne {:?} nb {:?} has overlapping elements",
            node.op.name(),
            node.desc.name,
            dst.ne,
            dst.nb
        )));
    }
    let reads = read_sources(&node.op, node.src.len());
    let mut src = Srcs::new();
    let mut alias: Srcs<bool> = smallvec::smallvec![false; node.src.len()];
    let mut copy: Srcs<bool> = smallvec::smallvec![false; node.src.len()];
    for (i, &s) in node.src.iter().enumerate() {
        let v = View::of(graph, s, placed(graph, s, src_at[i].as_ref())?, false)?;
        if reads.contains(&i) && v.overlaps(&dst) {
            if row_local(&node.op) && v.same_layout(&dst) && (i == 0 || v.ne == dst.ne) {
                alias[i] = true;
            } else {
                copy[i] = true;
            }
        }
        src.push(v);
    }
    Ok(Some(Resolved {
        dst,
        src,
        alias,
        copy,
        packed,
        fusion: None,
    }))
}

/// Computes node `id`, resolved as `r` for this graph.
pub(crate) fn run(graph: &Graph, id: TensorId, r: &Resolved, ws: &mut Workspace) -> Result<()> {
    match r.fusion {
        Some(Fusion::Skip) => return Ok(()),
        Some(Fusion::StoredBy) if ws.stored.take(id) => return Ok(()),
        _ => {}
    }
    // Owned copies of the sources marked to copy; they must outlive the
    // kernel call.
    let mut copies: Vec<AlignedBytes> = Vec::new();
    let mut src = Cow::Borrowed(&r.src[..]);
    if r.copy.contains(&true) {
        for (v, _) in src.to_mut().iter_mut().zip(&r.copy).filter(|(_, &c)| c) {
            let mut bytes = AlignedBytes::default();
            *v = materialize(v, &mut bytes);
            copies.push(bytes);
        }
    }
    let ctx = NodeCtx {
        graph,
        id,
        dst: r.dst.clone(),
        src,
        alias: &r.alias,
        packed: r.packed,
        fusion: r.fusion.as_ref(),
    };
    let res = dispatch(&ctx, ws);
    drop(copies);
    res
}

/// The nodes of the graphs a backend computed last, resolved, by the
/// list of nodes it was asked for (a scheduler hands a backend one list
/// per split): valid while the graph keeps its [`Revision`] and no
/// repacked tensor is added, which is how a graph reused from one token to
/// the next comes back.
#[derive(Default)]
pub(crate) struct Plans {
    at: Option<(Revision, u64)>,
    lists: HashMap<Vec<TensorId>, Vec<(TensorId, Resolved)>>,
}

/// Lists a backend keeps for one revision: the splits of a graph, or its
/// nodes one at a time (an eval callback).
const MAX_LISTS: usize = 4096;

impl Plans {
    /// Computes `nodes` of `graph`, resolving them unless they were
    /// resolved for this revision of it.
    pub(crate) fn compute(
        &mut self,
        graph: &Graph,
        nodes: &[TensorId],
        ws: &mut Workspace,
    ) -> Result<()> {
        let at = (graph.revision(), repack::tables_epoch());
        if self.at != Some(at) {
            self.lists.clear();
            self.at = Some(at);
        }
        // One lookup when the list is known (every token of a reused graph).
        if let Some(list) = self.lists.get(nodes) {
            return run_list(graph, list, ws);
        }
        let mut list = Vec::with_capacity(nodes.len());
        for &id in nodes {
            if let Some(r) = resolve(graph, id)? {
                list.push((id, r));
            }
        }
        fuse::plan(graph, &mut list);
        if self.lists.len() >= MAX_LISTS {
            self.lists.clear();
        }
        run_list(graph, self.lists.entry(nodes.to_vec()).or_insert(list), ws)
    }
}

/// Computes the resolved nodes `list` of `graph` in order.
fn run_list(graph: &Graph, list: &[(TensorId, Resolved)], ws: &mut Workspace) -> Result<()> {
    ws.stored.clear();
    if !profile::enabled() {
        for (id, r) in list {
            run(graph, *id, r, ws)?;
        }
        return Ok(());
    }
    for (id, r) in list {
        let t0 = std::time::Instant::now();
        run(graph, *id, r, ws)?;
        profile::record(graph, *id, t0.elapsed());
    }
    Ok(())
}

/// The placement of tensor `id`, or an error naming it when it has none.
fn placed<'p>(graph: &Graph, id: TensorId, at: Option<&'p Placement>) -> Result<&'p Placement> {
    at.ok_or_else(|| Error::NoData(graph.desc(id).name.clone()))
}

/// The panel kernel of node `id`'s weights when they are stored repacked;
/// an error when the node reads or writes repacked memory any other way
/// (only MUL_MAT and MUL_MAT_ID can read it, as their whole first
/// source). `dst` and `srcs` are the placements of the node and of its
/// sources.
fn repacked_weights(
    graph: &Graph,
    id: TensorId,
    dst: Option<&Placement>,
    srcs: &[Option<Placement>],
) -> Result<Option<&'static Gemm>> {
    let node = graph.node(id);
    let in_repack = |t: TensorId, at: Option<&Placement>| {
        at.and_then(|p| {
            p.buffer
                .as_any()
                .downcast_ref::<RepackBuffer>()
                .map(|b| b.packed_at(p.offset, graph.desc(t)))
        })
    };
    let refuse = |t: TensorId, what: &str| {
        Err(Error::Invalid(format!(
            "CPU: {} '{}': tensor '{}' is stored repacked ({REPACK_NAME}) and {what}",
            node.op.name(),
            node.desc.name,
            graph.desc(t).name
        )))
    };
    if in_repack(id, dst).is_some() {
        return refuse(id, "cannot be written");
    }
    let mut packed = None;
    for (i, (&s, at)) in node.src.iter().zip(srcs).enumerate() {
        match in_repack(s, at.as_ref()) {
            None => {}
            Some(Some(g)) if i == 0 && matches!(node.op, Op::MulMat | Op::MulMatId) => {
                packed = Some(g)
            }
            Some(_) => {
                return refuse(
                    s,
                    "only MUL_MAT and MUL_MAT_ID can read it, as their whole weights",
                )
            }
        }
    }
    Ok(packed)
}

fn dispatch(ctx: &NodeCtx<'_>, ws: &mut Workspace) -> Result<()> {
    match &ctx.graph.node(ctx.id).op {
        Op::Dup | Op::Cont | Op::Cpy => ops::copy::dup(ctx),
        Op::Add => ops::binary::binary(ctx, ops::binary::BinOp::Add),
        Op::Mul => ops::binary::binary(ctx, ops::binary::BinOp::Mul),
        Op::Div => ops::binary::binary(ctx, ops::binary::BinOp::Div),
        Op::Clamp { min, max } => ops::unary::clamp(ctx, *min, *max),
        Op::MulMatId => ops::mul_mat_id::mul_mat_id(ctx, ws),
        Op::Argsort(order) => ops::routing::argsort(ctx, *order),
        Op::SumRows => ops::routing::sum_rows(ctx),
        Op::Scale(s) => ops::unary::scale(ctx, *s),
        Op::Unary(u) => ops::unary::unary(ctx, *u),
        Op::Glu { op, swapped } => ops::unary::glu(ctx, *op, *swapped),
        Op::GetRows => ops::copy::get_rows(ctx),
        Op::SetRows => ops::copy::set_rows(ctx),
        Op::RmsNorm { eps } => ops::norm::rms_norm(ctx, *eps),
        Op::Norm { eps } => ops::norm::norm(ctx, *eps),
        Op::MulMat => matmul::mul_mat(ctx, ws),
        Op::Rope(p) => ops::rope::rope(ctx, p),
        Op::SoftMax { scale, max_bias } => ops::softmax::soft_max(ctx, *scale, *max_bias),
        Op::Argmax => ops::unary::argmax(ctx),
        Op::FlashAttnExt {
            scale,
            max_bias,
            softcap,
        } => ops::flash_attn::flash_attn_ext(ctx, *scale, *max_bias, *softcap),
        Op::Concat { dim } => ops::ssm::concat(ctx, *dim),
        Op::SsmConv => ops::ssm::ssm_conv(ctx),
        Op::SsmScan => ops::ssm::ssm_scan(ctx, ws),
        Op::L2Norm { eps } => ops::rwkv::l2_norm(ctx, *eps),
        Op::RwkvWkv6 => ops::rwkv::wkv6(ctx),
        Op::RwkvWkv7 => ops::rwkv::wkv7(ctx),
        Op::GatedDeltaNet => ops::delta_net::gated_delta_net(ctx, ws),
        Op::AddId => ops::oai::add_id(ctx),
        Op::SwigluOai { alpha, limit } => ops::oai::swiglu_oai(ctx, *alpha, *limit),
        Op::None | Op::View | Op::Reshape | Op::Permute(_) | Op::Transpose => Ok(()),
    }
}

/// Copies a tensor into dense memory of the same type and returns a view
/// of the copy.
fn materialize(v: &View, buf: &mut AlignedBytes) -> View {
    let rb = v.row_bytes();
    *buf = AlignedBytes::zeroed(rb * v.n_rows());
    let bytes = buf.bytes_mut();
    let es = v.ty.type_size();
    for r in 0..v.n_rows() {
        let p = v.row_ptr(v.row_index(r));
        let out = &mut bytes[r * rb..(r + 1) * rb];
        if v.dense_rows() {
            // SAFETY: the row lies inside the validated view and is only read.
            out.copy_from_slice(unsafe { std::slice::from_raw_parts(p, rb) });
        } else {
            for (j, o) in out.chunks_exact_mut(es).enumerate() {
                // SAFETY: element j of the row is inside the view.
                o.copy_from_slice(unsafe { std::slice::from_raw_parts(p.add(j * v.nb[0]), es) });
            }
        }
    }
    View::over(bytes, v.ty, v.ne)
}

thread_local! {
    /// Each thread's scratch rows, kept from one node to the next.
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::default();
}

/// The thread's scratch rows while a task runs, given back when dropped
/// (a task that needs scratch while another holds it gets fresh rows).
struct ReusedScratch(Scratch);

impl ReusedScratch {
    fn take() -> ReusedScratch {
        ReusedScratch(SCRATCH.with_borrow_mut(std::mem::take))
    }
}

impl Drop for ReusedScratch {
    fn drop(&mut self) {
        let s = std::mem::take(&mut self.0);
        SCRATCH.with_borrow_mut(|slot| *slot = s);
    }
}

/// Runs `f` over `0..n_rows` split into chunks for the pool, or on the
/// calling thread when the work is small.
pub(crate) fn par_rows<F>(n_rows: usize, work_per_row: usize, f: F) -> Result<()>
where
    F: Fn(Range<usize>, &mut Scratch) -> Result<()> + Sync,
{
    par_rows_with(n_rows, work_per_row, || (), |rows, s, _| f(rows, s))
}

/// [`par_rows`] with state of each thread made by `init` and kept across
/// the chunks the thread computes in this call: what neighbouring rows
/// share (converted operands, mask rows) is then made once per thread,
/// not once per chunk.
pub(crate) fn par_rows_with<S, F>(
    n_rows: usize,
    work_per_row: usize,
    init: impl Fn() -> S + Sync,
    f: F,
) -> Result<()>
where
    F: Fn(Range<usize>, &mut Scratch, &mut S) -> Result<()> + Sync,
{
    let threads = pool::current_num_threads();
    if threads <= 1 || n_rows <= 1 || !split_pays(n_rows.saturating_mul(work_per_row), SERIAL_WORK)
    {
        return f(0..n_rows, &mut ReusedScratch::take().0, &mut init());
    }
    let n_chunks = n_rows.min(threads * 4);
    let chunk = n_rows.div_ceil(n_chunks);
    pool::try_for_each_init(
        n_rows.div_ceil(chunk),
        || (ReusedScratch::take(), init()),
        |(s, state), c| f(c * chunk..((c + 1) * chunk).min(n_rows), &mut s.0, state),
    )
}

fn is_float(t: Type) -> bool {
    matches!(t, Type::F32 | Type::F16)
}

/// Types the row converters can read into f32.
pub(crate) fn readable(t: Type) -> bool {
    matches!(t, Type::F32 | Type::F16 | Type::BF16 | Type::I32)
        || (t.is_quantized() && ggml_core::quants::can_dequantize(t))
}

/// Types the row converters can write from f32.
pub(crate) fn writable(t: Type) -> bool {
    matches!(t, Type::F32 | Type::F16 | Type::BF16 | Type::I32)
        || (t.is_quantized() && ggml_core::quants::can_quantize(t))
}

fn ensure(ok: bool, why: impl FnOnce() -> String) -> std::result::Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(why())
    }
}

/// Why the CPU cannot compute a node, as an error message. The node's
/// sources and shapes are checked by ggml-core ([`Graph::validate`]); this
/// checks the types and layouts the kernels take.
fn check(graph: &Graph, id: TensorId) -> std::result::Result<(), String> {
    graph.validate(id).map_err(|e| e.to_string())?;
    let node = graph.node(id);
    let d = &node.desc;
    let s = |i: usize| {
        node.src
            .get(i)
            .map(|&t| graph.desc(t))
            .ok_or_else(|| format!("source {i} is missing"))
    };
    let opt = |i: usize| node.src.get(i).map(|&t| graph.desc(t));
    match &node.op {
        Op::None | Op::View | Op::Reshape | Op::Permute(_) | Op::Transpose => Ok(()),
        Op::Dup | Op::Cont | Op::Cpy => {
            let a = s(0)?;
            let same = a.ty == d.ty
                && (!a.ty.is_quantized()
                    || a.ne[0] == d.ne[0]
                    || (a.is_contiguous() && d.is_contiguous()));
            let conv = readable(a.ty) && writable(d.ty) && a.ty != Type::I32 && d.ty != Type::I32;
            ensure(same || conv, || {
                format!("cannot convert {} to {}", a.ty, d.ty)
            })
        }
        Op::Add | Op::Mul | Op::Div => {
            let (a, b) = (s(0)?, s(1)?);
            ensure(is_float(a.ty) && is_float(b.ty) && is_float(d.ty), || {
                format!("types {} {} -> {}", a.ty, b.ty, d.ty)
            })
        }
        Op::Scale(_)
        | Op::Unary(_)
        | Op::RmsNorm { .. }
        | Op::Norm { .. }
        | Op::L2Norm { .. }
        | Op::Clamp { .. } => {
            let a = s(0)?;
            ensure(is_float(a.ty) && is_float(d.ty), || {
                format!("{} -> {}", a.ty, d.ty)
            })
        }
        Op::Glu { .. } => {
            let a = s(0)?;
            let ok = opt(1).is_none_or(|b| is_float(b.ty));
            ensure(ok && is_float(a.ty) && is_float(d.ty), || {
                format!("{} -> {}", a.ty, d.ty)
            })
        }
        Op::GetRows => {
            let (a, i) = (s(0)?, s(1)?);
            let ok = i.ty == Type::I32
                && readable(a.ty)
                && matches!(d.ty, Type::F32 | Type::F16 | Type::I32)
                && (d.ty == Type::I32) == (a.ty == Type::I32);
            ensure(ok, || format!("{} by {} -> {}", a.ty, i.ty, d.ty))
        }
        Op::SetRows => {
            let (dst, src, idx) = (s(0)?, s(1)?, s(2)?);
            let ok = matches!(idx.ty, Type::I32 | Type::I64)
                && readable(src.ty)
                && src.ty != Type::I32
                && writable(dst.ty)
                && dst.ty != Type::I32;
            ensure(ok, || {
                format!("dst {}, src {}, idx {}", dst.ty, src.ty, idx.ty)
            })
        }
        Op::MulMat => {
            let (a, b) = (s(0)?, s(1)?);
            let ok = matmul::supports_type(a.ty)
                && matches!(b.ty, Type::F32 | Type::F16)
                && d.ty == Type::F32
                && (a.rows_contiguous() || matches!(a.ty, Type::F32 | Type::F16 | Type::BF16));
            ensure(ok, || {
                format!("{} {:?} x {} {:?} -> {:?}", a.ty, a.ne, b.ty, b.ne, d.ne)
            })
        }
        Op::MulMatId => {
            let (a, b, ids) = (s(0)?, s(1)?, s(2)?);
            let ok = matmul::supports_type(a.ty)
                && matches!(b.ty, Type::F32 | Type::F16)
                && ids.ty == Type::I32
                && d.ty == Type::F32
                && (a.rows_contiguous() || matches!(a.ty, Type::F32 | Type::F16 | Type::BF16));
            ensure(ok, || {
                format!(
                    "{} {:?} x {} {:?} by {} {:?} -> {:?}",
                    a.ty, a.ne, b.ty, b.ne, ids.ty, ids.ne, d.ne
                )
            })
        }
        Op::Argsort(_) => {
            let a = s(0)?;
            let ok = a.ty == Type::F32 && d.ty == Type::I32;
            ensure(ok, || format!("{} -> {}", a.ty, d.ty))
        }
        Op::SumRows => {
            let a = s(0)?;
            let ok = a.ty == Type::F32 && d.ty == Type::F32;
            ensure(ok, || format!("{} -> {}", a.ty, d.ty))
        }
        Op::Rope(p) => {
            let (a, pos) = (s(0)?, s(1)?);
            let mut ok = is_float(a.ty) && is_float(d.ty) && pos.ty == Type::I32;
            if let Some(f) = opt(2) {
                ok &= f.ty == Type::F32;
            }
            ensure(ok, || {
                format!(
                    "{} {:?} at {} {:?}, n_dims {}",
                    a.ty, a.ne, pos.ty, pos.ne, p.n_dims
                )
            })
        }
        Op::SoftMax { .. } => {
            let a = s(0)?;
            let mut ok = is_float(a.ty) && d.ty == Type::F32;
            if let Some(m) = opt(1) {
                ok &= is_float(m.ty);
            }
            if let Some(k) = opt(2) {
                ok &= dense_f32(k);
            }
            ensure(ok, || format!("{} {:?} -> {:?}", a.ty, a.ne, d.ne))
        }
        Op::Argmax => {
            let a = s(0)?;
            let ok = a.ty == Type::F32 && d.ty == Type::I32;
            ensure(ok, || format!("{} -> {}", a.ty, d.ty))
        }
        Op::Concat { .. } | Op::SsmConv | Op::SsmScan => check_ssm(graph, id),
        Op::RwkvWkv6 | Op::RwkvWkv7 => {
            // The kernels address every source as dense f32 memory.
            let node = graph.node(id);
            let bad = node
                .src
                .iter()
                .map(|&t| graph.desc(t))
                .find(|t| t.ty != Type::F32 || !t.is_contiguous());
            let ok = bad.is_none() && d.ty == Type::F32 && d.is_contiguous();
            ensure(ok, || match bad {
                Some(t) => format!(
                    "source '{}' is {} nb {:?} (need contiguous F32)",
                    t.name, t.ty, t.nb
                ),
                None => format!("result {} nb {:?} (need contiguous F32)", d.ty, d.nb),
            })
        }
        Op::GatedDeltaNet => {
            // q, k and v are read a row at a time; g, beta and the states
            // too; the result is written densely.
            let srcs: Vec<&TensorDesc> =
                graph.node(id).src.iter().map(|&t| graph.desc(t)).collect();
            let ok = srcs.iter().all(|t| dense_f32(t)) && d.ty == Type::F32 && d.is_contiguous();
            ensure(ok, || {
                let t: Vec<String> = srcs
                    .iter()
                    .map(|t| format!("{} nb {:?}", t.ty, t.nb))
                    .collect();
                format!("sources {} (need F32 with dense rows)", t.join(", "))
            })
        }
        Op::AddId => {
            let (a, b, ids) = (s(0)?, s(1)?, s(2)?);
            let ok =
                a.ty == Type::F32 && b.ty == Type::F32 && ids.ty == Type::I32 && d.ty == Type::F32;
            ensure(ok, || {
                format!("{} + {} by {} -> {}", a.ty, b.ty, ids.ty, d.ty)
            })
        }
        Op::SwigluOai { .. } => {
            let (g, u) = (s(0)?, s(1)?);
            let ok = g.ty == Type::F32 && u.ty == Type::F32 && d.ty == Type::F32;
            ensure(ok, || format!("{} and {} -> {}", g.ty, u.ty, d.ty))
        }
        Op::FlashAttnExt { .. } => {
            let (q, k, v) = (s(0)?, s(1)?, s(2)?);
            let mut ok = q.ty == Type::F32
                && matches!(k.ty, Type::F32 | Type::F16)
                && matches!(v.ty, Type::F32 | Type::F16)
                && d.ty == Type::F32;
            if let Some(m) = opt(3) {
                ok &= is_float(m.ty);
            }
            if let Some(k) = opt(4) {
                ok &= dense_f32(k);
            }
            ensure(ok, || {
                format!(
                    "q {} {:?}, k {} {:?}, v {} {:?}",
                    q.ty, q.ne, k.ty, k.ne, v.ty, v.ne
                )
            })
        }
    }
}

/// True when `d` is F32 with adjacent elements in each row.
fn dense_f32(d: &TensorDesc) -> bool {
    d.ty == Type::F32 && (d.ne[0] <= 1 || d.nb[0] == 4)
}

/// The types and layouts the kernels of CONCAT, SSM_CONV and SSM_SCAN
/// take (`node.op` is one of them).
fn check_ssm(graph: &Graph, id: TensorId) -> std::result::Result<(), String> {
    let node = graph.node(id);
    let d = &node.desc;
    let s: Srcs<&TensorDesc> = node.src.iter().map(|&t| graph.desc(t)).collect();
    match node.op {
        Op::Concat { .. } => {
            let ok = s[0].ty == d.ty
                && s[1].ty == d.ty
                && d.ty.block_size() == 1
                && !d.ty.is_removed()
                && d.is_contiguous();
            ensure(ok, || {
                format!("{} and {} -> {} {:?}", s[0].ty, s[1].ty, d.ty, d.nb)
            })
        }
        Op::SsmConv => {
            let ok = dense_f32(s[0]) && dense_f32(s[1]) && d.ty == Type::F32;
            ensure(ok, || {
                format!(
                    "input {} nb {:?}, kernel {} nb {:?} (need F32 rows)",
                    s[0].ty, s[0].nb, s[1].ty, s[1].nb
                )
            })
        }
        _ => {
            // States, A, B and C are read a row at a time, x and dt an
            // element at a time.
            let ok = [0, 3, 4, 5].iter().all(|&i| dense_f32(s[i]))
                && s[1].ty == Type::F32
                && s[2].ty == Type::F32
                && s[6].ty == Type::I32
                && d.ty == Type::F32
                && d.is_contiguous();
            ensure(ok, || {
                let t: Vec<String> = s
                    .iter()
                    .map(|t| format!("{} nb {:?}", t.ty, t.nb))
                    .collect();
                format!(
                    "sources {} (need F32 with dense rows, I32 ids)",
                    t.join(", ")
                )
            })
        }
    }
}

/// True when the CPU can compute node `id`.
pub(crate) fn supports(graph: &Graph, id: TensorId) -> bool {
    check(graph, id).is_ok()
}

fn validate(graph: &Graph, id: TensorId) -> Result<()> {
    match check(graph, id) {
        Ok(()) => Ok(()),
        Err(why) => {
            let node = graph.node(id);
            Err(Error::Unsupported {
                backend: "CPU".into(),
                op: format!("{} ({why})", node.op.name()),
                tensor: node.desc.name.clone(),
            })
        }
    }
}
