//! Assigning the graph's nodes to backends, pass by pass, and cutting it
//! into splits with their input copies (see the module documentation of
//! [`super`] for the passes).

use std::sync::Arc;

use smallvec::SmallVec;

use super::{is_view_op, Scheduler, Split, SplitInput, SCHED_MAX_SPLIT_INPUTS};
use crate::backend::{Buffer, BufferType, BufferUsage};
use crate::graph::{Flags, Graph, Node, TensorId};
use crate::op::Op;
use crate::{Error, Result};

fn base_buffer(graph: &Graph, id: TensorId) -> Option<&Arc<dyn Buffer>> {
    let (base, _) = graph.view_base(id);
    graph.node(base).at.as_ref().map(|p| &p.buffer)
}

fn same_buft(a: &Arc<dyn BufferType>, b: &Arc<dyn BufferType>) -> bool {
    std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b))
}

impl Scheduler {
    /// True when backend `b` can compute `id` (leaves and views compute nothing).
    fn supports(&self, graph: &Graph, b: usize, id: TensorId) -> bool {
        let op = &graph.node(id).op;
        *op == Op::None || op.is_view() || self.devices[b].supports_op(graph, id)
    }

    /// The highest-priority backend that can use the buffer holding `t`
    /// and run `op_node`.
    fn backend_from_buffer(&self, graph: &Graph, t: TensorId, op_node: TensorId) -> Option<usize> {
        let buf = base_buffer(graph, t)?;
        let buft = buf.buffer_type();
        (0..self.backends.len())
            .find(|&b| self.devices[b].supports_buft(&*buft) && self.supports(graph, b, op_node))
    }

    /// True when backend `b` can read `t` where it lives (or will live).
    fn buffer_supported(&self, graph: &Graph, t: TensorId, b: usize) -> bool {
        if let Some(buf) = base_buffer(graph, t) {
            return self.devices[b].supports_buft(&*buf.buffer_type());
        }
        let tb =
            self.backend_of[t.index()].or_else(|| self.backend_of[graph.view_base(t).0.index()]);
        tb.is_some_and(|tb| self.devices[b].supports_buft(&*self.bufts[tb]))
    }

    fn backend_from_cur(&self, graph: &Graph, id: TensorId) -> Result<Option<usize>> {
        if let Some(b) = self.backend_from_buffer(graph, id, id) {
            return Ok(Some(b));
        }
        let node = graph.node(id);
        if let Some(buf) = base_buffer(graph, id) {
            return Err(Error::Invalid(format!(
                "scheduler: tensor '{}' lives in a {} buffer, and no backend that can use it runs {}",
                node.desc.name,
                buf.buffer_type().name(),
                node.op.name()
            )));
        }
        if node.flags.contains(Flags::INPUT) {
            return Ok(Some(self.backends.len() - 1));
        }
        if matches!(node.op, Op::Rope(_)) {
            return Ok(None);
        }
        let cpu = self.backends.len() - 1;
        for &s in &node.src {
            let Some(buf) = base_buffer(graph, s) else {
                continue;
            };
            if buf.usage() != BufferUsage::Weights {
                continue;
            }
            let sb = self.backend_from_buffer(graph, s, id);
            if self.op_offload && sb == Some(cpu) && buf.buffer_type().is_host() {
                for b in 0..cpu {
                    if self.devices[b].supports_op(graph, id)
                        && self.devices[b].offload_op(graph, id)
                    {
                        return Ok(Some(b));
                    }
                }
            }
            return Ok(sb);
        }
        Ok(None)
    }

    fn set_if_supported(&mut self, graph: &Graph, id: TensorId, b: usize) {
        if self.supports(graph, b, id) {
            self.backend_of[id.index()] = Some(b);
        }
    }

