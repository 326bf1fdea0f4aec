//! The quantizers of the 2- and 3-bit grid i-quants (ggml's
//! `quantize_row_iq2_xxs_impl`, `_iq2_xs_impl`, `_iq2_s_impl`,
//! `_iq3_xxs_impl`, `_iq3_s_impl`), with ggml's arithmetic order so that
//! the bytes are llama.cpp's.
//!
//! Each group of a super-block takes the magnitudes of its values (the
//! signs are stored apart; IQ2_XXS, IQ2_XS and IQ3_XXS keep an even number
//! of negatives by flipping the least important one), searches a scale
//! over a few candidates, rounds each 8- or 4-wide piece to levels `l`
//! (values `2 l + 1`) and, when that vector is not a grid point, takes
//! the neighbour closest in the weighted error; the best scale of the
//! search is refined once more, and the group scales are stored as 4-bit
//! multiples of the super-block's f16 scale.

use half::f16;

use super::blocks::{BlockIq2S, BlockIq2Xs, BlockIq2Xxs, BlockIq3S, BlockIq3Xxs, QK_K};
use super::fp::{f2h, nearest_int};
use super::iq_neighbours::{self, GridSearch};
use super::search::{make_qp_quants, GROUP_MAX_EPS};
use crate::error::{Error, Result};

const GROUP_MAX_EPS_IQ3_XXS: f32 = 1e-8;
const GROUP_MAX_EPS_IQ2_S: f32 = 1e-8;

/// The grid point among `neighbours` closest to `xval` in the weighted
/// squared error (the first on ties), a point's levels worth
/// `scale * value(p)` for its odd coordinates `p`; writes its levels to `l`.
pub(crate) fn best_neighbour<const W: usize>(
    t: &GridSearch<W>,
    neighbours: &[u16],
    xval: &[f32],
    weight: &[f32],
    scale: f32,
    value: impl Fn(i8) -> f32,
    l: &mut [i8],
) -> usize {
    // The first neighbour stands when every error is NaN (ggml asserts).
    let mut best = f32::MAX;
    let mut index = neighbours[0] as usize;
    for &j in neighbours {
        let p = &t.points[j as usize];
        let mut d2 = 0f32;
        for i in 0..W {
            let diff = scale * value(p[i]) - xval[i];
            d2 += weight[i] * diff * diff;
        }
        if d2 < best {
            best = d2;
            index = j as usize;
        }
    }
    for (li, &p) in l.iter_mut().zip(&t.points[index]) {
        *li = (p - 1) / 2;
    }
    index
}

/// Bits per level of a `W`-wide grid vector.
const fn level_bits(w: usize) -> usize {
    if w == 8 {
        2
    } else {
        3
    }
}

/// Rounds the `W` values `xval` at inverse scale `id` to levels below
/// `kmax` into `l`; off the grid, takes the best neighbour at `scale`.
/// True when the rounding landed on the grid.
fn snap<const W: usize>(
    t: &GridSearch<W>,
    xval: &[f32],
    waux: &[f32],
    id: f32,
    scale: f32,
    kmax: i32,
    l: &mut [i8],
) -> bool {
    let mut u = 0usize;
    for i in 0..W {
        let v = nearest_int(0.5 * (id * xval[i] - 1.0));
        let v = v.clamp(0, kmax - 1);
        l[i] = v as i8;
        u |= (v as usize) << (level_bits(W) * i);
    }
    match t.lookup(u) {
        Ok(_) => true,
        Err(n) => {
            best_neighbour(t, n, xval, waux, scale, f32::from, l);
            false
        }
    }
}

/// The grid index of the levels `l`.
fn grid_index<const W: usize>(t: &GridSearch<W>, l: &[i8]) -> Result<usize> {
    let mut u = 0usize;
    for (i, &v) in l.iter().enumerate().take(W) {
        u |= (v as usize) << (level_bits(W) * i);
    }
    t.lookup(u)
        .map_err(|_| Error::Quant(format!("grid quantizer: point {u} is not on the grid")))
}

