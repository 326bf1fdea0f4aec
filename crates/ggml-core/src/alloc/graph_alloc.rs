//! The graph allocator (ggml_gallocr): gives every intermediate tensor of a
//! graph memory in a compute buffer, reusing the memory of tensors no longer
//! needed and computing in place where the op allows it.
//!
//! Rules, as ggml has them:
//! - only nodes that are not views and have no placement yet get memory;
//!   views share their base's memory, imported tensors (weights, KV cache)
//!   keep theirs;
//! - graph inputs ([`Flags::INPUT`]) are allocated before anything else and
//!   never freed while the graph runs; outputs ([`Flags::OUTPUT`], or the
//!   base of an output view) are never freed;
//! - a tensor is freed after its last consumer has been allocated; a view
//!   counts as a consumer of its source, and the base of a view stays alive
//!   until every consumer of the view has run;
//! - a node whose op can run in place ([`crate::Op::can_inplace`]) takes over the
//!   memory of its first source when that source has exactly one consumer,
//!   no views, the same type, shape and strides, lives in the same buffer
//!   type, was allocated here and is neither an input nor an output.
//!
//! Planning happens on every call (it is cheap: one pass over the nodes);
//! [`GraphAlloc::reserve`] sizes the buffers for a worst case once, after
//! which [`GraphAlloc::alloc_graph`] allocates no buffer for any graph whose
//! plan fits, and grows (reporting it) only when one does not. When the
//! greedy plan of a smaller graph does not fit buffers of several chunks, a
//! second plan that prefers room inside the existing chunks is tried first.

use std::fmt;
use std::sync::Arc;

use super::{Addr, DynAlloc, VBuffer};
use crate::backend::{BufferType, BufferUsage};
use crate::graph::{Flags, Graph, TensorId};
use crate::{Error, Result};

/// Plans and allocates the intermediate tensors of graphs into one virtual
/// buffer per buffer type.
pub struct GraphAlloc {
    bufts: Vec<Arc<dyn BufferType>>,
    /// Buffer type index -> slot; indices with the same buffer type share one.
    slot_of: Vec<usize>,
    slots: Vec<Slot>,
    state: Vec<NodeState>,
    order: Vec<TensorId>,
    planned: Option<usize>,
    n_inplace: usize,
}

impl fmt::Debug for GraphAlloc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GraphAlloc")
            .field(
                "bufts",
                &self.bufts.iter().map(|b| b.name()).collect::<Vec<_>>(),
            )
            .field(
                "sizes",
                &self.slots.iter().map(|s| s.vbuf.size()).collect::<Vec<_>>(),
            )
            .finish()
    }
}

struct Slot {
    planner: DynAlloc,
    vbuf: VBuffer,
}

#[derive(Clone, Copy, Default)]
struct NodeState {
    n_children: u32,
    n_views: u32,
    /// Memory currently held (not freed, not handed to an in-place child).
    live: bool,
    /// Base of an output view: never freed.
    pinned: bool,
    /// Appeared in the order already.
    seen: bool,
    slot: u32,
    addr: Option<Addr>,
    size: usize,
}

#[derive(Clone, Copy)]
enum Ids<'a> {
    All(usize),
    Per(&'a [usize]),
}

impl Ids<'_> {
    fn get(self, id: TensorId) -> usize {
        match self {
            Ids::All(b) => b,
            Ids::Per(v) => v[id.index()],
        }
    }
}

fn same_buft(a: &Arc<dyn BufferType>, b: &Arc<dyn BufferType>) -> bool {
    std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b))
}

impl GraphAlloc {
    /// An allocator for graphs whose tensors all go to one buffer type.
    pub fn new(buft: Arc<dyn BufferType>) -> GraphAlloc {
        let planner = DynAlloc::new(buft.alignment(), buft.max_size());
        GraphAlloc {
            slots: vec![Slot {
                planner,
                vbuf: VBuffer::new(buft.clone(), BufferUsage::Compute),
            }],
            bufts: vec![buft],
            slot_of: vec![0],
            state: Vec::new(),
            order: Vec::new(),
            planned: None,
            n_inplace: 0,
        }
    }

