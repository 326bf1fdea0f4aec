//! The backend scheduler (ggml_backend_sched): decides which backend runs
//! each node of a graph, cuts the graph into splits of consecutive nodes on
//! one backend, copies each split's inputs from other backends, sizes one
//! compute buffer per backend and runs the splits in order.
//!
//! # Assignment
//! Backends are given in priority order, the CPU last. Each node gets a
//! backend in passes:
//! 1. a tensor that already has memory (a weight, the KV cache, or a view of
//!    one) runs on the highest-priority backend that can use its buffer type
//!    (and run its op); graph inputs go to the CPU; an op that reads a weight
//!    runs where the weight lives (ROPE excepted: its frequency factors are too
//!    small to decide), except that with `op_offload` an op whose weight lives
//!    in host memory of the CPU moves to the first higher-priority backend that
//!    supports it and wants it ([`Device::offload_op`], e.g. for batches of
//!    32 tokens or more);
//! 2. assignments spread to unassigned neighbours: first those of the non-CPU
//!    backends downwards then upwards, then any backend's downwards then
//!    upwards, each time only to nodes the backend supports;
//! 3. a node moves to a higher-priority backend with the same buffer type that
//!    supports it and can read all its sources; a still unassigned node goes
//!    to the backend that supports it and can read most of its sources;
//! 4. views follow their source; sources without a backend take their
//!    consumer's; whatever is left goes to the first backend supporting it.
//!
//! User assignments ([`Scheduler::set_tensor_backend`]) are never changed;
//! they apply to the next graph split ([`Scheduler::alloc_graph`] or
//! [`Scheduler::reserve`]) and are forgotten afterwards, since node ids
//! belong to one graph.
//!
//! # Splits and copies
//! Consecutive nodes on one backend form a split. A source that lives on
//! another backend whose memory the split's backend cannot read gets a copy:
//! the scheduler appends a leaf to the graph (named
//! `"{backend}#{source}#{copy}"`, with the source's layout and the source as
//! its only `src`, which keeps the source alive until the copy is made) and
//! rewrites the node's `src` to it. A source copied to one backend is copied
//! once per graph and reused by later splits on that backend. A split has at
//! most [`SCHED_MAX_SPLIT_INPUTS`] inputs: a node that would add more starts a
//! new split on the same backend (a node that alone needs more is an error). A node that reads a weight its backend
//! cannot read also starts a new split once the current one has inputs, so
//! that the memory of the copied weights can be reused.
//!
//! Because copies are appended (their ids are higher than their consumers'),
//! the scheduler computes from its per-split node lists, never in id order.
//! A graph is allocated by [`Scheduler::alloc_graph`] once; the next batch
//! gets a new graph, or the same one again through
//! [`Scheduler::reuse_graph`] (below). [`Scheduler::reserve`] works on a clone and leaves its
//! graph untouched.
//!
//! # Inputs
//! Graph inputs ([`Flags::INPUT`]: token ids, positions, masks) live on the
//! CPU (the last backend) unless assigned otherwise. After
//! [`Scheduler::alloc_graph`] the caller writes their data into
//! `graph.placement(id)` (host memory; [`Scheduler::set_input`] does it with
//! a size check); [`Scheduler::compute`] copies them to every split that
//! reads them on another backend, just before that split runs.
//!
//! # Reusing an allocated graph
//! A caller that computes graphs of the same shape over and over (one token
//! at a time) may keep a graph after computing it and run it again: it
//! takes [`Scheduler::last_allocation`] after [`Scheduler::alloc_graph`],
//! and before the next run asks [`Scheduler::reuse_graph`], which says yes
//! only while the scheduler's assignment, splits and compute buffers are
//! still those of that allocation (no other graph was split, no
//! reservation, no reset since). The caller answers for the rest: the graph
//! must be the one allocated, unchanged, and its inputs are written again
//! before each run. Every intermediate tensor and split copy is recomputed
//! by the run, so nothing of the previous run leaks into the next.
//!
//! # Pipeline parallelism
//! With `parallel`, the scheduler keeps [`SCHED_MAX_COPIES`] sets of split
//! inputs (and of graph inputs) and uses one per graph in turn, so that the
//! copies for one batch do not overwrite inputs a backend may still be reading
//! for the previous one; one event per backend and copy orders the copies
//! after the work that last read them. Set it only when the devices support
//! asynchronous compute and events (as llama.cpp does); without events the
//! scheduler falls back to synchronizing the backend.
//!
//! # Memory
//! [`Scheduler::reserve`] sizes one compute buffer per backend (a
//! [`crate::alloc::VBuffer`] of at most 16 chunks) for a worst-case graph;
//! afterwards [`Scheduler::alloc_graph`] allocates no buffer for graphs no
//! larger, and grows the buffers (reporting it) for graphs that are.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use smallvec::SmallVec;

