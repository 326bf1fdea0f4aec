//! Fusions the CPU backend applies to a list of resolved nodes: the graph
//! stays as the model built it; the backend recognises a pattern whose
//! intermediate nobody else reads and computes it in fewer passes over
//! memory. Each fusion is decided once per resolved list (from the graph
//! and the resolved memory) and, where the data decides, confirmed at run
//! time, falling back to the unfused nodes when the data does not allow
//! it. `GGML_CPU_NO_FUSION=1` switches every fusion off.
//!
//! **Recurrent states read from and stored into their cache in place.** A
//! recurrent layer's op (SSM_SCAN, GATED_DELTA_NET) writes each sequence's
//! final state after its outputs; a SET_ROWS copies those states into the
//! recurrent cache at the rows of the sequences' cells. GATED_DELTA_NET
//! also reads its starting states through a GET_ROWS that gathers them from
//! the cache (SSM_SCAN reads the cache itself, by cell index). Fused, the
//! op reads the starting states from the cache rows and writes the final
//! ones straight into the cache rows: the GET_ROWS is skipped, and so is
//! the SET_ROWS whenever the row indices allow the in-place store (no
//! sequence's target row is another sequence's source row). For a state of
//! 1 MiB per layer (Mamba-2, Qwen3.5) that is two or three passes over it
//! less per layer and token.

use std::sync::OnceLock;

use ggml_core::graph::{Flags, Graph, TensorId};
use ggml_core::{Op, Type};

use crate::compute::Resolved;
use crate::ops::read_index;
use crate::tensor::View;

/// What a node does differently in a fused list.
#[derive(Clone, Debug)]
pub(crate) enum Fusion {
    /// A recurrent op: where its starting states come from and where its
    /// final states go, besides its own sources and result.
    States(Box<StateIo>),
    /// A GET_ROWS whose rows the recurrent op after it reads from the
    /// cache itself: nothing to compute.
    Skip,
    /// A SET_ROWS skipped when the recurrent op stored its rows in this run
    /// (see [`Stored`]).
    StoredBy,
}

/// Where a recurrent op's states come from and go to when fused.
#[derive(Clone, Debug, Default)]
pub(crate) struct StateIo {
    /// The starting states: rows of the cache, one per sequence.
    pub load: Option<Rows>,
    /// The final states: rows of the cache, one per sequence, and the
    /// SET_ROWS that would store them.
    pub store: Option<(Rows, TensorId)>,
}

/// Whole rows of an F32 cache (one state per row), chosen per sequence by
/// an index tensor of one I32 / I64 per sequence.
#[derive(Clone, Debug)]
pub(crate) struct Rows {
    pub cache: View,
    pub index: View,
}

impl Rows {
    /// The row of each of the `n_s` sequences, or the first bad index.
    pub(crate) fn read(&self, n_s: usize) -> std::result::Result<Vec<usize>, i64> {
        (0..n_s)
            .map(|s| {
                // SAFETY: element s of the index tensor, n_s long (checked
                // when the fusion was planned), inside its view.
                let v = unsafe { read_index(&self.index, [s, 0, 0, 0]) };
                usize::try_from(v)
                    .ok()
                    .filter(|&r| r < self.cache.ne[1])
                    .ok_or(v)
            })
            .collect()
    }

    /// Address of f32 `at` of row `row` (in range).
    pub(crate) fn ptr(&self, row: usize, at: usize) -> *mut f32 {
        (self.cache.ptr.get() as *mut f32).wrapping_add(row * self.cache.ne[0] + at)
    }
}

/// The target rows of a fused store, when the op can write them in place:
/// all inside the cache, distinct, and none another sequence's source row
/// (`src`, the rows the op reads its starting states from when they are in
/// the same cache). `None` leaves the store to the SET_ROWS, which also
/// reports bad indices.
pub(crate) fn store_rows(store: &Rows, src: Option<&[usize]>, n_s: usize) -> Option<Vec<usize>> {
    let dst = store.read(n_s).ok()?;
    for (s, &t) in dst.iter().enumerate() {
        let taken = dst[..s].contains(&t)
            || src.is_some_and(|src| src.iter().enumerate().any(|(o, &f)| o != s && f == t));
        if taken {
            return None;
        }
    }
    Some(dst)
}

