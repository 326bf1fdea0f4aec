//! SCALE, the unary activations, the gated units and ARGMAX.

use ggml_core::{GluOp, Result, UnaryOp};

use crate::compute::{par_rows, NodeCtx};
use crate::simd::scalar::{gelu, gelu_table};

fn map_rows(ctx: &NodeCtx<'_>, work: usize, f: impl Fn(f32) -> f32 + Sync) -> Result<()> {
    map_rows_with(ctx, work, |x, out| {
        for (o, &v) in out.iter_mut().zip(x) {
            *o = f(v);
        }
    })
}

/// Applies a row function `f(src, dst)` to every row.
fn map_rows_with(
    ctx: &NodeCtx<'_>,
    work: usize,
    f: impl Fn(&[f32], &mut [f32]) + Sync,
) -> Result<()> {
    let (a, d) = (&ctx.src[0], &ctx.dst);
    let alias = ctx.alias[0];
    par_rows(d.n_rows(), work, |rows, s| {
        for r in rows {
            let i = d.row_index(r);
            // SAFETY: same shape as the result; aliased rows are copied.
            let x = unsafe { a.read_row(i, alias, &mut s.a)? };
            // SAFETY: each result row is written by one task.
            unsafe { d.write_row(i, &mut s.c, |out| f(x, out))? };
        }
        Ok(())
    })
}

/// `dst = src0 * s`.
pub(crate) fn scale(ctx: &NodeCtx<'_>, s: f32) -> Result<()> {
    map_rows(ctx, ctx.dst.ne[0], move |x| x * s)
}

/// Element-wise activation.
pub(crate) fn unary(ctx: &NodeCtx<'_>, u: UnaryOp) -> Result<()> {
    if u == UnaryOp::Gelu {
        gelu_table();
    }
    // One instantiation per function, so that the loops inline and vectorise.
    let w = ctx.dst.ne[0] * 8;
    match u {
        UnaryOp::Silu => {
            let k = crate::simd::kernels().silu;
            map_rows_with(ctx, w, k)
        }
        UnaryOp::Gelu => map_rows(ctx, w, gelu),
        UnaryOp::Relu => map_rows(ctx, w, |x| if x > 0.0 { x } else { 0.0 }),
        UnaryOp::Neg => map_rows(ctx, w, |x| -x),
        UnaryOp::Tanh => map_rows(ctx, w, f32::tanh),
        UnaryOp::Sigmoid => map_rows(ctx, w, |x| 1.0 / (1.0 + (-x).exp())),
        UnaryOp::Exp => map_rows(ctx, w, f32::exp),
        UnaryOp::Softplus => map_rows(ctx, w, |x| if x > 20.0 { x } else { (1.0 + x.exp()).ln() }),
    }
}

/// `dst = clamp(src0, min, max)`.
pub(crate) fn clamp(ctx: &NodeCtx<'_>, min: f32, max: f32) -> Result<()> {
    map_rows(ctx, ctx.dst.ne[0], move |x| x.clamp(min, max))
}

/// `act(gate) * up`, from the two halves of src0's rows or from two tensors.
pub(crate) fn glu(ctx: &NodeCtx<'_>, op: GluOp, swapped: bool) -> Result<()> {
    match op {
        GluOp::Swiglu => {
            let k = crate::simd::kernels().swiglu;
            glu_with(ctx, swapped, k)
        }
        GluOp::Geglu => {
            gelu_table();
            let k = crate::simd::kernels().geglu;
            glu_with(ctx, swapped, k)
        }
    }
}

pub(crate) fn glu_with(
    ctx: &NodeCtx<'_>,
    swapped: bool,
    f: impl Fn(&[f32], &[f32], &mut [f32]) + Sync,
) -> Result<()> {
    let d = &ctx.dst;
    let n = d.ne[0];
    let split = ctx.src.len() >= 2;
    par_rows(d.n_rows(), n * 8, |rows, s| {
        for r in rows {
            let i = d.row_index(r);
            let (g, u): (&[f32], &[f32]) = if split {
                // SAFETY: both sources have the result's shape and do not
                // overlap it (else they were copied).
                let g = unsafe { ctx.src[0].read_row(i, false, &mut s.a)? };
                // SAFETY: as above.
                let u = unsafe { ctx.src[1].read_row(i, false, &mut s.b)? };
                (g, u)
            } else {
                // SAFETY: src0 has rows of 2n elements at the result's indices.
                let x = unsafe { ctx.src[0].read_row(i, false, &mut s.a)? };
                let (lo, hi) = x.split_at(n);
                if swapped {
                    (hi, lo)
                } else {
                    (lo, hi)
                }
            };
            // SAFETY: each result row is written by one task.
            unsafe { d.write_row(i, &mut s.c, |out| f(g, u, out))? };
        }
        Ok(())
    })
}

/// Index of the first maximum of each row (I32).
pub(crate) fn argmax(ctx: &NodeCtx<'_>) -> Result<()> {
    let (a, d) = (&ctx.src[0], &ctx.dst);
    par_rows(a.n_rows(), a.ne[0], |rows, s| {
        for r in rows {
            let i = a.row_index(r);
            // SAFETY: row in range; the result does not overlap the source.
            let x = unsafe { a.read_row(i, false, &mut s.a)? };
            let (mut best, mut idx) = (f32::NEG_INFINITY, 0i32);
            for (k, &v) in x.iter().enumerate() {
                if v > best {
                    best = v;
                    idx = k as i32;
                }
            }
            let p = d.ptr.get().wrapping_add(r * d.nb[0]) as *mut i32;
            // SAFETY: element r of the I32 result (d.ne0 == rows), aligned
            // and written by this task only.
            unsafe { p.write(idx) };
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simd::scalar::gelu_exact;
    use half::f16;

    #[test]
    fn gelu_follows_the_f16_table() {
        assert_eq!(gelu(-11.0), 0.0);
        assert_eq!(gelu(12.5), 12.5);
        let x = 0.3f32;
        let want = f16::from_f32(gelu_exact(f16::from_f32(x).to_f32())).to_f32();
        assert_eq!(gelu(x), want);
        assert!((gelu(1.0) - 0.8412).abs() < 1e-3);
    }
}