/// `sum w x q` and `sum w q q` over the group with `q = 2 l + 1`.
fn sums(weight: &[f32], xval: &[f32], l: &[i8]) -> (f32, f32) {
    let (mut sumqx, mut sumq2) = (0f32, 0f32);
    for ((&w, &x), &l) in weight.iter().zip(xval).zip(l) {
        let q = f32::from(2 * l + 1);
        sumqx += w * x * q;
        sumq2 += w * q * q;
    }
    (sumqx, sumq2)
}

#[inline]
fn fmax(a: f32, b: f32) -> f32 {
    if a > b {
        a
    } else {
        b
    }
}

/// Magnitudes of 8 values and their sign bits; with `even`, the least
/// important value (weight times square) is flipped when the negatives
/// are odd, and 7 sign bits are kept.
fn signs8(xb: &[f32], weight: &[f32], xval: &mut [f32], even: bool) -> u8 {
    let mut s = 0u8;
    let mut nflip = 0;
    for i in 0..8 {
        if xb[i] >= 0.0 {
            xval[i] = xb[i];
        } else {
            xval[i] = -xb[i];
            nflip += 1;
            s |= 1 << i;
        }
    }
    if !even {
        return s;
    }
    if nflip % 2 == 1 {
        let mut imin = 0;
        let mut min = weight[0] * xb[0] * xb[0];
        for i in 1..8 {
            let ax = weight[i] * xb[i] * xb[i];
            if ax < min {
                min = ax;
                imin = i;
            }
        }
        xval[imin] = -xval[imin];
        s ^= 1 << imin;
    }
    s & 127
}

/// Group weights: `qw * sqrt(sigma2 + x^2)` with an importance matrix,
/// else the type's own choice.
pub(crate) fn group_weights(
    xb: &[f32],
    qw: Option<&[f32]>,
    sigma2: f32,
    own: impl Fn(f32) -> f32,
    w: &mut [f32],
) {
    match qw {
        Some(qw) => {
            for ((w, &x), &q) in w.iter_mut().zip(xb).zip(qw) {
                *w = q * (sigma2 + x * x).sqrt();
            }
        }
        None => {
            for (w, &x) in w.iter_mut().zip(xb) {
                *w = own(x);
            }
        }
    }
}

/// The sum of squares of `x`, in order.
pub(crate) fn sum_sq(x: &[f32]) -> f32 {
    let mut s = 0f32;
    for &v in x {
        s += v * v;
    }
    s
}

/// A group's values ready for the search: their weights (and square
/// roots, which weigh the neighbour search), magnitudes, sign bits (one
/// byte per 8 values) and largest magnitude.
struct Group<const N: usize> {
    weight: [f32; N],
    waux: [f32; N],
    xval: [f32; N],
    signs: [u8; 4],
    max: f32,
}

impl<const N: usize> Group<N> {
    /// `xb`'s group with importance `qw` when given (else weights
    /// `own(x)`); `even` keeps an even number of negatives (7 sign bits).
    fn new(
        xb: &[f32],
        qw: Option<&[f32]>,
        sigma2: f32,
        own: impl Fn(f32) -> f32,
        even: bool,
    ) -> Self {
        let mut weight = [0f32; N];
        group_weights(xb, qw, sigma2, own, &mut weight);
        let waux = weight.map(f32::sqrt);
        let mut xval = [0f32; N];
        let mut signs = [0u8; 4];
        for k in 0..N / 8 {
            let r = 8 * k..8 * k + 8;
            signs[k] = signs8(&xb[r.clone()], &weight[r.clone()], &mut xval[r], even);
        }
        let mut max = xval[0];
        for &v in &xval[1..] {
            max = fmax(max, v);
        }
        Group {
            weight,
            waux,
            xval,
            signs,
            max,
        }
    }

    /// `scale` made positive: a negative one flips every sign bit (the 7
    /// kept ones with `even`).
    fn positive(&mut self, scale: f32, even: bool) -> f32 {
        if scale < 0.0 {
            let mask = if even { 127 } else { 255 };
            for s in &mut self.signs[..N / 8] {
                *s = !*s & mask;
            }
            return -scale;
        }
        scale
    }
}

/// Which pieces the search rounds again at its best scale.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Redo {
    /// Those off the grid.
    OffGrid,
    /// All, when one is off the grid (or no candidate won).
    AllWhenOff,
    /// All.
    All,
}

