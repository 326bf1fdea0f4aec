//! IQ4_NL and IQ4_XS: 4-bit indices into the non-linear table
//! [`KVALUES_IQ4NL`], with ggml's quantizer (the one `ggml_quantize_chunk`
//! runs without an importance matrix: weights `x^2`, 7 scale trials each way).
//!
//! For IQ4_NL this is what model files hold; ggml's `quantize_row_iq4_nl_ref`
//! (used by its CPU `from_float`, e.g. for an IQ4_NL KV cache) skips the
//! trials and the final re-rounding, and can give other bytes.

use super::blocks::{BlockIq4Nl, BlockIq4Xs, QK_K};
use super::fp::{f2h, h2f, nearest_int, signed_absmax};
use super::search::GROUP_MAX_EPS;
use super::tables::KVALUES_IQ4NL;

/// Scale trials on each side of the first estimate.
const NTRY: i32 = 7;

/// [`KVALUES_IQ4NL`] as f32.
const LEVELS: [f32; 16] = [
    -127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0, -10.0, 1.0, 13.0, 25.0, 38.0, 53.0, 69.0,
    89.0, 113.0,
];

/// The midpoints between neighbouring [`LEVELS`] (all exact in f32).
const MIDPOINTS: [f32; 15] = [
    -115.5, -93.5, -74.0, -57.0, -42.0, -28.5, -16.0, -4.5, 7.0, 19.0, 31.5, 45.5, 61.0, 79.0,
    101.0,
];

/// The index of the level nearest to `x`: the number of midpoints that
/// `x` is not below, which is ggml's `best_index_int8` choice for every
/// f32 (NaN included, which gets the last level).
///
/// ggml bisects for the neighbours `a <= x < b` and keeps `a` when
/// `x - a < b - x` in f32. Rounding is monotonic, so that comparison can
/// only differ from `x < (a + b) / 2` where the two differences are within
/// a rounding step of each other, i.e. for `x` next to a midpoint; every
/// midpoint has magnitude at least 4.5 and every half gap is below 12.5,
/// so there both differences are multiples of `x`'s ulp well inside its
/// range and are exact. The tests check this around every midpoint and
/// level. Counting compares instead of branching lets the compiler do a
/// whole group at once.
#[inline(always)]
// `!(x < m)` rather than `x >= m`: a NaN counts past every midpoint.
#[allow(clippy::neg_cmp_op_on_partial_ord)]
fn nearest_level(x: f32) -> u8 {
    let mut n = 0u8;
    for m in MIDPOINTS {
        n += u8::from(!(x < m));
    }
    n
}

/// The nearest level index of each `id * x` of a group.
#[inline(always)]
fn nearest_levels(id: f32, xb: &[f32; 32], l: &mut [u8; 32]) {
    for (l, &x) in l.iter_mut().zip(xb) {
        *l = nearest_level(id * x);
    }
}

/// The weighted sums `sum w*q*x` and `sum w*q*q` of a group at levels
/// `l`, accumulated in ggml's order.
#[inline(always)]
fn level_sums(xb: &[f32; 32], weight: &[f32; 32], l: &[u8; 32]) -> (f32, f32) {
    let (mut sumqx, mut sumq2) = (0f32, 0f32);
    for ((&x, &w), &k) in xb.iter().zip(weight).zip(l) {
        let q = LEVELS[usize::from(k & 15)];
        sumqx += w * q * x;
        sumq2 += w * q * q;
    }
    (sumqx, sumq2)
}

/// Finds the scale of one group of 32 and its levels (`quantize_row_iq4_nl_impl`'s
/// inner search with weights `x^2`).
fn search_group(xb: &[f32; 32], l: &mut [u8; 32]) -> f32 {
    let mut w = [0f32; 32];
    for (w, &x) in w.iter_mut().zip(xb) {
        *w = x * x;
    }
    search_group_weighted(xb, &w, l)
}