    /// Spreads assignments to unassigned neighbours in `nodes` order;
    /// `skip_cpu` stops at CPU nodes instead of spreading the CPU.
    fn expand(&mut self, graph: &Graph, nodes: &[TensorId], skip_cpu: bool, reverse: bool) {
        let cpu = self.backends.len() - 1;
        let mut cur: Option<usize> = None;
        let mut step = |s: &mut Scheduler, id: TensorId| {
            if is_view_op(graph.node(id)) {
                return;
            }
            match s.backend_of[id.index()] {
                Some(b) if skip_cpu && b == cpu => cur = None,
                Some(b) => cur = Some(b),
                None => {
                    if let Some(c) = cur {
                        s.set_if_supported(graph, id, c);
                    }
                }
            }
        };
        if reverse {
            for &id in nodes.iter().rev() {
                step(self, id);
            }
        } else {
            for &id in nodes {
                step(self, id);
            }
        }
    }

    /// Assigns every node a backend, cuts the graph into splits with their
    /// input copies (appended to `graph`) and lists the allocation order.
    pub(super) fn split_graph(&mut self, graph: &mut Graph) -> Result<()> {
        // Whatever happens below, earlier allocations no longer describe
        // the scheduler's state.
        self.generation += 1;
        self.last_alloc = None;
        self.start_assignment(graph)?;
        let leaves: Vec<TensorId> = graph
            .ids()
            .filter(|&id| graph.node(id).op == Op::None)
            .collect();
        let nodes: Vec<TensorId> = graph
            .ids()
            .filter(|&id| graph.node(id).op != Op::None)
            .collect();
        self.assign_from_memory(graph, &leaves, &nodes)?;
        self.expand_all(graph, &nodes);
        self.upgrade_or_place(graph, &nodes);
        self.follow_views_and_consumers(graph, &leaves, &nodes)?;
        self.make_splits(graph, &nodes)?;
        self.allocation_order(graph, &leaves);
        Ok(())
    }

    /// Forgets the previous graph's assignment and splits, keeping the
    /// user's assignments; refuses a graph that was split before.
    fn start_assignment(&mut self, graph: &Graph) -> Result<()> {
        let n = graph.len();
        self.backend_of.clear();
        self.backend_of.resize(n, None);
        for (id, b) in self.user_backend.drain() {
            if id.index() < n {
                self.backend_of[id.index()] = Some(b);
            }
        }
        self.splits.clear();
        self.graph_inputs.clear();
        self.copies.clear();
        if let Some(id) = graph
            .ids()
            .find(|&id| graph.node(id).op == Op::None && !graph.node(id).src.is_empty())
        {
            return Err(Error::Invalid(format!(
                "scheduler: the graph was split before (copy '{}'); build a new graph per batch",
                graph.desc(id).name
            )));
        }
        Ok(())
    }

    /// Pass 1: tensors with memory, graph inputs, ops on weights.
    fn assign_from_memory(
        &mut self,
        graph: &Graph,
        leaves: &[TensorId],
        nodes: &[TensorId],
    ) -> Result<()> {
        for &id in leaves.iter().chain(nodes) {
            if self.backend_of[id.index()].is_none() {
                self.backend_of[id.index()] = self.backend_from_cur(graph, id)?;
            }
        }
        Ok(())
    }

    /// Pass 2: assignments spread to unassigned neighbours, first those of
    /// the non-CPU backends, downwards then upwards.
    fn expand_all(&mut self, graph: &Graph, nodes: &[TensorId]) {
        self.expand(graph, nodes, true, false);
        self.expand(graph, nodes, true, true);
        self.expand(graph, nodes, false, false);
        self.expand(graph, nodes, false, true);
    }

    /// Pass 3: a node moves to a higher-priority backend with the same
    /// buffer type that supports it and reads all its sources; a node still
    /// unassigned goes where most of its sources can be read.
    fn upgrade_or_place(&mut self, graph: &Graph, nodes: &[TensorId]) {
        for &id in nodes {
            if is_view_op(graph.node(id)) {
                continue;
            }
            match self.backend_of[id.index()] {
                None => self.place_by_sources(graph, id),
                Some(cur) => self.upgrade(graph, id, cur),
            }
        }
    }

