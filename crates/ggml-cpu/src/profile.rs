//! `GGML_CPU_PROFILE=1`: the wall time of every node the CPU backend
//! computes, summed per op and result type, printed to stderr when a CPU
//! backend is dropped (at the end of a program) as a table: total time,
//! share, calls and mean per call. What a model's token costs, op by op,
//! without a profiler; unset, it costs one flag test per list of nodes.

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use ggml_core::graph::{Graph, TensorId};

/// Time and calls per "OP TYPE".
static TOTALS: Mutex<BTreeMap<String, (Duration, u64)>> = Mutex::new(BTreeMap::new());

/// True when `GGML_CPU_PROFILE` is set to something other than empty or 0.
pub(crate) fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("GGML_CPU_PROFILE").is_ok_and(|v| !v.is_empty() && v != "0"))
}

/// Adds one computation of node `id` that took `dt`.
pub(crate) fn record(graph: &Graph, id: TensorId, dt: Duration) {
    let key = format!("{} {}", graph.node(id).op.name(), graph.desc(id).ty);
    let mut totals = TOTALS.lock().unwrap_or_else(|e| e.into_inner());
    let e = totals.entry(key).or_default();
    e.0 += dt;
    e.1 += 1;
}

/// Prints the table of what was recorded, largest first, and starts over.
pub(crate) fn print_and_reset() {
    if !enabled() {
        return;
    }
    let totals = std::mem::take(&mut *TOTALS.lock().unwrap_or_else(|e| e.into_inner()));
    if totals.is_empty() {
        return;
    }
    let mut rows: Vec<_> = totals.into_iter().collect();
    rows.sort_by_key(|(_, (t, _))| std::cmp::Reverse(*t));
    let all: Duration = rows.iter().map(|(_, (t, _))| *t).sum();
    eprintln!(
        "ggml_cpu profile: {:.3} ms in nodes",
        all.as_secs_f64() * 1e3
    );
    eprintln!(
        "{:<28} {:>12} {:>7} {:>9} {:>11}",
        "op", "total ms", "share", "calls", "mean us"
    );
    for (op, (t, n)) in rows {
        eprintln!(
            "{:<28} {:>12.3} {:>6.1}% {:>9} {:>11.2}",
            op,
            t.as_secs_f64() * 1e3,
            100.0 * t.as_secs_f64() / all.as_secs_f64().max(1e-12),
            n,
            t.as_secs_f64() * 1e6 / n.max(1) as f64
        );
    }
}
