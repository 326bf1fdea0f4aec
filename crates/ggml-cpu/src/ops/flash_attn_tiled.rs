//! FLASH_ATTN_EXT for prompts, in tiles as ggml's CPU backend computes
//! 64 or more query rows of F32 against F32 or F16 keys and values of one
//! type: [`Q_TILE`] query rows of a head at a time go through the keys
//! [`KV_TILE`] at a time; each key tile's scores are one f32 matrix
//! product (Q in f32, keys converted to f32), softmaxed against the running
//! maximum of each row, and the value tile (converted to f32) is added to
//! the rows' f32 sums with a second product. A key tile that the mask hides
//! from every row of the query tile is skipped.
//!
//! Each result row depends only on its own query, keys, values and mask,
//! not on which tile or thread computes it.

use ggml_core::{Result, Type};

use super::alibi_slope;
use super::flash_attn::Params;
use crate::compute::{par_rows, NodeCtx};
use crate::simd;
use crate::tensor::View;

/// Query rows per tile (ggml's `GGML_FA_TILE_Q`); also the fewest query
/// rows for which attention is tiled.
pub(crate) const Q_TILE: usize = 64;
/// Keys per tile (ggml's `GGML_FA_TILE_KV`).
const KV_TILE: usize = 64;

/// True when the tiled algorithm computes this attention (as in ggml:
/// enough query rows, F32 queries, keys and values of one float type).
pub(crate) fn applies(q: &View, k: &View, v: &View) -> bool {
    q.ne[1] >= Q_TILE && q.ty == Type::F32 && k.ty == v.ty && matches!(k.ty, Type::F16 | Type::F32)
}

