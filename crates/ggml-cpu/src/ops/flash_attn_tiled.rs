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

use std::cell::RefCell;

use ggml_core::{Result, Type};

use super::alibi_slope;
use super::flash_attn::Params;
use crate::compute::{par_rows_with, NodeCtx, Scratch};
use crate::pool;
use crate::simd;
use crate::tensor::View;

/// Query rows per tile (ggml's `GGML_FA_TILE_Q`); also the fewest query
/// rows for which attention is tiled.
pub(crate) const Q_TILE: usize = 64;
/// Keys per tile (ggml's `GGML_FA_TILE_KV`).
const KV_TILE: usize = 64;
/// Most bytes of converted keys and values a task keeps for the heads and
/// query tiles that share them.
const KEPT_BYTES: usize = 2 << 20;

/// True when the tiled algorithm computes this attention (as in ggml:
/// enough query rows, F32 queries, keys and values of one float type).
pub(crate) fn applies(q: &View, k: &View, v: &View) -> bool {
    q.ne[1] >= Q_TILE && q.ty == Type::F32 && k.ty == v.ty && matches!(k.ty, Type::F16 | Type::F32)
}

/// What a thread keeps while it computes its units of one attention: the
/// tiles it works in and what the units share.
#[derive(Default)]
struct Tiles {
    /// A query tile (rows x dk).
    qt: Vec<f32>,
    /// Converted key tiles (transposed, dk x keys) and value tiles (keys x
    /// dv), one slot per key tile while every tile fits in [`KEPT_BYTES`]
    /// (the heads and query tiles that use the same keys and values then
    /// convert them once), else one slot for every tile in turn.
    kts: Vec<f32>,
    vts: Vec<f32>,
    /// What each slot holds: (key head, key batch, value head, value batch,
    /// tile).
    held: Vec<Option<[usize; 5]>>,
    /// Scores of a query tile against a key tile.
    kq: Vec<f32>,
    /// The weighted sums of the values of a query tile.
    vkq: Vec<f32>,
    /// The mask rows of a query tile, times the head's slope,
    masks: Vec<f32>,
    /// per row and key tile whether the row sees a key of the tile,
    sees: Vec<bool>,
    /// and which rows they are (first query row, mask head and batch, slope
    /// bits): the heads of a query tile usually share them.
    masks_of: Option<[usize; 4]>,
}

impl Tiles {
    /// Sizes the buffers for an attention of these dimensions and forgets
    /// what they held (the buffers' old values are never read: each is
    /// written before it is read).
    fn fit(&mut self, dk: usize, dv: usize, n_kv: usize, masked: bool) {
        let n_tiles = n_kv.div_ceil(KV_TILE);
        let slots = if n_kv * (dk + dv) * 4 <= KEPT_BYTES {
            n_tiles
        } else {
            1
        };
        self.qt.resize(Q_TILE * dk, 0.0);
        self.kts.resize(slots * dk * KV_TILE, 0.0);
        self.vts.resize(slots * KV_TILE * dv, 0.0);
        self.held.clear();
        self.held.resize(slots, None);
        self.kq.resize(Q_TILE * KV_TILE, 0.0);
        self.vkq.resize(Q_TILE * dv, 0.0);
        self.masks
            .resize(if masked { Q_TILE * n_kv } else { 0 }, 0.0);
        self.sees
            .resize(if masked { Q_TILE * n_tiles } else { 0 }, false);
        self.masks_of = None;
    }

    /// Bytes of the f32 buffers (the flags and tags besides are small).
    fn bytes(&self) -> usize {
        4 * (self.qt.capacity()
            + self.kts.capacity()
            + self.vts.capacity()
            + self.kq.capacity()
            + self.vkq.capacity()
            + self.masks.capacity())
    }
}

/// Most bytes of tiles a thread keeps between attentions.
const SPARE_BYTES: usize = 4 << 20;

