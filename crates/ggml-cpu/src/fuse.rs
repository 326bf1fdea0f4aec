//! Fusions the CPU backend applies to a list of resolved nodes: the graph
//! stays as the model built it; the backend recognises a pattern whose
//! intermediate nobody else reads and computes it in fewer passes over
//! memory. Each fusion is decided once per resolved list (from the graph
//! and the resolved memory) and confirmed at run time from the data (row
//! indices), falling back to the unfused nodes when the data does not
//! allow it. `GGML_CPU_NO_FUSION=1` switches every fusion off.
//!
//! * **SSM states stored in place**: SSM_SCAN writes each sequence's final
//!   state after its outputs, and a SET_ROWS copies those states into the
//!   recurrent cache, at the rows of the sequences' cells. Fused, the scan
//!   writes the states straight into the cache rows and the SET_ROWS has
//!   nothing left to do: one pass of the state size less per layer and
//!   token, which for Mamba-2 (a state of 1 MiB per layer) is a visible
//!   share of generation.

use std::sync::OnceLock;

use ggml_core::graph::{Graph, TensorId};
use ggml_core::{Op, Type};

use crate::compute::Resolved;
use crate::tensor::View;

/// What a node does differently in a fused list.
#[derive(Clone, Debug)]
pub(crate) enum Fusion {
    /// SSM_SCAN: write the final states into `cache` (F32 rows of one
    /// state each) at the rows `dst_rows` names per sequence, the work of
    /// the SET_ROWS node `set_rows`, when the rows allow it.
    StoreStates {
        cache: View,
        dst_rows: View,
        set_rows: TensorId,
    },
    /// SET_ROWS: skipped when the node that stores its rows did so in this
    /// run (see [`Stored`]).
    StoredBy,
}

/// The SET_ROWS nodes whose work an earlier fused node did in this run of
/// a list.
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

/// Decides the fusions of `list`, a resolved list of `graph`'s nodes
/// computed in order by this backend.
pub(crate) fn plan(graph: &Graph, list: &mut [(TensorId, Resolved)]) {
    if !enabled() || !list.iter().any(|(id, _)| graph.node(*id).op == Op::SsmScan) {
        return;
    }
    // Every reader of every SSM_SCAN result, through views: (scan, offset
    // and extent of what is read, reader).
    let scans: Vec<TensorId> = list
        .iter()
        .filter(|(id, _)| graph.node(*id).op == Op::SsmScan)
        .map(|(id, _)| *id)
        .collect();
    let mut readers: Vec<(TensorId, usize, usize, TensorId)> = Vec::new();
    for reader in graph.ids() {
        // A view reads nothing: its readers are found through it.
        if graph.node(reader).op.is_view() {
            continue;
        }
        for &s in &graph.node(reader).src {
            let (base, off) = graph.view_base(s);
            if scans.contains(&base) {
                readers.push((base, off, graph.desc(s).nbytes(), reader));
            }
        }
    }
    for i in 0..list.len() {
        let id = list[i].0;
        if graph.node(id).op != Op::SsmScan {
            continue;
        }
        if let Some((j, fusion)) = store_states(graph, list, i, &readers) {
            list[i].1.fusion = Some(fusion);
            list[j].1.fusion = Some(Fusion::StoredBy);
        }
    }
}

/// The SET_ROWS of `list` that stores the states of the SSM_SCAN at
/// `list[i]` into the cache the scan reads, and the scan's fusion, when
/// nothing else reads those states.
fn store_states(
    graph: &Graph,
    list: &[(TensorId, Resolved)],
    i: usize,
    readers: &[(TensorId, usize, usize, TensorId)],
) -> Option<(usize, Fusion)> {
    let (scan, r) = (&list[i].0, &list[i].1);
    let scan = *scan;
    if graph
        .node(scan)
        .flags
        .contains(ggml_core::graph::Flags::OUTPUT)
    {
        return None;
    }
    let (s0, x) = (r.src.first()?, r.src.get(1)?);
    let [d_state, head_dim, n_head, _] = s0.ne;
    let [_, _, n_t, n_s] = x.ne;
    let y_bytes = 4 * head_dim * n_head * n_t * n_s;
    let state = d_state * head_dim * n_head;
    // Readers of the states region: exactly one, a SET_ROWS later in the
    // list reading it as its rows.
    let mut store = None;
    for &(base, off, len, reader) in readers {
        if base != scan || off + len <= y_bytes {
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
    let (cache, rows, dst_rows) = (&w.dst, &w.src[1], &w.src[2]);
    let dense = |v: &View| v.nb[0] == 4 && v.nb[1] == 4 * v.ne[0];
    let same_cache = cache.ty == Type::F32
        && s0.ty == Type::F32
        && cache.ptr.get() == s0.ptr.get()
        && cache.ne[0] == state
        && dense(cache)
        && s0.is_contiguous();
    let states_rows = rows.ty == Type::F32
        && rows.ptr.get() == r.dst.ptr.get().wrapping_add(y_bytes)
        && rows.ne == [state, n_s, 1, 1]
        && dense(rows);
    let one_row_each =
        dst_rows.ne == [n_s, 1, 1, 1] && matches!(dst_rows.ty, Type::I32 | Type::I64);
    (same_cache && states_rows && one_row_each).then(|| {
        (
            j,
            Fusion::StoreStates {
                cache: cache.clone(),
                dst_rows: dst_rows.clone(),
                set_rows,
            },
        )
    })
}
