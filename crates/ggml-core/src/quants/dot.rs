//! Scalar reference dot products of a weight row with an activation row
//! quantized to the weight type's partner ([`vec_dot_type`]).
//!
//! Summation order (the contract SIMD kernels are tested against):
//!
//! * F32, F16, BF16: each product is formed in f32 (after exact widening) and
//!   the products are summed in f64 in element order; the result is rounded
//!   to f32 once, as ggml's scalar `ggml_vec_dot_f16` does.
//! * Block types: within a block every product of integer levels is summed
//!   exactly in i32 (`sumi`); K-quants first weigh the sums of each group by
//!   the group's integer scale (`sumi = sum_g sc_g * sum_j qx_j * qy_j`), and
//!   subtract their mins through the activation's `bsums`
//!   (`summ = sum_g m_g * bsum_g`). Each block then adds, in block order, to
//!   one f32 accumulator starting at 0:
//!   - Q4_0, Q5_0, Q8_0, IQ4_NL, MXFP4 x Q8_0: `(dx * dy) * sumi`
//!   - Q4_1, Q5_1 x Q8_1: `(dx * dy) * sumi + mx * sy`
//!   - Q2_K, Q4_K, Q5_K x Q8_K: `(dx * dy) * sumi - (dminx * dy) * summ`
//!   - Q3_K, Q6_K, IQ4_XS, TQ1_0, TQ2_0 x Q8_K: `(dx * dy) * sumi`
//!   - IQ2_*, IQ3_*, IQ1_* x Q8_K: `(dx * dy) * (factor * sumi + 0.125 * sumd)`
//!     with the type's power-of-two `factor` and `sumd` the IQ1 offset term
//!     (zero for the others).
//!
//! Integer sums are exact, so any kernel that sums the same integers in
//! another order gets the same `sumi`; only the f32 accumulation differs.

use super::blocks::*;
use super::fp::{self, h2f};
use super::iq_grid::GridInts;
use super::k_quants::{level_2bit, q3k_scales, scale_min_k4};
use super::row_size;
use super::tables::{IQ1S_DELTA, KVALUES_IQ4NL};
use crate::error::{Error, Result};
use crate::Type;

/// The type an activation row is quantized to before its dot product with a
/// row of `ty`, or `None` when ggml has no dot product for `ty`.
pub fn vec_dot_type(ty: Type) -> Option<Type> {
    use Type::*;
    Some(match ty {
        F32 => F32,
        F16 => F16,
        BF16 => BF16,
        Q4_0 | Q5_0 | Q8_0 | IQ4_NL | MXFP4 => Q8_0,
        Q4_1 | Q5_1 => Q8_1,
        Q2_K | Q3_K | Q4_K | Q5_K | Q6_K | IQ4_XS | IQ2_XXS | IQ2_XS | IQ2_S | IQ3_XXS | IQ3_S
        | IQ1_S | IQ1_M | TQ1_0 | TQ2_0 => Q8_K,
        _ => return None,
    })
}

