//! IQ4_NL and IQ4_XS: 4-bit indices into the non-linear table
//! [`KVALUES_IQ4NL`], with ggml's quantizer (the one `ggml_quantize_chunk`
//! runs without an importance matrix: weights `x^2`, 7 scale trials each way).
//!
//! For IQ4_NL this is what model files hold; ggml's `quantize_row_iq4_nl_ref`
//! (used by its CPU `from_float`, e.g. for an IQ4_NL KV cache) skips the
//! trials and the final re-rounding, and can give other bytes.

use super::blocks::{BlockIq4Nl, BlockIq4Xs, QK_K};
use super::fp::{f2h, h2f, nearest_int, signed_absmax};
use super::search::{best_index_int8, group_scales, GROUP_MAX_EPS};
use super::tables::KVALUES_IQ4NL;

/// Scale trials on each side of the first estimate.
const NTRY: i32 = 7;

/// Finds the scale of one group of 32 and its levels (`quantize_row_iq4_nl_impl`'s
/// inner search with weights `x^2`).
fn search_group(xb: &[f32], l: &mut [u8]) -> f32 {
    let mut w = [0f32; 32];
    for (w, &x) in w.iter_mut().zip(xb) {
        *w = x * x;
    }
    search_group_weighted(xb, &w, l)
}

