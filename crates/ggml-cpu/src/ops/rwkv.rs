//! L2_NORM, RWKV_WKV6 and RWKV_WKV7: the ops of RWKV-6 and RWKV-7.
//!
//! A WKV unit is one head of one sequence: it copies the head's state from
//! the states source into the result's state region and carries it
//! through the sequence's tokens there, so units write disjoint memory and
//! the results do not depend on the number of threads. The inner loops run
//! over one state row of dense f32 values, which the compiler vectorizes.

use ggml_core::Result;

use crate::compute::{par_rows, NodeCtx};
use crate::tensor::View;

/// `x / max(sqrt(sum(x^2)), eps)` of each row: squares in f32, summed in
/// f64, as ggml.
pub(crate) fn l2_norm(ctx: &NodeCtx<'_>, eps: f32) -> Result<()> {
    let (a, d) = (&ctx.src[0], &ctx.dst);
    let alias = ctx.alias[0];
    par_rows(d.n_rows(), d.ne[0] * 2, |rows, s| {
        for r in rows {
            let i = d.row_index(r);
            // SAFETY: same shape as the result; aliased rows are copied.
            let x = unsafe { a.read_row(i, alias, &mut s.a)? };
            let sum: f64 = x.iter().map(|&v| f64::from(v * v)).sum();
            let scale = 1.0 / (sum as f32).sqrt().max(eps);
            // SAFETY: each result row is written by one task.
            unsafe {
                d.write_row(i, &mut s.c, |out| {
                    for (o, &v) in out.iter_mut().zip(x) {
                        *o = v * scale;
                    }
                })?
            };
        }
        Ok(())
    })
}

/// The dense f32 values of a contiguous source from element `at` on.
///
/// # Safety
/// `v` must be a contiguous F32 view holding at least `at + n` elements
/// that nobody writes while the slice lives.
#[inline]
unsafe fn floats<'a>(v: &View, at: usize, n: usize) -> &'a [f32] {
    debug_assert!((at + n) * 4 <= v.len);
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts((v.ptr.get() as *const f32).add(at), n) }
}

/// Sizes of a WKV node: head size, heads, tokens, sequences.
struct Wkv {
    hs: usize,
    nh: usize,
    nt: usize,
    n_s: usize,
}

impl Wkv {
    fn of(k: &View, state: &View) -> Wkv {
        Wkv {
            hs: k.ne[0],
            nh: k.ne[1],
            nt: k.ne[2],
            n_s: state.ne[1],
        }
    }

    /// Runs `f(h, state, tokens)` for every head of every sequence,
    /// with the head's state copied into the result's state region.
    fn run(
        &self,
        ctx: &NodeCtx<'_>,
        state: &View,
        f: impl Fn(usize, &mut [f32], std::ops::Range<usize>) + Sync,
    ) -> Result<()> {
        let Wkv { hs, nh, nt, n_s } = *self;
        let c = hs * nh;
        let per = nt / n_s;
        let d = &ctx.dst;
        par_rows(n_s * nh, per * hs * hs * 4, |units, _| {
            for u in units {
                let (seq, h) = (u / nh, u % nh);
                let at = c * nt + seq * hs * c + h * hs * hs;
                // SAFETY: the head's state (hs * hs values) inside the dense
                // F32 result, written by this unit only.
                let st = unsafe {
                    std::slice::from_raw_parts_mut((d.ptr.get() as *mut f32).add(at), hs * hs)
                };
                // SAFETY: the contiguous states source holds hs * hs * nh
                // values per sequence; it does not overlap the result
                // (overlapping sources are copied before the node runs).
                st.copy_from_slice(unsafe {
                    floats(state, seq * hs * hs * nh + h * hs * hs, hs * hs)
                });
                f(h, st, seq * per..(seq + 1) * per);
            }
            Ok(())
        })
    }
}