/// The search of one group: the scale candidates
/// `(2 kmax - 1 + is * step) / max` for `is` in `-steps..=steps`, keeping
/// the levels of the best (`l` and `scale` hold the start), then the
/// pieces `redo` names rounded again at the best scale and the scale
/// refitted. As ggml's `quantize_row_iq2_*_impl` and `_iq3_*_impl`.
#[allow(clippy::too_many_arguments)]
fn search_group<const W: usize, const N: usize>(
    t: &GridSearch<W>,
    g: &Group<N>,
    max: f32,
    kmax: i32,
    (steps, step): (i32, f32),
    redo: Redo,
    mut scale: f32,
    l: &mut [i8; N],
) -> f32 {
    let pieces = N / W;
    let (xval, weight, waux) = (&g.xval, &g.weight, &g.waux);
    let mut laux = [0i8; N];
    let mut on_grid = [redo == Redo::OffGrid; 8];
    let mut on_grid_aux = [true; 8];
    let mut best = 0f32;
    for is in -steps..=steps {
        let id = ((2 * kmax - 1) as f32 + is as f32 * step) / max;
        let this_scale = 1.0 / id;
        for k in 0..pieces {
            let r = k * W..(k + 1) * W;
            on_grid_aux[k] = snap(
                t,
                &xval[r.clone()],
                &waux[r.clone()],
                id,
                this_scale,
                kmax,
                &mut laux[r],
            );
        }
        let (sumqx, sumq2) = sums(weight, xval, &laux);
        if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
            scale = sumqx / sumq2;
            best = scale * sumqx;
            *l = laux;
            on_grid[..pieces].copy_from_slice(&on_grid_aux[..pieces]);
        }
    }
    let again = redo == Redo::All || on_grid[..pieces].iter().any(|&g| !g);
    if again && scale > 0.0 {
        let id = 1.0 / scale;
        for k in 0..pieces {
            if on_grid[k] && redo == Redo::OffGrid {
                continue;
            }
            let r = k * W..(k + 1) * W;
            snap(
                t,
                &xval[r.clone()],
                &waux[r.clone()],
                id,
                scale,
                kmax,
                &mut l[r],
            );
        }
        let (sumqx, sumq2) = sums(weight, xval, l);
        if sumq2 > 0.0 {
            scale = sumqx / sumq2;
        }
    }
    scale
}

/// The 4-bit group scale codes of `scales` against `max_scale / 31`.
fn scale_codes(scales: &[f32], max_scale: f32) -> impl Iterator<Item = u8> + '_ {
    let d = max_scale / 31.0;
    let id = 1.0 / d;
    scales
        .iter()
        .map(move |&s| nearest_int(0.5 * (id * s - 1.0)).clamp(0, 15) as u8)
}

impl BlockIq2Xxs {
    /// IQ2_XXS of 256 values with importance `qw` (ggml requires one).
    pub(crate) fn quantize_weighted(x: &[f32], qw: &[f32]) -> Result<Self> {
        let t = iq_neighbours::iq2xxs();
        const KMAX: i32 = 3;
        let mut q2 = [0u32; QK_K / 16];
        let mut scales = [0f32; QK_K / 32];
        let mut max_scale = 0f32;
        let sigma2 = sum_sq(x) / QK_K as f32;
        for ib in 0..QK_K / 32 {
            let xb = &x[32 * ib..32 * ib + 32];
            let mut g = Group::<32>::new(xb, Some(&qw[32 * ib..32 * ib + 32]), sigma2, |v| v, true);
            if g.max < GROUP_MAX_EPS {
                continue;
            }
            let mut lq = [0u8; 32];
            let scale = make_qp_quants(KMAX + 1, &g.xval, &mut lq, &g.weight);
            let eff_max = scale * KMAX as f32;
            if eff_max <= 0.0 {
                continue;
            }
            let mut l = lq.map(|v| v as i8);
            let scale = search_group(t, &g, eff_max, KMAX, (6, 0.1), Redo::All, scale, &mut l);
            let scale = g.positive(scale, true);
            for k in 0..4 {
                let gi = grid_index(t, &l[8 * k..8 * k + 8])?;
                q2[2 * ib] |= (gi as u32) << (8 * k);
                q2[2 * ib + 1] |= u32::from(g.signs[k]) << (7 * k);
            }
            scales[ib] = scale;
            max_scale = fmax(max_scale, scale);
        }
        let mut qs = [0u16; QK_K / 8];
        if max_scale == 0.0 {
            return Ok(BlockIq2Xxs { d: f16::ZERO, qs });
        }
        for (ib, c) in scale_codes(&scales, max_scale).enumerate() {
            q2[2 * ib + 1] |= u32::from(c) << 28;
        }
        for (j, w) in q2.iter().enumerate() {
            qs[2 * j] = *w as u16;
            qs[2 * j + 1] = (*w >> 16) as u16;
        }
        Ok(BlockIq2Xxs {
            d: f2h(max_scale / 31.0),
            qs,
        })
    }
}

