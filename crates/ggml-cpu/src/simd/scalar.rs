//! Portable dot kernels for every type. Their summation order is the one
//! ggml-core's reference `vec_dot` documents, so they agree with it bit for
//! bit; the vector kernels are tested against them.

use ggml_core::quants::{self, KVALUES_IQ4NL, KVALUES_MXFP4, QK_K};
use ggml_core::Type;
use half::f16;

use super::{by_tile, check_tile, DotFn};

/// f32 dot product: products in f32, summed in f64.
pub(crate) fn dot_f32(x: &[f32], y: &[f32]) -> f32 {
    x.iter()
        .zip(y)
        .map(|(&a, &b)| f64::from(a * b))
        .sum::<f64>() as f32
}

/// f16 dot product: products of the widened values in f32, summed in f64.
pub(crate) fn dot_f16(x: &[f16], y: &[f16]) -> f32 {
    x.iter()
        .zip(y)
        .map(|(a, b)| f64::from(a.to_f32() * b.to_f32()))
        .sum::<f64>() as f32
}

/// `acc[i] = f16(f32(acc[i]) * s)`: an f16 accumulator rescaled through f32.
pub(crate) fn scale_f16(acc: &mut [f16], s: f32) {
    for a in acc {
        *a = f16::from_f32(a.to_f32() * s);
    }
}

/// `acc[i] = f16(f32(acc[i]) + f32(v[i]) * s)`, the product rounded to f32
/// before the sum (no fused multiply-add): an f16 accumulator as ggml's
/// one-query attention keeps for F16 values.
pub(crate) fn mad_f16(acc: &mut [f16], v: &[f16], s: f32) {
    for (a, x) in acc.iter_mut().zip(v) {
        *a = f16::from_f32(a.to_f32() + x.to_f32() * s);
    }
}

/// Checks the operands of the attention row kernels: every listed row of
/// `width` bytes at `stride` lies inside `rows`.
pub(crate) fn check_rows(rows: &[u8], stride: usize, width: usize, keys: &[u32]) {
    if let Some(&last) = keys.iter().max() {
        let end = (last as usize)
            .checked_mul(stride)
            .and_then(|o| o.checked_add(width));
        assert!(
            end.is_some_and(|e| e <= rows.len()),
            "attention rows out of range"
        );
    }
}

/// `out[j] = dot_f16(q, row keys[j])` over F16 rows of `rows` at `stride` bytes.
pub(crate) fn dot_f16_rows(q: &[f16], rows: &[u8], stride: usize, keys: &[u32], out: &mut [f32]) {
    check_rows(rows, stride, 2 * q.len(), keys);
    let mut k = vec![f16::ZERO; q.len()];
    for (o, &ic) in out.iter_mut().zip(keys) {
        let r = &rows[ic as usize * stride..][..2 * q.len()];
        for (x, b) in k.iter_mut().zip(r.chunks_exact(2)) {
            *x = f16::from_bits(u16::from_le_bytes([b[0], b[1]]));
        }
        *o = dot_f16(&k, q);
    }
}

/// The value sum of ggml's one-query attention with F16 values: for each
/// listed row `v = row keys[j]` of `rows` (at `stride` bytes), in order,
/// `acc = f16(f32(acc) * ms[j])` when `ms[j] != 1` and then
/// `acc = f16(f32(acc) + f32(v) * vs[j])` (see [`mad_f16`]).
pub(crate) fn attn_values_f16(
    acc: &mut [f16],
    rows: &[u8],
    stride: usize,
    keys: &[u32],
    ms: &[f32],
    vs: &[f32],
) {
    check_rows(rows, stride, 2 * acc.len(), keys);
    let mut v = vec![f16::ZERO; acc.len()];
    for ((&ic, &m), &s) in keys.iter().zip(ms).zip(vs) {
        if m != 1.0 {
            scale_f16(acc, m);
        }
        let r = &rows[ic as usize * stride..][..2 * acc.len()];
        for (x, b) in v.iter_mut().zip(r.chunks_exact(2)) {
            *x = f16::from_bits(u16::from_le_bytes([b[0], b[1]]));
        }
        mad_f16(acc, &v, s);
    }
}

