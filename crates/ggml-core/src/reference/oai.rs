//! Reference ADD_ID, SWIGLU_OAI and the attention sinks of SOFT_MAX and
//! FLASH_ATTN_EXT.

use super::{load, rows, store, unsupported};
use crate::graph::{Graph, TensorId};
use crate::Result;

/// The sinks of an attention node, when it has source `at` (one logit per
/// head).
pub(super) fn sinks(graph: &Graph, src: &[TensorId], at: usize) -> Result<Option<Vec<f32>>> {
    match src.get(at) {
        Some(&k) => Ok(Some(load(graph, k)?.row([0, 0, 0])?)),
        None => Ok(None),
    }
}

/// `dst[:, e, t] = a[:, e, t] + b[:, ids[e, t]]`.
pub(super) fn add_id(graph: &Graph, id: TensorId, src: &[TensorId]) -> Result<()> {
    let (a, b, ids) = (
        load(graph, src[0])?,
        load(graph, src[1])?,
        load(graph, src[2])?,
    );
    let mut d = load(graph, id)?;
    let n_rows = b.ne()[1];
    for r in rows(d.ne()) {
        let ix = ids.get_int([r[0], r[1], 0, 0]);
        if ix < 0 || ix as usize >= n_rows {
            return unsupported(graph, id, format!("id {ix} out of range 0..{n_rows}"));
        }
        let x = a.row(r)?;
        let y = b.row([ix as usize, 0, 0])?;
        let out: Vec<f32> = x.iter().zip(&y).map(|(&p, &q)| p + q).collect();
        d.set_row(r, &out)?;
    }
    store(graph, id, &d)
}

/// gpt-oss's clamped SwiGLU, element by element in f32 as ggml computes it.
pub(super) fn swiglu_oai(
    graph: &Graph,
    id: TensorId,
    src: &[TensorId],
    alpha: f32,
    limit: f32,
) -> Result<()> {
    let (g, u) = (load(graph, src[0])?, load(graph, src[1])?);
    let mut d = load(graph, id)?;
    for r in rows(d.ne()) {
        let (x, y) = (g.row(r)?, u.row(r)?);
        let out: Vec<f32> = x
            .iter()
            .zip(&y)
            .map(|(&x, &y)| swiglu_oai_one(x, y, alpha, limit))
            .collect();
        d.set_row(r, &out)?;
    }
    store(graph, id, &d)
}

/// One element of SWIGLU_OAI.
fn swiglu_oai_one(gate: f32, up: f32, alpha: f32, limit: f32) -> f32 {
    let x = gate.min(limit);
    let y = up.clamp(-limit, limit);
    x / (1.0 + (alpha * -x).exp()) * (y + 1.0)
}