/// What IQ2_XS and IQ2_S share: groups of 16 in two 8-wide pieces.
struct Iq2Groups {
    grid: [u16; QK_K / 8],
    signs: [u8; QK_K / 8],
    scales: [f32; QK_K / 16],
    max_scale: f32,
}

fn iq2_groups(
    t: &GridSearch<8>,
    x: &[f32],
    qw: Option<&[f32]>,
    sigma2: f32,
    even_signs: bool,
    eps: f32,
) -> Result<Iq2Groups> {
    const KMAX: i32 = 3;
    let mut out = Iq2Groups {
        grid: [0; QK_K / 8],
        signs: [0; QK_K / 8],
        scales: [0.0; QK_K / 16],
        max_scale: 0.0,
    };
    for ib in 0..QK_K / 16 {
        let xb = &x[16 * ib..16 * ib + 16];
        let own = |v: f32| 0.25 * sigma2 + v * v;
        let qwb = qw.map(|q| &q[16 * ib..16 * ib + 16]);
        let mut g = Group::<16>::new(xb, qwb, sigma2, own, even_signs);
        if g.max < eps {
            continue;
        }
        let mut l = [0i8; 16];
        let start = g.max / (2 * KMAX - 1) as f32;
        let scale = search_group(t, &g, g.max, KMAX, (9, 0.1), Redo::OffGrid, start, &mut l);
        let scale = g.positive(scale, even_signs);
        for k in 0..2 {
            out.grid[2 * ib + k] = grid_index(t, &l[8 * k..8 * k + 8])? as u16;
            out.signs[2 * ib + k] = g.signs[k];
        }
        out.scales[ib] = scale;
        out.max_scale = fmax(out.max_scale, scale);
    }
    Ok(out)
}

fn pack_nibbles(scales: &[f32], max_scale: f32) -> [u8; QK_K / 32] {
    let mut out = [0u8; QK_K / 32];
    for (ib, c) in scale_codes(scales, max_scale).enumerate() {
        out[ib / 2] |= c << (4 * (ib % 2));
    }
    out
}

impl BlockIq2Xs {
    /// IQ2_XS of 256 values with importance `qw` (ggml requires one).
    pub(crate) fn quantize_weighted(x: &[f32], qw: &[f32]) -> Result<Self> {
        let sigma2 = sum_sq(x) / QK_K as f32;
        let g = iq2_groups(
            iq_neighbours::iq2xs(),
            x,
            Some(qw),
            sigma2,
            true,
            GROUP_MAX_EPS,
        )?;
        if g.max_scale == 0.0 {
            return Ok(BlockIq2Xs {
                d: f16::ZERO,
                qs: [0; QK_K / 8],
                scales: [0; QK_K / 32],
            });
        }
        let mut qs = [0u16; QK_K / 8];
        for (q, (&i, &s)) in qs.iter_mut().zip(g.grid.iter().zip(&g.signs)) {
            *q = i | (u16::from(s) << 9);
        }
        Ok(BlockIq2Xs {
            d: f2h(g.max_scale / 31.0),
            qs,
            scales: pack_nibbles(&g.scales, g.max_scale),
        })
    }
}

