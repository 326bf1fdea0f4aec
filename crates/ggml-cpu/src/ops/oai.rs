//! ADD_ID (per-expert biases) and SWIGLU_OAI (gpt-oss's clamped SwiGLU),
//! and the attention sinks SOFT_MAX and FLASH_ATTN_EXT read.

use ggml_core::Result;

use super::read_index;
use crate::compute::{par_rows, NodeCtx};

/// The sinks of an attention node (source `at`): one logit per head.
pub(crate) fn sinks(ctx: &NodeCtx<'_>, at: usize) -> Result<Option<Vec<f32>>> {
    match ctx.src.get(at) {
        Some(k) => {
            let mut buf = Vec::new();
            // SAFETY: the sinks' one row, only read (never the result).
            let row = unsafe { k.read_row([0, 0, 0], false, &mut buf)? };
            Ok(Some(row.to_vec()))
        }
        None => Ok(None),
    }
}

/// `dst[:, e, t] = a[:, e, t] + b[:, ids[e, t]]`.
pub(crate) fn add_id(ctx: &NodeCtx<'_>) -> Result<()> {
    let (a, b, ids, d) = (&ctx.src[0], &ctx.src[1], &ctx.src[2], &ctx.dst);
    let alias = ctx.alias[0];
    let n_bias = b.ne[1];
    par_rows(d.n_rows(), d.ne[0], |rows, s| {
        for r in rows {
            let i = d.row_index(r);
            // SAFETY: ids is I32 [n_used, n_tokens] (checked) and the
            // result row [e, t, 0] names one of its elements.
            let ix = unsafe { read_index(ids, [i[0], i[1], 0, 0]) };
            if ix < 0 || ix as usize >= n_bias {
                return Err(ctx.err(format!(
                    "bias id {ix} of slot {}, token {} is outside 0..{n_bias}",
                    i[0], i[1]
                )));
            }
            let ix = ix as usize;
            // SAFETY: same shape as the result; aliased rows are copied.
            let x = unsafe { a.read_row(i, alias, &mut s.a)? };
            // SAFETY: row ix < b.ne1 of the bias, only read.
            let y = unsafe { b.read_row([ix, 0, 0], false, &mut s.b)? };
            // SAFETY: each result row is written by one task.
            unsafe {
                d.write_row(i, &mut s.c, |out| {
                    for ((o, &p), &q) in out.iter_mut().zip(x).zip(y) {
                        *o = p + q;
                    }
                })?
            };
        }
        Ok(())
    })
}

/// gpt-oss's clamped SwiGLU of gate (src0) and up (src1), per element in
/// f32 as ggml's CPU computes it.
pub(crate) fn swiglu_oai(ctx: &NodeCtx<'_>, alpha: f32, limit: f32) -> Result<()> {
    super::unary::glu_with(ctx, false, move |g, u, out| {
        for ((o, &x), &y) in out.iter_mut().zip(g).zip(u) {
            let x = x.min(limit);
            let y = y.clamp(-limit, limit);
            *o = x / (1.0 + (alpha * -x).exp()) * (y + 1.0);
        }
    })
}