use crate::alloc::GraphAlloc;
use crate::backend::{copy_placement, Backend, BufferType, Device, DeviceKind, Event, Placement};
use crate::graph::{Flags, Graph, Node, TensorId};
use crate::{Error, Result};

mod split;

/// Most backends a scheduler takes.
pub const SCHED_MAX_BACKENDS: usize = 16;
/// Sets of split inputs kept for pipeline parallelism.
pub const SCHED_MAX_COPIES: usize = 4;
/// Most inputs (copies from other backends) one split may have.
pub const SCHED_MAX_SPLIT_INPUTS: usize = 30;

/// Watches the nodes of a graph as they are computed (ggml's eval
/// callback): the scheduler first asks [`EvalObserver::wants`] of each node
/// in order, computes the nodes up to the next one wanted in one call to the
/// backend, waits for it, and shows it to [`EvalObserver::observe`]. Nodes
/// nobody wants cost no stop, so an observer that wants a few nodes keeps
/// most of the graph's speed.
pub trait EvalObserver: Send {
    /// Whether `id` is to be shown once computed (ggml's `ask`); every
    /// node unless told otherwise.
    fn wants(&mut self, graph: &Graph, id: TensorId) -> bool {
        let _ = (graph, id);
        true
    }

    /// Sees node `id` just after it is computed, with where its data is;
    /// its sources are still intact. Returning false stops the computation
    /// ([`Error::Aborted`]).
    fn observe(&mut self, graph: &Graph, id: TensorId, at: &Placement) -> bool;
}

impl<F> EvalObserver for F
where
    F: FnMut(&Graph, TensorId, &Placement) -> bool + Send,
{
    fn observe(&mut self, graph: &Graph, id: TensorId, at: &Placement) -> bool {
        self(graph, id, at)
    }
}

/// The observer a scheduler calls during compute (see [`EvalObserver`]);
/// a closure over (graph, node, placement) sees every node.
pub type EvalCallback = Box<dyn EvalObserver>;

/// Polled between splits (and between nodes when an eval callback is set);
/// returning true stops the computation ([`Error::Aborted`]).
pub type AbortCallback = Box<dyn FnMut() -> bool + Send>;

/// One allocation made by [`Scheduler::alloc_graph`], for
/// [`Scheduler::reuse_graph`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllocationId {
    /// The scheduler's assignment generation it belongs to.
    generation: u64,
    /// Nodes of the graph after splitting (copies included).
    n_nodes: usize,
    /// The copy set the graph reads its inputs from.
    copy: usize,
}

/// A tensor one split reads from another backend, with its copies (one per
/// copy set; the current set's copy is what the split's nodes read).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitInput {
    /// The tensor on its own backend.
    pub src: TensorId,
    /// Its copies, indexed by copy set.
    pub copies: SmallVec<[TensorId; SCHED_MAX_COPIES]>,
}

/// Consecutive nodes that run on one backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Split {
    backend: usize,
    nodes: Vec<TensorId>,
    compute: Vec<TensorId>,
    inputs: Vec<SplitInput>,
}

impl Split {
    /// Index of the backend that runs it.
    pub fn backend(&self) -> usize {
        self.backend
    }

    /// Its nodes in execution order, views included.
    pub fn nodes(&self) -> &[TensorId] {
        &self.nodes
    }

    /// The nodes handed to the backend (views compute nothing and are left out).
    pub fn compute_nodes(&self) -> &[TensorId] {
        &self.compute
    }

    /// Tensors copied in from other backends before it runs.
    pub fn inputs(&self) -> &[SplitInput] {
        &self.inputs
    }
}

