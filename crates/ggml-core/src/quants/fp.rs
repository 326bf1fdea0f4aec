//! Scalar conversions between f32 and the 16-bit float formats, and the
//! rounding helper of the K-quant search procedures.
//!
//! ggml's portable conversions are reproduced exactly: f32 -> f16 rounds to
//! nearest, ties to even, overflows to infinity and turns every NaN into the
//! quiet NaN `0x7e00` (sign kept); f32 -> bf16 rounds to nearest even and
//! quiets NaNs by setting bit 6 of the kept payload. Widening is exact.

/// Widens IEEE half-precision bits to f32 (exact; NaN payloads are kept and quieted).
#[inline]
pub fn fp16_to_fp32(h: u16) -> f32 {
    let sign = u32::from(h & 0x8000) << 16;
    let exp = u32::from(h >> 10) & 0x1f;
    let man = u32::from(h & 0x03ff);
    let bits = match exp {
        0 => {
            if man == 0 {
                sign
            } else {
                // Subnormal half: man * 2^-24, exactly representable in f32.
                let v = man as f32 * (1.0 / 16_777_216.0);
                sign | v.to_bits()
            }
        }
        0x1f if man == 0 => sign | 0x7f80_0000,
        0x1f => sign | 0x7fc0_0000 | (man << 13),
        _ => sign | ((exp + 112) << 23) | (man << 13),
    };
    f32::from_bits(bits)
}

/// Narrows f32 to IEEE half-precision bits, rounding to nearest even.
#[inline]
pub fn fp32_to_fp16(f: f32) -> u16 {
    let x = f.to_bits();
    let sign = ((x >> 16) & 0x8000) as u16;
    let abs = x & 0x7fff_ffff;
    if abs > 0x7f80_0000 {
        return sign | 0x7e00;
    }
    // 65520 is half way between the largest half (65504) and 2^16; the tie
    // goes to the even neighbour, which is infinity.
    if abs >= 0x477f_f000 {
        return sign | 0x7c00;
    }
    let exp = abs >> 23;
    if exp < 113 {
        // Below the smallest normal half: round to a multiple of 2^-24.
        if exp == 0 {
            return sign;
        }
        let mant = (abs & 0x007f_ffff) | 0x0080_0000;
        let shift = 126 - exp;
        if shift >= 25 {
            return sign;
        }
        let q = mant >> shift;
        let rem = mant & ((1u32 << shift) - 1);
        let half = 1u32 << (shift - 1);
        let q = if rem > half || (rem == half && q & 1 == 1) {
            q + 1
        } else {
            q
        };
        return sign | q as u16;
    }
    let mut h = ((exp - 112) << 10) | ((abs >> 13) & 0x3ff);
    let rem = abs & 0x1fff;
    if rem > 0x1000 || (rem == 0x1000 && h & 1 == 1) {
        // A carry out of the mantissa correctly bumps the exponent.
        h += 1;
    }
    sign | h as u16
}

/// `y[i] = levels[i] * d` with the f16 scale `d`: the dequantization of
/// the symmetric block types.
pub(crate) fn dequantize_scaled<L: Into<f32>>(
    y: &mut [f32],
    d: half::f16,
    levels: impl IntoIterator<Item = L>,
) {
    let d = h2f(d);
    for (y, l) in y.iter_mut().zip(levels) {
        *y = l.into() * d;
    }
}

/// `y[i] = levels[i] * d + m` with the f16 scale `d` and minimum `m`: the
/// dequantization of the block types with a minimum.
pub(crate) fn dequantize_scaled_min<L: Into<f32>>(
    y: &mut [f32],
    d: half::f16,
    m: half::f16,
    levels: impl IntoIterator<Item = L>,
) {
    let (d, m) = (h2f(d), h2f(m));
    for (y, l) in y.iter_mut().zip(levels) {
        *y = l.into() * d + m;
    }
}

/// Widens a block's f16 field to f32 (exact).
#[inline]
pub(crate) fn h2f(h: half::f16) -> f32 {
    fp16_to_fp32(h.to_bits())
}

/// Narrows f32 to a block's f16 field, as [`fp32_to_fp16`].
#[inline]
pub(crate) fn f2h(f: f32) -> half::f16 {
    half::f16::from_bits(fp32_to_fp16(f))
}

/// Widens bfloat16 bits to f32 (exact).
#[inline]
pub fn bf16_to_fp32(h: u16) -> f32 {
    f32::from_bits(u32::from(h) << 16)
}

/// Narrows f32 to bfloat16 bits as ggml does: round to nearest even, NaNs
/// keep their top payload bits and are forced quiet.
#[inline]
pub fn fp32_to_bf16(f: f32) -> u16 {
    let u = f.to_bits();
    if u & 0x7fff_ffff > 0x7f80_0000 {
        return ((u >> 16) | 64) as u16;
    }
    (u.wrapping_add(0x7fff + ((u >> 16) & 1)) >> 16) as u16
}