/// The SET_ROWS nodes whose work a fused node did in this run of a list.
#[derive(Default, Debug)]
pub(crate) struct Stored(Vec<TensorId>);

impl Stored {
    pub(crate) fn clear(&mut self) {
        self.0.clear();
    }

    pub(crate) fn mark(&mut self, id: TensorId) {
        self.0.push(id);
    }

    /// True (once) when `id`'s work was done.
    pub(crate) fn take(&mut self, id: TensorId) -> bool {
        match self.0.iter().position(|&x| x == id) {
            Some(i) => {
                self.0.swap_remove(i);
                true
            }
            None => false,
        }
    }
}

fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("GGML_CPU_NO_FUSION").is_none_or(|v| v.is_empty()))
}

/// A recurrent op's layout: (bytes of outputs before the states, floats
/// of one sequence's state, sequences, source index of the starting
/// states read through a GET_ROWS, if the op reads them so).
fn recurrent(
    graph: &Graph,
    id: TensorId,
    r: &Resolved,
) -> Option<(usize, usize, usize, Option<usize>)> {
    match graph.node(id).op {
        Op::SsmScan => {
            let (s0, x) = (r.src.first()?, r.src.get(1)?);
            let [d_state, head_dim, n_head, _] = s0.ne;
            let [_, _, n_t, n_s] = x.ne;
            Some((
                4 * head_dim * n_head * n_t * n_s,
                d_state * head_dim * n_head,
                n_s,
                None,
            ))
        }
        Op::GatedDeltaNet => {
            let v = r.src.get(2)?;
            let [s, h_v, n_t, n_s] = v.ne;
            Some((4 * s * h_v * n_t * n_s, s * s * h_v, n_s, Some(5)))
        }
        _ => None,
    }
}

/// Decides the fusions of `list`, a resolved list of `graph`'s nodes
/// computed in order by this backend.
pub(crate) fn plan(graph: &Graph, list: &mut [(TensorId, Resolved)]) {
    if !enabled() {
        return;
    }
    let ops: Vec<usize> = (0..list.len())
        .filter(|&i| recurrent(graph, list[i].0, &list[i].1).is_some())
        .collect();
    if ops.is_empty() {
        return;
    }
    // Every reader, through views, of what these ops read and write:
    // (base tensor, offset and extent read, reader).
    let mut bases: Vec<TensorId> = ops.iter().map(|&i| list[i].0).collect();
    for &i in &ops {
        let node = graph.node(list[i].0);
        if let Some((_, _, _, Some(k))) = recurrent(graph, list[i].0, &list[i].1) {
            if let Some(&s) = node.src.get(k) {
                bases.push(graph.view_base(s).0);
            }
        }
    }
    let mut readers: Vec<(TensorId, usize, usize, TensorId)> = Vec::new();
    for reader in graph.ids() {
        // A view reads nothing: its readers are found through it.
        if graph.node(reader).op.is_view() {
            continue;
        }
        for &s in &graph.node(reader).src {
            let (base, off) = graph.view_base(s);
            if bases.contains(&base) {
                readers.push((base, off, graph.desc(s).nbytes(), reader));
            }
        }
    }
    for &i in &ops {
        let id = list[i].0;
        let Some((out_bytes, state, n_s, load_src)) = recurrent(graph, id, &list[i].1) else {
            continue;
        };
        if graph.node(id).flags.contains(Flags::OUTPUT) {
            continue;
        }
        let mut io = StateIo::default();
        let mut skip = None;
        if let Some(k) = load_src {
            if let Some((g, rows)) = load_states(graph, list, i, k, state, n_s, &readers) {
                io.load = Some(rows);
                skip = Some(g);
            }
        }
        let cache_of_load = io.load.as_ref().map(|l| l.cache.ptr.get());
        let store = store_states(graph, list, i, out_bytes, state, n_s, &readers);
        // An SSM_SCAN reads the cache it stores into by index; a loaded op
        // must store into the cache it loads from (else another sequence
        // could read a row this one overwrote).
        let store = store.filter(|(_, rows, _)| match (load_src, cache_of_load) {
            (None, _) => rows.cache.ptr.get() == list[i].1.src[0].ptr.get(),
            (Some(_), Some(c)) => rows.cache.ptr.get() == c,
            (Some(_), None) => true,
        });
        if let Some((j, rows, set_rows)) = store {
            io.store = Some((rows, set_rows));
            list[j].1.fusion = Some(Fusion::StoredBy);
        }
        if let Some(g) = skip {
            list[g].1.fusion = Some(Fusion::Skip);
        }
        if io.load.is_some() || io.store.is_some() {
            list[i].1.fusion = Some(Fusion::States(Box::new(io)));
        }
    }
}