/// `x[i] = exp(x[i] - max)` in place, summed in f64 (eight partial sums).
pub(crate) fn exp_sum(x: &mut [f32], max: f32) -> f64 {
    let mut part = [0f64; 8];
    for (i, v) in x.iter_mut().enumerate() {
        let e = exp_f32(*v - max);
        part[i % 8] += f64::from(e);
        *v = e;
    }
    part.iter().sum()
}

/// See [`super::Kernels::exp_sum_rows`].
pub(crate) fn exp_sum_rows(x: &mut [f32], w: usize, maxes: &[f32], sums: &mut [f64]) {
    super::exp_sum_rows_by(exp_sum, x, w, maxes, sums);
}

/// `x[i] = x[i] * scale (+ mask[i])` in place (a product, then a sum:
/// no fused multiply-add); returns the largest result, NaNs ignored as
/// `f32::max` does (`-inf` when every value is `-inf` or NaN).
pub(crate) fn scale_mask_max(x: &mut [f32], mask: Option<&[f32]>, scale: f32) -> f32 {
    if let Some(m) = mask {
        assert!(
            m.len() >= x.len(),
            "scale_mask_max: mask shorter than the row"
        );
    }
    match mask {
        Some(m) => x
            .iter_mut()
            .zip(m)
            .for_each(|(x, &mv)| *x = *x * scale + mv),
        None => x.iter_mut().for_each(|x| *x *= scale),
    }
    // Each of eight lanes keeps `y` where `y > m` (what the packed maximum
    // instructions compute), so that the compiler vectorises it.
    let pick = |m: f32, y: f32| if y > m { y } else { m };
    let mut lanes = [f32::NEG_INFINITY; 8];
    let chunks = x.chunks_exact(8);
    let tail = chunks.remainder();
    for c in chunks {
        for (m, &y) in lanes.iter_mut().zip(c) {
            *m = pick(*m, y);
        }
    }
    lanes
        .iter()
        .chain(tail)
        .copied()
        .fold(f32::NEG_INFINITY, pick)
}

/// `out[i] = x[i] / (1 + exp(-x[i]))`.
pub(crate) fn silu(x: &[f32], out: &mut [f32]) {
    for (o, &v) in out.iter_mut().zip(x) {
        *o = v / (1.0 + exp_f32(-v));
    }
}

/// `out[i] = silu(g[i]) * u[i]`.
pub(crate) fn swiglu(g: &[f32], u: &[f32], out: &mut [f32]) {
    for ((o, &a), &b) in out.iter_mut().zip(g).zip(u) {
        *o = a / (1.0 + exp_f32(-a)) * b;
    }
}

const GELU_COEF_A: f32 = 0.044715;
const SQRT_2_OVER_PI: f32 = 0.797_884_6;

/// GELU, tanh approximation, in f32.
#[inline]
pub(crate) fn gelu_exact(x: f32) -> f32 {
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (1.0 + GELU_COEF_A * x * x)).tanh())
}

/// [`gelu_exact`] at every f16 value, as f16 bits, indexed by the f16 bits.
pub(crate) fn gelu_table() -> &'static [u16] {
    static TABLE: std::sync::OnceLock<Vec<u16>> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        (0..=u16::MAX)
            .map(|h| half::f16::from_f32(gelu_exact(half::f16::from_bits(h).to_f32())).to_bits())
            .collect()
    })
}

/// GELU as ggml's CPU backend computes it by default: 0 below -10, the
/// identity above 10, else the f16 table of the tanh approximation looked
/// up at the f16 rounding of x.
#[inline]
pub(crate) fn gelu(x: f32) -> f32 {
    if x <= -10.0 {
        0.0
    } else if x >= 10.0 {
        x
    } else {
        let h = half::f16::from_f32(x).to_bits();
        half::f16::from_bits(gelu_table()[h as usize]).to_f32()
    }
}

/// `out[i] = gelu(g[i]) * u[i]`.
pub(crate) fn geglu(g: &[f32], u: &[f32], out: &mut [f32]) {
    for ((o, &a), &b) in out.iter_mut().zip(g).zip(u) {
        *o = gelu(a) * b;
    }
}

