//! RMS_NORM and NORM over rows, with ggml's f64 accumulation.

use ggml_core::Result;

use crate::compute::{par_rows, NodeCtx};

/// `x / sqrt(mean(x^2) + eps)`: squares in f32, summed in f64, as ggml.
pub(crate) fn rms_norm_row(x: &[f32], out: &mut [f32], eps: f32) {
    let sum: f64 = x.iter().map(|&v| f64::from(v * v)).sum();
    let mean = (sum / x.len() as f64) as f32;
    let scale = 1.0 / (mean + eps).sqrt();
    for (o, &v) in out.iter_mut().zip(x) {
        *o = v * scale;
    }
}

/// `(x - mean) / sqrt(var + eps)`: sums in f64, as ggml.
pub(crate) fn norm_row(x: &[f32], out: &mut [f32], eps: f32) {
    let n = x.len() as f64;
    let sum: f64 = x.iter().map(|&v| f64::from(v)).sum();
    let mean = (sum / n) as f32;
    let mut sum2 = 0f64;
    for (o, &v) in out.iter_mut().zip(x) {
        let c = v - mean;
        *o = c;
        sum2 += f64::from(c * c);
    }
    let variance = (sum2 / n) as f32;
    let scale = 1.0 / (variance + eps).sqrt();
    for o in out.iter_mut() {
        *o *= scale;
    }
}

fn rows(ctx: &NodeCtx<'_>, eps: f32, f: fn(&[f32], &mut [f32], f32)) -> Result<()> {
    let (a, d) = (&ctx.src[0], &ctx.dst);
    let alias = ctx.alias[0];
    par_rows(d.n_rows(), d.ne[0] * 2, |rows, s| {
        for r in rows {
            let i = d.row_index(r);
            // SAFETY: same shape as the result; aliased rows are copied.
            let x = unsafe { a.read_row(i, alias, &mut s.a)? };
            // SAFETY: each result row is written by one task.
            unsafe { d.write_row(i, &mut s.c, |out| f(x, out, eps))? };
        }
        Ok(())
    })
}

/// RMS_NORM.
pub(crate) fn rms_norm(ctx: &NodeCtx<'_>, eps: f32) -> Result<()> {
    rows(ctx, eps, rms_norm_row)
}

/// NORM.
pub(crate) fn norm(ctx: &NodeCtx<'_>, eps: f32) -> Result<()> {
    rows(ctx, eps, norm_row)
}