/// Attention of every query row: result [d_v, n_head, n_q, ne3].
pub(crate) fn flash_attn_tiled(ctx: &NodeCtx<'_>, p: Params) -> Result<()> {
    let Params {
        scale,
        max_bias,
        softcap,
    } = p;
    let (q, k, v, d) = (&ctx.src[0], &ctx.src[1], &ctx.src[2], &ctx.dst);
    let mask = ctx.src.get(3);
    let (dk, dv, n_kv) = (q.ne[0], v.ne[0], k.ne[1]);
    let (n_q, n_head, ne3) = (q.ne[1], q.ne[2], q.ne[3]);
    let kern = simd::kernels();
    let q_tiles = n_q.div_ceil(Q_TILE);
    // One task unit per (query tile, head, batch).
    let units = q_tiles * n_head * ne3;
    par_rows(units, Q_TILE * n_kv * (dk + dv), |range, s| {
        let mut qt = vec![0f32; Q_TILE * dk];
        let mut kt = vec![0f32; dk * KV_TILE];
        let mut vt = vec![0f32; KV_TILE * dv];
        let mut kq = vec![0f32; Q_TILE * KV_TILE];
        let mut vkq = vec![0f32; Q_TILE * dv];
        let mut masks = vec![0f32; if mask.is_some() { Q_TILE * n_kv } else { 0 }];
        // The mask rows in `masks` (first query row, mask head and batch,
        // slope): the heads of a query tile usually share them.
        let mut masks_of = None;
        for u in range {
            let t0 = (u % q_tiles) * Q_TILE;
            let ih = (u / q_tiles) % n_head;
            let iq3 = u / (q_tiles * n_head);
            let rows = (n_q - t0).min(Q_TILE);
            let (ik2, ik3) = (ih / (n_head / k.ne[2]), iq3 / (ne3 / k.ne[3]));
            let (iv2, iv3) = (ih / (n_head / v.ne[2]), iq3 / (ne3 / v.ne[3]));
            for t in 0..rows {
                // SAFETY: (t0 + t, ih, iq3) is a query row, only read.
                let r = unsafe { q.read_row([t0 + t, ih, iq3], false, &mut s.a)? };
                qt[t * dk..(t + 1) * dk].copy_from_slice(r);
            }
            if let Some(m) = mask {
                let slope = alibi_slope(max_bias, n_head, ih);
                let (im2, im3) = (ih % m.ne[2], iq3 % m.ne[3]);
                let of = Some((t0, im2, im3, slope.to_bits()));
                if masks_of != of {
                    for t in 0..rows {
                        // SAFETY: m.ne1 >= n_q (checked); batch dims wrap.
                        let r = unsafe { m.read_row([t0 + t, im2, im3], false, &mut s.b)? };
                        for (o, &x) in masks[t * n_kv..(t + 1) * n_kv].iter_mut().zip(r) {
                            *o = slope * x;
                        }
                    }
                    masks_of = of;
                }
            }
            let mut max = [f32::NEG_INFINITY; Q_TILE];
            let mut sum = [0f32; Q_TILE];
            vkq[..rows * dv].fill(0.0);
            for ic in (0..n_kv).step_by(KV_TILE) {
                let w = (n_kv - ic).min(KV_TILE);
                let hidden = |t: usize| {
                    masks[t * n_kv + ic..t * n_kv + ic + w]
                        .iter()
                        .all(|&x| x == f32::NEG_INFINITY)
                };
                if mask.is_some() && (0..rows).all(hidden) {
                    continue;
                }
                // Keys transposed (dk x w), so that a score row is a row of
                // the product.
                for tk in 0..w {
                    // SAFETY: key row (ic + tk, ik2, ik3), only read.
                    let r = unsafe { k.read_row([ic + tk, ik2, ik3], false, &mut s.c)? };
                    for (x, &e) in r.iter().enumerate() {
                        kt[x * w + tk] = e;
                    }
                }
                let kq = &mut kq[..rows * w];
                kq.fill(0.0);
                (kern.gemm_f32)(kq, &qt, &kt, rows, dk, w);
                // Scaled (and capped), then masked: one loop per case, so
                // that the plain ones are vectorised.
                if softcap != 0.0 {
                    kq.iter_mut()
                        .for_each(|x| *x = softcap * (*x * scale).tanh());
                    if mask.is_some() {
                        for (t, row) in kq.chunks_exact_mut(w).enumerate() {
                            let m = &masks[t * n_kv + ic..t * n_kv + ic + w];
                            row.iter_mut().zip(m).for_each(|(x, &mv)| *x += mv);
                        }
                    }
                } else if mask.is_some() {
                    for (t, row) in kq.chunks_exact_mut(w).enumerate() {
                        let m = &masks[t * n_kv + ic..t * n_kv + ic + w];
                        row.iter_mut()
                            .zip(m)
                            .for_each(|(x, &mv)| *x = *x * scale + mv);
                    }
                } else {
                    kq.iter_mut().for_each(|x| *x *= scale);
                }
                for (t, row) in kq.chunks_exact_mut(w).enumerate() {
                    let tile_max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                    if tile_max == f32::NEG_INFINITY {
                        // Every key of the tile hidden from this row.
                        row.fill(0.0);
                        continue;
                    }
                    let new_max = max[t].max(tile_max);
                    if new_max > max[t] {
                        let ms = (max[t] - new_max).exp();
                        for x in &mut vkq[t * dv..(t + 1) * dv] {
                            *x *= ms;
                        }
                        sum[t] *= ms;
                    }
                    max[t] = new_max;
                    sum[t] = (f64::from(sum[t]) + (kern.exp_sum)(row, new_max)) as f32;
                }
                for tk in 0..w {
                    let vp = v.row_ptr([ic + tk, iv2, iv3]);
                    // SAFETY: value row (ic + tk, iv2, iv3) of dv elements
                    // inside the view, only read.
                    unsafe { v.read_strided(vp, dv, &mut vt[tk * dv..(tk + 1) * dv])? };
                }
                (kern.gemm_f32)(&mut vkq[..rows * dv], kq, &vt, rows, w, dv);
            }
            for t in 0..rows {
                let inv = if sum[t] == 0.0 { 0.0 } else { 1.0 / sum[t] };
                let acc = &vkq[t * dv..(t + 1) * dv];
                // SAFETY: each result row is written by one task.
                unsafe {
                    d.write_row([ih, t0 + t, iq3], &mut s.d, |o| {
                        for (o, &a) in o.iter_mut().zip(acc) {
                            *o = a * inv;
                        }
                    })?
                };
            }
        }
        Ok(())
    })
}