    /// An allocator over several buffer types (one per backend of a
    /// scheduler); nodes are assigned one by index. Indices with the same
    /// buffer type share one virtual buffer.
    pub fn with_buffer_types(bufts: Vec<Arc<dyn BufferType>>) -> Result<GraphAlloc> {
        if bufts.is_empty() {
            return Err(Error::Invalid(
                "graph allocator: at least one buffer type is needed".into(),
            ));
        }
        let mut slot_of = Vec::with_capacity(bufts.len());
        let mut slots: Vec<Slot> = Vec::new();
        for (i, bt) in bufts.iter().enumerate() {
            match (0..i).find(|&j| same_buft(&bufts[j], bt)) {
                Some(j) => slot_of.push(slot_of[j]),
                None => {
                    slot_of.push(slots.len());
                    slots.push(Slot {
                        planner: DynAlloc::new(bt.alignment(), bt.max_size()),
                        vbuf: VBuffer::new(bt.clone(), BufferUsage::Compute),
                    });
                }
            }
        }
        Ok(GraphAlloc {
            bufts,
            slot_of,
            slots,
            state: Vec::new(),
            order: Vec::new(),
            planned: None,
            n_inplace: 0,
        })
    }

    /// With `on`, buffers grow as planned buffers that hold no memory: a
    /// memory plan reaching exactly the sizes a real reservation would.
    pub fn set_planning(&mut self, on: bool) {
        for s in &mut self.slots {
            s.vbuf.set_planning(on);
        }
    }

    /// Number of buffer type indices.
    pub fn n_buffer_types(&self) -> usize {
        self.bufts.len()
    }

    /// The buffer type of index `i`.
    pub fn buffer_type(&self, i: usize) -> Option<&Arc<dyn BufferType>> {
        self.bufts.get(i)
    }

    /// Bytes allocated for buffer type index `i`; 0 when an earlier index
    /// has the same buffer type (its memory is counted there).
    pub fn buffer_size(&self, i: usize) -> usize {
        match self.slot_of.get(i) {
            Some(&s) if self.slot_of[..i].iter().all(|&x| x != s) => self.slots[s].vbuf.size(),
            _ => 0,
        }
    }

    /// The virtual buffer behind buffer type index `i`.
    pub fn vbuffer(&self, i: usize) -> Option<&VBuffer> {
        self.slot_of.get(i).map(|&s| &self.slots[s].vbuf)
    }

    /// Real buffers allocated by this allocator so far.
    pub fn n_buffer_allocs(&self) -> usize {
        self.slots.iter().map(|s| s.vbuf.n_allocs()).sum()
    }

    /// Nodes computed in place over their source in the last plan.
    pub fn n_inplace(&self) -> usize {
        self.n_inplace
    }

    /// Sizes the buffers for `graph` (every node, in id order, one buffer
    /// type) without placing anything. Returns true when buffers were
    /// allocated.
    pub fn reserve(&mut self, graph: &Graph) -> Result<bool> {
        self.plan_all(graph)?;
        self.grow()
    }

    /// Like [`GraphAlloc::reserve`], with an explicit order of the nodes and
    /// a buffer type index per node (`buffer_ids[id.index()]`).
    pub fn reserve_n(
        &mut self,
        graph: &Graph,
        order: &[TensorId],
        buffer_ids: &[usize],
    ) -> Result<bool> {
        self.plan(graph, order, buffer_ids)?;
        self.grow()
    }

    /// Places every node of `graph` that needs memory (in id order, one
    /// buffer type). Returns true when the reserved buffers were too small
    /// and had to grow.
    pub fn alloc_graph(&mut self, graph: &mut Graph) -> Result<bool> {
        self.plan_all(graph)?;
        self.commit(graph)
    }

    /// Like [`GraphAlloc::alloc_graph`], with an explicit order and a buffer
    /// type index per node. Nodes that are not in `order` get memory only
    /// when an ordered node uses them.
    pub fn alloc_graph_n(
        &mut self,
        graph: &mut Graph,
        order: &[TensorId],
        buffer_ids: &[usize],
    ) -> Result<bool> {
        self.plan(graph, order, buffer_ids)?;
        self.commit(graph)
    }

    /// The bytes per buffer type `graph` needs (one buffer type, id order),
    /// without allocating: a dry run.
    pub fn measure(&mut self, graph: &Graph) -> Result<Vec<usize>> {
        self.plan_all(graph)?;
        Ok(self.planned_sizes())
    }

    /// Like [`GraphAlloc::measure`], with an explicit order and buffer ids.
    pub fn measure_n(
        &mut self,
        graph: &Graph,
        order: &[TensorId],
        buffer_ids: &[usize],
    ) -> Result<Vec<usize>> {
        self.plan(graph, order, buffer_ids)?;
        Ok(self.planned_sizes())
    }

    fn planned_sizes(&self) -> Vec<usize> {
        (0..self.bufts.len())
            .map(|i| {
                let s = self.slot_of[i];
                if self.slot_of[..i].contains(&s) {
                    0
                } else {
                    self.slots[s].planner.total_size()
                }
            })
            .collect()
    }