/// Runs graphs over several backends (ggml_backend_sched).
pub struct Scheduler {
    backends: Vec<Box<dyn Backend>>,
    devices: Vec<Arc<dyn Device>>,
    bufts: Vec<Arc<dyn BufferType>>,
    galloc: GraphAlloc,
    graph_size: usize,
    op_offload: bool,
    n_copies: usize,
    cur_copy: usize,
    next_copy: usize,
    /// `events[backend][copy]`.
    events: Vec<Vec<Option<Arc<dyn Event>>>>,
    user_backend: HashMap<TensorId, usize>,
    backend_of: Vec<Option<usize>>,
    splits: Vec<Split>,
    graph_inputs: Vec<SplitInput>,
    copies: HashMap<(TensorId, usize), SmallVec<[TensorId; SCHED_MAX_COPIES]>>,
    order: Vec<TensorId>,
    buffer_ids: Vec<usize>,
    is_alloc: bool,
    alloc_len: usize,
    /// Bumped whenever the assignment, splits or compute buffers change
    /// (a split, a reservation, a reset): allocations of an older
    /// generation can no longer be reused.
    generation: u64,
    /// The last allocation by [`Scheduler::alloc_graph`].
    last_alloc: Option<AllocationId>,
    eval_cb: Option<EvalCallback>,
    abort_cb: Option<AbortCallback>,
}

impl fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scheduler")
            .field(
                "backends",
                &self.backends.iter().map(|b| b.name()).collect::<Vec<_>>(),
            )
            .field("n_splits", &self.splits.len())
            .field("n_copies", &self.n_copies)
            .field("op_offload", &self.op_offload)
            .finish()
    }
}

fn is_view_op(node: &Node) -> bool {
    node.op.is_view()
}

impl Scheduler {
    /// A scheduler over `backends` in priority order, the CPU last (at most
    /// [`SCHED_MAX_BACKENDS`]). `bufts` gives the compute buffer type of each
    /// backend (`None`: each device's own). `graph_size` is the largest graph
    /// (in nodes) it will be given. `parallel` keeps [`SCHED_MAX_COPIES`]
    /// input sets for pipeline parallelism; `op_offload` lets higher-priority
    /// backends take expensive ops whose weights are in host memory.
    pub fn new(
        backends: Vec<Box<dyn Backend>>,
        bufts: Option<Vec<Arc<dyn BufferType>>>,
        graph_size: usize,
        parallel: bool,
        op_offload: bool,
    ) -> Result<Scheduler> {
        let n = backends.len();
        if n == 0 || n > SCHED_MAX_BACKENDS {
            return Err(Error::Invalid(format!(
                "scheduler: {n} backends given, 1 to {SCHED_MAX_BACKENDS} allowed"
            )));
        }
        let devices: Vec<Arc<dyn Device>> = backends.iter().map(|b| b.device()).collect();
        if devices[n - 1].kind() != DeviceKind::Cpu {
            return Err(Error::Invalid(format!(
                "scheduler: the last backend must be the CPU, not {}",
                backends[n - 1].name()
            )));
        }
        let bufts = match bufts {
            Some(b) if b.len() != n => {
                return Err(Error::Invalid(format!(
                    "scheduler: {} buffer types for {n} backends",
                    b.len()
                )))
            }
            Some(b) => b,
            None => devices.iter().map(|d| d.buffer_type()).collect(),
        };
        for (i, bt) in bufts.iter().enumerate() {
            if !devices[i].supports_buft(&**bt) {
                return Err(Error::Invalid(format!(
                    "scheduler: backend {} cannot use buffer type {}",
                    backends[i].name(),
                    bt.name()
                )));
            }
        }
        let n_copies = if parallel { SCHED_MAX_COPIES } else { 1 };
        let events = devices
            .iter()
            .map(|d| {
                (0..n_copies)
                    .map(|_| if parallel { d.event_new() } else { None })
                    .collect()
            })
            .collect();
        Ok(Scheduler {
            galloc: GraphAlloc::with_buffer_types(bufts.clone())?,
            backends,
            devices,
            bufts,
            graph_size,
            op_offload,
            n_copies,
            cur_copy: 0,
            next_copy: 0,
            events,
            user_backend: HashMap::new(),
            backend_of: Vec::new(),
            splits: Vec::new(),
            graph_inputs: Vec::new(),
            copies: HashMap::new(),
            order: Vec::new(),
            buffer_ids: Vec::new(),
            is_alloc: false,
            alloc_len: 0,
            generation: 0,
            last_alloc: None,
            eval_cb: None,
            abort_cb: None,
        })
    }