/// exp(x) without a library call: Cody-Waite reduction by ln 2 and Cephes'
/// degree-6 polynomial (within 2 ulp; results below 2^-126 flush to zero,
/// above f32::MAX are +inf). The vector paths compute the same operations
/// in the same order, so they give the same bits.
#[inline(always)]
pub(crate) fn exp_f32(x: f32) -> f32 {
    let xc = x.clamp(EXP_LO, EXP_HI);
    // Round to nearest with the 1.5 * 2^23 trick (exact for these magnitudes).
    let k = (xc * std::f32::consts::LOG2_E + EXP_MAGIC) - EXP_MAGIC;
    let r = xc - k * EXP_C1 - k * EXP_C2;
    let z = r * r;
    let p = EXP_P;
    let poly = (((((p[0] * r + p[1]) * r + p[2]) * r + p[3]) * r + p[4]) * r + p[5]) * z + r + 1.0;
    let scale = f32::from_bits((((k as i32) + 127) as u32) << 23);
    let y = poly * scale;
    if x.is_nan() {
        x
    } else if x > EXP_HI {
        f32::INFINITY
    } else if x < EXP_LO {
        0.0
    } else {
        y
    }
}

/// Range of arguments [`exp_f32`] evaluates; outside it the result is 0 or +inf.
pub(crate) const EXP_LO: f32 = -87.336_54;
/// See [`EXP_LO`].
pub(crate) const EXP_HI: f32 = 88.722_83;
pub(crate) const EXP_MAGIC: f32 = 12_582_912.0;
pub(crate) const EXP_C1: f32 = 0.693_359_4;
pub(crate) const EXP_C2: f32 = -2.121_944_4e-4;
pub(crate) const EXP_P: [f32; 6] = [
    1.987_569_1e-4,
    1.398_199_9e-3,
    8.333_452e-3,
    4.166_579_6e-2,
    1.666_666_5e-1,
    0.5,
];

/// The scalar row kernel of a weight type.
pub(crate) fn row_kernel(ty: Type) -> Option<DotFn> {
    use Type::*;
    Some(match ty {
        F32 => f32_row,
        F16 => f16_row,
        BF16 => bf16_row,
        Q4_0 => q4_0,
        Q5_0 => q5_0,
        Q8_0 => q8_0,
        IQ4_NL => iq4_nl,
        MXFP4 => mxfp4,
        Q4_1 => q4_1,
        Q5_1 => q5_1,
        Q2_K => q2_k,
        Q3_K => q3_k,
        Q4_K => q4_k,
        Q5_K => q5_k,
        Q6_K => q6_k,
        IQ4_XS => iq4_xs,
        _ => return None,
    })
}

#[inline]
pub(crate) fn f16_at(b: &[u8], o: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[o], b[o + 1]])).to_f32()
}

#[inline]
pub(crate) fn f32_at(b: &[u8], o: usize) -> f32 {
    f32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}

#[inline]
fn isum(q: &[i8], y: &[u8]) -> i32 {
    q.iter()
        .zip(y)
        .map(|(&a, &b)| i32::from(a) * i32::from(b as i8))
        .sum()
}

// ------------------------------------------------------------------ floats

fn float_tile<const R: usize, const C: usize>(
    n: usize,
    xs: &[&[u8]],
    ys: &[&[u8]],
    out: &mut [f32],
    width: usize,
    get: impl Fn(&[u8], usize) -> f32,
) {
    check_tile(n, xs, width, ys, width, out);
    for r in 0..R {
        for c in 0..C {
            let (x, y) = (xs[r], ys[c]);
            let mut s = 0f64;
            for i in 0..n {
                s += f64::from(get(x, i * width) * get(y, i * width));
            }
            out[r * C + c] = s as f32;
        }
    }
}