    fn plan_all(&mut self, graph: &Graph) -> Result<()> {
        if self.bufts.len() != 1 {
            return Err(Error::Invalid(
                "graph allocator: several buffer types need an assignment per node".into(),
            ));
        }
        let mut order = std::mem::take(&mut self.order);
        order.clear();
        order.extend(graph.ids());
        let r = self.plan_impl(graph, &order, Ids::All(0));
        self.order = order;
        r
    }

    /// Plans `graph` visiting `order`, with buffer type `buffer_ids[id]` per
    /// node. Nothing is allocated or placed until [`GraphAlloc::commit`].
    pub(crate) fn plan(
        &mut self,
        graph: &Graph,
        order: &[TensorId],
        buffer_ids: &[usize],
    ) -> Result<()> {
        if buffer_ids.len() < graph.len() {
            return Err(Error::Invalid(format!(
                "graph allocator: {} buffer ids for a graph of {} nodes",
                buffer_ids.len(),
                graph.len()
            )));
        }
        self.plan_impl(graph, order, Ids::Per(buffer_ids))
    }

    /// True when the last plan does not fit the buffers allocated so far.
    pub(crate) fn needs_growth(&self) -> bool {
        self.slots
            .iter()
            .any(|s| !s.vbuf.fits(&s.planner.chunk_sizes()))
    }

    fn grow(&mut self) -> Result<bool> {
        let mut grew = false;
        for s in &mut self.slots {
            grew |= s.vbuf.grow(&s.planner.chunk_sizes())? > 0;
        }
        Ok(grew)
    }

    /// Allocates what the last plan needs (growing buffers only when they
    /// are too small) and sets the placements. Returns whether it grew.
    pub(crate) fn commit(&mut self, graph: &mut Graph) -> Result<bool> {
        match self.planned.take() {
            Some(n) if n == graph.len() => {}
            _ => {
                return Err(Error::Invalid(
                    "graph allocator: the graph to place is not the one planned".into(),
                ))
            }
        }
        let grew = self.grow()?;
        for (i, st) in self.state.iter().enumerate() {
            let Some(addr) = st.addr else { continue };
            let p = self.slots[st.slot as usize].vbuf.placement(addr)?;
            let node = graph.node_mut(TensorId(i as u32));
            p.buffer.init_tensor(&node.desc, p.offset)?;
            node.at = Some(p);
        }
        Ok(grew)
    }

    /// Plans as ggml does; when that plan does not fit the buffers that
    /// exist, plans again preferring room inside them, and keeps that plan
    /// when it fits (a smaller graph whose greedy layout happens to differ
    /// then still needs no new buffer). Otherwise the first plan stands and
    /// the buffers will grow to it.
    fn plan_impl(&mut self, graph: &Graph, order: &[TensorId], ids: Ids<'_>) -> Result<()> {
        self.plan_once(graph, order, ids, false)?;
        let have_buffers = self.slots.iter().any(|s| s.vbuf.n_chunks() > 0);
        if have_buffers && self.needs_growth() {
            self.plan_once(graph, order, ids, true)?;
            if self.needs_growth() {
                self.plan_once(graph, order, ids, false)?;
            }
        }
        Ok(())
    }

    fn plan_once(
        &mut self,
        graph: &Graph,
        order: &[TensorId],
        ids: Ids<'_>,
        prefer_existing: bool,
    ) -> Result<()> {
        self.planned = None;
        let n = graph.len();
        for s in &mut self.slots {
            if prefer_existing {
                let caps = s.vbuf.chunk_sizes();
                s.planner.reset_with_capacities(&caps);
            } else {
                s.planner.reset();
            }
        }
        self.state.clear();
        self.state.resize(n, NodeState::default());
        let mut p = Planner {
            graph,
            ids,
            bufts: &self.bufts,
            slot_of: &self.slot_of,
            slots: &mut self.slots,
            state: &mut self.state,
            n_inplace: 0,
        };
        p.run(order)?;
        self.n_inplace = p.n_inplace;
        self.planned = Some(n);
        Ok(())
    }
}

struct Planner<'a> {
    graph: &'a Graph,
    ids: Ids<'a>,
    bufts: &'a [Arc<dyn BufferType>],
    slot_of: &'a [usize],
    slots: &'a mut [Slot],
    state: &'a mut [NodeState],
    n_inplace: usize,
}