    /// With `on`, [`Scheduler::reserve`] sizes the compute buffers with
    /// planned buffers that hold no memory: [`Scheduler::buffer_size`] then
    /// gives exactly what the same reservations would allocate, and the
    /// scheduler can plan but not compute.
    pub fn set_planning(&mut self, on: bool) {
        self.galloc.set_planning(on);
    }

    /// Number of backends.
    pub fn n_backends(&self) -> usize {
        self.backends.len()
    }

    /// Backend `i`, e.g. to set its thread count.
    pub fn backend_mut(&mut self, i: usize) -> Option<&mut (dyn Backend + 'static)> {
        self.backends.get_mut(i).map(|b| &mut **b)
    }

    /// Name of backend `i`.
    pub fn backend_name(&self, i: usize) -> Option<&str> {
        self.backends.get(i).map(|b| b.name())
    }

    /// Index of the backend named `name`.
    pub fn backend_index(&self, name: &str) -> Option<usize> {
        self.backends.iter().position(|b| b.name() == name)
    }

    /// Compute buffer type of backend `i`.
    pub fn buffer_type(&self, i: usize) -> Option<&Arc<dyn BufferType>> {
        self.bufts.get(i)
    }

    /// Largest graph (in nodes) the scheduler takes.
    pub fn graph_size(&self) -> usize {
        self.graph_size
    }

    /// Changes the largest graph (in nodes) the scheduler takes, e.g. when
    /// a context's graphs grow by the nodes of adapters.
    pub fn set_graph_size(&mut self, graph_size: usize) {
        self.graph_size = graph_size;
    }

    /// Whether expensive ops on host weights may move to other backends.
    pub fn op_offload(&self) -> bool {
        self.op_offload
    }

    /// Number of splits of the last graph split.
    pub fn n_splits(&self) -> usize {
        self.splits.len()
    }

    /// The splits of the last graph split.
    pub fn splits(&self) -> &[Split] {
        &self.splits
    }

    /// Graph inputs with their copy sets (only with pipeline parallelism).
    pub fn graph_inputs(&self) -> &[SplitInput] {
        &self.graph_inputs
    }

    /// Number of input copy sets: [`SCHED_MAX_COPIES`] with pipeline
    /// parallelism, else 1.
    pub fn n_copies(&self) -> usize {
        self.n_copies
    }

    /// The copy set the last allocated graph uses.
    pub fn cur_copy(&self) -> usize {
        self.cur_copy
    }

    /// Bytes of backend `i`'s compute buffer (0 when an earlier backend has
    /// the same buffer type and the memory is counted there).
    pub fn buffer_size(&self, i: usize) -> usize {
        self.galloc.buffer_size(i)
    }

    /// Compute buffers allocated so far, over all backends.
    pub fn n_buffer_allocs(&self) -> usize {
        self.galloc.n_buffer_allocs()
    }

    /// Runs `id` on backend `backend` in the next graph split by
    /// [`Scheduler::alloc_graph`] or [`Scheduler::reserve`].
    pub fn set_tensor_backend(&mut self, id: TensorId, backend: usize) -> Result<()> {
        if backend >= self.backends.len() {
            return Err(Error::Invalid(format!(
                "scheduler: backend {backend} does not exist ({} backends)",
                self.backends.len()
            )));
        }
        self.user_backend.insert(id, backend);
        Ok(())
    }

    /// The backend of `id`: as assigned by the last split, or by the user.
    pub fn tensor_backend(&self, id: TensorId) -> Option<usize> {
        self.backend_of
            .get(id.index())
            .copied()
            .flatten()
            .or_else(|| self.user_backend.get(&id).copied())
    }

    /// Sets (or clears) the observer that sees the nodes it wants after
    /// they are computed (see [`EvalObserver`]). While one is set, each
    /// split runs in pieces that end at the nodes it wants.
    pub fn set_eval_callback(&mut self, cb: Option<EvalCallback>) {
        self.eval_cb = cb;
    }

    /// Sets (or clears) the abort callback.
    pub fn set_abort_callback(&mut self, cb: Option<AbortCallback>) {
        self.abort_cb = cb;
    }

    /// Forgets pending user assignments, the last graph's assignments and
    /// the current allocation.
    pub fn reset(&mut self) {
        self.user_backend.clear();
        self.backend_of.clear();
        self.is_alloc = false;
        self.generation += 1;
        self.last_alloc = None;
    }

