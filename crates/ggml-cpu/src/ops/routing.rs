//! ARGSORT and SUM_ROWS, the row reductions of expert routing.

use ggml_core::{Result, SortOrder};

use crate::compute::{par_rows, NodeCtx};

/// Sorts each row's indices by value; equal values keep index order.
///
/// ggml sorts with `std::sort`, which leaves the order of equal values to
/// the library; a stable order makes the expert choice reproducible and the
/// same on every backend (the Vulkan shader sorts by (value, index)).
pub(crate) fn argsort(ctx: &NodeCtx<'_>, order: SortOrder) -> Result<()> {
    let (a, d) = (&ctx.src[0], &ctx.dst);
    let n = a.ne[0];
    par_rows(a.n_rows(), n * 8, |rows, s| {
        let mut idx: Vec<u32> = Vec::with_capacity(n);
        for r in rows {
            let i = a.row_index(r);
            // SAFETY: row in range; the I32 result never overlaps the F32
            // source (different types are never in place).
            let x = unsafe { a.read_row(i, false, &mut s.a)? };
            idx.clear();
            idx.extend(0..n as u32);
            // `+ 0.0` makes -0 equal to +0, as a float comparison has it.
            let key = |j: u32| x[j as usize] + 0.0;
            match order {
                SortOrder::Asc => idx.sort_by(|&p, &q| key(p).total_cmp(&key(q))),
                SortOrder::Desc => idx.sort_by(|&p, &q| key(q).total_cmp(&key(p))),
            }
            let p = d.row_ptr(i);
            for (j, &v) in idx.iter().enumerate() {
                // SAFETY: element j of this row of the I32 result, in bounds,
                // aligned, written by this task only.
                unsafe { (p.add(j * d.nb[0]) as *mut i32).write(v as i32) };
            }
        }
        Ok(())
    })
}

/// Sum of each row (accumulated in f64, as ggml's `ggml_vec_sum_f32`).
pub(crate) fn sum_rows(ctx: &NodeCtx<'_>) -> Result<()> {
    let (a, d) = (&ctx.src[0], &ctx.dst);
    let alias = ctx.alias[0];
    par_rows(a.n_rows(), a.ne[0], |rows, s| {
        for r in rows {
            let i = a.row_index(r);
            // SAFETY: row in range; aliased rows are copied first.
            let x = unsafe { a.read_row(i, alias, &mut s.a)? };
            let sum: f64 = x.iter().map(|&v| f64::from(v)).sum();
            // SAFETY: the result's row i has one element, written here only.
            unsafe { d.write_row(i, &mut s.c, |out| out[0] = sum as f32)? };
        }
        Ok(())
    })
}