/// Reference dot product of `n` elements: `x` is a row of `ty`, `y` a row of
/// `vec_dot_type(ty)`. Fails on unsupported types, on `n` not a multiple of
/// the block size and on byte lengths that do not match `n`.
pub fn vec_dot(ty: Type, n: usize, x: &[u8], y: &[u8]) -> Result<f32> {
    let yt = vec_dot_type(ty)
        .ok_or_else(|| Error::Quant(format!("vec_dot: no dot product for type {ty}")))?;
    for (what, t, bytes) in [("x", ty, x), ("y", yt, y)] {
        let want = row_size(t, n)?;
        if bytes.len() != want {
            return Err(Error::Quant(format!(
                "vec_dot: {what} holds {} bytes, a row of {n} {t} needs {want}",
                bytes.len()
            )));
        }
    }
    use Type::*;
    match ty {
        F32 => Ok(float_dot(x, y, 4, |b| {
            f32::from_le_bytes([b[0], b[1], b[2], b[3]])
        })),
        F16 => Ok(float_dot(x, y, 2, |b| {
            fp::fp16_to_fp32(u16::from_le_bytes([b[0], b[1]]))
        })),
        BF16 => Ok(float_dot(x, y, 2, |b| {
            fp::bf16_to_fp32(u16::from_le_bytes([b[0], b[1]]))
        })),
        Q4_0 => q8_0_dot::<BlockQ4_0>(x, y, |b| (h2f(b.d), b.levels())),
        Q5_0 => q8_0_dot::<BlockQ5_0>(x, y, |b| (h2f(b.d), b.levels())),
        Q8_0 => q8_0_dot::<BlockQ8_0>(x, y, |b| (h2f(b.d), b.qs)),
        IQ4_NL => q8_0_dot::<BlockIq4Nl>(x, y, |b| {
            (h2f(b.d), std::array::from_fn(|j| KVALUES_IQ4NL[b.index(j)]))
        }),
        MXFP4 => q8_0_dot::<BlockMxfp4>(x, y, |b| {
            (
                fp::e8m0_to_fp32_half(b.e),
                std::array::from_fn(|j| b.value(j)),
            )
        }),
        Q4_1 => q8_1_dot::<BlockQ4_1>(x, y, |b| (h2f(b.d), h2f(b.m), b.levels())),
        Q5_1 => q8_1_dot::<BlockQ5_1>(x, y, |b| (h2f(b.d), h2f(b.m), b.levels())),
        Q2_K => q8_k_dot::<BlockQ2K>(x, y, q2_k_block),
        Q3_K => q8_k_dot::<BlockQ3K>(x, y, q3_k_block),
        Q4_K => q8_k_dot::<BlockQ4K>(x, y, |b, y| {
            qkx_block(b.d, b.dmin, &b.scales, |i| b.level(i), y)
        }),
        Q5_K => q8_k_dot::<BlockQ5K>(x, y, |b, y| {
            qkx_block(b.d, b.dmin, &b.scales, |i| b.level(i), y)
        }),
        Q6_K => q8_k_dot::<BlockQ6K>(x, y, q6_k_block),
        IQ4_XS => q8_k_dot::<BlockIq4Xs>(x, y, iq4_xs_block),
        TQ1_0 => q8_k_dot::<BlockTq1_0>(x, y, |b, y| {
            let sumi: i32 = (0..QK_K)
                .map(|i| i32::from(b.trit(i) - 1) * i32::from(y.qs[i]))
                .sum();
            (h2f(b.d) * y.d) * sumi as f32
        }),
        TQ2_0 => q8_k_dot::<BlockTq2_0>(x, y, |b, y| {
            let sumi: i32 = (0..QK_K)
                .map(|i| i32::from(b.code(i) - 1) * i32::from(y.qs[i]))
                .sum();
            (h2f(b.d) * y.d) * sumi as f32
        }),
        IQ2_XXS => q8_k_dot::<BlockIq2Xxs>(x, y, |b, y| grid_block(&b.ints(), y)),
        IQ2_XS => q8_k_dot::<BlockIq2Xs>(x, y, |b, y| grid_block(&b.ints(), y)),
        IQ2_S => q8_k_dot::<BlockIq2S>(x, y, |b, y| grid_block(&b.ints(), y)),
        IQ3_XXS => q8_k_dot::<BlockIq3Xxs>(x, y, |b, y| grid_block(&b.ints(), y)),
        IQ3_S => q8_k_dot::<BlockIq3S>(x, y, |b, y| grid_block(&b.ints(), y)),
        IQ1_S => q8_k_dot::<BlockIq1S>(x, y, |b, y| grid_block(&b.ints(), y)),
        IQ1_M => q8_k_dot::<BlockIq1M>(x, y, |b, y| grid_block(&b.ints(), y)),
        _ => Err(Error::Quant(format!(
            "vec_dot: no dot product for type {ty}"
        ))),
    }
}

fn float_dot(x: &[u8], y: &[u8], width: usize, get: impl Fn(&[u8]) -> f32) -> f32 {
    let mut sum = 0f64;
    for (a, b) in x.chunks_exact(width).zip(y.chunks_exact(width)) {
        sum += f64::from(get(a) * get(b));
    }
    sum as f32
}

fn isum(a: &[i8], b: &[i8]) -> i32 {
    a.iter()
        .zip(b)
        .map(|(&a, &b)| i32::from(a) * i32::from(b))
        .sum()
}

fn q8_0_dot<B: Block>(x: &[u8], y: &[u8], levels: impl Fn(&B) -> (f32, [i8; 32])) -> Result<f32> {
    let mut sum = 0f32;
    for (bx, by) in iter_blocks::<B>(x).zip(iter_blocks::<BlockQ8_0>(y)) {
        let (bx, by) = (bx?, by?);
        let (dx, qx) = levels(&bx);
        sum += (dx * h2f(by.d)) * isum(&qx, &by.qs) as f32;
    }
    Ok(sum)
}