    /// Waits for every backend. Outside an allocated graph, the next graph
    /// uses copy set 0 again (so that a synchronous decode loop always sees
    /// the same graph).
    pub fn synchronize(&mut self) -> Result<()> {
        for b in &mut self.backends {
            b.synchronize()?;
        }
        if !self.is_alloc {
            self.next_copy = 0;
        }
        Ok(())
    }

    /// Sizes the compute buffers for `graph`, a worst case (e.g. a full
    /// ubatch of prompt tokens): splits a clone of it and allocates the
    /// buffers its plan needs. Later graphs no larger allocate nothing.
    pub fn reserve(&mut self, graph: &Graph) -> Result<()> {
        self.check_size(graph)?;
        self.synchronize()?;
        let mut g = graph.clone();
        self.split_graph(&mut g)?;
        self.galloc.reserve_n(&g, &self.order, &self.buffer_ids)?;
        self.reset();
        Ok(())
    }

    /// Assigns backends, splits `graph` (appending copy leaves) and places
    /// every intermediate tensor. Returns true when the compute buffers had
    /// to grow (the graph was larger than any reserved). Write the inputs'
    /// data afterwards, then call [`Scheduler::compute`].
    pub fn alloc_graph(&mut self, graph: &mut Graph) -> Result<bool> {
        self.check_size(graph)?;
        self.cur_copy = self.next_copy;
        self.next_copy = (self.next_copy + 1) % self.n_copies;
        self.split_graph(graph)?;
        self.galloc.plan(graph, &self.order, &self.buffer_ids)?;
        if self.galloc.needs_growth() {
            // buffers are about to be replaced: nothing may still use them
            for b in &mut self.backends {
                b.synchronize()?;
            }
        }
        let grew = self.galloc.commit(graph)?;
        self.is_alloc = true;
        self.alloc_len = graph.len();
        self.last_alloc = Some(AllocationId {
            generation: self.generation,
            n_nodes: graph.len(),
            copy: self.cur_copy,
        });
        Ok(grew)
    }

    /// The last allocation by [`Scheduler::alloc_graph`], while it can
    /// still be reused (see [`Scheduler::reuse_graph`]).
    pub fn last_allocation(&self) -> Option<AllocationId> {
        self.last_alloc.filter(|a| a.generation == self.generation)
    }

    /// Makes `graph`, allocated earlier as `id` and computed since, ready to
    /// compute again without splitting or placing it anew: true when the
    /// scheduler still holds that allocation (no graph was split, no
    /// reservation or reset since, no pending user assignment), false when
    /// the caller must build and allocate a new graph. `graph` must be the
    /// graph that was allocated, unchanged; write its inputs afterwards,
    /// then call [`Scheduler::compute`]. With pipeline parallelism it waits
    /// for the backends first, since the graph reads its inputs from the
    /// same copy set every time.
    pub fn reuse_graph(&mut self, graph: &Graph, id: AllocationId) -> Result<bool> {
        if self.last_allocation() != Some(id)
            || graph.len() != id.n_nodes
            || !self.user_backend.is_empty()
        {
            return Ok(false);
        }
        if self.n_copies > 1 {
            for b in &mut self.backends {
                b.synchronize()?;
            }
        }
        self.cur_copy = id.copy;
        self.is_alloc = true;
        self.alloc_len = id.n_nodes;
        Ok(true)
    }

    /// Writes `data` into input `id` of an allocated graph.
    pub fn set_input(graph: &Graph, id: TensorId, data: &[u8]) -> Result<()> {
        let want = graph.desc(id).nbytes();
        if data.len() != want {
            return Err(Error::Invalid(format!(
                "input '{}' takes {want} bytes, {} given",
                graph.desc(id).name,
                data.len()
            )));
        }
        let p = graph.placement_or_err(id)?;
        p.buffer.set_tensor(p.offset, data)
    }

    /// Computes `graph` (allocating it first unless [`Scheduler::alloc_graph`]
    /// was called for it) and waits for the result.
    pub fn compute(&mut self, graph: &mut Graph) -> Result<()> {
        let r = self.compute_async(graph);
        let s = self.synchronize();
        r.and(s)
    }