/// Decodes an E8M0 scale (MXFP4) to f32, already halved as ggml stores the
/// MXFP4 code values doubled: `2^(e - 128)`.
#[inline]
pub fn e8m0_to_fp32_half(e: u8) -> f32 {
    let bits = if e < 2 {
        0x0020_0000u32 << e
    } else {
        u32::from(e - 1) << 23
    };
    f32::from_bits(bits)
}

/// ggml's `nearest_int`: rounds to nearest, ties to even, by adding 1.5 * 2^23
/// and reading the low mantissa bits. Exact for |x| <= 2^22 - 1; outside that
/// range it returns what ggml's bit trick returns (never panics).
#[inline]
pub(crate) fn nearest_int(x: f32) -> i32 {
    let v = x + 12_582_912.0;
    (v.to_bits() as i32 & 0x007f_ffff) - 0x0040_0000
}

/// The value of largest magnitude (the first one on ties) and its
/// magnitude, as ggml's quantizers find them.
pub(crate) fn signed_absmax(x: &[f32]) -> (f32, f32) {
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    (max, amax)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fp16_round_trip_every_value() {
        for h in 0..=u16::MAX {
            let f = fp16_to_fp32(h);
            let back = fp32_to_fp16(f);
            if f.is_nan() {
                assert_eq!(back & 0x7fff, 0x7e00);
            } else {
                assert_eq!(back, h, "{h:#06x}");
            }
        }
    }

    #[test]
    fn fp16_widening_matches_half() {
        for h in 0..=u16::MAX {
            let ours = fp16_to_fp32(h);
            let theirs = half::f16::from_bits(h).to_f32();
            if theirs.is_nan() {
                assert!(ours.is_nan());
            } else {
                assert_eq!(ours.to_bits(), theirs.to_bits(), "{h:#06x}");
            }
        }
    }

    #[test]
    fn fp16_narrowing_matches_half_on_non_nan() {
        // half's from_f32 also rounds to nearest even; compare on a dense sweep of
        // f32 bit patterns (every 97th, plus the neighbourhood of every half).
        let mut u = 0u32;
        while u < 0x7f80_0000 {
            for s in [0, 0x8000_0000] {
                let f = f32::from_bits(u | s);
                assert_eq!(fp32_to_fp16(f), half::f16::from_f32(f).to_bits(), "{f:e}");
            }
            u += 97;
        }
        for h in 0..0x7c00u16 {
            let b = fp16_to_fp32(h).to_bits();
            for d in [-1i64, 0, 1] {
                let f = f32::from_bits((i64::from(b) + d).clamp(0, 0x7f7f_ffff) as u32);
                assert_eq!(fp32_to_fp16(f), half::f16::from_f32(f).to_bits(), "{f:e}");
            }
            // Exact ties between h and h + 1.
            let mid = (f64::from(fp16_to_fp32(h)) + f64::from(fp16_to_fp32(h + 1))) / 2.0;
            let f = mid as f32;
            assert_eq!(fp32_to_fp16(f), half::f16::from_f32(f).to_bits(), "{f:e}");
        }
        assert_eq!(fp32_to_fp16(65519.0), 0x7bff);
        assert_eq!(fp32_to_fp16(65520.0), 0x7c00);
        assert_eq!(fp32_to_fp16(f32::INFINITY), 0x7c00);
        assert_eq!(fp32_to_fp16(f32::NAN), 0x7e00);
        assert_eq!(fp32_to_fp16(-0.0), 0x8000);
    }

    #[test]
    fn bf16_rounding() {
        assert_eq!(fp32_to_bf16(1.0), 0x3f80);
        // 1 + 2^-8 is a tie between 1.0 (even) and 1 + 2^-7.
        assert_eq!(fp32_to_bf16(f32::from_bits(0x3f80_8000)), 0x3f80);
        assert_eq!(fp32_to_bf16(f32::from_bits(0x3f81_8000)), 0x3f82);
        assert_eq!(fp32_to_bf16(f32::from_bits(0x3f80_8001)), 0x3f81);
        assert_eq!(fp32_to_bf16(f32::from_bits(0x7f80_0001)), 0x7fc0);
        assert_eq!(fp32_to_bf16(f32::MAX), 0x7f80);
        assert_eq!(bf16_to_fp32(0xbf80), -1.0);
    }

    #[test]
    fn nearest_int_ties_to_even() {
        assert_eq!(nearest_int(0.5), 0);
        assert_eq!(nearest_int(1.5), 2);
        assert_eq!(nearest_int(-2.5), -2);
        assert_eq!(nearest_int(-2.6), -3);
        assert_eq!(nearest_int(4_194_303.0), 4_194_303);
    }

    #[test]
    fn e8m0() {
        assert_eq!(e8m0_to_fp32_half(128), 1.0);
        assert_eq!(e8m0_to_fp32_half(127), 0.5);
        assert_eq!(e8m0_to_fp32_half(1), 2f32.powi(-127));
        assert_eq!(e8m0_to_fp32_half(0), 2f32.powi(-128));
    }
}