/// [`search_group`] with the weights given (ggml's inner search of
/// `quantize_row_iq4_nl_impl`).
fn search_group_weighted(xb: &[f32], weight: &[f32], l: &mut [u8]) -> f32 {
    let values = &KVALUES_IQ4NL;
    let v0 = f32::from(values[0]);
    let (max, amax) = signed_absmax(xb);
    if amax < GROUP_MAX_EPS {
        l.fill(0);
        return 0.0;
    }
    let mut d = -max / v0;
    let mut id = 1.0 / d;
    let (mut sumqx, mut sumq2) = (0f32, 0f32);
    for ((l, &x), &w) in l.iter_mut().zip(xb).zip(weight) {
        let k = best_index_int8(values, id * x);
        *l = k as u8;
        let q = f32::from(values[k]);
        sumqx += w * q * x;
        sumq2 += w * q * q;
    }
    d = if sumq2 > 0.0 { sumqx / sumq2 } else { 0.0 };
    let mut best = d * sumqx;
    for itry in -NTRY..=NTRY {
        id = (itry + i32::from(values[0])) as f32 / max;
        sumqx = 0.0;
        sumq2 = 0.0;
        for (&x, &w) in xb.iter().zip(weight) {
            let q = f32::from(values[best_index_int8(values, id * x)]);
            sumqx += w * q * x;
            sumq2 += w * q * q;
        }
        if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    d
}

/// ggml's weights of a group `xb` of super-block `sb` under importance
/// values `qw`: `qw * sqrt(sigma2 + x^2)`, sigma2 twice the super-block's
/// mean square.
fn imatrix_weights(sb: &[f32], xb: &[f32], qw: &[f32]) -> [f32; 32] {
    let mut sigma2 = 0f32;
    for &v in sb {
        sigma2 += v * v;
    }
    sigma2 *= 2.0 / sb.len() as f32;
    let mut w = [0f32; 32];
    for ((w, &x), &q) in w.iter_mut().zip(xb).zip(qw) {
        *w = q * (sigma2 + x * x).sqrt();
    }
    w
}

fn pack_nibbles(l: &[u8], qs: &mut [u8]) {
    for (i, q) in qs.chunks_exact_mut(16).enumerate() {
        for j in 0..16 {
            q[j] = l[32 * i + j] | (l[32 * i + 16 + j] << 4);
        }
    }
}

impl BlockIq4Nl {
    /// ggml's IQ4_NL quantizer for one block (as `quantize_iq4_nl` without weights).
    pub(crate) fn quantize(x: &[f32]) -> Self {
        Self::quantize_weighted(x, None)
    }

    /// The quantizer with importance weights `qw` (32 values) when given:
    /// each value weighs `qw * sqrt(sigma2 + x^2)`, sigma2 twice the
    /// block's mean square.
    pub(crate) fn quantize_weighted(x: &[f32], qw: Option<&[f32]>) -> Self {
        let mut l = [0u8; 32];
        let scale = match qw {
            None => search_group(x, &mut l),
            Some(qw) => search_group_weighted(x, &imatrix_weights(x, x, qw), &mut l),
        };
        let id = if scale != 0.0 { 1.0 / scale } else { 0.0 };
        for (l, &v) in l.iter_mut().zip(x) {
            *l = best_index_int8(&KVALUES_IQ4NL, id * v) as u8;
        }
        let mut qs = [0u8; 16];
        pack_nibbles(&l, &mut qs);
        Self { d: f2h(scale), qs }
    }

    /// The table index of element `j`.
    #[inline]
    pub(crate) fn index(&self, j: usize) -> usize {
        usize::from(if j < 16 {
            self.qs[j] & 0x0f
        } else {
            self.qs[j - 16] >> 4
        })
    }

    pub(crate) fn dequantize(&self, y: &mut [f32]) {
        let d = h2f(self.d);
        for (j, y) in y.iter_mut().enumerate() {
            *y = d * f32::from(KVALUES_IQ4NL[self.index(j)]);
        }
    }
}

impl BlockIq4Xs {
    /// ggml's IQ4_XS quantizer for one super-block (as `quantize_iq4_xs` without weights).
    pub(crate) fn quantize(x: &[f32]) -> Self {
        Self::quantize_weighted(x, None)
    }

    /// The quantizer with importance weights `qw` (256 values) when given
    /// (sigma2 from the whole super-block).
    pub(crate) fn quantize_weighted(x: &[f32], qw: Option<&[f32]>) -> Self {
        let mut l = [0u8; QK_K];
        let (scales, max_scale, _) = match qw {
            None => group_scales::<_, 8, 32>(x, &mut l, search_group),
            Some(qw) => {
                let mut scales = [0f32; 8];
                let (mut max_scale, mut amax) = (0f32, 0f32);
                for ib in 0..8 {
                    let r = 32 * ib..32 * ib + 32;
                    let w = imatrix_weights(x, &x[r.clone()], &qw[r.clone()]);
                    let s = search_group_weighted(&x[r.clone()], &w, &mut l[r]);
                    scales[ib] = s;
                    if s.abs() > amax {
                        (amax, max_scale) = (s.abs(), s);
                    }
                }
                (scales, max_scale, amax)
            }
        };
        let d = -max_scale / 32.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut scales_h = 0u16;
        let mut scales_l = [0u8; 4];
        for ib in 0..8 {
            let ls = nearest_int(id * scales[ib]).clamp(-32, 31);
            let dl = d * ls as f32;
            let idl = if dl != 0.0 { 1.0 / dl } else { 0.0 };
            for j in 32 * ib..32 * ib + 32 {
                l[j] = best_index_int8(&KVALUES_IQ4NL, idl * x[j]) as u8;
            }
            let ls = (ls + 32) as u8;
            scales_l[ib / 2] |= (ls & 0x0f) << (4 * (ib % 2));
            scales_h |= u16::from(ls >> 4) << (2 * ib);
        }
        let mut qs = [0u8; QK_K / 2];
        pack_nibbles(&l, &mut qs);
        Self {
            d: f2h(d),
            scales_h,
            scales_l,
            qs,
        }
    }

    /// The 6-bit scale of group `ib` minus 32.
    #[inline]
    pub(crate) fn group_scale(&self, ib: usize) -> i32 {
        let low = (self.scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0f;
        let high = (self.scales_h >> (2 * ib)) & 3;
        i32::from(low) | (i32::from(high) << 4)
    }

    /// The table index of element `i`.
    #[inline]
    pub(crate) fn index(&self, i: usize) -> usize {
        let (ib, j) = (i / 32, i % 32);
        let b = self.qs[16 * ib + j % 16];
        usize::from(if j < 16 { b & 0x0f } else { b >> 4 })
    }

    pub(crate) fn dequantize(&self, y: &mut [f32]) {
        let d = h2f(self.d);
        for (ib, y) in y.chunks_exact_mut(32).enumerate() {
            let dl = d * (self.group_scale(ib) - 32) as f32;
            for (j, y) in y.iter_mut().enumerate() {
                *y = dl * f32::from(KVALUES_IQ4NL[self.index(32 * ib + j)]);
            }
        }
    }
}