impl Planner<'_> {
    fn run(&mut self, order: &[TensorId]) -> Result<()> {
        let g = self.graph;
        // consumers and views
        for &id in order {
            let st = self.state.get_mut(id.index()).ok_or_else(|| {
                Error::Invalid(format!(
                    "graph allocator: node {} is not in the graph ({} nodes)",
                    id.0,
                    g.len()
                ))
            })?;
            if st.seen {
                return Err(Error::Invalid(format!(
                    "graph allocator: node '{}' appears twice in the order",
                    g.desc(id).name
                )));
            }
            st.seen = true;
            let node = g.node(id);
            if node.view.is_some() {
                let (base, _) = g.view_base(id);
                let bs = &mut self.state[base.index()];
                bs.n_views += 1;
                if node.flags.contains(Flags::OUTPUT) {
                    bs.pinned = true;
                }
            }
            for &s in &node.src {
                self.state[s.index()].n_children += 1;
            }
        }
        // inputs first, so that nothing is ever placed over them
        for &id in order {
            if g.node(id).flags.contains(Flags::INPUT) {
                self.ensure(id)?;
            }
        }
        for &id in order {
            let node = g.node(id);
            for &s in &node.src {
                self.ensure(s)?;
            }
            self.ensure(id)?;
            for &s in &node.src {
                self.release(s)?;
            }
        }
        Ok(())
    }

    /// Gives `id` (or the base of the view `id`) memory if it needs some and
    /// has none yet.
    fn ensure(&mut self, id: TensorId) -> Result<()> {
        let g = self.graph;
        let id = if g.node(id).view.is_some() {
            g.view_base(id).0
        } else {
            id
        };
        let node = g.node(id);
        if node.at.is_some() || self.state[id.index()].addr.is_some() {
            return Ok(());
        }
        let b = self.ids.get(id);
        let slot = *self.slot_of.get(b).ok_or_else(|| {
            Error::Invalid(format!(
                "graph allocator: tensor '{}' assigned to buffer type {b}, only {} exist",
                node.desc.name,
                self.bufts.len()
            ))
        })?;
        if node.op.can_inplace() {
            if let Some(&p) = node.src.first() {
                if self.can_take_over(id, p, slot) {
                    let ps = self.state[p.index()];
                    self.state[p.index()].live = false;
                    let st = &mut self.state[id.index()];
                    st.addr = ps.addr;
                    st.slot = ps.slot;
                    st.size = ps.size;
                    st.live = true;
                    self.n_inplace += 1;
                    return Ok(());
                }
            }
        }
        let size = self.bufts[b].alloc_size(&node.desc);
        let addr = self.slots[slot]
            .planner
            .alloc(size)
            .map_err(|e| Error::Alloc {
                name: self.bufts[b].name().to_string(),
                size,
                reason: format!("tensor '{}': {e}", node.desc.name),
            })?;
        let st = &mut self.state[id.index()];
        st.addr = Some(addr);
        st.slot = slot as u32;
        st.size = size;
        st.live = true;
        Ok(())
    }

    /// True when `node` may be computed in place over its source `parent`.
    fn can_take_over(&self, node: TensorId, parent: TensorId, slot: usize) -> bool {
        let g = self.graph;
        let (n, p) = (g.node(node), g.node(parent));
        let ps = &self.state[parent.index()];
        p.view.is_none()
            && p.at.is_none()
            && ps.live
            && ps.slot as usize == slot
            && !ps.pinned
            && !p.flags.contains(Flags::OUTPUT)
            && !p.flags.contains(Flags::INPUT)
            && ps.n_children == 1
            && ps.n_views == 0
            && p.desc.ty == n.desc.ty
            && p.desc.ne == n.desc.ne
            && p.desc.nb == n.desc.nb
    }

    /// One consumer of `id` is done: free it (or its view base) when that
    /// was the last use.
    fn release(&mut self, id: TensorId) -> Result<()> {
        let g = self.graph;
        let st = &mut self.state[id.index()];
        st.n_children = st.n_children.saturating_sub(1);
        if st.n_children > 0 || st.n_views > 0 {
            return Ok(());
        }
        if g.node(id).view.is_some() {
            let (base, _) = g.view_base(id);
            let bs = &mut self.state[base.index()];
            bs.n_views = bs.n_views.saturating_sub(1);
            if bs.n_views == 0 && bs.n_children == 0 && bs.live {
                self.free(base)?;
            }
        } else if st.live {
            self.free(id)?;
        }
        Ok(())
    }

    fn free(&mut self, id: TensorId) -> Result<()> {
        let node = self.graph.node(id);
        let st = &mut self.state[id.index()];
        if st.pinned || node.flags.contains(Flags::OUTPUT) || node.flags.contains(Flags::INPUT) {
            return Ok(());
        }
        if let Some(addr) = st.addr {
            st.live = false;
            self.slots[st.slot as usize].planner.free(addr, st.size)?;
        }
        Ok(())
    }
}