fn q8_1_dot<B: Block>(
    x: &[u8],
    y: &[u8],
    levels: impl Fn(&B) -> (f32, f32, [u8; 32]),
) -> Result<f32> {
    let mut sum = 0f32;
    for (bx, by) in iter_blocks::<B>(x).zip(iter_blocks::<BlockQ8_1>(y)) {
        let (bx, by) = (bx?, by?);
        let (dx, mx, qx) = levels(&bx);
        let sumi: i32 = qx
            .iter()
            .zip(&by.qs)
            .map(|(&a, &b)| i32::from(a) * i32::from(b))
            .sum();
        sum += (dx * h2f(by.d)) * sumi as f32 + mx * h2f(by.s);
    }
    Ok(sum)
}

fn q8_k_dot<B: Block>(x: &[u8], y: &[u8], block: impl Fn(&B, &BlockQ8K) -> f32) -> Result<f32> {
    let mut sum = 0f32;
    for (bx, by) in iter_blocks::<B>(x).zip(iter_blocks::<BlockQ8K>(y)) {
        sum += block(&bx?, &by?);
    }
    Ok(sum)
}

/// `sum_j q(j) * y_j` over `len` elements starting at `start`.
#[inline]
fn group_sum(start: usize, len: usize, q: impl Fn(usize) -> i32, y: &BlockQ8K) -> i32 {
    (start..start + len)
        .map(|i| q(i) * i32::from(y.qs[i]))
        .sum()
}

fn q2_k_block(b: &BlockQ2K, y: &BlockQ8K) -> f32 {
    let (mut sumi, mut summ) = (0i32, 0i32);
    for g in 0..16 {
        let sc = b.scales[g];
        let s = group_sum(16 * g, 16, |i| i32::from(level_2bit(&b.qs, i)), y);
        sumi += i32::from(sc & 0x0f) * s;
        summ += i32::from(sc >> 4) * i32::from(y.bsums[g]);
    }
    (h2f(b.d) * y.d) * sumi as f32 - (h2f(b.dmin) * y.d) * summ as f32
}

fn q3_k_block(b: &BlockQ3K, y: &BlockQ8K) -> f32 {
    let sc = q3k_scales(&b.scales);
    let sumi: i32 = (0..16)
        .map(|g| i32::from(sc[g]) * group_sum(16 * g, 16, |i| i32::from(b.level(i)), y))
        .sum();
    (h2f(b.d) * y.d) * sumi as f32
}

fn qkx_block(
    d: half::f16,
    dmin: half::f16,
    scales: &[u8; 12],
    level: impl Fn(usize) -> u8,
    y: &BlockQ8K,
) -> f32 {
    let (mut sumi, mut summ) = (0i32, 0i32);
    for g in 0..8 {
        let (sc, m) = scale_min_k4(g, scales);
        sumi += i32::from(sc) * group_sum(32 * g, 32, |i| i32::from(level(i)), y);
        summ += i32::from(m) * (i32::from(y.bsums[2 * g]) + i32::from(y.bsums[2 * g + 1]));
    }
    (h2f(d) * y.d) * sumi as f32 - (h2f(dmin) * y.d) * summ as f32
}

fn q6_k_block(b: &BlockQ6K, y: &BlockQ8K) -> f32 {
    let sumi: i32 = (0..16)
        .map(|g| i32::from(b.scales[g]) * group_sum(16 * g, 16, |i| i32::from(b.level(i)), y))
        .sum();
    (h2f(b.d) * y.d) * sumi as f32
}

fn iq4_xs_block(b: &BlockIq4Xs, y: &BlockQ8K) -> f32 {
    let sumi: i32 = (0..8)
        .map(|g| {
            let s = group_sum(32 * g, 32, |i| i32::from(KVALUES_IQ4NL[b.index(i)]), y);
            (b.group_scale(g) - 32) * s
        })
        .sum();
    (h2f(b.d) * y.d) * sumi as f32
}

fn grid_block(g: &GridInts, y: &BlockQ8K) -> f32 {
    let mut sumi = 0i32;
    for k in 0..16 {
        sumi += g.ls[k] * isum(&g.q[16 * k..16 * k + 16], &y.qs[16 * k..16 * k + 16]);
    }
    let mut sumd = 0i32;
    for k in 0..32 {
        if g.delta[k] != 0 {
            let s: i32 = y.qs[8 * k..8 * k + 8].iter().map(|&v| i32::from(v)).sum();
            sumd += g.ls[k / 2] * i32::from(g.delta[k]) * s;
        }
    }
    (g.d * y.d) * (g.factor * sumi as f32 + IQ1S_DELTA * sumd as f32)
}