/// Dense F32 rows of `width` floats.
fn dense_rows(v: &View, width: usize) -> bool {
    v.ty == Type::F32 && v.ne[0] == width && v.nb[0] == 4 && v.nb[1] == 4 * width
}

/// One index per sequence.
fn one_each(v: &View, n_s: usize) -> bool {
    v.ne == [n_s, 1, 1, 1] && matches!(v.ty, Type::I32 | Type::I64)
}

/// The GET_ROWS earlier in `list` whose result the op at `list[i]` reads
/// (whole, as source `k`) and nobody else reads, gathering whole state
/// rows of a cache: its position and the rows.
fn load_states(
    graph: &Graph,
    list: &[(TensorId, Resolved)],
    i: usize,
    k: usize,
    state: usize,
    n_s: usize,
    readers: &[(TensorId, usize, usize, TensorId)],
) -> Option<(usize, Rows)> {
    let op = list[i].0;
    let (g, off) = graph.view_base(*graph.node(op).src.get(k)?);
    if off != 0 || graph.node(g).op != Op::GetRows || graph.node(g).flags.contains(Flags::OUTPUT) {
        return None;
    }
    if readers.iter().any(|&(b, _, _, r)| b == g && r != op) {
        return None;
    }
    let j = list[..i].iter().position(|(id, _)| *id == g)?;
    let r = &list[j].1;
    let (cache, index) = (r.src.first()?, r.src.get(1)?);
    let gathered = &r.dst;
    let fits = dense_rows(cache, state)
        && one_each(index, n_s)
        && gathered.ne == [state, n_s, 1, 1]
        && list[i].1.src[k].is_contiguous()
        && list[i].1.src[k].ptr.get() == gathered.ptr.get();
    fits.then(|| {
        (
            j,
            Rows {
                cache: cache.clone(),
                index: index.clone(),
            },
        )
    })
}

/// The SET_ROWS later in `list` that stores the final states of the op at
/// `list[i]` (`state` floats per sequence after `out_bytes` of outputs)
/// and is their only reader: its position, target rows and id.
fn store_states(
    graph: &Graph,
    list: &[(TensorId, Resolved)],
    i: usize,
    out_bytes: usize,
    state: usize,
    n_s: usize,
    readers: &[(TensorId, usize, usize, TensorId)],
) -> Option<(usize, Rows, TensorId)> {
    let (op, r) = (list[i].0, &list[i].1);
    let mut store = None;
    for &(base, off, len, reader) in readers {
        if base != op || off + len <= out_bytes {
            continue;
        }
        if store.is_some_and(|s| s != reader) {
            return None;
        }
        store = Some(reader);
    }
    let set_rows = store?;
    let j = list[i + 1..].iter().position(|(id, _)| *id == set_rows)? + i + 1;
    let w = &list[j].1;
    if graph.node(set_rows).op != Op::SetRows || w.src.len() < 3 {
        return None;
    }
    let (cache, rows, index) = (&w.dst, &w.src[1], &w.src[2]);
    let fits = dense_rows(cache, state)
        && rows.ne == [state, n_s, 1, 1]
        && dense_rows(rows, state)
        && rows.ptr.get() == r.dst.ptr.get().wrapping_add(out_bytes)
        && one_each(index, n_s);
    fits.then(|| {
        (
            j,
            Rows {
                cache: cache.clone(),
                index: index.clone(),
            },
            set_rows,
        )
    })
}
