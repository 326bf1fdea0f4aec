//! SOFT_MAX with scale, optional F16/F32 mask, ALiBi slopes and attention
//! sinks.

use ggml_core::Result;

use super::alibi_slope;
use crate::compute::{par_rows, NodeCtx};

/// `softmax(x * scale + slope * mask)` of one row, as ggml: the exponentials
/// are summed in f64 and multiplied by the f32 rounding of the inverse sum.
/// A sink joins the maximum and the sum as one more logit without an output.
pub(crate) fn soft_max_row(
    x: &[f32],
    mask: Option<&[f32]>,
    scale: f32,
    slope: f32,
    sink: Option<f32>,
    out: &mut [f32],
) {
    for (o, &v) in out.iter_mut().zip(x) {
        *o = v * scale;
    }
    if let Some(m) = mask {
        for (o, &mv) in out.iter_mut().zip(m) {
            *o += slope * mv;
        }
    }
    let mut max = out.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    if let Some(k) = sink {
        max = max.max(k);
    }
    let mut sum = (crate::simd::kernels().exp_sum)(out, max);
    if let Some(k) = sink {
        sum += f64::from((k - max).exp());
    }
    let inv = (1.0 / sum) as f32;
    for o in out.iter_mut() {
        *o *= inv;
    }
}

/// SOFT_MAX over rows; the mask row is the row's index in dim 1, broadcast
/// over dims 2 and 3.
pub(crate) fn soft_max(ctx: &NodeCtx<'_>, scale: f32, max_bias: f32) -> Result<()> {
    let (a, d) = (&ctx.src[0], &ctx.dst);
    let mask = ctx.src.get(1);
    let alias = ctx.alias[0];
    let n_head = a.ne[2];
    let sinks = super::oai::sinks(ctx, 2)?;
    par_rows(d.n_rows(), d.ne[0] * 4, |rows, s| {
        for r in rows {
            let i = d.row_index(r);
            // SAFETY: same shape as the result; aliased rows are copied.
            let x = unsafe { a.read_row(i, alias, &mut s.a)? };
            let m = match mask {
                Some(m) => {
                    let im = [i[0], i[1] % m.ne[2], i[2] % m.ne[3]];
                    // SAFETY: m.ne1 >= a.ne1 (checked), other dims by modulo;
                    // the mask is only read.
                    Some(unsafe { m.read_row(im, false, &mut s.b)? })
                }
                None => None,
            };
            let slope = alibi_slope(max_bias, n_head, i[1]);
            let sink = sinks.as_ref().map(|k| k[i[1]]);
            // SAFETY: each result row is written by one task.
            unsafe {
                d.write_row(i, &mut s.c, |out| {
                    soft_max_row(x, m, scale, slope, sink, out)
                })?
            };
        }
        Ok(())
    })
}