fn f32_tile<const R: usize, const C: usize>(n: usize, xs: &[&[u8]], ys: &[&[u8]], out: &mut [f32]) {
    float_tile::<R, C>(n, xs, ys, out, 4, f32_at)
}
fn f16_tile<const R: usize, const C: usize>(n: usize, xs: &[&[u8]], ys: &[&[u8]], out: &mut [f32]) {
    float_tile::<R, C>(n, xs, ys, out, 2, f16_at)
}
fn bf16_at(b: &[u8], o: usize) -> f32 {
    f32::from_bits(u32::from(u16::from_le_bytes([b[o], b[o + 1]])) << 16)
}
fn bf16_tile<const R: usize, const C: usize>(
    n: usize,
    xs: &[&[u8]],
    ys: &[&[u8]],
    out: &mut [f32],
) {
    float_tile::<R, C>(n, xs, ys, out, 2, bf16_at)
}

fn f32_row(n: usize, xs: &[&[u8]], ys: &[&[u8]], out: &mut [f32]) {
    by_tile!(f32_tile, n, xs, ys, out)
}
fn f16_row(n: usize, xs: &[&[u8]], ys: &[&[u8]], out: &mut [f32]) {
    by_tile!(f16_tile, n, xs, ys, out)
}
fn bf16_row(n: usize, xs: &[&[u8]], ys: &[&[u8]], out: &mut [f32]) {
    by_tile!(bf16_tile, n, xs, ys, out)
}

// -------------------------------------------------------- 32-blocks x Q8_0

/// Decodes a 32-weight block into its scale and signed levels.
pub(super) type Decode32 = fn(&[u8], &mut [i8; 32]) -> f32;

pub(super) fn dec_q4_0(b: &[u8], q: &mut [i8; 32]) -> f32 {
    for j in 0..16 {
        q[j] = (b[2 + j] & 15) as i8 - 8;
        q[j + 16] = (b[2 + j] >> 4) as i8 - 8;
    }
    f16_at(b, 0)
}

pub(super) fn dec_q5_0(b: &[u8], q: &mut [i8; 32]) -> f32 {
    let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
    for j in 0..16 {
        let h0 = ((qh >> j) & 1) << 4;
        let h1 = ((qh >> (j + 16)) & 1) << 4;
        q[j] = ((u32::from(b[6 + j] & 15) | h0) as i32 - 16) as i8;
        q[j + 16] = ((u32::from(b[6 + j] >> 4) | h1) as i32 - 16) as i8;
    }
    f16_at(b, 0)
}

pub(super) fn dec_q8_0(b: &[u8], q: &mut [i8; 32]) -> f32 {
    for j in 0..32 {
        q[j] = b[2 + j] as i8;
    }
    f16_at(b, 0)
}

pub(super) fn dec_iq4_nl(b: &[u8], q: &mut [i8; 32]) -> f32 {
    for j in 0..16 {
        q[j] = KVALUES_IQ4NL[usize::from(b[2 + j] & 15)];
        q[j + 16] = KVALUES_IQ4NL[usize::from(b[2 + j] >> 4)];
    }
    f16_at(b, 0)
}

/// MXFP4: an E8M0 scale byte (halved, as ggml stores the FP4 values
/// doubled), then 32 nibbles indexing the doubled FP4 values.
pub(super) fn dec_mxfp4(b: &[u8], q: &mut [i8; 32]) -> f32 {
    for j in 0..16 {
        q[j] = KVALUES_MXFP4[usize::from(b[1 + j] & 15)];
        q[j + 16] = KVALUES_MXFP4[usize::from(b[1 + j] >> 4)];
    }
    quants::e8m0_to_fp32_half(b[0])
}

fn q8_0_family<const R: usize, const C: usize>(
    n: usize,
    xs: &[&[u8]],
    ys: &[&[u8]],
    out: &mut [f32],
    bytes: usize,
    dec: Decode32,
) {
    let nb = n / 32;
    check_tile(nb, xs, bytes, ys, 34, out);
    let mut acc = [[0f32; C]; R];
    let mut q = [[0i8; 32]; R];
    let mut dx = [0f32; R];
    for ib in 0..nb {
        for r in 0..R {
            dx[r] = dec(&xs[r][ib * bytes..(ib + 1) * bytes], &mut q[r]);
        }
        for c in 0..C {
            let yb = &ys[c][ib * 34..ib * 34 + 34];
            let dy = f16_at(yb, 0);
            for r in 0..R {
                acc[r][c] += (dx[r] * dy) * isum(&q[r], &yb[2..]) as f32;
            }
        }
    }
    for r in 0..R {
        out[r * C..(r + 1) * C].copy_from_slice(&acc[r]);
    }
}