    /// The supporting backend that can read the most of `id`'s assigned
    /// sources (the first of equals).
    fn place_by_sources(&mut self, graph: &Graph, id: TensorId) {
        let mut best: Option<usize> = None;
        for b in 0..self.backends.len() {
            if !self.supports(graph, b, id) {
                continue;
            }
            let n_ok = graph
                .node(id)
                .src
                .iter()
                .filter(|&&s| {
                    let assigned = self.backend_of[s.index()].is_some()
                        || self.backend_of[graph.view_base(s).0.index()].is_some();
                    assigned && self.buffer_supported(graph, s, b)
                })
                .count();
            if best.is_none_or(|nbest| n_ok > nbest) {
                best = Some(n_ok);
                self.backend_of[id.index()] = Some(b);
            }
        }
    }

    /// The first backend before `cur` with the same buffer type that
    /// supports `id` and can read all its sources, if any.
    fn upgrade(&mut self, graph: &Graph, id: TensorId, cur: usize) {
        for b in 0..cur {
            if same_buft(&self.bufts[b], &self.bufts[cur])
                && self.supports(graph, b, id)
                && graph
                    .node(id)
                    .src
                    .iter()
                    .all(|&s| self.buffer_supported(graph, s, b))
            {
                self.backend_of[id.index()] = Some(b);
                break;
            }
        }
    }

    /// Pass 4: views follow their source, what is left goes to the first
    /// backend supporting it, unassigned sources take their consumer's
    /// backend, and unused leaves the CPU's (they still need a buffer).
    fn follow_views_and_consumers(
        &mut self,
        graph: &Graph,
        leaves: &[TensorId],
        nodes: &[TensorId],
    ) -> Result<()> {
        let nb = self.backends.len();
        for &id in nodes {
            let node = graph.node(id);
            if self.backend_of[id.index()].is_none() && node.view.is_some() {
                self.backend_of[id.index()] = self.backend_of[graph.view_base(id).0.index()];
            }
            if self.backend_of[id.index()].is_none() {
                for b in 0..nb {
                    self.set_if_supported(graph, id, b);
                    if self.backend_of[id.index()].is_some() {
                        break;
                    }
                }
            }
            let Some(cur) = self.backend_of[id.index()] else {
                return Err(Error::Unsupported {
                    backend: "every backend".into(),
                    op: node.op.name().into(),
                    tensor: node.desc.name.clone(),
                });
            };
            for &s in &node.src {
                if self.backend_of[s.index()].is_some() {
                    continue;
                }
                if graph.node(s).view.is_some() {
                    let base = graph.view_base(s).0;
                    if self.backend_of[base.index()].is_none() {
                        self.backend_of[base.index()] = Some(cur);
                    }
                    self.backend_of[s.index()] = self.backend_of[base.index()];
                } else {
                    self.backend_of[s.index()] = Some(cur);
                }
            }
        }
        for &id in leaves {
            if self.backend_of[id.index()].is_none() {
                self.backend_of[id.index()] = Some(nb - 1);
            }
        }
        Ok(())
    }

    /// The allocation order: graph input copy sets, leaves, then each
    /// split's input copies followed by its nodes; and each tensor's
    /// buffer (its backend's).
    fn allocation_order(&mut self, graph: &Graph, leaves: &[TensorId]) {
        let nb = self.backends.len();
        let mut listed = vec![false; graph.len()];
        self.order.clear();
        for gi in &self.graph_inputs {
            for &c in &gi.copies {
                self.order.push(c);
                listed[c.index()] = true;
            }
        }
        for &id in leaves {
            if !listed[id.index()] {
                self.order.push(id);
                listed[id.index()] = true;
            }
        }
        for split in &self.splits {
            for input in &split.inputs {
                self.order.extend(input.copies.iter().copied());
            }
            self.order.extend(split.nodes.iter().copied());
        }
        self.buffer_ids.clear();
        self.buffer_ids
            .extend(self.backend_of.iter().map(|b| b.unwrap_or(nb - 1)));
    }

    fn push_copy(
        &mut self,
        graph: &mut Graph,
        src: TensorId,
        backend: usize,
        c: usize,
        flags: Flags,
        keep_src: bool,
    ) -> TensorId {
        let mut desc = graph.desc(src).clone();
        desc.name = format!("{}#{}#{c}", self.backends[backend].name(), desc.name);
        let id = graph.push(Node {
            desc,
            op: Op::None,
            src: if keep_src {
                std::iter::once(src).collect()
            } else {
                SmallVec::new()
            },
            view: None,
            flags,
            at: None,
        });
        self.backend_of.push(Some(backend));
        id
    }

