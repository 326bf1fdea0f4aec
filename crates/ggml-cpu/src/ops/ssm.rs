//! CONCAT, SSM_CONV and SSM_SCAN: the ops of Mamba's mixer.
//!
//! Every kernel splits its work into units that write disjoint parts of
//! the result and compute each element the same way whatever the split,
//! so results do not depend on the number of threads.

use ggml_core::Result;

use crate::compute::{par_rows, NodeCtx, Workspace};
use crate::fuse::{store_rows, Fusion, Rows};
use crate::simd;
use crate::tensor::View;

/// Address of element `i` of a view.
#[inline]
fn at(v: &View, i: [usize; 4]) -> *mut u8 {
    v.ptr
        .get()
        .wrapping_add(i[0] * v.nb[0] + i[1] * v.nb[1] + i[2] * v.nb[2] + i[3] * v.nb[3])
}

/// `n` f32 elements of a row with dense elements starting at `p`.
///
/// # Safety
/// `p` must address `n` f32 values of a validated view, 4-byte aligned,
/// that nobody writes while the slice lives.
#[inline]
unsafe fn floats<'a>(p: *const u8, n: usize) -> &'a [f32] {
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(p as *const f32, n) }
}

/// One f32 element at `p`.
///
/// # Safety
/// As [`floats`] for one element.
#[inline]
unsafe fn float(p: *const u8) -> f32 {
    // SAFETY: the caller's contract.
    unsafe { (p as *const f32).read() }
}

/// ggml's softplus: `x` above 20, else `ln(1 + e^x)`.
#[inline]
fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        (1.0 + x.exp()).ln()
    }
}

/// Copies `n` elements of `es` bytes from element `i` of `v` (stride
/// nb0) to the dense memory at `to`.
///
/// # Safety
/// The `n` elements must lie inside the validated view `v`; `to` must be
/// writable for `n * es` bytes that nobody else touches and that do not
/// overlap the source.
unsafe fn copy_row(v: &View, i: [usize; 4], to: *mut u8, n: usize, es: usize) {
    let from = at(v, i);
    // SAFETY: the caller's contract.
    unsafe {
        if v.nb[0] == es || n <= 1 {
            std::ptr::copy_nonoverlapping(from, to, n * es);
        } else {
            for j in 0..n {
                std::ptr::copy_nonoverlapping(from.add(j * v.nb[0]), to.add(j * es), es);
            }
        }
    }
}

/// `src0` then `src1` along axis `dim`, bytes copied unchanged, one
/// result row per unit.
pub(crate) fn concat(ctx: &NodeCtx<'_>, dim: usize) -> Result<()> {
    let (a, b, d) = (&ctx.src[0], &ctx.src[1], &ctx.dst);
    let es = d.ty.type_size();
    par_rows(d.n_rows(), d.ne[0], |rows, _| {
        for r in rows {
            let [i1, i2, i3] = d.row_index(r);
            let out = d.row_ptr([i1, i2, i3]);
            let i = [0, i1, i2, i3];
            if dim == 0 {
                // SAFETY: the source rows lie inside their validated views
                // (indices in range by the shape rules); the result row is
                // dense (a new contiguous tensor) of a.ne0 + b.ne0
                // elements, written by this unit only, and does not overlap
                // the sources (those that would are copied before the node
                // runs).
                unsafe {
                    copy_row(a, i, out, a.ne[0], es);
                    copy_row(b, i, out.add(a.ne[0] * es), b.ne[0], es);
                }
            } else if i[dim] < a.ne[dim] {
                // SAFETY: as above.
                unsafe { copy_row(a, i, out, a.ne[0], es) };
            } else {
                let mut j = i;
                j[dim] -= a.ne[dim];
                // SAFETY: as above.
                unsafe { copy_row(b, j, out, b.ne[0], es) };
            }
        }
        Ok(())
    })
}

/// Channels of one SSM_CONV unit.
const CONV_CHANNELS: usize = 32;

/// `r[ch, t, s] = sum_k sx[t + k, ch, s] * c[k, ch]`, summed in order of
/// k as ggml does; a unit is a block of channels of one sequence.
pub(crate) fn ssm_conv(ctx: &NodeCtx<'_>) -> Result<()> {
    let (sx, c, d) = (&ctx.src[0], &ctx.src[1], &ctx.dst);
    let d_conv = c.ne[0];
    let [d_inner, n_t, n_s, _] = d.ne;
    let blocks = d_inner.div_ceil(CONV_CHANNELS);
    par_rows(n_s * blocks, CONV_CHANNELS * n_t * d_conv, |units, _| {
        for u in units {
            let (s, blk) = (u / blocks, u % blocks);
            for ch in blk * CONV_CHANNELS..((blk + 1) * CONV_CHANNELS).min(d_inner) {
                // SAFETY: the kernel row of `d_conv` dense f32 values is
                // inside its validated view and only read.
                let w = unsafe { floats(at(c, [0, ch, 0, 0]), d_conv) };
                // SAFETY: as for the kernel: sx's row of d_conv - 1 + n_t values.
                let x = unsafe { floats(at(sx, [0, ch, s, 0]), sx.ne[0]) };
                for t in 0..n_t {
                    let mut sum = 0f32;
                    for k in 0..d_conv {
                        sum += x[t + k] * w[k];
                    }
                    // SAFETY: element (ch, t, s) of the F32 result, written by
                    // this unit only (its channel block of sequence s).
                    unsafe { (at(d, [ch, t, s, 0]) as *mut f32).write(sum) };
                }
            }
        }
        Ok(())
    })
}

