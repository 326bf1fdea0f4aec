//! The quantizers of IQ1_S and IQ1_M (ggml's `quantize_row_iq1_s_impl`
//! and `quantize_row_iq1_m_impl`), with ggml's arithmetic order.
//!
//! A group's values take one of three levels `-1, 0, 1` shifted by
//! `±IQ1S_DELTA`: the values sorted (stably) and split at every pair of
//! boundaries, the weighted least-squares scale of each split is
//! compared, the best split's pieces of 8 are moved to the nearest grid
//! points, and the group scales are stored as 3-bit multiples of the
//! super-block's scale (IQ1_M fits that scale once more over the whole
//! super-block).

use half::f16;

use super::blocks::{BlockIq1M, BlockIq1S, QK_K};
use super::fp::{f2h, nearest_int};
use super::iq_grid_quant::{best_neighbour, group_weights, sum_sq};
use super::iq_neighbours::{self, GridSearch};
use super::tables::IQ1S_DELTA;
use crate::error::Result;

const GROUP_MAX_EPS_IQ1_S: f32 = 1e-12;
const GROUP_MAX_EPS_IQ1_M: f32 = 1e-7;
const X_P: [f32; 3] = [-1.0 + IQ1S_DELTA, IQ1S_DELTA, 1.0 + IQ1S_DELTA];
const X_M: [f32; 3] = [-1.0 - IQ1S_DELTA, -IQ1S_DELTA, 1.0 - IQ1S_DELTA];

/// The grid index of the levels `l` of a piece, or its best neighbour's
/// (then `l` is updated) with levels worth `xx` at `scale`; the flag says
/// whether it was on the grid.
fn piece_index(
    t: &GridSearch<8>,
    x: &[f32],
    weight: &[f32],
    scale: f32,
    xx: &[f32; 3],
    l: &mut [i8],
) -> (usize, bool) {
    let mut u = 0usize;
    for (j, &v) in l.iter().enumerate() {
        u |= (v as usize) << (2 * j);
    }
    match t.lookup(u) {
        Ok(g) => (g, true),
        Err(n) => {
            let value = |p: i8| xx[((p - 1) / 2) as usize];
            (best_neighbour(t, n, x, weight, scale, value, l), false)
        }
    }
}

/// The `P` pieces of 8 of a group moved onto the grid, piece `k`'s levels
/// worth `xx(k)`: their grid indices and the scale, refitted when a piece
/// was off the grid.
fn snap_pieces<const P: usize>(
    t: &GridSearch<8>,
    xb: &[f32],
    weight: &[f32],
    mut scale: f32,
    xx: impl Fn(usize) -> &'static [f32; 3],
    l: &mut [i8],
) -> ([usize; P], f32) {
    let mut index = [0usize; P];
    let mut all_on_grid = true;
    for k in 0..P {
        let r = 8 * k..8 * k + 8;
        let (g, on) = piece_index(
            t,
            &xb[r.clone()],
            &weight[r.clone()],
            scale,
            xx(k),
            &mut l[r],
        );
        index[k] = g;
        all_on_grid &= on;
    }
    if !all_on_grid {
        let (mut sumqx, mut sumq2) = (0f32, 0f32);
        for k in 0..P {
            let xx = xx(k);
            let p = &t.points[index[k]];
            for j in 0..8 {
                let w = weight[8 * k + j];
                let q = xx[((p[j] - 1) / 2) as usize];
                sumqx += w * q * xb[8 * k + j];
                sumq2 += w * q * q;
            }
        }
        if sumqx > 0.0 && sumq2 > 0.0 {
            scale = sumqx / sumq2;
        }
    }
    (index, scale)
}

/// A negative `scale` made positive by mirroring the levels `l`; true
/// when it was negative.
fn mirror(scale: &mut f32, l: &mut [i8]) -> bool {
    if *scale < 0.0 {
        for v in l {
            *v = 2 - *v;
        }
        *scale = -*scale;
        return true;
    }
    false
}