thread_local! {
    /// The tiles of the thread's last attention, for the next one: fresh
    /// buffers (zeroed, and faulted in when large) were a visible share of
    /// a small prompt's attention.
    static SPARE: RefCell<Option<Tiles>> = const { RefCell::new(None) };
}

/// A thread's tiles for one attention, kept for the next when dropped.
struct Lent(Tiles);

impl Lent {
    fn take(dk: usize, dv: usize, n_kv: usize, masked: bool) -> Lent {
        let mut t = SPARE.with_borrow_mut(Option::take).unwrap_or_default();
        t.fit(dk, dv, n_kv, masked);
        Lent(t)
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        let t = std::mem::take(&mut self.0);
        if t.bytes() <= SPARE_BYTES {
            SPARE.with_borrow_mut(|s| *s = Some(t));
        }
    }
}

/// Attention of every query row: result [d_v, n_head, n_q, ne3].
pub(crate) fn flash_attn_tiled(ctx: &NodeCtx<'_>, p: Params) -> Result<()> {
    let (q, k, v) = (&ctx.src[0], &ctx.src[1], &ctx.src[2]);
    let mask = ctx.src.get(3);
    let (dk, dv, n_kv) = (q.ne[0], v.ne[0], k.ne[1]);
    let (n_q, n_head, ne3) = (q.ne[1], q.ne[2], q.ne[3]);
    let q_tiles = n_q.div_ceil(Q_TILE);
    // One task unit per query tile, batch and group of heads: the heads
    // that share a key head, where that leaves units enough for the team
    // (a unit's heads then convert each key and value tile once), else
    // one head (at least one: a graph may hold an attention of no heads).
    let shared = (n_head / k.ne[2]).max(1);
    let group = if (n_head / shared) * q_tiles * ne3 >= 2 * pool::current_num_threads() {
        shared
    } else {
        1
    };
    let groups = n_head / group;
    let units = groups * q_tiles * ne3;
    par_rows_with(
        units,
        group * Q_TILE * n_kv * (dk + dv),
        || Lent::take(dk, dv, n_kv, mask.is_some()),
        |range, s, t| {
            for u in range {
                let g = u % groups;
                let t0 = (u / groups % q_tiles) * Q_TILE;
                let iq3 = u / (groups * q_tiles);
                for ih in g * group..(g + 1) * group {
                    head(ctx, p, [t0, ih, iq3], s, &mut t.0)?;
                }
            }
            Ok(())
        },
    )
}

