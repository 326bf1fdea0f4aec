//! An arena graph of tensors addressed by [`TensorId`], built by op methods.
//!
//! Nodes are stored in creation order, which is a topological order: every
//! source of a node was created before it. Leaves (`Op::None`) are weights,
//! KV-cache tensors and inputs; views share their source's memory.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use smallvec::SmallVec;

use crate::backend::Placement;
use crate::op::{GluOp, Op, RopeParams, UnaryOp};
use crate::tensor::{contiguous_strides, pad_ne, TensorDesc, MAX_DIMS};
use crate::{Error, Result, Type};

mod delta_net;
mod oai;
mod routing;
mod rwkv;
mod ssm;
mod validate;

/// Index of a node in its [`Graph`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorId(pub u32);

impl TensorId {
    /// The index as usize.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Node flags.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Flags(u8);

impl Flags {
    /// Data set from outside before compute (token ids, positions, masks).
    pub const INPUT: Flags = Flags(1);
    /// Result read after compute: never overwritten by the allocator.
    pub const OUTPUT: Flags = Flags(2);
    /// A model weight.
    pub const WEIGHT: Flags = Flags(4);

    /// True when every flag of `other` is set.
    pub fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }

    /// Sets the flags of `other`.
    pub fn insert(&mut self, other: Flags) {
        self.0 |= other.0;
    }
}

/// One tensor of a graph.
#[derive(Clone)]
pub struct Node {
    /// Name, type, shape and strides.
    pub desc: TensorDesc,
    /// What computes it.
    pub op: Op,
    /// Operands.
    pub src: SmallVec<[TensorId; 4]>,
    /// For views: the tensor whose memory this one shares, and the byte offset.
    pub view: Option<(TensorId, usize)>,
    /// Input / output / weight flags.
    pub flags: Flags,
    /// Where the data lives: set for imported tensors and by the allocator.
    pub at: Option<Placement>,
}

impl fmt::Debug for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Node")
            .field("name", &self.desc.name)
            .field("op", &self.op.name())
            .field("ty", &self.desc.ty)
            .field("ne", &self.desc.ne)
            .field("src", &self.src)
            .field("view", &self.view)
            .finish()
    }
}

/// The contents of a [`Graph`] at one moment: every change to a graph
/// gives it a revision no graph of this process had before, and a clone
/// keeps its original's until either changes. Two graphs of equal revision
/// are thus equal, node for node, placements (and so the buffers they hold)
/// included, which lets a backend keep what it derived from a graph (views,
/// checks) for as long as the graph comes back unchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Revision(u64);