/// `x`'s positions sorted by value, stably.
fn sorted_positions<const N: usize>(x: &[f32]) -> [usize; N] {
    let mut idx: [usize; N] = std::array::from_fn(|i| i);
    idx.sort_by(|&a, &b| x[a].partial_cmp(&x[b]).unwrap_or(std::cmp::Ordering::Equal));
    idx
}

fn abs_max(x: &[f32]) -> f32 {
    let mut m = x[0].abs();
    for &v in &x[1..] {
        let a = v.abs();
        m = if m > a { m } else { a };
    }
    m
}

fn sigma2_of(x: &[f32]) -> f32 {
    2.0 * sum_sq(x) / QK_K as f32
}

/// The levels of a split: below `i1` level 0, below `i2` level 1, else 2.
fn split_levels(idx: &[usize], i1: usize, i2: usize, l: &mut [i8]) {
    for (j, &i) in idx.iter().enumerate() {
        l[i] = if j < i1 {
            0
        } else if j < i2 {
            1
        } else {
            2
        };
    }
}

impl BlockIq1S {
    /// IQ1_S of 256 values with importance `qw` (ggml requires one).
    pub(crate) fn quantize_weighted(x: &[f32], qw: &[f32]) -> Result<Self> {
        const BS: usize = 32;
        let t = iq_neighbours::iq1s();
        let mut b = BlockIq1S {
            d: f16::ZERO,
            qs: [0; QK_K / 8],
            qh: [0; QK_K / 32],
        };
        let mut scales = [0f32; QK_K / BS];
        let mut shifts = [0i8; QK_K / BS];
        let mut max_scale = 0f32;
        let sigma2 = sigma2_of(x);
        for ib in 0..QK_K / BS {
            let xb = &x[BS * ib..BS * ib + BS];
            let mut weight = [0f32; BS];
            let qwb = Some(&qw[BS * ib..BS * ib + BS]);
            group_weights(xb, qwb, sigma2, |v| v * v, &mut weight);
            let max = abs_max(xb);
            shifts[ib] = 1;
            if max < GROUP_MAX_EPS_IQ1_S {
                continue;
            }
            let idx: [usize; BS] = sorted_positions(xb);
            let mut sumx = [0f32; BS + 1];
            let mut sumw = [0f32; BS + 1];
            for (j, &i) in idx.iter().enumerate() {
                sumx[j + 1] = sumx[j] + weight[i] * xb[i];
                sumw[j + 1] = sumw[j] + weight[i];
            }
            let mut best_score = f32::MIN;
            let mut scale = max;
            let mut best: Option<(usize, usize, i8)> = None;
            for i1 in 0..=BS {
                for i2 in i1..=BS {
                    for (xv, shift) in [(&X_P, 1i8), (&X_M, -1)] {
                        let sumqx = (sumx[i1] - sumx[0]) * xv[0]
                            + (sumx[i2] - sumx[i1]) * xv[1]
                            + (sumx[BS] - sumx[i2]) * xv[2];
                        let sumq2 = (sumw[i1] - sumw[0]) * xv[0] * xv[0]
                            + (sumw[i2] - sumw[i1]) * xv[1] * xv[1]
                            + (sumw[BS] - sumw[i2]) * xv[2] * xv[2];
                        if sumq2 > 0.0 && sumqx * sumqx > best_score * sumq2 {
                            scale = sumqx / sumq2;
                            best_score = scale * sumqx;
                            best = Some((i1, i2, shift));
                        }
                    }
                }
            }
            let Some((i1, i2, mut shift)) = best else {
                continue;
            };
            let mut l = [0i8; BS];
            split_levels(&idx, i1, i2, &mut l);
            if mirror(&mut scale, &mut l) {
                shift = -shift;
            }
            let xx: &'static [f32; 3] = if shift == 1 { &X_P } else { &X_M };
            let (index, scale) = snap_pieces::<{ BS / 8 }>(t, xb, &weight, scale, |_| xx, &mut l);
            let mut h = 0u16;
            for (k, &g) in index.iter().enumerate() {
                b.qs[(BS / 8) * ib + k] = g as u8;
                h |= ((g >> 8) as u16) << (3 * k);
            }
            b.qh[ib] = h;
            scales[ib] = scale;
            shifts[ib] = shift;
            max_scale = if max_scale > scale { max_scale } else { scale };
        }
        if max_scale == 0.0 {
            return Ok(b);
        }
        let d = max_scale / 15.0;
        b.d = f2h(d * 1.125);
        let id = 1.0 / d;
        for ib in 0..QK_K / BS {
            let mut l = nearest_int(0.5 * (id * scales[ib] - 1.0)).clamp(0, 7) as u16;
            if shifts[ib] == -1 {
                l |= 8;
            }
            b.qh[ib] |= l << 12;
        }
        Ok(b)
    }
}

