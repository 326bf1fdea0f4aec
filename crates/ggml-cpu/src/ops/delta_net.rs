//! GATED_DELTA_NET: the gated delta rule of DeltaNet layers.
//!
//! A unit is one V head of one sequence: it carries its state matrix
//! through the tokens in the result's state region (or, fused, in its
//! cache row: see `fuse`), so that neither the
//! source states nor another unit is written, and each element is
//! computed the same way whatever the number of threads.

use ggml_core::{Error, Result};

use crate::compute::{par_rows, NodeCtx, Workspace};
use crate::fuse::{store_rows, Fusion};
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
pub(crate) fn gated_delta_net(ctx: &NodeCtx<'_>, ws: &mut Workspace) -> Result<()> {
    let [q, k, v, g, beta, s0] = [0, 1, 2, 3, 4, 5].map(|i| &ctx.src[i]);
    let d = &ctx.dst;
    let [s, h_v, n_t, n_s] = v.ne;
    let h_k = q.ne[1];
    let per_key = g.ne[0] == s;
    let scale = 1.0 / (s as f32).sqrt();
    let out_len = s * h_v * n_t * n_s;
    let kern = simd::kernels();
    // Fused (see `fuse`): the starting states read from the cache rows
    // the skipped GET_ROWS would have gathered, the final ones stored into
    // the cache rows of the SET_ROWS after this node when the indices
    // allow it.
    let (load, store) = match ctx.fusion {
        Some(Fusion::States(io)) => (io.load.as_ref(), io.store.as_ref()),
        _ => (None, None),
    };
    let src_rows = match load {
        Some(rows) => Some(rows.read(n_s).map_err(|bad| {
            ctx.err(format!(
                "state row index {bad} is outside 0..{}",
                rows.cache.ne[1]
            ))
        })?),
        None => None,
    };
    let dst_rows = store.and_then(|(rows, _)| store_rows(rows, src_rows.as_deref(), n_s));
    par_rows(n_s * h_v, n_t * s * s * 4, |units, _| {
        let mut decay = vec![0f32; s];
        for u in units {
            let (seq, h) = (u / h_v, u % h_v);
            let hk = h % h_k;
            let st_ptr = match (store, &dst_rows) {
                (Some((rows, _)), Some(dst)) => rows.ptr(dst[seq], s * s * h),
                _ => (d.ptr.get() as *mut f32).wrapping_add(out_len + s * s * (h + h_v * seq)),
            };
            let from: Option<*const f32> = match (load, &src_rows) {
                (Some(rows), Some(src)) => Some(rows.ptr(src[seq], s * s * h)),
                _ => None,
            };
            if from != Some(st_ptr as *const f32) {
                for j in 0..s {
                    let row = match from {
                        // SAFETY: row j of the head's state in a cache row
                        // (in range: read by `Rows::read`), only read while
                        // this node runs: no unit stores into another
                        // sequence's source row (`store_rows`).
                        Some(p) => unsafe { std::slice::from_raw_parts(p.add(j * s), s) },
                        // SAFETY: row (j, h, seq) of the dense F32 states,
                        // only read; it does not overlap the result
                        // (overlapping sources are copied before the node
                        // runs).
                        None => unsafe { floats(at(s0, [0, j, h, seq]), s) },
                    };
                    // SAFETY: row j of the unit's state, written by this
                    // unit only, disjoint from the row read.
                    unsafe { std::slice::from_raw_parts_mut(st_ptr.add(j * s), s) }
                        .copy_from_slice(row);
                }
            }
            // SAFETY: the unit's S x S state floats (its part of the
            // result, or of a cache row), written by this unit only.
            let st = unsafe { std::slice::from_raw_parts_mut(st_ptr, s * s) };
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
                    for (x, &gi) in decay.iter_mut().zip(gv) {
                        *x = gi.exp();
                    }
                }
                let e = gv[0].exp();
                let o0 = s * (h + h_v * (t + n_t * seq));
                // Row j of the state needs only its own delta, so each row
                // is decayed, corrected and read out while it is in L1:
                // the same operations on the same values as the whole
                // state taken a step at a time, in one pass over it.
                for (j, row) in st.chunks_exact_mut(s).enumerate() {
                    if per_key {
                        for (x, &e) in row.iter_mut().zip(decay.iter()) {
                            *x *= e;
                        }
                    } else {
                        for x in row.iter_mut() {
                            *x *= e;
                        }
                    }
                    let dj = (vv[j] - (kern.dot_f32)(row, kv)) * b;
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
    })?;
    if let (Some((_, set_rows)), Some(_)) = (store, &dst_rows) {
        ws.stored.mark(*set_rows);
    }
    Ok(())
}
