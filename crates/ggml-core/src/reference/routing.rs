//! Reference MUL_MAT_ID, ARGSORT and SUM_ROWS.

use super::{load, rows, store, unsupported};
use crate::graph::{Graph, TensorId};
use crate::op::SortOrder;
use crate::Result;

/// `dst[:, e, t] = as[:, :, ids[e, t]]^T b[:, e % b.ne1, t]`, exact sums.
pub(super) fn mul_mat_id(graph: &Graph, id: TensorId, src: &[TensorId]) -> Result<()> {
    let (a, b, ids) = (
        load(graph, src[0])?,
        load(graph, src[1])?,
        load(graph, src[2])?,
    );
    let mut d = load(graph, id)?;
    let n_expert = a.ne()[2];
    for t in 0..d.ne()[2] {
        for e in 0..d.ne()[1] {
            let ex = ids.get_int([e, t, 0, 0]);
            if ex < 0 || ex as usize >= n_expert {
                return unsupported(
                    graph,
                    id,
                    format!("expert id {ex} out of range 0..{n_expert}"),
                );
            }
            let y = b.row([e % b.ne()[1], t, 0])?;
            for i in 0..d.ne()[0] {
                let x = a.row([i, ex as usize, 0])?;
                let s: f64 = x
                    .iter()
                    .zip(&y)
                    .map(|(&p, &q)| f64::from(p) * f64::from(q))
                    .sum();
                d.set([i, e, t, 0], s as f32);
            }
        }
    }
    store(graph, id, &d)
}

/// Sorts each row's indices by value; equal values keep index order (a
/// stable sort), which fixes the order ggml leaves to its sort routine.
pub(super) fn argsort(graph: &Graph, id: TensorId, a: TensorId, order: SortOrder) -> Result<()> {
    let a = load(graph, a)?;
    let mut d = load(graph, id)?;
    for r in rows(a.ne()) {
        let x = a.row(r)?;
        let mut idx: Vec<usize> = (0..x.len()).collect();
        match order {
            // `+ 0.0` makes -0 equal to +0, as a float comparison has it.
            SortOrder::Asc => idx.sort_by(|&i, &j| (x[i] + 0.0).total_cmp(&(x[j] + 0.0))),
            SortOrder::Desc => idx.sort_by(|&i, &j| (x[j] + 0.0).total_cmp(&(x[i] + 0.0))),
        }
        for (i0, &v) in idx.iter().enumerate() {
            let o = d.at([i0, r[0], r[1], r[2]]);
            d.bytes[o..o + 4].copy_from_slice(&(v as i32).to_le_bytes());
        }
    }
    store(graph, id, &d)
}

/// Sum of each row, in f64, rounded once.
pub(super) fn sum_rows(graph: &Graph, id: TensorId, a: TensorId) -> Result<()> {
    let a = load(graph, a)?;
    let mut d = load(graph, id)?;
    for r in rows(a.ne()) {
        let s: f64 = a.row(r)?.iter().map(|&v| f64::from(v)).sum();
        d.set([0, r[0], r[1], r[2]], s as f32);
    }
    store(graph, id, &d)
}