/// The scan of `Graph::ssm_scan`: a unit is one head of one sequence,
/// whose rows carry their states through the tokens in the result's state
/// region, so that neither the cache nor another unit is written.
pub(crate) fn ssm_scan(ctx: &NodeCtx<'_>, ws: &mut Workspace) -> Result<()> {
    let [s0, x, dt, a, b, c, ids] = [0, 1, 2, 3, 4, 5, 6].map(|i| &ctx.src[i]);
    let d = &ctx.dst;
    let [d_state, head_dim, n_head, n_slots] = s0.ne;
    let [_, _, n_t, n_s] = x.ne;
    let per_group = n_head / b.ne[1];
    let mamba1 = a.ne[0] != 1;
    let y_len = head_dim * n_head * n_t * n_s;
    let k = simd::kernels();
    let work = head_dim * n_t * d_state * if mamba1 { 8 } else { 3 };
    // Fused with the SET_ROWS that stores the final states (see
    // `fuse`): the cache rows each sequence's state goes to, when the
    // indices allow writing them in place.
    let store = match ctx.fusion {
        Some(Fusion::States(io)) => io.store.as_ref().and_then(|(rows, set_rows)| {
            let src = Rows {
                cache: rows.cache.clone(),
                index: ids.clone(),
            };
            src.read(n_s)
                .ok()
                .and_then(|src| store_rows(rows, Some(&src), n_s))
                .map(|dst| (rows, dst, *set_rows))
        }),
        _ => None,
    };
    par_rows(n_s * n_head, work, |units, _| {
        for u in units {
            let (seq, h) = (u / n_head, u % n_head);
            let g = h / per_group;
            // SAFETY: element `seq` of the I32 ids, inside the view.
            let slot = i64::from(unsafe { (at(ids, [seq, 0, 0, 0]) as *const i32).read() });
            if slot < 0 || slot as usize >= n_slots {
                return Err(ctx.err(format!(
                    "state slot {slot} of sequence {seq} is out of range 0..{n_slots}"
                )));
            }
            let head_ptr = match &store {
                // Row dst[seq] of the dense F32 cache (in range: checked by
                // `store_rows`), the head's part of it.
                Some((rows, dst, _)) => rows.ptr(dst[seq], d_state * head_dim * h),
                // SAFETY: the head's part of the states after y in the
                // dense 1-d result.
                None => unsafe {
                    (d.ptr.get() as *mut f32).add(y_len + d_state * head_dim * (h + n_head * seq))
                },
            };
            let from = at(s0, [0, 0, h, slot as usize]) as *const f32;
            if store.is_none() || !std::ptr::eq(head_ptr, from) {
                for i in 0..head_dim {
                    // SAFETY: row i of the head's state (written by this
                    // unit only: another sequence's cell, or the result)
                    // and the cache's row (i, h, slot), only read, which
                    // it does not overlap: the result does not overlap the
                    // sources (else they were copied), and a stored row is
                    // no sequence's source cell but its own (`store_rows`).
                    unsafe {
                        std::slice::from_raw_parts_mut(head_ptr.add(i * d_state), d_state)
                            .copy_from_slice(floats(at(s0, [0, i, h, slot as usize]), d_state))
                    };
                }
            }
            // SAFETY: the head's head_dim rows of d_state f32 values,
            // written by this unit only (its cache row part, or its part of
            // the result).
            let states = unsafe { std::slice::from_raw_parts_mut(head_ptr, d_state * head_dim) };
            // SAFETY: A's row h: d_state values for Mamba-1, one for Mamba-2.
            let a_row = unsafe { floats(at(a, [0, h, 0, 0]), a.ne[0]) };
            // Token by token, every row of the head: B and C of the token
            // stay in cache while the head's rows are updated, as in ggml.
            for t in 0..n_t {
                // SAFETY: element (h, t, seq) of dt and B's and C's rows
                // (g, t, seq) of d_state values, inside their views.
                let (dt_v, bv, cv) = unsafe {
                    (
                        float(at(dt, [h, t, seq, 0])),
                        floats(at(b, [0, g, t, seq]), d_state),
                        floats(at(c, [0, g, t, seq]), d_state),
                    )
                };
                let dt_sp = softplus(dt_v);
                let da = (dt_sp * a_row[0]).exp();
                let y0 = head_dim * (h + n_head * (t + n_t * seq));
                for (i, row) in states.chunks_exact_mut(d_state).enumerate() {
                    // SAFETY: x's element (i, h, t, seq), inside its view.
                    let x_dt = unsafe { float(at(x, [i, h, t, seq])) } * dt_sp;
                    let y = if mamba1 {
                        (k.ssm_step_decay)(row, a_row, bv, cv, dt_sp, x_dt)
                    } else {
                        (k.ssm_step)(row, bv, cv, da, x_dt)
                    };
                    // SAFETY: element y0 + i of the dense result's y region,
                    // written by this unit only (head h of sequence seq).
                    unsafe { (d.ptr.get() as *mut f32).add(y0 + i).write(y) };
                }
            }
        }
        Ok(())
    })?;
    if let Some((_, _, set_rows)) = store {
        ws.stored.mark(set_rows);
    }
    Ok(())
}