/// The tile kernel `$tile` and row entry `$row` of one type: the shared
/// code of its family (`q8_0_family` or `q8_k_family`) with the type's
/// block bytes and decoder.
macro_rules! family_kernel {
    ($family:ident, $tile:ident, $row:ident, $bytes:expr, $dec:ident) => {
        fn $tile<const R: usize, const C: usize>(
            n: usize,
            xs: &[&[u8]],
            ys: &[&[u8]],
            out: &mut [f32],
        ) {
            $family::<R, C>(n, xs, ys, out, $bytes, $dec)
        }
        fn $row(n: usize, xs: &[&[u8]], ys: &[&[u8]], out: &mut [f32]) {
            by_tile!($tile, n, xs, ys, out)
        }
    };
}

family_kernel!(q8_0_family, q4_0_tile, q4_0, 18, dec_q4_0);
family_kernel!(q8_0_family, q5_0_tile, q5_0, 22, dec_q5_0);
family_kernel!(q8_0_family, q8_0_tile, q8_0, 34, dec_q8_0);
family_kernel!(q8_0_family, iq4_nl_tile, iq4_nl, 18, dec_iq4_nl);
family_kernel!(q8_0_family, mxfp4_tile, mxfp4, 17, dec_mxfp4);

// -------------------------------------------------------- 32-blocks x Q8_1

fn q8_1_family<const R: usize, const C: usize>(
    n: usize,
    xs: &[&[u8]],
    ys: &[&[u8]],
    out: &mut [f32],
    five: bool,
) {
    let bytes = if five { 24 } else { 20 };
    let nb = n / 32;
    check_tile(nb, xs, bytes, ys, 36, out);
    let mut acc = [[0f32; C]; R];
    let mut q = [[0i8; 32]; R];
    let mut dm = [(0f32, 0f32); R];
    for ib in 0..nb {
        for r in 0..R {
            let b = &xs[r][ib * bytes..(ib + 1) * bytes];
            dm[r] = (f16_at(b, 0), f16_at(b, 2));
            let q = &mut q[r];
            if five {
                let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
                for j in 0..16 {
                    q[j] = ((b[8 + j] & 15) as u32 | ((qh >> j) & 1) << 4) as i8;
                    q[j + 16] = ((b[8 + j] >> 4) as u32 | ((qh >> (j + 16)) & 1) << 4) as i8;
                }
            } else {
                for j in 0..16 {
                    q[j] = (b[4 + j] & 15) as i8;
                    q[j + 16] = (b[4 + j] >> 4) as i8;
                }
            }
        }
        for c in 0..C {
            let yb = &ys[c][ib * 36..ib * 36 + 36];
            let (dy, sy) = (f16_at(yb, 0), f16_at(yb, 2));
            for r in 0..R {
                let sumi = isum(&q[r], &yb[4..]);
                acc[r][c] += (dm[r].0 * dy) * sumi as f32 + dm[r].1 * sy;
            }
        }
    }
    for r in 0..R {
        out[r * C..(r + 1) * C].copy_from_slice(&acc[r]);
    }
}

fn q4_1_tile<const R: usize, const C: usize>(
    n: usize,
    xs: &[&[u8]],
    ys: &[&[u8]],
    out: &mut [f32],
) {
    q8_1_family::<R, C>(n, xs, ys, out, false)
}
fn q5_1_tile<const R: usize, const C: usize>(
    n: usize,
    xs: &[&[u8]],
    ys: &[&[u8]],
    out: &mut [f32],
) {
    q8_1_family::<R, C>(n, xs, ys, out, true)
}
fn q4_1(n: usize, xs: &[&[u8]], ys: &[&[u8]], out: &mut [f32]) {
    by_tile!(q4_1_tile, n, xs, ys, out)
}
fn q5_1(n: usize, xs: &[&[u8]], ys: &[&[u8]], out: &mut [f32]) {
    by_tile!(q5_1_tile, n, xs, ys, out)
}

// ----------------------------------------------------- super-blocks x Q8_K