/// Attention of the query tile from row `t0` of head `ih`, batch `iq3`.
fn head(
    ctx: &NodeCtx<'_>,
    p: Params,
    [t0, ih, iq3]: [usize; 3],
    s: &mut Scratch,
    t: &mut Tiles,
) -> Result<()> {
    let Params {
        scale,
        max_bias,
        softcap,
    } = p;
    let (q, k, v, d) = (&ctx.src[0], &ctx.src[1], &ctx.src[2], &ctx.dst);
    let mask = ctx.src.get(3);
    let (dk, dv, n_kv) = (q.ne[0], v.ne[0], k.ne[1]);
    let (n_q, n_head, ne3) = (q.ne[1], q.ne[2], q.ne[3]);
    let n_tiles = n_kv.div_ceil(KV_TILE);
    let kern = simd::kernels();
    let Tiles {
        qt,
        kts,
        vts,
        held,
        kq,
        vkq,
        masks,
        sees,
        masks_of,
    } = t;
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
        let of = Some([t0, im2, im3, slope.to_bits() as usize]);
        if *masks_of != of {
            for t in 0..rows {
                // SAFETY: m.ne1 >= n_q (checked); batch dims wrap.
                let r = unsafe { m.read_row([t0 + t, im2, im3], false, &mut s.b)? };
                let row = &mut masks[t * n_kv..(t + 1) * n_kv];
                for (o, &x) in row.iter_mut().zip(r) {
                    *o = slope * x;
                }
                for (seen, keys) in sees[t * n_tiles..(t + 1) * n_tiles]
                    .iter_mut()
                    .zip(row.chunks(KV_TILE))
                {
                    *seen = keys
                        .iter()
                        .fold(false, |a, &x| a | (x != f32::NEG_INFINITY));
                }
            }
            *masks_of = of;
        }
    }
    let mut max = [f32::NEG_INFINITY; Q_TILE];
    let mut sum = [0f32; Q_TILE];
    vkq[..rows * dv].fill(0.0);
    let slots = held.len();
    for ic in (0..n_kv).step_by(KV_TILE) {
        let w = (n_kv - ic).min(KV_TILE);
        let it = ic / KV_TILE;
        if mask.is_some() && !(0..rows).any(|t| sees[t * n_tiles + it]) {
            continue;
        }
        let slot = if slots == 1 { 0 } else { it };
        let kt = &mut kts[slot * dk * KV_TILE..(slot + 1) * dk * KV_TILE];
        let vt = &mut vts[slot * KV_TILE * dv..(slot + 1) * KV_TILE * dv];
        let tag = Some([ik2, ik3, iv2, iv3, it]);
        if held[slot] != tag {
            // Keys transposed (dk x w), so that a score row is a row of
            // the product.
            for tk in 0..w {
                // SAFETY: key row (ic + tk, ik2, ik3), only read.
                let r = unsafe { k.read_row([ic + tk, ik2, ik3], false, &mut s.c)? };
                for (x, &e) in r.iter().enumerate() {
                    kt[x * w + tk] = e;
                }
            }
            for tk in 0..w {
                let vp = v.row_ptr([ic + tk, iv2, iv3]);
                // SAFETY: value row (ic + tk, iv2, iv3) of dv elements
                // inside the view, only read.
                unsafe { v.read_strided(vp, dv, &mut vt[tk * dv..(tk + 1) * dv])? };
            }
            held[slot] = tag;
        }
        let kq = &mut kq[..rows * w];
        kq.fill(0.0);
        (kern.gemm_f32)(kq, qt, kt, rows, dk, w);
        // Capped (when the model asks), scaled and masked; each row's
        // largest score then gives its exponentials.
        let scale = if softcap != 0.0 {
            kq.iter_mut()
                .for_each(|x| *x = softcap * (*x * scale).tanh());
            1.0
        } else {
            scale
        };
        // The largest score of each row so far (-inf for a row that sees
        // no key of the tile), then the rows' exponentials side by side.
        let mut row_max = [f32::NEG_INFINITY; Q_TILE];
        for (t, row) in kq.chunks_exact_mut(w).enumerate() {
            let m = mask.map(|_| &masks[t * n_kv + ic..t * n_kv + ic + w]);
            let tile_max = (kern.scale_mask_max)(row, m, scale);
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
            row_max[t] = new_max;
        }
        let mut row_sum = [0f64; Q_TILE];
        (kern.exp_sum_rows)(kq, w, &row_max[..rows], &mut row_sum[..rows]);
        for t in 0..rows {
            if row_max[t] != f32::NEG_INFINITY {
                sum[t] = (f64::from(sum[t]) + row_sum[t]) as f32;
            }
        }
        (kern.gemm_f32)(&mut vkq[..rows * dv], kq, vt, rows, w, dv);
    }
    if let Some(k) = ctx.src.get(4) {
        let mut buf = Vec::new();
        // SAFETY: the sinks' one row (one logit per head), only read.
        let sink = unsafe { k.read_row([0, 0, 0], false, &mut buf)? }[ih];
        for t in 0..rows {
            let acc = &mut vkq[t * dv..(t + 1) * dv];
            sum[t] = super::flash_attn::add_sink(sink, max[t], sum[t], acc);
        }
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
    Ok(())
}