/// Output row `(h, t)` of `hs` values in the result.
///
/// # Safety
/// `d` is the dense F32 result of a WKV node of `nh` heads; the row is
/// written by the calling unit only.
#[inline]
unsafe fn out_row<'a>(d: &View, hs: usize, nh: usize, h: usize, t: usize) -> &'a mut [f32] {
    // SAFETY: the caller's contract; the row lies in the output region.
    unsafe {
        std::slice::from_raw_parts_mut((d.ptr.get() as *mut f32).add(t * hs * nh + h * hs), hs)
    }
}

/// The recurrence of `Graph::rwkv_wkv6` (sources k, v, r, u, w, state).
pub(crate) fn wkv6(ctx: &NodeCtx<'_>) -> Result<()> {
    let [k, v, r, u, w, s0] = [0, 1, 2, 3, 4, 5].map(|i| &ctx.src[i]);
    let dims = Wkv::of(k, s0);
    let (hs, nh) = (dims.hs, dims.nh);
    let d = &ctx.dst;
    dims.run(ctx, s0, |h, st, tokens| {
        // SAFETY: the head's bonus row of the contiguous [hs, nh] source.
        let uh = unsafe { floats(u, h * hs, hs) };
        let mut kv = vec![0f32; hs];
        for t in tokens {
            let row = (t * nh + h) * hs;
            // SAFETY: the head's rows of token t of the contiguous
            // [hs, nh, nt] sources, only read.
            let (kt, vt, rt, wt) = unsafe {
                (
                    floats(k, row, hs),
                    floats(v, row, hs),
                    floats(r, row, hs),
                    floats(w, row, hs),
                )
            };
            // SAFETY: output row (h, t), written by this unit only.
            let out = unsafe { out_row(d, hs, nh, h, t) };
            out.fill(0.0);
            for (i, srow) in st.chunks_exact_mut(hs).enumerate() {
                let (ki, ri, ui, wi) = (kt[i], rt[i], uh[i], wt[i]);
                for (x, &vj) in kv.iter_mut().zip(vt) {
                    *x = ki * vj;
                }
                for ((o, s), &x) in out.iter_mut().zip(srow.iter_mut()).zip(&kv) {
                    *o += (x * ui + *s) * ri;
                    *s = *s * wi + x;
                }
            }
        }
    })
}

/// The recurrence of `Graph::rwkv_wkv7` (sources r, w, k, v, a, b, state).
pub(crate) fn wkv7(ctx: &NodeCtx<'_>) -> Result<()> {
    let [r, w, k, v, a, b, s0] = [0, 1, 2, 3, 4, 5, 6].map(|i| &ctx.src[i]);
    let dims = Wkv::of(k, s0);
    let (hs, nh) = (dims.hs, dims.nh);
    let d = &ctx.dst;
    dims.run(ctx, s0, |h, st, tokens| {
        for t in tokens {
            let row = (t * nh + h) * hs;
            // SAFETY: the head's rows of token t of the contiguous
            // [hs, nh, nt] sources, only read.
            let (rt, wt, kt, vt, at, bt) = unsafe {
                (
                    floats(r, row, hs),
                    floats(w, row, hs),
                    floats(k, row, hs),
                    floats(v, row, hs),
                    floats(a, row, hs),
                    floats(b, row, hs),
                )
            };
            // SAFETY: output row (h, t), written by this unit only.
            let out = unsafe { out_row(d, hs, nh, h, t) };
            for (i, srow) in st.chunks_exact_mut(hs).enumerate() {
                let sa = dot(at, srow);
                let vi = vt[i];
                let mut y = 0f32;
                for ((((s, &w), &k), &b), &r) in srow.iter_mut().zip(wt).zip(kt).zip(bt).zip(rt) {
                    *s = *s * w + vi * k + sa * b;
                    y += *s * r;
                }
                out[i] = y;
            }
        }
    })
}

/// A dot product in eight running sums, so that it vectorizes.
#[inline]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for ((a, &p), &q) in acc.iter_mut().zip(x).zip(y) {
            *a += p * q;
        }
    }
    let mut s: f32 = acc.iter().sum();
    for (x, y) in ra.iter().zip(rb) {
        s += x * y;
    }
    s
}