    /// Like [`Scheduler::compute`], without waiting at the end: backends that
    /// run asynchronously may still be working when it returns (call
    /// [`Scheduler::synchronize`] before reading results).
    pub fn compute_async(&mut self, graph: &mut Graph) -> Result<()> {
        if !self.is_alloc {
            self.alloc_graph(graph)?;
        } else if graph.len() != self.alloc_len {
            return Err(Error::Invalid(
                "scheduler: compute was given a graph other than the one allocated".into(),
            ));
        }
        let r = self.compute_splits(graph);
        self.is_alloc = false;
        r
    }

    fn check_size(&self, graph: &Graph) -> Result<()> {
        if graph.len() > self.graph_size {
            return Err(Error::Invalid(format!(
                "scheduler: graph of {} nodes, created for at most {}",
                graph.len(),
                self.graph_size
            )));
        }
        Ok(())
    }

    fn aborted(&mut self) -> bool {
        self.abort_cb.as_mut().is_some_and(|cb| cb())
    }

    /// Computes split `si` for the eval observer: the nodes up to the next
    /// one it wants in one backend call, then that node is shown to it.
    fn compute_observed(&mut self, graph: &Graph, si: usize) -> Result<()> {
        let b = self.splits[si].backend;
        let n = self.splits[si].nodes.len();
        let mut run: Vec<TensorId> = Vec::new();
        let mut start = 0;
        while start < n {
            if self.aborted() {
                return Err(Error::Aborted);
            }
            let nodes = &self.splits[si].nodes;
            let Some(cb) = self.eval_cb.as_mut() else {
                return Ok(());
            };
            let wanted = (start..n).find(|&k| cb.wants(graph, nodes[k]));
            let last = wanted.unwrap_or(n - 1);
            run.clear();
            run.extend(
                nodes[start..=last]
                    .iter()
                    .copied()
                    .filter(|&id| !is_view_op(graph.node(id))),
            );
            if !run.is_empty() {
                self.backends[b].graph_compute(graph, &run)?;
                self.backends[b].synchronize()?;
            }
            if let Some(k) = wanted {
                let id = self.splits[si].nodes[k];
                let p = graph.placement_or_err(id)?;
                if let Some(cb) = self.eval_cb.as_mut() {
                    if !cb.observe(graph, id, &p) {
                        return Err(Error::Aborted);
                    }
                }
            }
            start = last + 1;
        }
        Ok(())
    }

    // ------------------------------------------------------------ compute

    fn compute_splits(&mut self, graph: &Graph) -> Result<()> {
        let cur = self.cur_copy;
        for si in 0..self.splits.len() {
            if self.aborted() {
                return Err(Error::Aborted);
            }
            let b = self.splits[si].backend;
            let event = self.events[b][cur].clone();
            for input in &self.splits[si].inputs {
                let (src, dst) = (input.src, input.copies[cur]);
                let sp = graph.placement_or_err(src)?;
                let dp = graph.placement_or_err(dst)?;
                let size = graph.desc(src).nbytes();
                let backend = &mut self.backends[b];
                if graph.node(src).flags.contains(Flags::INPUT) {
                    // the caller may overwrite its inputs once compute returns:
                    // copy them now
                    match &event {
                        Some(e) => e.synchronize()?,
                        None => backend.synchronize()?,
                    }
                    copy_placement(&sp, &dp, size)?;
                } else {
                    // the split's backend must be done with this copy set
                    match &event {
                        Some(e) => backend.event_wait(&**e)?,
                        None => backend.synchronize()?,
                    }
                    if !backend.cpy_tensor_async(&sp, &dp, size)? {
                        let from = self.backend_of[src.index()].unwrap_or(b);
                        self.backends[from].synchronize()?;
                        match &event {
                            Some(e) => e.synchronize()?,
                            None => self.backends[b].synchronize()?,
                        }
                        copy_placement(&sp, &dp, size)?;
                    }
                }
            }
            if self.eval_cb.is_none() {
                let split = &self.splits[si];
                if !split.compute.is_empty() {
                    self.backends[b].graph_compute(graph, &split.compute)?;
                }
            } else {
                self.compute_observed(graph, si)?;
            }
            if !self.splits[si].inputs.is_empty() {
                if let Some(e) = &event {
                    self.backends[b].event_record(&**e)?;
                }
            }
        }
        Ok(())
    }
}
