//! GATED_DELTA_NET: the gated delta rule of DeltaNet layers.
//!
//! A unit is one V head of one sequence: it carries its state matrix
//! through the tokens in the result's state region, so that neither the
//! source states nor another unit is written, and each element is
//! computed the same way whatever the number of threads.

use ggml_core::{Error, Result};

use crate::compute::{par_rows, NodeCtx};
use crate::simd;
use crate::tensor::View;

/// Address of element `i` of a view.
#[inline]
fn at(v: &View, i: [usize; 4]) -> *mut u8 {
    v.ptr
        .get()
        .wrapping_add(i[0] * v.nb[0] + i[1] * v.nb[1] + i[2] * v.nb[2] + i[3] * v.nb[3])
}

/// `n` f32 values at `p`.
///
/// # Safety
/// `p` must address `n` dense f32 values of a validated view, 4-byte
/// aligned, that nobody writes while the slice lives.
#[inline]
unsafe fn floats<'a>(p: *const u8, n: usize) -> &'a [f32] {
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(p as *const f32, n) }
}

/// The delta rule of `Graph::gated_delta_net` (ggml's order of
/// operations: decay, delta from the decayed state, rank-1 update, output
/// from the updated state scaled by 1/sqrt(S)).
pub(crate) fn gated_delta_net(ctx: &NodeCtx<'_>) -> Result<()> {
    let [q, k, v, g, beta, s0] = [0, 1, 2, 3, 4, 5].map(|i| &ctx.src[i]);
    let d = &ctx.dst;
    let [s, h_v, n_t, n_s] = v.ne;
    let h_k = q.ne[1];
    let per_key = g.ne[0] == s;
    let scale = 1.0 / (s as f32).sqrt();
    let out_len = s * h_v * n_t * n_s;
    let kern = simd::kernels();
    par_rows(n_s * h_v, n_t * s * s * 4, |units, _| {
        let mut delta = vec![0f32; s];
        for u in units {
            let (seq, h) = (u / h_v, u % h_v);
            let hk = h % h_k;
            // SAFETY: the unit's S x S state floats inside the dense result,
            // written by this unit only.
            let st = unsafe {
                std::slice::from_raw_parts_mut(
                    (d.ptr.get() as *mut f32).add(out_len + s * s * (h + h_v * seq)),
                    s * s,
                )
            };
            for (j, row) in st.chunks_exact_mut(s).enumerate() {
                // SAFETY: row (j, h, seq) of the dense F32 states, only read;
                // it does not overlap the result (overlapping sources are
                // copied before the node runs).
                row.copy_from_slice(unsafe { floats(at(s0, [0, j, h, seq]), s) });
            }
            for t in 0..n_t {
                // SAFETY: rows of s dense f32 (checked by the backend) inside
                // the validated views, only read.
                let (kv, qv, vv, gv, b) = unsafe {
                    (
                        floats(at(k, [0, hk, t, seq]), s),
                        floats(at(q, [0, hk, t, seq]), s),
                        floats(at(v, [0, h, t, seq]), s),
                        floats(at(g, [0, h, t, seq]), g.ne[0]),
                        (at(beta, [0, h, t, seq]) as *const f32).read(),
                    )
                };
                if per_key {
                    for (x, &gi) in delta.iter_mut().zip(gv) {
                        *x = gi.exp();
                    }
                    for row in st.chunks_exact_mut(s) {
                        for (x, &e) in row.iter_mut().zip(delta.iter()) {
                            *x *= e;
                        }
                    }
                } else {
                    let e = gv[0].exp();
                    for x in st.iter_mut() {
                        *x *= e;
                    }
                }
                for (j, row) in st.chunks_exact(s).enumerate() {
                    delta[j] = (vv[j] - (kern.dot_f32)(row, kv)) * b;
                }
                let o0 = s * (h + h_v * (t + n_t * seq));
                for (j, row) in st.chunks_exact_mut(s).enumerate() {
                    let dj = delta[j];
                    for (x, &ki) in row.iter_mut().zip(kv) {
                        *x += ki * dj;
                    }
                    let o = (kern.dot_f32)(row, qv) * scale;
                    // SAFETY: element o0 + j of the dense result's output
                    // region, written by this unit only (head h of seq).
                    unsafe { (d.ptr.get() as *mut f32).add(o0 + j).write(o) };
                }
            }
        }
        Ok::<(), Error>(())
    })
}
