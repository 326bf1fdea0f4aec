//! The K-quants Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and the activation type Q8_K:
//! ggml's reference quantizers (no importance matrix) and dequantizers.
//!
//! Dequantization follows ggml's arithmetic order: the group scale is
//! `d * sc` (f32 times integer), then each weight is `(d * sc) * q - dmin * m`.

use super::blocks::{BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, BlockQ8K, QK_K};
use super::fp::{f2h, h2f, nearest_int, signed_absmax};
use super::search::{
    group_scales, make_q3_quants, make_qkx2_quants, make_qx_quants, make_qx_quants_weighted, Qkx2,
    GROUP_MAX_EPS,
};

/// Unpacks the 6-bit scale and min of group `j` (0..8) of Q4_K / Q5_K.
#[inline]
pub(crate) fn scale_min_k4(j: usize, q: &[u8; 12]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// Dequantizes a Q4_K / Q5_K super-block, whose weights differ only in
/// how `level(i)` (0..16 or 0..32) is stored: group `g` of 32 has the
/// packed scale and min `scale_min_k4(g)`.
fn dequantize_scale_min(
    d: half::f16,
    dmin: half::f16,
    scales: &[u8; 12],
    level: impl Fn(usize) -> u8,
    y: &mut [f32],
) {
    let d = h2f(d);
    let min = h2f(dmin);
    for (g, y) in y.chunks_exact_mut(32).enumerate() {
        let (sc, m) = scale_min_k4(g, scales);
        let dl = d * f32::from(sc);
        let ml = min * f32::from(m);
        for (k, y) in y.iter_mut().enumerate() {
            *y = dl * f32::from(level(32 * g + k)) - ml;
        }
    }
}

/// Packs eight 6-bit scales and mins as Q4_K / Q5_K store them.
pub(crate) fn pack_scale_min_k4(ls: &[u8; 8], lm: &[u8; 8]) -> [u8; 12] {
    let mut s = [0u8; 12];
    for j in 0..8 {
        if j < 4 {
            s[j] = ls[j];
            s[j + 4] = lm[j];
        } else {
            s[j + 4] = (ls[j] & 0x0f) | ((lm[j] & 0x0f) << 4);
            s[j - 4] |= (ls[j] >> 4) << 6;
            s[j] |= (lm[j] >> 4) << 6;
        }
    }
    s
}

/// The signed 6-bit group scales of Q3_K (already minus 32).
#[inline]
pub(crate) fn q3k_scales(s: &[u8; 12]) -> [i8; 16] {
    let mut out = [0i8; 16];
    for (j, o) in out.iter_mut().enumerate() {
        let low = if j < 8 { s[j] & 0x0f } else { s[j - 8] >> 4 };
        let high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
        *o = (low | (high << 4)) as i8 - 32;
    }
    out
}

/// Packs 2-bit levels: byte `l` of each 32-byte part holds elements
/// `l`, `l + 32`, `l + 64`, `l + 96` of its 128-element half.
pub(crate) fn pack_2bit(l: &[u8; QK_K]) -> [u8; QK_K / 4] {
    let mut qs = [0u8; QK_K / 4];
    for j in (0..QK_K).step_by(128) {
        for k in 0..32 {
            qs[j / 4 + k] =
                l[j + k] | (l[j + k + 32] << 2) | (l[j + k + 64] << 4) | (l[j + k + 96] << 6);
        }
    }
    qs
}

/// The 2-bit level of element `i` of a Q2_K / Q3_K super-block.
#[inline]
pub(crate) fn level_2bit(qs: &[u8; QK_K / 4], i: usize) -> u8 {
    let half = i / 128;
    let r = i % 128;
    (qs[half * 32 + r % 32] >> (2 * (r / 32))) & 3
}

impl BlockQ2K {
    /// ggml's `quantize_row_q2_K_ref` for one super-block.
    pub(crate) fn quantize(x: &[f32]) -> Self {
        const Q4SCALE: f32 = 15.0;
        let p = Qkx2 {
            nmax: 3,
            rmin: -0.5,
            rdelta: 0.1,
            nstep: 15,
            use_mad: true,
        };
        let mut l = [0u8; QK_K];
        let (scales, mins, max_scale, max_min) =
            qkx2_groups::<16, 16>(&p, x, |xs| std::array::from_fn(|i| xs[i].abs()), &mut l);
        let mut sc = [0u8; 16];
        let d = if max_scale > 0.0 {
            let iscale = Q4SCALE / max_scale;
            for j in 0..16 {
                sc[j] = nearest_int(iscale * scales[j]) as u8;
            }
            f2h(max_scale / Q4SCALE)
        } else {
            f2h(0.0)
        };
        let dmin = if max_min > 0.0 {
            let iscale = Q4SCALE / max_min;
            for j in 0..16 {
                sc[j] |= (nearest_int(iscale * mins[j]) << 4) as u8;
            }
            f2h(max_min / Q4SCALE)
        } else {
            f2h(0.0)
        };
        for j in 0..16 {
            let dl = h2f(d) * f32::from(sc[j] & 0x0f);
            if dl == 0.0 {
                continue;
            }
            let dm = h2f(dmin) * f32::from(sc[j] >> 4);
            for i in 16 * j..16 * j + 16 {
                l[i] = nearest_int((x[i] + dm) / dl).clamp(0, 3) as u8;
            }
        }
        Self {
            scales: sc,
            qs: pack_2bit(&l),
            d,
            dmin,
        }
    }

    pub(crate) fn dequantize(&self, y: &mut [f32]) {
        let d = h2f(self.d);
        let min = h2f(self.dmin);
        for (g, y) in y.chunks_exact_mut(16).enumerate() {
            let sc = self.scales[g];
            let dl = d * f32::from(sc & 0x0f);
            let ml = min * f32::from(sc >> 4);
            for (k, y) in y.iter_mut().enumerate() {
                *y = dl * f32::from(level_2bit(&self.qs, 16 * g + k)) - ml;
            }
        }
    }
}

impl BlockQ3K {
    /// ggml's `quantize_row_q3_K_ref` for one super-block.
    pub(crate) fn quantize(x: &[f32]) -> Self {
        let mut l = [0i8; QK_K];
        let (scales, max_scale, _) =
            group_scales::<_, 16, 16>(x, &mut l, |x, l| make_q3_quants(4, x, l));
        let mut sc = [0u8; 12];
        let d = if max_scale != 0.0 {
            let iscale = -32.0 / max_scale;
            for j in 0..16 {
                let q = nearest_int(iscale * scales[j]) as i8;
                let q = (q.clamp(-32, 31) + 32) as u8;
                if j < 8 {
                    sc[j] = q & 0x0f;
                } else {
                    sc[j - 8] |= (q & 0x0f) << 4;
                }
                sc[j % 4 + 8] |= (q >> 4) << (2 * (j / 4));
            }
            1.0 / iscale
        } else {
            0.0
        };
        Self::pack(x, sc, d, l)
    }

    /// Requantizes `x` under the packed group scales `sc` and super-block
    /// scale `d` (groups with a zero scale keep their levels `l`, offset by
    /// 4) and packs the block.
    pub(crate) fn pack(x: &[f32], sc: [u8; 12], d: f32, mut l: [i8; QK_K]) -> Self {
        let d = f2h(d);
        let group = q3k_scales(&sc);
        requantize_16s(x, h2f(d), &group, 4, &mut l);
        let mut hmask = [0u8; QK_K / 8];
        let mut low = [0u8; QK_K];
        for j in 0..QK_K {
            let mut q = l[j] as u8;
            if q > 3 {
                hmask[j % 32] |= 1 << (j / 32);
                q -= 4;
            }
            low[j] = q;
        }
        Self {
            hmask,
            qs: pack_2bit(&low),
            scales: sc,
            d,
        }
    }

    pub(crate) fn dequantize(&self, y: &mut [f32]) {
        let d_all = h2f(self.d);
        let sc = q3k_scales(&self.scales);
        for (g, y) in y.chunks_exact_mut(16).enumerate() {
            let dl = d_all * f32::from(sc[g]);
            for (k, y) in y.iter_mut().enumerate() {
                *y = dl * f32::from(self.level(16 * g + k));
            }
        }
    }

    /// The signed 3-bit level (-4..4) of element `i`.
    #[inline]
    pub(crate) fn level(&self, i: usize) -> i8 {
        let low = level_2bit(&self.qs, i) as i8;
        let high = self.hmask[i % 32] & (1 << (i / 32)) != 0;
        low - if high { 0 } else { 4 }
    }
}

/// Quantizes again the 16 groups of 16 of a Q3_K / Q6_K super-block under
/// their stored scales `d * group[j]`: levels `-half..half`, kept offset by
/// `half`. A group whose scale is 0 keeps the levels it had.
fn requantize_16s(x: &[f32], d: f32, group: &[i8; 16], half: i32, l: &mut [i8; QK_K]) {
    for j in 0..16 {
        let dl = d * f32::from(group[j]);
        if dl == 0.0 {
            continue;
        }
        for i in 16 * j..16 * j + 16 {
            l[i] = (nearest_int(x[i] / dl).clamp(-half, half - 1) + half) as i8;
        }
    }
}

/// The scales and mins that `make_qkx2_quants` finds for the `G` groups of
/// `S` weights of a super-block (each group's weights from `weights`), and
/// the largest of each; the levels go to `l`. Q2_K and Q4_K / Q5_K differ
/// only in the group size and the weights.
fn qkx2_groups<const G: usize, const S: usize>(
    p: &Qkx2,
    x: &[f32],
    weights: impl Fn(&[f32]) -> [f32; S],
    l: &mut [u8; QK_K],
) -> ([f32; G], [f32; G], f32, f32) {
    let mut scales = [0f32; G];
    let mut mins = [0f32; G];
    let (mut max_scale, mut max_min) = (0f32, 0f32);
    for j in 0..G {
        let xs = &x[S * j..S * j + S];
        let (s, m) = make_qkx2_quants(p, xs, &weights(xs), &mut l[S * j..S * j + S]);
        scales[j] = s;
        mins[j] = m;
        if s > max_scale {
            max_scale = s;
        }
        if m > max_min {
            max_min = m;
        }
    }
    (scales, mins, max_scale, max_min)
}

/// Scales, mins and levels of the Q4_K / Q5_K reference quantizer.
fn quantize_qkx_sb(
    x: &[f32],
    nmax: i32,
    rmin: f32,
    nstep: i32,
) -> ([u8; 12], f32, f32, [u8; QK_K]) {
    let p = Qkx2 {
        nmax,
        rmin,
        rdelta: 0.1,
        nstep,
        use_mad: false,
    };
    let mut l = [0u8; QK_K];
    let weights = |xs: &[f32]| {
        let mut sum_x2 = 0f32;
        for &v in xs {
            sum_x2 += v * v;
        }
        let av_x = (sum_x2 / 32.0).sqrt();
        std::array::from_fn(|i| av_x + xs[i].abs())
    };
    let (scales, mins, max_scale, max_min) = qkx2_groups::<8, 32>(&p, x, weights, &mut l);
    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let mut ls = [0u8; 8];
    let mut lm = [0u8; 8];
    for j in 0..8 {
        ls[j] = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        lm[j] = (nearest_int(inv_min * mins[j]) as u8).min(63);
    }
    let packed = pack_scale_min_k4(&ls, &lm);
    let d = h2f(f2h(max_scale / 63.0));
    let dmin = h2f(f2h(max_min / 63.0));
    for j in 0..8 {
        let (sc, m) = scale_min_k4(j, &packed);
        let dl = d * f32::from(sc);
        if dl == 0.0 {
            continue;
        }
        let dm = dmin * f32::from(m);
        for i in 32 * j..32 * j + 32 {
            l[i] = nearest_int((x[i] + dm) / dl).clamp(0, nmax) as u8;
        }
    }
    (packed, max_scale / 63.0, max_min / 63.0, l)
}

impl BlockQ4K {
    /// ggml's `quantize_row_q4_K_ref` for one super-block.
    pub(crate) fn quantize(x: &[f32]) -> Self {
        let (scales, d, dmin, l) = quantize_qkx_sb(x, 15, -1.0, 20);
        Self::pack(scales, d, dmin, &l)
    }

    /// The block of packed scales, super-block scales and 4-bit levels.
    pub(crate) fn pack(scales: [u8; 12], d: f32, dmin: f32, l: &[u8; QK_K]) -> Self {
        let mut qs = [0u8; QK_K / 2];
        for (c, j) in (0..QK_K).step_by(64).enumerate() {
            for k in 0..32 {
                qs[32 * c + k] = l[j + k] | (l[j + k + 32] << 4);
            }
        }
        Self {
            d: f2h(d),
            dmin: f2h(dmin),
            scales,
            qs,
        }
    }

    /// The 4-bit level of element `i`.
    #[inline]
    pub(crate) fn level(&self, i: usize) -> u8 {
        let b = self.qs[32 * (i / 64) + i % 32];
        if i % 64 < 32 {
            b & 0x0f
        } else {
            b >> 4
        }
    }

    pub(crate) fn dequantize(&self, y: &mut [f32]) {
        dequantize_scale_min(self.d, self.dmin, &self.scales, |i| self.level(i), y);
    }
}

impl BlockQ5K {
    /// ggml's `quantize_row_q5_K_ref` for one super-block.
    pub(crate) fn quantize(x: &[f32]) -> Self {
        let (scales, d, dmin, l) = quantize_qkx_sb(x, 31, -0.5, 15);
        Self::pack(scales, d, dmin, &l)
    }

    /// The block of packed scales, super-block scales and 5-bit levels.
    pub(crate) fn pack(scales: [u8; 12], d: f32, dmin: f32, l: &[u8; QK_K]) -> Self {
        let mut qs = [0u8; QK_K / 2];
        let mut qh = [0u8; QK_K / 8];
        for (c, j) in (0..QK_K).step_by(64).enumerate() {
            let (m1, m2) = (1u8 << (2 * c), 2u8 << (2 * c));
            for k in 0..32 {
                let mut l1 = l[j + k];
                if l1 > 15 {
                    l1 -= 16;
                    qh[k] |= m1;
                }
                let mut l2 = l[j + k + 32];
                if l2 > 15 {
                    l2 -= 16;
                    qh[k] |= m2;
                }
                qs[32 * c + k] = l1 | (l2 << 4);
            }
        }
        Self {
            d: f2h(d),
            dmin: f2h(dmin),
            scales,
            qh,
            qs,
        }
    }

    /// The 5-bit level of element `i`.
    #[inline]
    pub(crate) fn level(&self, i: usize) -> u8 {
        let c = i / 64;
        let k = i % 32;
        let upper = i % 64 >= 32;
        let b = self.qs[32 * c + k];
        let low = if upper { b >> 4 } else { b & 0x0f };
        let bit = 2 * c + usize::from(upper);
        low + if self.qh[k] & (1 << bit) != 0 { 16 } else { 0 }
    }

    pub(crate) fn dequantize(&self, y: &mut [f32]) {
        dequantize_scale_min(self.d, self.dmin, &self.scales, |i| self.level(i), y);
    }
}

impl BlockQ6K {
    /// ggml's `quantize_row_q6_K_ref` for one super-block.
    pub(crate) fn quantize(x: &[f32]) -> Self {
        Self::quantize_weighted(x, None)
    }

    /// With importance values `qw` (256) when given: they weigh each
    /// group's scale search as they are (`quantize_row_q6_K_impl`).
    pub(crate) fn quantize_weighted(x: &[f32], qw: Option<&[f32]>) -> Self {
        let mut l = [0i8; QK_K];
        let group = std::cell::Cell::new(0usize);
        let (scales, max_scale, max_abs_scale) = group_scales::<_, 16, 16>(x, &mut l, |x, l| {
            let g = group.replace(group.get() + 1);
            match qw {
                None => make_qx_quants(32, x, l),
                Some(w) => make_qx_quants_weighted(32, x, Some(&w[16 * g..16 * g + 16]), l),
            }
        });
        if max_abs_scale < GROUP_MAX_EPS {
            return Self {
                ql: [0; QK_K / 2],
                qh: [0; QK_K / 4],
                scales: [0; QK_K / 16],
                d: f2h(0.0),
            };
        }
        let iscale = -128.0 / max_scale;
        let d = f2h(1.0 / iscale);
        let mut sc = [0i8; 16];
        for ib in 0..16 {
            sc[ib] = nearest_int(iscale * scales[ib]).min(127) as i8;
        }
        requantize_16s(x, h2f(d), &sc, 32, &mut l);
        let mut ql = [0u8; QK_K / 2];
        let mut qh = [0u8; QK_K / 4];
        for (c, j) in (0..QK_K).step_by(128).enumerate() {
            for k in 0..32 {
                let q = |o: usize| l[j + k + o] as u8;
                ql[64 * c + k] = (q(0) & 0x0f) | ((q(64) & 0x0f) << 4);
                ql[64 * c + k + 32] = (q(32) & 0x0f) | ((q(96) & 0x0f) << 4);
                qh[32 * c + k] =
                    (q(0) >> 4) | ((q(32) >> 4) << 2) | ((q(64) >> 4) << 4) | ((q(96) >> 4) << 6);
            }
        }
        Self {
            ql,
            qh,
            scales: sc,
            d,
        }
    }

    /// The signed 6-bit level (-32..32) of element `i`.
    #[inline]
    pub(crate) fn level(&self, i: usize) -> i8 {
        let c = i / 128;
        let r = i % 128;
        let k = r % 32;
        let part = r / 32; // 0..4: low nibble of ql[k], ql[k+32], high nibble of ql[k], ql[k+32]
        let b = self.ql[64 * c + k + 32 * (part & 1)];
        let low = if part < 2 { b & 0x0f } else { b >> 4 };
        let high = (self.qh[32 * c + k] >> (2 * part)) & 3;
        (low | (high << 4)) as i8 - 32
    }

    pub(crate) fn dequantize(&self, y: &mut [f32]) {
        let d = h2f(self.d);
        for (g, y) in y.chunks_exact_mut(16).enumerate() {
            let ds = d * f32::from(self.scales[g]);
            for (k, y) in y.iter_mut().enumerate() {
                *y = ds * f32::from(self.level(16 * g + k));
            }
        }
    }
}

impl BlockQ8K {
    /// ggml's `quantize_row_q8_K_ref` for one super-block.
    pub(crate) fn quantize(x: &[f32]) -> Self {
        let (max, amax) = signed_absmax(x);
        let mut qs = [0i8; QK_K];
        let mut bsums = [0i16; QK_K / 16];
        if amax == 0.0 {
            return Self { d: 0.0, qs, bsums };
        }
        let iscale = -127.0 / max;
        for (q, &v) in qs.iter_mut().zip(x) {
            *q = nearest_int(iscale * v).min(127) as i8;
        }
        for (s, q) in bsums.iter_mut().zip(qs.chunks_exact(16)) {
            *s = q.iter().map(|&v| i16::from(v)).sum();
        }
        Self {
            d: 1.0 / iscale,
            qs,
            bsums,
        }
    }

    pub(crate) fn dequantize(&self, y: &mut [f32]) {
        for (y, &q) in y.iter_mut().zip(&self.qs) {
            *y = self.d * f32::from(q);
        }
    }
}