impl BlockIq1M {
    /// IQ1_M of 256 values, with importance `qw` when given.
    pub(crate) fn quantize_weighted(x: &[f32], qw: Option<&[f32]>) -> Result<Self> {
        const BS: usize = 16;
        const MASKS: [u8; 4] = [0x00, 0x80, 0x08, 0x88];
        let t = iq_neighbours::iq1s();
        let mut b = BlockIq1M {
            qs: [0; QK_K / 8],
            qh: [0; QK_K / 16],
            scales: [0; QK_K / 32],
        };
        // The sign choice of each half: 0 (+,+), 1 (+,-), 2 (-,+), 3 (-,-).
        let half = |k: usize, choice: usize| -> &'static [f32; 3] {
            let plus = if k == 0 { choice < 2 } else { choice % 2 == 0 };
            if plus {
                &X_P
            } else {
                &X_M
            }
        };
        let mut scales = [0f32; QK_K / BS];
        let mut shifts = [0usize; QK_K / BS];
        let mut max_scale = 0f32;
        let sigma2 = sigma2_of(x);
        for ib in 0..QK_K / BS {
            let xb = &x[BS * ib..BS * ib + BS];
            let mut weight = [0f32; BS];
            let qwb = qw.map(|q| &q[BS * ib..BS * ib + BS]);
            group_weights(xb, qwb, sigma2, |v| v * v, &mut weight);
            let max = abs_max(xb);
            if max < GROUP_MAX_EPS_IQ1_M {
                continue;
            }
            let idx: [usize; BS] = sorted_positions(xb);
            let mut px = [[0f32; BS + 1]; 2];
            let mut pw = [[0f32; BS + 1]; 2];
            for (j, &i) in idx.iter().enumerate() {
                let h = usize::from(i >= BS / 2);
                px[h][j + 1] = px[h][j] + weight[i] * xb[i];
                px[1 - h][j + 1] = px[1 - h][j];
                pw[h][j + 1] = pw[h][j] + weight[i];
                pw[1 - h][j + 1] = pw[1 - h][j];
            }
            let txs = [px[0][BS], px[1][BS]];
            let tws = [pw[0][BS], pw[1][BS]];
            let (p2, m2) = (X_P[2], X_M[2]);
            let cp1 = X_P[0] * X_P[0] - X_P[1] * X_P[1];
            let cp2 = X_P[1] * X_P[1] - X_P[2] * X_P[2];
            let cm1 = X_M[0] * X_M[0] - X_M[1] * X_M[1];
            let cm2 = X_M[1] * X_M[1] - X_M[2] * X_M[2];
            let mut best_score = f32::MIN;
            let mut scale = max;
            let mut best: Option<(usize, usize, usize)> = None;
            for i1 in 0..=BS {
                for i2 in i1..=BS {
                    let (mut qx_p, mut qx_m, mut q2_p, mut q2_m) =
                        ([0f32; 2], [0f32; 2], [0f32; 2], [0f32; 2]);
                    for h in 0..2 {
                        let sx = px[h][i1] + px[h][i2];
                        qx_p[h] = txs[h] * p2 - sx;
                        qx_m[h] = txs[h] * m2 - sx;
                        q2_p[h] = tws[h] * p2 * p2 + pw[h][i1] * cp1 + pw[h][i2] * cp2;
                        q2_m[h] = tws[h] * m2 * m2 + pw[h][i1] * cm1 + pw[h][i2] * cm2;
                    }
                    let sumqx = [
                        qx_p[0] + qx_p[1],
                        qx_p[0] + qx_m[1],
                        qx_m[0] + qx_p[1],
                        qx_m[0] + qx_m[1],
                    ];
                    let sumq2 = [
                        q2_p[0] + q2_p[1],
                        q2_p[0] + q2_m[1],
                        q2_m[0] + q2_p[1],
                        q2_m[0] + q2_m[1],
                    ];
                    for k in 0..4 {
                        if sumq2[k] > 0.0 && sumqx[k] * sumqx[k] > best_score * sumq2[k] {
                            scale = sumqx[k] / sumq2[k];
                            best_score = scale * sumqx[k];
                            best = Some((i1, i2, k));
                        }
                    }
                }
            }
            let Some((i1, i2, mut best_k)) = best else {
                continue;
            };
            let mut l = [0i8; BS];
            split_levels(&idx, i1, i2, &mut l);
            if mirror(&mut scale, &mut l) {
                best_k = 3 - best_k;
            }
            let (index, scale) =
                snap_pieces::<2>(t, xb, &weight, scale, |k| half(k, best_k), &mut l);
            b.qs[2 * ib] = index[0] as u8;
            b.qs[2 * ib + 1] = index[1] as u8;
            b.qh[ib] = (index[0] >> 8) as u8 | (((index[1] >> 8) as u8) << 4);
            scales[ib] = scale;
            shifts[ib] = best_k;
            max_scale = if max_scale > scale { max_scale } else { scale };
        }
        if max_scale == 0.0 {
            return Ok(b);
        }
        let mut sc = [0u16; 4];
        let mut d = max_scale / 15.0;
        let id = 1.0 / d;
        let (mut sumqx, mut sumq2) = (0f32, 0f32);
        for ib in 0..QK_K / BS {
            let l = nearest_int(0.5 * (id * scales[ib] - 1.0)).clamp(0, 7);
            sc[ib / 4] |= (l as u16) << (3 * (ib % 4));
            b.qh[ib] |= MASKS[shifts[ib]];
            let xb = &x[BS * ib..BS * ib + BS];
            let mut weight = [0f32; BS];
            let qwb = qw.map(|q| &q[BS * ib..BS * ib + BS]);
            group_weights(xb, qwb, sigma2, |v| v * v, &mut weight);
            for k in 0..2 {
                let xx = half(k, shifts[ib]);
                let g = usize::from(b.qs[2 * ib + k])
                    + ((usize::from(b.qh[ib]) << (8 - 4 * k)) & 0x700);
                let p = &t.points[g];
                for j in 0..8 {
                    let w = weight[8 * k + j];
                    let q = xx[((p[j] - 1) / 2) as usize] * (2 * l + 1) as f32;
                    sumqx += w * q * xb[8 * k + j];
                    sumq2 += w * q * q;
                }
            }
        }
        if sumq2 > 0.0 {
            d = sumqx / sumq2;
        }
        let s = f2h(d * 1.1125).to_bits();
        sc[0] |= (s & 0x000f) << 12;
        sc[1] |= (s & 0x00f0) << 8;
        sc[2] |= (s & 0x0f00) << 4;
        sc[3] |= s & 0xf000;
        for (j, w) in sc.iter().enumerate() {
            b.scales[2 * j..2 * j + 2].copy_from_slice(&w.to_le_bytes());
        }
        Ok(b)
    }
}