    fn make_splits(&mut self, graph: &mut Graph, nodes: &[TensorId]) -> Result<()> {
        let cur_copy = self.cur_copy;
        let n_copies = self.n_copies;
        let copy_flags = if n_copies > 1 {
            let mut f = Flags::INPUT;
            f.insert(Flags::OUTPUT);
            f
        } else {
            Flags::default()
        };
        let mut pending_views: Vec<TensorId> = Vec::new();
        let mut split: Option<Split> = None;
        for &id in nodes {
            if is_view_op(graph.node(id)) {
                match split.as_mut() {
                    Some(s) => s.nodes.push(id),
                    None => pending_views.push(id),
                }
                continue;
            }
            let Some(b) = self.backend_of[id.index()] else {
                return Err(Error::Invalid(format!(
                    "scheduler: node '{}' has no backend",
                    graph.desc(id).name
                )));
            };
            let srcs: SmallVec<[TensorId; 4]> = graph.node(id).src.clone();
            let mut need_new = false;
            if let Some(s) = split
                .as_ref()
                .filter(|s| s.backend == b && !s.inputs.is_empty())
            {
                let mut n_new_inputs = 0;
                for &src in &srcs {
                    let elsewhere = self.backend_of[src.index()] != Some(b)
                        && !self.buffer_supported(graph, src, b);
                    let weight = base_buffer(graph, src)
                        .is_some_and(|buf| buf.usage() == BufferUsage::Weights);
                    if weight && elsewhere {
                        need_new = true;
                        break;
                    }
                    if elsewhere && !self.copies.contains_key(&(src, b)) {
                        n_new_inputs += 1;
                    }
                }
                if s.inputs.len() + n_new_inputs > SCHED_MAX_SPLIT_INPUTS {
                    need_new = true;
                }
            }
            if split.as_ref().is_none_or(|s| s.backend != b) || need_new {
                if let Some(s) = split.take() {
                    self.splits.push(s);
                }
                split = Some(Split {
                    backend: b,
                    nodes: std::mem::take(&mut pending_views),
                    compute: Vec::new(),
                    inputs: Vec::new(),
                });
            }
            let Some(s) = split.as_mut() else {
                continue;
            };
            s.nodes.push(id);
            s.compute.push(id);
            for (j, &src) in srcs.iter().enumerate() {
                let Some(sb) = self.backend_of[src.index()] else {
                    return Err(Error::Invalid(format!(
                        "scheduler: source '{}' of '{}' has no backend",
                        graph.desc(src).name,
                        graph.desc(id).name
                    )));
                };
                if n_copies > 1
                    && graph.node(src).flags.contains(Flags::INPUT)
                    && !self.copies.contains_key(&(src, sb))
                {
                    let mut set = SmallVec::new();
                    for c in 0..n_copies {
                        if c == cur_copy {
                            set.push(src);
                        } else {
                            set.push(self.push_copy(graph, src, sb, c, copy_flags, false));
                        }
                    }
                    self.copies.insert((src, sb), set.clone());
                    self.graph_inputs.push(SplitInput { src, copies: set });
                }
                if sb != b && !self.buffer_supported(graph, src, b) {
                    let copy = match self.copies.get(&(src, b)) {
                        Some(set) => set[cur_copy],
                        None => {
                            if s.inputs.len() >= SCHED_MAX_SPLIT_INPUTS {
                                return Err(Error::Invalid(format!(
                                    "scheduler: node '{}' needs more than {SCHED_MAX_SPLIT_INPUTS} inputs from other backends",
                                    graph.desc(id).name
                                )));
                            }
                            let mut set = SmallVec::new();
                            for c in 0..n_copies {
                                set.push(self.push_copy(graph, src, b, c, copy_flags, true));
                            }
                            let copy = set[cur_copy];
                            self.copies.insert((src, b), set.clone());
                            s.inputs.push(SplitInput { src, copies: set });
                            copy
                        }
                    };
                    graph.node_mut(id).src[j] = copy;
                }
            }
        }
        if let Some(s) = split {
            self.splits.push(s);
        }
        Ok(())
    }
}
