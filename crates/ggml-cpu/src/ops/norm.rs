//! RMS_NORM and NORM over rows, with ggml's f64 accumulation.

use ggml_core::{Result, Type};

use crate::compute::{par_rows, NodeCtx};

/// `x / sqrt(mean(x^2) + eps)`: squares in f32, summed in f64, as ggml.
pub(crate) fn rms_norm_row(x: &[f32], out: &mut [f32], eps: f32) {
    let sum: f64 = x.iter().map(|&v| f64::from(v * v)).sum();
    scale_row(x, out, rms_scale(sum, x.len(), eps));
}

/// `1 / sqrt(mean + eps)` of a row of `n` values whose squares sum to
/// `sum`.
fn rms_scale(sum: f64, n: usize, eps: f32) -> f32 {
    let mean = (sum / n as f64) as f32;
    1.0 / (mean + eps).sqrt()
}

/// `out[i] = x[i] * scale`.
fn scale_row(x: &[f32], out: &mut [f32], scale: f32) {
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

/// Rows whose f64 sums of squares run side by side.
const SIDE_BY_SIDE: usize = 8;

/// The sums of squares of rows of one length, each in f64 and in order
/// (ggml's sum, so the same bits as [`rms_norm_row`]'s): a row's sum is a
/// chain of dependent additions, and the rows' chains interleaved overlap
/// (one row at a time waits on every addition).
fn sums_of_squares(xs: &[&[f32]; SIDE_BY_SIDE]) -> [f64; SIDE_BY_SIDE] {
    let n = xs[0].len();
    assert!(xs.iter().all(|x| x.len() == n), "rows of one length");
    let mut s = [0f64; SIDE_BY_SIDE];
    for i in 0..n {
        for (s, x) in s.iter_mut().zip(xs) {
            *s += f64::from(x[i] * x[i]);
        }
    }
    s
}

/// RMS_NORM.
pub(crate) fn rms_norm(ctx: &NodeCtx<'_>, eps: f32) -> Result<()> {
    let (a, d) = (&ctx.src[0], &ctx.dst);
    // Rows read where they lie (F32, dense, not written in place) go
    // [`SIDE_BY_SIDE`] at a time; others one at a time.
    if ctx.alias[0] || a.ty != Type::F32 || !a.dense_rows() {
        return rows(ctx, eps, rms_norm_row);
    }
    let (n, n_rows) = (a.ne[0], d.n_rows());
    // Tasks of whole groups; a row side by side costs about a third of a
    // row alone (`benches/split.rs`, 2048 x 512 rows on one thread: 465 to
    // 732 us against 1,410 to 1,520).
    let groups = n_rows.div_ceil(SIDE_BY_SIDE);
    par_rows(groups, SIDE_BY_SIDE * n * 2 / 3, |groups, s| {
        let rows = groups.start * SIDE_BY_SIDE..(groups.end * SIDE_BY_SIDE).min(n_rows);
        let mut r = rows.start;
        while r + SIDE_BY_SIDE <= rows.end {
            let xs: [&[f32]; SIDE_BY_SIDE] = std::array::from_fn(|j| {
                let p = a.row_ptr(a.row_index(r + j)) as *const f32;
                // SAFETY: an F32 row of n adjacent elements inside the view
                // (dense, checked above), 4-byte aligned (`View::of`), only
                // read: the result does not alias it (checked above).
                unsafe { std::slice::from_raw_parts(p, n) }
            });
            let sums = sums_of_squares(&xs);
            for (j, (x, sum)) in xs.iter().zip(sums).enumerate() {
                let scale = rms_scale(sum, n, eps);
                // SAFETY: each result row is written by one task.
                unsafe {
                    d.write_row(d.row_index(r + j), &mut s.c, |out| scale_row(x, out, scale))?
                };
            }
            r += SIDE_BY_SIDE;
        }
        for r in r..rows.end {
            let i = d.row_index(r);
            // SAFETY: as above: an F32 row inside the view, only read.
            let x = unsafe { a.read_row(i, false, &mut s.a)? };
            // SAFETY: each result row is written by one task.
            unsafe { d.write_row(i, &mut s.c, |out| rms_norm_row(x, out, eps))? };
        }
        Ok(())
    })
}

/// NORM.
pub(crate) fn norm(ctx: &NodeCtx<'_>, eps: f32) -> Result<()> {
    rows(ctx, eps, norm_row)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Side by side, each row's f64 sum is the one-row sum, to the bit.
    #[test]
    fn side_by_side_sums_are_the_sums_in_order() {
        let mut seed = 0x2545_f491_u32;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            // Magnitudes over many binary orders, so that the order of the
            // additions shows in the f64 sums.
            (seed as f32 / u32::MAX as f32 - 0.5) * 2f32.powi((seed % 40) as i32 - 20)
        };
        for n in [1usize, 3, 64, 2049] {
            let rows: Vec<Vec<f32>> = (0..SIDE_BY_SIDE)
                .map(|_| (0..n).map(|_| next()).collect())
                .collect();
            let xs: [&[f32]; SIDE_BY_SIDE] = std::array::from_fn(|j| &rows[j][..]);
            let got = sums_of_squares(&xs);
            for (row, g) in rows.iter().zip(got) {
                let want: f64 = row.iter().map(|&v| f64::from(v * v)).sum();
                assert_eq!(g.to_bits(), want.to_bits(), "n={n}");
            }
        }
    }
}