impl BlockIq2S {
    /// IQ2_S of 256 values, with importance `qw` when given.
    pub(crate) fn quantize_weighted(x: &[f32], qw: Option<&[f32]>) -> Result<Self> {
        let sigma2 = 2.0 * sum_sq(x) / QK_K as f32;
        let g = iq2_groups(
            iq_neighbours::iq2s(),
            x,
            qw,
            sigma2,
            false,
            GROUP_MAX_EPS_IQ2_S,
        )?;
        let mut b = BlockIq2S {
            d: f16::ZERO,
            qs: [0; QK_K / 4],
            qh: [0; QK_K / 32],
            scales: [0; QK_K / 32],
        };
        // Groups without data have index 0 and no signs: zero bytes.
        for (i8, (&i, &s)) in g.grid.iter().zip(&g.signs).enumerate() {
            b.qs[i8] = i as u8;
            b.qh[i8 / 4] |= ((i >> 8) as u8) << (2 * (i8 % 4));
            b.qs[QK_K / 8 + i8] = s;
        }
        if g.max_scale == 0.0 {
            return Ok(b);
        }
        b.d = f2h(g.max_scale / 31.0 * 0.9875);
        b.scales = pack_nibbles(&g.scales, g.max_scale);
        Ok(b)
    }
}

/// The 4-wide grid of IQ3_XXS and IQ3_S searched over one group of 32
/// (levels below 8, candidates `15 + is * 0.2`): the levels and scale.
fn iq3_group(t: &GridSearch<4>, g: &Group<32>, steps: i32, redo: Redo) -> ([i8; 32], f32) {
    const KMAX: i32 = 8;
    let mut l = [0i8; 32];
    let start = g.max / (2 * KMAX - 1) as f32;
    let scale = search_group(t, g, g.max, KMAX, (steps, 0.2), redo, start, &mut l);
    (l, scale)
}

impl BlockIq3Xxs {
    /// IQ3_XXS of 256 values, with importance `qw` when given.
    pub(crate) fn quantize_weighted(x: &[f32], qw: Option<&[f32]>) -> Result<Self> {
        let t = iq_neighbours::iq3xxs();
        let mut q3 = [0u8; 3 * QK_K / 8];
        let mut sas = [0u32; QK_K / 32];
        let mut scales = [0f32; QK_K / 32];
        let mut max_scale = 0f32;
        let sigma2 = 2.0 * sum_sq(x) / QK_K as f32;
        for ib in 0..QK_K / 32 {
            let xb = &x[32 * ib..32 * ib + 32];
            let qwb = qw.map(|q| &q[32 * ib..32 * ib + 32]);
            let mut g = Group::<32>::new(xb, qwb, sigma2, |v| v * v, true);
            if g.max < GROUP_MAX_EPS_IQ3_XXS {
                continue;
            }
            let (l, scale) = iq3_group(t, &g, 15, Redo::OffGrid);
            let scale = g.positive(scale, true);
            for k in 0..8 {
                q3[8 * ib + k] = grid_index(t, &l[4 * k..4 * k + 4])? as u8;
            }
            let s = &g.signs;
            sas[ib] = u32::from(s[0])
                | (u32::from(s[1]) << 7)
                | (u32::from(s[2]) << 14)
                | (u32::from(s[3]) << 21);
            scales[ib] = scale;
            max_scale = fmax(max_scale, scale);
        }
        let mut qs = [0u8; 3 * QK_K / 8];
        if max_scale == 0.0 {
            return Ok(BlockIq3Xxs { d: f16::ZERO, qs });
        }
        for (ib, c) in scale_codes(&scales, max_scale).enumerate() {
            sas[ib] |= u32::from(c) << 28;
        }
        qs[..QK_K / 4].copy_from_slice(&q3[..QK_K / 4]);
        for (ib, w) in sas.iter().enumerate() {
            qs[QK_K / 4 + 4 * ib..QK_K / 4 + 4 * ib + 4].copy_from_slice(&w.to_le_bytes());
        }
        Ok(BlockIq3Xxs {
            d: f2h(max_scale / 31.0 * 1.0125),
            qs,
        })
    }
}