impl Revision {
    fn next() -> Revision {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        Revision(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

impl Default for Revision {
    fn default() -> Revision {
        Revision::next()
    }
}

/// An arena of nodes, built by the op methods, in topological order.
#[derive(Clone, Debug, Default)]
pub struct Graph {
    nodes: Vec<Node>,
    revision: Revision,
}

fn shape_err<T>(op: &'static str, msg: String) -> Result<T> {
    Err(Error::Shape { op, msg })
}

impl Graph {
    /// An empty graph.
    pub fn new() -> Graph {
        Graph::default()
    }

    /// Number of nodes (leaves included).
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// True when the graph has no node.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// A node.
    pub fn node(&self, id: TensorId) -> &Node {
        &self.nodes[id.index()]
    }

    /// A node, mutably (placement, flags, name).
    pub fn node_mut(&mut self, id: TensorId) -> &mut Node {
        &mut self.nodes_mut()[id.index()]
    }

    /// The nodes, for a change: the graph takes a new [`Revision`].
    fn nodes_mut(&mut self) -> &mut Vec<Node> {
        self.revision = Revision::next();
        &mut self.nodes
    }

    /// The graph's current [`Revision`].
    pub fn revision(&self) -> Revision {
        self.revision
    }

    /// The shape descriptor of a node.
    pub fn desc(&self, id: TensorId) -> &TensorDesc {
        &self.nodes[id.index()].desc
    }

    /// All nodes in order.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// All ids in order.
    pub fn ids(&self) -> impl Iterator<Item = TensorId> + '_ {
        (0..self.nodes.len() as u32).map(TensorId)
    }

    /// Ids of the nodes that compute something (not leaves, not pure views),
    /// in order.
    pub fn compute_ids(&self) -> impl Iterator<Item = TensorId> + '_ {
        self.ids().filter(|&id| {
            let op = &self.node(id).op;
            *op != Op::None && !op.is_view()
        })
    }

    /// Adds a node as given; the low-level entry point every builder goes
    /// through. The builders check the node ([`Graph::validate`]); a node
    /// pushed directly is checked by the backend that is asked to run it.
    pub fn push(&mut self, node: Node) -> TensorId {
        let id = TensorId(self.nodes.len() as u32);
        self.nodes_mut().push(node);
        id
    }

    fn add(&mut self, desc: TensorDesc, op: Op, src: &[TensorId]) -> TensorId {
        self.push(Node {
            desc,
            op,
            src: src.iter().copied().collect(),
            view: None,
            flags: Flags::default(),
            at: None,
        })
    }

    /// Pushes an op node once [`Graph::validate`] accepts it, so that
    /// every node a builder makes is well formed.
    fn add_checked(&mut self, desc: TensorDesc, op: Op, src: &[TensorId]) -> Result<TensorId> {
        let id = self.add(desc, op, src);
        if let Err(e) = self.validate(id) {
            self.nodes_mut().pop();
            return Err(e);
        }
        Ok(id)
    }

    fn add_view(
        &mut self,
        desc: TensorDesc,
        op: Op,
        src: &[TensorId],
        of: TensorId,
        offset: usize,
    ) -> Result<TensorId> {
        let id = self.add_checked(desc, op, src)?;
        self.nodes_mut()[id.index()].view = Some((of, offset));
        Ok(id)
    }

    fn derived_name(&self, a: TensorId, suffix: &str) -> String {
        format!("{} ({suffix})", self.desc(a).name)
    }

    /// A new leaf tensor without data (the allocator gives it memory).
    pub fn new_tensor(&mut self, name: impl Into<String>, ty: Type, ne: &[usize]) -> TensorId {
        self.add(TensorDesc::new(name, ty, ne), Op::None, &[])
    }

    /// A new input leaf: data is written after allocation, before compute.
    pub fn input(&mut self, name: impl Into<String>, ty: Type, ne: &[usize]) -> TensorId {
        let id = self.new_tensor(name, ty, ne);
        self.nodes_mut()[id.index()].flags.insert(Flags::INPUT);
        id
    }

    /// Imports a tensor whose memory already exists (a weight, a KV cache).
    pub fn import(&mut self, desc: TensorDesc, at: Placement, flags: Flags) -> TensorId {
        let id = self.add(desc, Op::None, &[]);
        let n = &mut self.nodes_mut()[id.index()];
        n.at = Some(at);
        n.flags = flags;
        id
    }

    /// Renames a node.
    pub fn set_name(&mut self, id: TensorId, name: impl Into<String>) {
        self.nodes_mut()[id.index()].desc.name = name.into();
    }

    /// Marks a node as an output: its memory is kept until after compute.
    pub fn set_output(&mut self, id: TensorId) {
        self.nodes_mut()[id.index()].flags.insert(Flags::OUTPUT);
    }

    /// The tensor whose memory a view ultimately shares, with the total offset.
    pub fn view_base(&self, id: TensorId) -> (TensorId, usize) {
        let mut cur = id;
        let mut off = 0;
        while let Some((src, o)) = self.nodes[cur.index()].view {
            off += o;
            cur = src;
        }
        (cur, off)
    }

    /// Where a tensor's bytes are: its base tensor's placement plus the view
    /// offset, or `None` when the base has no memory yet.
    pub fn placement(&self, id: TensorId) -> Option<Placement> {
        let (base, off) = self.view_base(id);
        self.nodes[base.index()].at.as_ref().map(|p| Placement {
            buffer: p.buffer.clone(),
            offset: p.offset + off,
        })
    }

    /// Like [`Graph::placement`], but an error naming the tensor when it has no memory.
    pub fn placement_or_err(&self, id: TensorId) -> Result<Placement> {
        self.placement(id)
            .ok_or_else(|| Error::NoData(self.desc(id).name.clone()))
    }

    // ---------------------------------------------------------------- views

    /// A view of `a` with shape `ne`, strides `nb[1..]` and byte `offset`
    /// (nb[0] is the element size).
    pub fn view(
        &mut self,
        a: TensorId,
        ne: &[usize],
        nb_rest: &[usize],
        offset: usize,
    ) -> Result<TensorId> {
        let src = self.desc(a);
        let ty = src.ty;
        let ne4 = pad_ne(ne);
        let mut nb = contiguous_strides(ty, &ne4);
        for (i, &s) in nb_rest.iter().enumerate().take(MAX_DIMS - 1) {
            nb[i + 1] = s;
        }
        // Unspecified higher strides follow the last given one.
        for i in nb_rest.len() + 1..MAX_DIMS {
            nb[i] = nb[i - 1] * ne4[i - 1];
        }
        if ne4[0] % ty.block_size() != 0 {
            return shape_err(
                "VIEW",
                format!(
                    "ne[0] = {} is not a multiple of the block size of {ty}",
                    ne4[0]
                ),
            );
        }
        let desc = TensorDesc {
            name: self.derived_name(a, "view"),
            ty,
            ne: ne4,
            nb,
        };
        let (base, base_off) = self.view_base(a);
        let base_bytes = self.desc(base).nbytes();
        if base_off + offset + desc.nbytes() > base_bytes {
            return shape_err(
                "VIEW",
                format!(
                    "view of '{}' with ne {:?} nb {:?} at offset {} needs {} bytes, source has {}",
                    src.name,
                    desc.ne,
                    desc.nb,
                    base_off + offset,
                    base_off + offset + desc.nbytes(),
                    base_bytes
                ),
            );
        }
        self.add_view(desc, Op::View, &[a], a, offset)
    }

    /// 1-d view of `ne0` elements at byte `offset`.
    pub fn view_1d(&mut self, a: TensorId, ne0: usize, offset: usize) -> Result<TensorId> {
        self.view(a, &[ne0], &[], offset)
    }

    /// 2-d view with row stride `nb1`.
    pub fn view_2d(
        &mut self,
        a: TensorId,
        ne0: usize,
        ne1: usize,
        nb1: usize,
        offset: usize,
    ) -> Result<TensorId> {
        self.view(a, &[ne0, ne1], &[nb1], offset)
    }

    /// 3-d view with strides `nb1`, `nb2`.
    pub fn view_3d(
        &mut self,
        a: TensorId,
        ne: [usize; 3],
        nb1: usize,
        nb2: usize,
        offset: usize,
    ) -> Result<TensorId> {
        self.view(a, &ne, &[nb1, nb2], offset)
    }

    /// 4-d view with strides `nb1`, `nb2`, `nb3`.
    pub fn view_4d(
        &mut self,
        a: TensorId,
        ne: [usize; 4],
        nb: [usize; 3],
        offset: usize,
    ) -> Result<TensorId> {
        self.view(a, &ne, &nb, offset)
    }

    /// `a` with shape `ne` (same element count; `a` must be contiguous).
    pub fn reshape(&mut self, a: TensorId, ne: &[usize]) -> Result<TensorId> {
        let ne4 = self.same_count("RESHAPE", a, ne)?;
        let src = self.desc(a);
        if !src.is_contiguous() {
            return shape_err(
                "RESHAPE",
                format!("'{}' is not contiguous (nb {:?})", src.name, src.nb),
            );
        }
        let desc = TensorDesc::new(self.derived_name(a, "reshaped"), src.ty, &ne4);
        self.add_view(desc, Op::Reshape, &[a], a, 0)
    }

    /// `ne` padded to four axes, when it holds as many elements as `a` (the
    /// new shape of `op`, which keeps the elements).
    fn same_count(&self, op: &'static str, a: TensorId, ne: &[usize]) -> Result<[usize; MAX_DIMS]> {
        let src = self.desc(a);
        let ne4 = pad_ne(ne);
        if ne4.iter().product::<usize>() != src.n_elements() {
            return shape_err(
                op,
                format!("'{}' {:?} cannot become {:?}", src.name, src.ne, ne4),
            );
        }
        Ok(ne4)
    }

    /// `a` with axes permuted: source axis i becomes axis `axes[i]` (ggml_permute).
    pub fn permute(&mut self, a: TensorId, axes: [usize; 4]) -> Result<TensorId> {
        let mut seen = [false; 4];
        for &x in &axes {
            if x >= 4 || seen[x] {
                return shape_err(
                    "PERMUTE",
                    format!("axes {axes:?} are not a permutation of 0..4"),
                );
            }
            seen[x] = true;
        }
        let src = self.desc(a).clone();
        let mut ne = [0; 4];
        let mut nb = [0; 4];
        for i in 0..4 {
            ne[axes[i]] = src.ne[i];
            nb[axes[i]] = src.nb[i];
        }
        let desc = TensorDesc {
            name: self.derived_name(a, "permuted"),
            ty: src.ty,
            ne,
            nb,
        };
        self.add_view(desc, Op::Permute(axes), &[a], a, 0)
    }

    /// `a` with its first two axes swapped.
    pub fn transpose(&mut self, a: TensorId) -> Result<TensorId> {
        let src = self.desc(a).clone();
        let mut desc = src.clone();
        desc.name = self.derived_name(a, "transposed");
        desc.ne.swap(0, 1);
        desc.nb.swap(0, 1);
        self.add_view(desc, Op::Transpose, &[a], a, 0)
    }

    // ---------------------------------------------------------------- copies

    /// A contiguous copy of `a`.
    pub fn cont(&mut self, a: TensorId) -> Result<TensorId> {
        let src = self.desc(a);
        let desc = TensorDesc::new(self.derived_name(a, "cont"), src.ty, &src.ne);
        self.add_checked(desc, Op::Cont, &[a])
    }

    /// A contiguous copy of `a` with shape `ne` (same element count).
    pub fn cont_shape(&mut self, a: TensorId, ne: &[usize]) -> Result<TensorId> {
        let ne4 = self.same_count("CONT", a, ne)?;
        let src = self.desc(a);
        let desc = TensorDesc::new(self.derived_name(a, "cont"), src.ty, &ne4);
        self.add_checked(desc, Op::Cont, &[a])
    }

    /// A contiguous duplicate of `a` with the same shape.
    pub fn dup(&mut self, a: TensorId) -> Result<TensorId> {
        let src = self.desc(a);
        let desc = TensorDesc::new(self.derived_name(a, "dup"), src.ty, &src.ne);
        self.add_checked(desc, Op::Dup, &[a])
    }

    /// Copies `a` into `b` (same element count, converting to `b`'s type);
    /// the result is a view of `b`.
    pub fn cpy(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        let (sa, sb) = (self.desc(a), self.desc(b));
        if sa.n_elements() != sb.n_elements() {
            return shape_err(
                "CPY",
                format!(
                    "'{}' {:?} and '{}' {:?} differ in element count",
                    sa.name, sa.ne, sb.name, sb.ne
                ),
            );
        }
        let mut desc = sb.clone();
        desc.name = format!("{} (copy of {})", sb.name, sa.name);
        self.add_view(desc, Op::Cpy, &[a, b], b, 0)
    }

    /// Writes the rows of `src` into `dst` at the row indices `idx` (I32 or
    /// I64); the result is a view of `dst` (ggml_set_rows).
    pub fn set_rows(&mut self, dst: TensorId, src: TensorId, idx: TensorId) -> Result<TensorId> {
        let (d, s, i) = (self.desc(dst), self.desc(src), self.desc(idx));
        if d.ne[0] != s.ne[0] || !matches!(i.ty, Type::I32 | Type::I64) || i.ne[0] != s.ne[1] {
            return shape_err(
                "SET_ROWS",
                format!(
                    "dst '{}' {:?}, src '{}' {:?}, idx '{}' {} {:?}: need dst.ne0 == src.ne0 and idx ({{I32|I64}}) ne0 == src.ne1",
                    d.name, d.ne, s.name, s.ne, i.name, i.ty, i.ne
                ),
            );
        }
        if s.ne[2] % i.ne[1] != 0
            || s.ne[3] % i.ne[2] != 0
            || d.ne[2] != s.ne[2]
            || d.ne[3] != s.ne[3]
        {
            return shape_err(
                "SET_ROWS",
                format!(
                    "batch dims of dst {:?}, src {:?} and idx {:?} do not match",
                    d.ne, s.ne, i.ne
                ),
            );
        }
        let mut desc = d.clone();
        desc.name = format!("{} (set rows)", d.name);
        self.add_view(desc, Op::SetRows, &[dst, src, idx], dst, 0)
    }

    // ---------------------------------------------------------------- maths

    fn binary(&mut self, op: Op, a: TensorId, b: TensorId) -> Result<TensorId> {
        let (sa, sb) = (self.desc(a), self.desc(b));
        if !sb.can_repeat_into(sa) {
            return shape_err(
                op.name(),
                format!(
                    "'{}' {:?} cannot be broadcast to '{}' {:?}",
                    sb.name, sb.ne, sa.name, sa.ne
                ),
            );
        }
        if sa.ty != Type::F32 && sa.ty != Type::F16 || sb.ty != Type::F32 && sb.ty != Type::F16 {
            return shape_err(
                op.name(),
                format!("types {} and {} (need F32/F16)", sa.ty, sb.ty),
            );
        }
        let desc = TensorDesc::new(self.derived_name(a, op.name()), sa.ty, &sa.ne);
        self.add_checked(desc, op, &[a, b])
    }

    /// a + b, b broadcast over a.
    pub fn add_op(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.binary(Op::Add, a, b)
    }

    /// a * b, b broadcast over a.
    pub fn mul(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.binary(Op::Mul, a, b)
    }

    /// a * s.
    pub fn scale(&mut self, a: TensorId, s: f32) -> Result<TensorId> {
        self.unary_like(Op::Scale(s), a)
    }

    fn unary_like(&mut self, op: Op, a: TensorId) -> Result<TensorId> {
        let sa = self.desc(a);
        if sa.ty != Type::F32 && sa.ty != Type::F16 {
            return shape_err(
                op.name(),
                format!("'{}' has type {} (need F32/F16)", sa.name, sa.ty),
            );
        }
        let desc = TensorDesc::new(self.derived_name(a, op.name()), sa.ty, &sa.ne);
        self.add_checked(desc, op, &[a])
    }

    /// Element-wise function.
    pub fn unary(&mut self, a: TensorId, op: UnaryOp) -> Result<TensorId> {
        self.unary_like(Op::Unary(op), a)
    }

    /// silu(a).
    pub fn silu(&mut self, a: TensorId) -> Result<TensorId> {
        self.unary(a, UnaryOp::Silu)
    }

    /// gelu(a).
    pub fn gelu(&mut self, a: TensorId) -> Result<TensorId> {
        self.unary(a, UnaryOp::Gelu)
    }

    /// RMS norm of each row.
    pub fn rms_norm(&mut self, a: TensorId, eps: f32) -> Result<TensorId> {
        self.unary_like(Op::RmsNorm { eps }, a)
    }

    /// Layer norm (without affine) of each row.
    pub fn norm(&mut self, a: TensorId, eps: f32) -> Result<TensorId> {
        self.unary_like(Op::Norm { eps }, a)
    }

    /// Rows of `a` picked by the I32 indices `idx` ([n] or [n, ne2]):
    /// result [a.ne0, idx.ne0, idx.ne1, idx.ne2] in F32.
    pub fn get_rows(&mut self, a: TensorId, idx: TensorId) -> Result<TensorId> {
        let (sa, si) = (self.desc(a), self.desc(idx));
        if si.ty != Type::I32 || sa.ne[2] != si.ne[1] || si.ne[3] != 1 {
            return shape_err(
                "GET_ROWS",
                format!(
                    "'{}' {:?} with indices '{}' {} {:?}",
                    sa.name, sa.ne, si.name, si.ty, si.ne
                ),
            );
        }
        let ty = if sa.ty == Type::I32 {
            Type::I32
        } else {
            Type::F32
        };
        let desc = TensorDesc::new(
            self.derived_name(a, "get_rows"),
            ty,
            &[sa.ne[0], si.ne[0], si.ne[1], si.ne[2]],
        );
        self.add_checked(desc, Op::GetRows, &[a, idx])
    }

    /// `a^T b`: a [k, m, A2, A3], b [k, n, B2, B3] -> [m, n, B2, B3] (F32),
    /// with B2 % A2 == 0 and B3 % A3 == 0 (broadcast of a, as for GQA).
    pub fn mul_mat(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        let (sa, sb) = (self.desc(a), self.desc(b));
        // A zero batch of `a` broadcasts to nothing (and must not divide).
        if sa.ne[0] != sb.ne[0]
            || sb.ne[2].checked_rem(sa.ne[2]) != Some(0)
            || sb.ne[3].checked_rem(sa.ne[3]) != Some(0)
            || sa.is_transposed()
        {
            return shape_err(
                "MUL_MAT",
                format!(
                    "'{}' {} {:?} x '{}' {} {:?}",
                    sa.name, sa.ty, sa.ne, sb.name, sb.ty, sb.ne
                ),
            );
        }
        let desc = TensorDesc::new(
            self.derived_name(a, "mul_mat"),
            Type::F32,
            &[sa.ne[1], sb.ne[1], sb.ne[2], sb.ne[3]],
        );
        self.add_checked(desc, Op::MulMat, &[a, b])
    }

    /// Rotary embedding of `a` [head_dim, n_head, n_tokens] at positions `pos`
    /// (I32 [n_tokens]), with optional per-dim frequency factors.
    pub fn rope_ext(
        &mut self,
        a: TensorId,
        pos: TensorId,
        freq_factors: Option<TensorId>,
        params: RopeParams,
    ) -> Result<TensorId> {
        let (sa, sp) = (self.desc(a), self.desc(pos));
        if sp.ty != Type::I32
            || sp.ne[0] != sa.ne[2]
            || params.n_dims > sa.ne[0]
            || params.n_dims % 2 != 0
        {
            return shape_err(
                "ROPE",
                format!(
                    "'{}' {:?} with positions '{}' {} {:?} and n_dims {}",
                    sa.name, sa.ne, sp.name, sp.ty, sp.ne, params.n_dims
                ),
            );
        }
        if let Some(ff) = freq_factors {
            let sf = self.desc(ff);
            if sf.ty != Type::F32 || sf.ne[0] < params.n_dims / 2 {
                return shape_err(
                    "ROPE",
                    format!("frequency factors '{}' {:?}", sf.name, sf.ne),
                );
            }
        }
        let desc = TensorDesc::new(self.derived_name(a, "rope"), sa.ty, &sa.ne);
        let mut src = vec![a, pos];
        src.extend(freq_factors);
        self.add_checked(desc, Op::Rope(params), &src)
    }

    /// softmax(a * scale + mask) over rows (ggml_soft_max_ext); the mask
    /// (F32 or F16, [a.ne0, >= a.ne1]) is broadcast over a's dims 2 and 3.
    pub fn soft_max_ext(
        &mut self,
        a: TensorId,
        mask: Option<TensorId>,
        scale: f32,
        max_bias: f32,
    ) -> Result<TensorId> {
        let sa = self.desc(a);
        if let Some(m) = mask {
            let sm = self.desc(m);
            if sm.ne[0] != sa.ne[0]
                || sm.ne[1] < sa.ne[1]
                || !matches!(sm.ty, Type::F32 | Type::F16)
            {
                return shape_err(
                    "SOFT_MAX",
                    format!(
                        "'{}' {:?} with mask '{}' {} {:?}",
                        sa.name, sa.ne, sm.name, sm.ty, sm.ne
                    ),
                );
            }
        }
        let op = Op::SoftMax { scale, max_bias };
        let desc = TensorDesc::new(self.derived_name(a, "soft_max"), Type::F32, &sa.ne);
        let mut src = vec![a];
        src.extend(mask);
        self.add_checked(desc, op, &src)
    }

    /// Gated unit over the two halves of each row of `a` (first half gate).
    pub fn glu(&mut self, a: TensorId, op: GluOp, swapped: bool) -> Result<TensorId> {
        let sa = self.desc(a);
        if sa.ne[0] % 2 != 0 {
            return shape_err(
                "GLU",
                format!("'{}' row length {} is odd", sa.name, sa.ne[0]),
            );
        }
        let mut ne = sa.ne;
        ne[0] /= 2;
        let desc = TensorDesc::new(self.derived_name(a, "glu"), sa.ty, &ne);
        self.add_checked(desc, Op::Glu { op, swapped }, &[a])
    }

    /// `act(gate) * up` with separate tensors of equal shape.
    pub fn glu_split(&mut self, gate: TensorId, up: TensorId, op: GluOp) -> Result<TensorId> {
        let (sg, su) = (self.desc(gate), self.desc(up));
        if sg.ne != su.ne {
            return shape_err(
                "GLU",
                format!(
                    "gate '{}' {:?} and up '{}' {:?} differ",
                    sg.name, sg.ne, su.name, su.ne
                ),
            );
        }
        let desc = TensorDesc::new(self.derived_name(gate, "glu"), sg.ty, &sg.ne);
        self.add_checked(desc, Op::Glu { op, swapped: false }, &[gate, up])
    }

    /// silu(gate) * up.
    pub fn swiglu_split(&mut self, gate: TensorId, up: TensorId) -> Result<TensorId> {
        self.glu_split(gate, up, GluOp::Swiglu)
    }

    /// Index of the maximum of each row: [a.ne1] I32 (a must be 2-d).
    pub fn argmax(&mut self, a: TensorId) -> Result<TensorId> {
        let sa = self.desc(a);
        if sa.ne[2] != 1 || sa.ne[3] != 1 || sa.ty != Type::F32 {
            return shape_err(
                "ARGMAX",
                format!("'{}' {} {:?} (need 2-d F32)", sa.name, sa.ty, sa.ne),
            );
        }
        let desc = TensorDesc::new(self.derived_name(a, "argmax"), Type::I32, &[sa.ne[1]]);
        self.add_checked(desc, Op::Argmax, &[a])
    }

    /// Fused attention: q [d, n_tokens, n_head], k [d, n_kv, n_head_kv],
    /// v [d_v, n_kv, n_head_kv], mask F16 [n_kv, >= n_tokens] -> [d_v, n_head, n_tokens] F32.
    pub fn flash_attn_ext(
        &mut self,
        q: TensorId,
        k: TensorId,
        v: TensorId,
        mask: Option<TensorId>,
        scale: f32,
        max_bias: f32,
        softcap: f32,
    ) -> Result<TensorId> {
        let (sq, sk, sv) = (self.desc(q), self.desc(k), self.desc(v));
        let ok = sq.ne[0] == sk.ne[0]
            && sk.ne[1] == sv.ne[1]
            && sk.ne[2] == sv.ne[2]
            && sk.ne[2] != 0
            && sq.ne[2] % sk.ne[2] == 0
            && sq.ty == Type::F32;
        if !ok {
            return shape_err(
                "FLASH_ATTN_EXT",
                format!(
                    "q {:?}, k {:?}, v {:?} do not fit together",
                    sq.ne, sk.ne, sv.ne
                ),
            );
        }
        if let Some(m) = mask {
            let sm = self.desc(m);
            if sm.ne[0] != sk.ne[1] || sm.ne[1] < sq.ne[1] {
                return shape_err(
                    "FLASH_ATTN_EXT",
                    format!("mask {:?} for k {:?}, q {:?}", sm.ne, sk.ne, sq.ne),
                );
            }
            // ggml reads the mask of this op as F16 whatever its type says;
            // holding to that keeps every graph runnable by ggml (over RPC).
            if sm.ty != Type::F16 {
                return shape_err(
                    "FLASH_ATTN_EXT",
                    format!("mask '{}' is {}, must be F16", sm.name, sm.ty),
                );
            }
        }
        let ne = [sv.ne[0], sq.ne[2], sq.ne[1], sq.ne[3]];
        let desc = TensorDesc::new(self.derived_name(q, "flash_attn"), Type::F32, &ne);
        let mut src = vec![q, k, v];
        src.extend(mask);
        self.add_checked(
            desc,
            Op::FlashAttnExt {
                scale,
                max_bias,
                softcap,
            },
            &src,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An `a` with an empty batch dimension (a hostile RPC graph) is a
    /// shape error, not a division by zero.
    #[test]
    fn mul_mat_of_an_empty_batch_is_an_error() {
        let mut g = Graph::new();
        for ne in [[4, 2, 0, 1], [4, 2, 1, 0]] {
            let a = g.new_tensor("a", Type::F32, &ne);
            let b = g.input("b", Type::F32, &[4, 3, 2, 2]);
            assert!(g.mul_mat(a, b).is_err(), "{ne:?}");
        }
    }

    #[test]
    fn builds_and_checks_shapes() {
        let mut g = Graph::new();
        let w = g.new_tensor("w", Type::Q4_0, &[64, 8]);
        let x = g.input("x", Type::F32, &[64, 3]);
        let y = g.mul_mat(w, x).unwrap();
        assert_eq!(g.desc(y).ne, [8, 3, 1, 1]);
        let bad = g.input("bad", Type::F32, &[63, 3]);
        let err = g.mul_mat(w, bad).unwrap_err().to_string();
        assert!(
            err.contains("MUL_MAT") && err.contains("[63, 3, 1, 1]"),
            "{err}"
        );
        let t = g.transpose(y).unwrap();
        assert_eq!(g.desc(t).ne, [3, 8, 1, 1]);
        assert_eq!(g.view_base(t), (y, 0));
        let p = g.permute(x, [0, 2, 1, 3]).unwrap();
        assert_eq!(g.desc(p).ne, [64, 1, 3, 1]);
        assert!(g.view(x, &[64, 4], &[256], 0).is_err());
        assert_eq!(g.compute_ids().collect::<Vec<_>>(), vec![y]);
    }

    #[test]
    fn every_change_gives_a_new_revision_and_reads_keep_it() {
        let mut g = Graph::new();
        let mut seen = vec![g.revision()];
        let mut changed = |g: &Graph| {
            assert!(!seen.contains(&g.revision()), "revision reused");
            seen.push(g.revision());
        };
        let x = g.input("x", Type::F32, &[4, 2]);
        changed(&g);
        let y = g.scale(x, 2.0).unwrap();
        changed(&g);
        g.set_name(y, "y");
        changed(&g);
        g.set_output(y);
        changed(&g);
        g.node_mut(y).at = None;
        changed(&g);

        let r = g.revision();
        let _ = (g.len(), g.node(y), g.desc(x), g.placement(y), g.validate(y));
        assert_eq!(g.revision(), r, "reading changed the revision");
        let mut c = g.clone();
        assert_eq!(c.revision(), r, "an unchanged clone is the same graph");
        c.set_name(x, "x2");
        assert_ne!(c.revision(), r);
        assert_eq!(g.revision(), r, "changing a clone changed its original");
        assert_ne!(Graph::new().revision(), Graph::new().revision());
    }
}