/// A decoded super-block: levels, integer group scales and mins.
struct KBlock {
    d: f32,
    dmin: f32,
    q: [i8; QK_K],
    sc: [i32; 16],
    m: [i32; 16],
    /// Elements per group (16 or 32).
    group: usize,
    has_min: bool,
}

impl KBlock {
    fn new() -> KBlock {
        KBlock {
            d: 0.0,
            dmin: 0.0,
            q: [0; QK_K],
            sc: [0; 16],
            m: [0; 16],
            group: 16,
            has_min: false,
        }
    }
}

/// The 6-bit scale and min of group `j` of Q4_K / Q5_K.
#[inline]
pub(crate) fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// The 16 signed 6-bit scales of Q3_K (already minus 32).
pub(crate) fn q3k_scales(s: &[u8]) -> [i8; 16] {
    let mut out = [0i8; 16];
    for j in 0..16 {
        let low = if j < 8 { s[j] & 15 } else { s[j - 8] >> 4 };
        let high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
        out[j] = ((low | (high << 4)) as i8).wrapping_sub(32);
    }
    out
}

fn dec_q2_k(b: &[u8], k: &mut KBlock) {
    for g in 0..16 {
        k.sc[g] = i32::from(b[g] & 15);
        k.m[g] = i32::from(b[g] >> 4);
    }
    let qs = &b[16..80];
    for half in 0..2 {
        for shift in 0..4 {
            for l in 0..32 {
                k.q[128 * half + 32 * shift + l] = ((qs[32 * half + l] >> (2 * shift)) & 3) as i8;
            }
        }
    }
    k.d = f16_at(b, 80);
    k.dmin = f16_at(b, 82);
    k.group = 16;
    k.has_min = true;
}

fn dec_q3_k(b: &[u8], k: &mut KBlock) {
    let hm = &b[0..32];
    let qs = &b[32..96];
    let sc = q3k_scales(&b[96..108]);
    for g in 0..16 {
        k.sc[g] = i32::from(sc[g]);
    }
    for half in 0..2 {
        for shift in 0..4 {
            let bit = 1u8 << (4 * half + shift);
            for l in 0..32 {
                let low = ((qs[32 * half + l] >> (2 * shift)) & 3) as i8;
                let sub = if hm[l] & bit != 0 { 0 } else { 4 };
                k.q[128 * half + 32 * shift + l] = low - sub;
            }
        }
    }
    k.d = f16_at(b, 108);
    k.group = 16;
    k.has_min = false;
}

fn dec_q4_k(b: &[u8], k: &mut KBlock) {
    let scales = &b[4..16];
    for g in 0..8 {
        let (s, m) = scale_min_k4(g, scales);
        k.sc[g] = i32::from(s);
        k.m[g] = i32::from(m);
    }
    let qs = &b[16..144];
    for j in 0..4 {
        for l in 0..32 {
            k.q[64 * j + l] = (qs[32 * j + l] & 15) as i8;
            k.q[64 * j + 32 + l] = (qs[32 * j + l] >> 4) as i8;
        }
    }
    k.d = f16_at(b, 0);
    k.dmin = f16_at(b, 2);
    k.group = 32;
    k.has_min = true;
}

fn dec_q5_k(b: &[u8], k: &mut KBlock) {
    let scales = &b[4..16];
    for g in 0..8 {
        let (s, m) = scale_min_k4(g, scales);
        k.sc[g] = i32::from(s);
        k.m[g] = i32::from(m);
    }
    let qh = &b[16..48];
    let qs = &b[48..176];
    for j in 0..4 {
        for l in 0..32 {
            let h0 = ((qh[l] >> (2 * j)) & 1) << 4;
            let h1 = ((qh[l] >> (2 * j + 1)) & 1) << 4;
            k.q[64 * j + l] = ((qs[32 * j + l] & 15) | h0) as i8;
            k.q[64 * j + 32 + l] = ((qs[32 * j + l] >> 4) | h1) as i8;
        }
    }
    k.d = f16_at(b, 0);
    k.dmin = f16_at(b, 2);
    k.group = 32;
    k.has_min = true;
}