impl BlockIq3S {
    /// IQ3_S of 256 values, with importance `qw` when given. Groups of
    /// 32 whose values are all zero are skipped, and as in ggml the
    /// indices and signs of the following groups then move up.
    pub(crate) fn quantize_weighted(x: &[f32], qw: Option<&[f32]>) -> Result<Self> {
        let t = iq_neighbours::iq3s();
        const BS: usize = 32;
        let mut b = BlockIq3S {
            d: f16::ZERO,
            qs: [0; QK_K / 4],
            qh: [0; QK_K / 32],
            signs: [0; QK_K / 8],
            scales: [0; QK_K / 64],
        };
        let (mut qs_at, mut signs_at) = (0usize, 0usize);
        let mut scales = [0f32; QK_K / BS];
        let mut max_scale = 0f32;
        let sigma2 = 2.0 * sum_sq(x) / QK_K as f32;
        for ib in 0..QK_K / BS {
            let xb = &x[BS * ib..BS * ib + BS];
            let qwb = qw.map(|q| &q[BS * ib..BS * ib + BS]);
            let mut g = Group::<BS>::new(xb, qwb, sigma2, |v| v * v, false);
            if g.max == 0.0 {
                continue;
            }
            let (l, scale) = iq3_group(t, &g, 9, Redo::AllWhenOff);
            let scale = g.positive(scale, false);
            for k in 0..BS / 4 {
                let gi = grid_index(t, &l[4 * k..4 * k + 4])?;
                b.qs[qs_at + k] = gi as u8;
                let at = ib * (BS / 4) + k;
                b.qh[at / 8] |= ((gi >> 8) as u8) << (at % 8);
            }
            qs_at += BS / 4;
            b.signs[signs_at..signs_at + BS / 8].copy_from_slice(&g.signs);
            signs_at += BS / 8;
            scales[ib] = scale;
            max_scale = fmax(max_scale, scale);
        }
        if max_scale == 0.0 {
            return Ok(b);
        }
        b.d = f2h(max_scale / 31.0 * 1.033);
        for (ib, c) in scale_codes(&scales, max_scale).enumerate() {
            b.scales[ib / 2] |= c << (4 * (ib % 2));
        }
        Ok(b)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{
        can_quantize, dequantize_row, needs_imatrix, quantize_row, quantize_rows, row_size,
    };
    use crate::Type;

    /// Normal-ish values from a fixed LCG.
    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                let mut acc = 0f32;
                for _ in 0..4 {
                    s = s
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    acc += (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
                }
                acc
            })
            .collect()
    }

    fn rel_rmse(a: &[f32], b: &[f32]) -> f32 {
        let e: f32 = a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum();
        let s: f32 = a.iter().map(|x| x * x).sum();
        (e / s).sqrt()
    }

    #[test]
    fn grid_quants_round_trip_within_their_bits() {
        let n = 512;
        let x = values(2 * n, 7);
        let w: Vec<f32> = values(n, 9).iter().map(|v| v.abs() + 0.1).collect();
        for (ty, bound) in [
            (Type::IQ1_S, 0.75),
            (Type::IQ1_M, 0.7),
            (Type::IQ2_XXS, 0.5),
            (Type::IQ2_XS, 0.45),
            (Type::IQ2_S, 0.4),
            (Type::IQ3_XXS, 0.3),
            (Type::IQ3_S, 0.25),
        ] {
            let mut q = vec![0u8; 2 * row_size(ty, n).unwrap()];
            quantize_rows(ty, &x, &mut q, n, Some(&w)).unwrap();
            let mut y = vec![0f32; 2 * n];
            dequantize_row(ty, &q, &mut y).unwrap();
            let e = rel_rmse(&x, &y);
            assert!(e < bound, "{ty}: relative error {e}");
            // The same rows again give the same bytes.
            let mut q2 = vec![0u8; q.len()];
            quantize_rows(ty, &x, &mut q2, n, Some(&w)).unwrap();
            assert_eq!(q, q2, "{ty}");
            // Without an importance matrix: refused where ggml refuses.
            let mut q3 = vec![0u8; q.len()];
            let r = quantize_row(ty, &x, &mut q3);
            assert_eq!(r.is_err(), needs_imatrix(ty), "{ty}: {r:?}");
            assert_eq!(can_quantize(ty), !needs_imatrix(ty));
            // All-zero rows quantize to zero.
            let zeros = vec![0f32; n];
            let mut qz = vec![0u8; row_size(ty, n).unwrap()];
            quantize_rows(ty, &zeros, &mut qz, n, Some(&w)).unwrap();
            let mut yz = vec![1f32; n];
            dequantize_row(ty, &qz, &mut yz).unwrap();
            assert!(yz.iter().all(|&v| v == 0.0), "{ty}: zeros");
        }
    }
}