/// [`search_group`] with the weights given (ggml's inner search of
/// `quantize_row_iq4_nl_impl`).
fn search_group_weighted(xb: &[f32; 32], weight: &[f32; 32], l: &mut [u8; 32]) -> f32 {
    let v0 = LEVELS[0];
    let (max, amax) = signed_absmax(xb);
    if amax < GROUP_MAX_EPS {
        l.fill(0);
        return 0.0;
    }
    let d = -max / v0;
    nearest_levels(1.0 / d, xb, l);
    let (sumqx, sumq2) = level_sums(xb, weight, l);
    let mut d = if sumq2 > 0.0 { sumqx / sumq2 } else { 0.0 };
    let mut best = d * sumqx;
    let mut trial = [0u8; 32];
    for itry in -NTRY..=NTRY {
        let id = (itry + i32::from(KVALUES_IQ4NL[0])) as f32 / max;
        nearest_levels(id, xb, &mut trial);
        let (sumqx, sumq2) = level_sums(xb, weight, &trial);
        if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    d
}

/// A group of 32 of a slice whose length is a multiple of 32.
fn group(x: &[f32], ib: usize) -> &[f32; 32] {
    x[32 * ib..32 * ib + 32]
        .try_into()
        .expect("IQ4 groups are 32 values")
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
        let xb = group(x, 0);
        let mut l = [0u8; 32];
        let scale = match qw {
            None => search_group(xb, &mut l),
            Some(qw) => search_group_weighted(xb, &imatrix_weights(x, x, qw), &mut l),
        };
        let id = if scale != 0.0 { 1.0 / scale } else { 0.0 };
        nearest_levels(id, xb, &mut l);
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
        let mut l = [[0u8; 32]; 8];
        let mut scales = [0f32; 8];
        let (mut max_scale, mut amax) = (0f32, 0f32);
        for ib in 0..8 {
            let xb = group(x, ib);
            let s = match qw {
                None => search_group(xb, &mut l[ib]),
                Some(qw) => {
                    let w = imatrix_weights(x, xb, &qw[32 * ib..32 * ib + 32]);
                    search_group_weighted(xb, &w, &mut l[ib])
                }
            };
            scales[ib] = s;
            if s.abs() > amax {
                (amax, max_scale) = (s.abs(), s);
            }
        }
        let d = -max_scale / 32.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut scales_h = 0u16;
        let mut scales_l = [0u8; 4];
        for ib in 0..8 {
            let ls = nearest_int(id * scales[ib]).clamp(-32, 31);
            let dl = d * ls as f32;
            let idl = if dl != 0.0 { 1.0 / dl } else { 0.0 };
            nearest_levels(idl, group(x, ib), &mut l[ib]);
            let ls = (ls + 32) as u8;
            scales_l[ib / 2] |= (ls & 0x0f) << (4 * (ib % 2));
            scales_h |= u16::from(ls >> 4) << (2 * ib);
        }
        let l = l.as_flattened();
        let mut qs = [0u8; QK_K / 2];
        pack_nibbles(l, &mut qs);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quants::search::best_index_int8;

    fn check(x: f32) {
        assert_eq!(
            usize::from(nearest_level(x)),
            best_index_int8(&KVALUES_IQ4NL, x),
            "x = {x:e} ({:#010x})",
            x.to_bits()
        );
    }

    /// The `n` floats on each side of `v`.
    fn around(v: f32, n: u32) -> impl Iterator<Item = f32> {
        let next = |x: f32, up: bool| {
            let b = x.to_bits();
            let toward_inf = up == (x >= 0.0);
            if x == 0.0 {
                if up {
                    f32::from_bits(1)
                } else {
                    -f32::from_bits(1)
                }
            } else if toward_inf {
                f32::from_bits(b + 1)
            } else {
                f32::from_bits(b - 1)
            }
        };
        let mut lo = v;
        let mut hi = v;
        (0..n).flat_map(move |_| {
            lo = next(lo, false);
            hi = next(hi, true);
            [lo, hi]
        })
    }

    #[test]
    fn tables_agree() {
        for i in 0..16 {
            assert_eq!(LEVELS[i], f32::from(KVALUES_IQ4NL[i]));
        }
        for i in 0..15 {
            assert_eq!(MIDPOINTS[i], (LEVELS[i] + LEVELS[i + 1]) / 2.0);
        }
    }

    #[test]
    fn nearest_level_is_ggmls_choice_near_every_midpoint_and_level() {
        for &m in MIDPOINTS.iter().chain(&LEVELS) {
            check(m);
            for x in around(m, 1 << 16) {
                check(x);
            }
        }
    }

    #[test]
    fn nearest_level_is_ggmls_choice_everywhere_else() {
        for x in [
            0.0,
            -0.0,
            f32::MIN_POSITIVE,
            -f32::MIN_POSITIVE,
            f32::from_bits(1),
            f32::MAX,
            f32::MIN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            -f32::NAN,
        ] {
            check(x);
        }
        // Every 4099th bit pattern: all exponents, both signs.
        for b in (0..=u32::MAX).step_by(4099) {
            check(f32::from_bits(b));
        }
        for i in -30_000..30_000 {
            check(i as f32 * 0.01);
        }
    }

    /// Every f32 (a minute in release builds: `cargo test --release -p
    /// ggml-core --lib every_f32 -- --ignored`).
    #[test]
    #[ignore = "slow: all 2^32 bit patterns"]
    fn nearest_level_is_ggmls_choice_for_every_f32() {
        for b in 0..=u32::MAX {
            let x = f32::from_bits(b);
            if usize::from(nearest_level(x)) != best_index_int8(&KVALUES_IQ4NL, x) {
                check(x);
            }
        }
    }
}