fn dec_q6_k(b: &[u8], k: &mut KBlock) {
    let (ql, qh) = (&b[0..128], &b[128..192]);
    for g in 0..16 {
        k.sc[g] = i32::from(b[192 + g] as i8);
    }
    for half in 0..2 {
        let (ql, qh) = (&ql[64 * half..], &qh[32 * half..]);
        let o = 128 * half;
        for l in 0..32 {
            k.q[o + l] = ((ql[l] & 15) | ((qh[l] & 3) << 4)) as i8 - 32;
            k.q[o + l + 32] = ((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) as i8 - 32;
            k.q[o + l + 64] = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i8 - 32;
            k.q[o + l + 96] = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i8 - 32;
        }
    }
    k.d = f16_at(b, 208);
    k.group = 16;
    k.has_min = false;
}

fn dec_iq4_xs(b: &[u8], k: &mut KBlock) {
    let sh = u16::from_le_bytes([b[2], b[3]]);
    let sl = &b[4..8];
    let qs = &b[8..136];
    for g in 0..8 {
        let lo = (sl[g / 2] >> (4 * (g % 2))) & 15;
        let hi = ((sh >> (2 * g)) & 3) as u8;
        k.sc[g] = i32::from(lo | (hi << 4)) - 32;
        for j in 0..16 {
            k.q[32 * g + j] = KVALUES_IQ4NL[usize::from(qs[16 * g + j] & 15)];
            k.q[32 * g + 16 + j] = KVALUES_IQ4NL[usize::from(qs[16 * g + j] >> 4)];
        }
    }
    k.d = f16_at(b, 0);
    k.group = 32;
    k.has_min = false;
}

/// Bytes of a Q8_K block and offsets of its fields.
pub(crate) const Q8K_BYTES: usize = 292;
pub(crate) const Q8K_QS: usize = 4;
pub(crate) const Q8K_BSUMS: usize = 4 + QK_K;

#[inline]
pub(crate) fn q8k_bsum(yb: &[u8], j: usize) -> i32 {
    i32::from(i16::from_le_bytes([
        yb[Q8K_BSUMS + 2 * j],
        yb[Q8K_BSUMS + 2 * j + 1],
    ]))
}

fn q8_k_family<const R: usize, const C: usize>(
    n: usize,
    xs: &[&[u8]],
    ys: &[&[u8]],
    out: &mut [f32],
    bytes: usize,
    dec: fn(&[u8], &mut KBlock),
) {
    let nb = n / QK_K;
    check_tile(nb, xs, bytes, ys, Q8K_BYTES, out);
    let mut acc = [[0f32; C]; R];
    let mut k: [KBlock; R] = std::array::from_fn(|_| KBlock::new());
    for ib in 0..nb {
        for r in 0..R {
            dec(&xs[r][ib * bytes..(ib + 1) * bytes], &mut k[r]);
        }
        for c in 0..C {
            let yb = &ys[c][ib * Q8K_BYTES..(ib + 1) * Q8K_BYTES];
            let dy = f32_at(yb, 0);
            let yq = &yb[Q8K_QS..Q8K_QS + QK_K];
            for r in 0..R {
                let k = &k[r];
                let gs = k.group;
                let (mut sumi, mut summ) = (0i32, 0i32);
                for g in 0..QK_K / gs {
                    sumi += k.sc[g] * isum(&k.q[g * gs..(g + 1) * gs], &yq[g * gs..(g + 1) * gs]);
                    if k.has_min {
                        let bs = if gs == 16 {
                            q8k_bsum(yb, g)
                        } else {
                            q8k_bsum(yb, 2 * g) + q8k_bsum(yb, 2 * g + 1)
                        };
                        summ += k.m[g] * bs;
                    }
                }
                if k.has_min {
                    acc[r][c] += (k.d * dy) * sumi as f32 - (k.dmin * dy) * summ as f32;
                } else {
                    acc[r][c] += (k.d * dy) * sumi as f32;
                }
            }
        }
    }
    for r in 0..R {
        out[r * C..(r + 1) * C].copy_from_slice(&acc[r]);
    }
}

family_kernel!(q8_k_family, q2_k_tile, q2_k, 84, dec_q2_k);
family_kernel!(q8_k_family, q3_k_tile, q3_k, 110, dec_q3_k);
family_kernel!(q8_k_family, q4_k_tile, q4_k, 144, dec_q4_k);
family_kernel!(q8_k_family, q5_k_tile, q5_k, 176, dec_q5_k);
family_kernel!(q8_k_family, q6_k_tile, q6_k, 210, dec_q6_k);
family_kernel!(q8_k_family, iq4_xs_tile, iq4_xs, 136, dec_iq4_xs);

// --------------------------------------------------------------- the rest

/// Types without a kernel of their own: ggml-core's reference dot product,
/// one pair at a time.
pub(crate) fn reference_dot(ty: Type, n: usize, xs: &[&[u8]], ys: &[&[u8]], out: &mut [f32]) {
    let (Ok(xb), Some(yt)) = (quants::row_size(ty, n), quants::vec_dot_type(ty)) else {
        out.fill(f32::NAN);
        return;
    };
    let Ok(yb) = quants::row_size(yt, n) else {
        out.fill(f32::NAN);
        return;
    };
    for (r, x) in xs.iter().enumerate() {
        for (c, y) in ys.iter().enumerate() {
            out[r * ys.len() + c] = quants::vec_dot(ty, n, &x[..xb], &y[..yb]).unwrap_or(f32::NAN);
        }
    }
}

/// `c += a x b` (see `Kernels::gemm_f32`): one `mul_add` per element and
/// step of k, in order.
pub(crate) fn gemm_f32(c: &mut [f32], a: &[f32], b: &[f32], m: usize, k: usize, n: usize) {
    super::check_gemm_f32(c, a, b, m, k, n);
    for i in 0..m {
        for kk in 0..k {
            let x = a[i * k + kk];
            for (o, &y) in c[i * n..(i + 1) * n]
                .iter_mut()
                .zip(&b[kk * n..(kk + 1) * n])
            {
                *o = x.mul_add(y, *o);
            }
        }
    }
}

/// Lanes the scalar SSM kernels keep, so that the compiler can vectorize
/// the state loop.
const SSM_LANES: usize = 8;

/// One token of a Mamba-2 state row: `s[k] = s[k] * da + b[k] * x_dt`,
/// returning `sum_k s[k] * c[k]` (see [`super::Kernels::ssm_step`]).
pub(crate) fn ssm_step(s: &mut [f32], b: &[f32], c: &[f32], da: f32, x_dt: f32) -> f32 {
    let n = s.len().min(b.len()).min(c.len());
    let (s, b, c) = (&mut s[..n], &b[..n], &c[..n]);
    let mut acc = [0f32; SSM_LANES];
    let mut sc = s.chunks_exact_mut(SSM_LANES);
    let (mut bc, mut cc) = (b.chunks_exact(SSM_LANES), c.chunks_exact(SSM_LANES));
    for ((sv, bv), cv) in (&mut sc).zip(&mut bc).zip(&mut cc) {
        for l in 0..SSM_LANES {
            let v = sv[l] * da + bv[l] * x_dt;
            sv[l] = v;
            acc[l] += v * cv[l];
        }
    }
    let mut sum: f32 = acc.iter().sum();
    for ((sv, &bv), &cv) in sc
        .into_remainder()
        .iter_mut()
        .zip(bc.remainder())
        .zip(cc.remainder())
    {
        let v = *sv * da + bv * x_dt;
        *sv = v;
        sum += v * cv;
    }
    sum
}

/// One token of a Mamba-1 state row: `s[k] = s[k] * exp(dt * a[k]) +
/// b[k] * x_dt`, returning `sum_k s[k] * c[k]` (see
/// [`super::Kernels::ssm_step_decay`]).
pub(crate) fn ssm_step_decay(
    s: &mut [f32],
    a: &[f32],
    b: &[f32],
    c: &[f32],
    dt: f32,
    x_dt: f32,
) -> f32 {
    let n = s.len().min(a.len()).min(b.len()).min(c.len());
    let mut sum = 0f32;
    for k in 0..n {
        let v = s[k] * exp_f32(dt * a[k]) + b[k] * x_dt;
        s[k] = v;
        sum += v * c[k];
    }
    sum
}
