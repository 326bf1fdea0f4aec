//! Conversions between f32 rows and every storage type, as ggml's CPU
//! backend does them (`to_float` / `from_float` of its type traits).
//!
//! Q8_0 and Q8_1 are the activation types of the dot products; ggml's x86
//! build quantizes them with `127 / amax` and rounds half to even, which
//! differs in rare ties from the portable reference quantizer, so they are
//! written here. Every other quantized type goes through ggml-core's
//! reference quantizers, which ggml's CPU backend also uses.

use ggml_core::quants::{self, QK8_0, QK_K};
use ggml_core::{Error, Result, Type};
use half::f16;
use half::prelude::*;

/// Bytes of one Q8_0 / Q8_1 / Q8_K block.
pub(crate) const Q8_0_BYTES: usize = 34;
/// Bytes of one Q8_1 block.
pub(crate) const Q8_1_BYTES: usize = 36;
/// Bytes of one Q8_K block.
pub(crate) const Q8_K_BYTES: usize = 292;

/// Converts a dense row of `ty` into f32.
pub(crate) fn to_f32(ty: Type, src: &[u8], dst: &mut [f32]) -> Result<()> {
    match ty {
        Type::F32 => {
            for (d, b) in dst.iter_mut().zip(src.chunks_exact(4)) {
                *d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
            Ok(())
        }
        Type::F16 => {
            f16_bytes_to_f32(src, dst);
            Ok(())
        }
        Type::BF16 => {
            for (d, b) in dst.iter_mut().zip(src.chunks_exact(2)) {
                *d = f32::from_bits(u32::from(u16::from_le_bytes([b[0], b[1]])) << 16);
            }
            Ok(())
        }
        Type::I32 => {
            for (d, b) in dst.iter_mut().zip(src.chunks_exact(4)) {
                *d = i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f32;
            }
            Ok(())
        }
        _ => quants::dequantize_row(ty, src, dst),
    }
}

/// Converts f32 values into a dense row of `ty`.
pub(crate) fn from_f32(ty: Type, src: &[f32], dst: &mut [u8]) -> Result<()> {
    match ty {
        Type::F32 => {
            for (s, d) in src.iter().zip(dst.chunks_exact_mut(4)) {
                d.copy_from_slice(&s.to_le_bytes());
            }
            Ok(())
        }
        Type::F16 => {
            f32_to_f16_bytes(src, dst);
            Ok(())
        }
        Type::BF16 => {
            for (s, d) in src.iter().zip(dst.chunks_exact_mut(2)) {
                d.copy_from_slice(&quants::fp32_to_bf16(*s).to_le_bytes());
            }
            Ok(())
        }
        Type::I32 => {
            for (s, d) in src.iter().zip(dst.chunks_exact_mut(4)) {
                d.copy_from_slice(&(*s as i32).to_le_bytes());
            }
            Ok(())
        }
        Type::Q8_0 => {
            check_blocks(ty, src.len(), dst.len())?;
            quantize_q8_0(src, dst);
            Ok(())
        }
        Type::Q8_1 => {
            check_blocks(ty, src.len(), dst.len())?;
            quantize_q8_1(src, dst);
            Ok(())
        }
        Type::Q8_K => {
            check_blocks(ty, src.len(), dst.len())?;
            quantize_q8_k(src, dst);
            Ok(())
        }
        _ => quants::quantize_row(ty, src, dst),
    }
}

fn check_blocks(ty: Type, n: usize, bytes: usize) -> Result<()> {
    let bs = ty.block_size();
    if n % bs != 0 || n / bs * ty.type_size() != bytes {
        return Err(Error::Quant(format!(
            "CPU: {n} values do not fill {bytes} bytes of {ty} blocks"
        )));
    }
    Ok(())
}

/// One element of a non-block type as f32.
pub(crate) fn scalar_to_f32(ty: Type, b: &[u8]) -> f32 {
    match ty {
        Type::F32 => f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
        Type::F16 => f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32(),
        Type::BF16 => f32::from_bits(u32::from(u16::from_le_bytes([b[0], b[1]])) << 16),
        Type::I32 => i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f32,
        _ => f32::NAN,
    }
}

/// Stores one f32 as an element of a non-block type.
pub(crate) fn scalar_from_f32(ty: Type, v: f32, b: &mut [u8]) {
    match ty {
        Type::F32 => b.copy_from_slice(&v.to_le_bytes()),
        Type::F16 => b.copy_from_slice(&f16::from_f32(v).to_bits().to_le_bytes()),
        Type::BF16 => b.copy_from_slice(&quants::fp32_to_bf16(v).to_le_bytes()),
        Type::I32 => b.copy_from_slice(&(v as i32).to_le_bytes()),
        _ => {}
    }
}

/// Widens little-endian f16 bytes to f32 (vectorised by `half` when F16C is present).
pub(crate) fn f16_bytes_to_f32(src: &[u8], dst: &mut [f32]) {
    #[cfg(target_endian = "little")]
    {
        // SAFETY: every bit pattern of two bytes is an f16, which is a
        // transparent u16: on a little-endian target the aligned middle
        // of `src` is the values themselves.
        let (head, mid, _) = unsafe { src.align_to::<f16>() };
        if head.is_empty() {
            let n = dst.len().min(mid.len());
            mid[..n].convert_to_f32_slice(&mut dst[..n]);
            return;
        }
    }
    let mut tmp = [f16::ZERO; 256];
    for (s, d) in src.chunks(512).zip(dst.chunks_mut(256)) {
        let n = d.len();
        for (t, b) in tmp[..n].iter_mut().zip(s.chunks_exact(2)) {
            *t = f16::from_bits(u16::from_le_bytes([b[0], b[1]]));
        }
        tmp[..n].convert_to_f32_slice(d);
    }
}

/// Narrows f32 to little-endian f16 bytes, rounding to nearest even.
pub(crate) fn f32_to_f16_bytes(src: &[f32], dst: &mut [u8]) {
    #[cfg(target_endian = "little")]
    {
        // SAFETY: as in `f16_bytes_to_f32`; any f16 written is two valid
        // bytes.
        let (head, mid, _) = unsafe { dst.align_to_mut::<f16>() };
        if head.is_empty() {
            let n = src.len().min(mid.len());
            mid[..n].convert_from_f32_slice(&src[..n]);
            return;
        }
    }
    let mut tmp = [f16::ZERO; 256];
    for (s, d) in src.chunks(256).zip(dst.chunks_mut(512)) {
        let n = s.len();
        tmp[..n].convert_from_f32_slice(s);
        for (t, b) in tmp[..n].iter().zip(d.chunks_exact_mut(2)) {
            b.copy_from_slice(&t.to_bits().to_le_bytes());
        }
    }
}

/// Narrows f32 to f16 values.
pub(crate) fn f32_to_f16(src: &[f32], dst: &mut [f16]) {
    dst.convert_from_f32_slice(src);
}

/// Scale and quants of one 32-value block the way ggml's x86 build makes
/// them: `d = amax / 127`, `q = round_half_even(x * (127 / amax))`.
#[inline]
fn q8_block(x: &[f32], qs: &mut [i8]) -> f32 {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
    for (q, &v) in qs.iter_mut().zip(x) {
        // |v * id| <= 127 (+ rounding), well inside nearest_int's exact range;
        // non-finite inputs saturate like the packing instructions.
        *q = nearest_int(v * id).clamp(-128, 127) as i8;
    }
    d
}

/// True when the AVX-512 quantizers below may run (the level in use is
/// AVX-512, see [`crate::simd::kernels`]).
#[cfg(target_arch = "x86_64")]
fn use_avx512() -> bool {
    crate::simd::kernels().isa == crate::features::Isa::Avx512
}

/// Quantizes activations to Q8_0 (`src.len()` a multiple of 32).
pub(crate) fn quantize_q8_0(src: &[f32], dst: &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    if use_avx512() {
        // SAFETY: AVX-512 F/BW/VL/DQ is present (the level in use).
        unsafe { avx512::quantize_q8_0(src, dst) };
        return;
    }
    quantize_q8_0_scalar(src, dst);
}

/// [`quantize_q8_0`] one value at a time.
pub(crate) fn quantize_q8_0_scalar(src: &[f32], dst: &mut [u8]) {
    for (x, out) in src
        .chunks_exact(QK8_0)
        .zip(dst.chunks_exact_mut(Q8_0_BYTES))
    {
        let mut qs = [0i8; QK8_0];
        let d = q8_block(x, &mut qs);
        out[0..2].copy_from_slice(&f16::from_f32(d).to_bits().to_le_bytes());
        for (o, q) in out[2..].iter_mut().zip(qs) {
            *o = q as u8;
        }
    }
}

/// Quantizes activations to Q8_1: Q8_0 plus `s = d * sum(q)`.
pub(crate) fn quantize_q8_1(src: &[f32], dst: &mut [u8]) {
    for (x, out) in src
        .chunks_exact(QK8_0)
        .zip(dst.chunks_exact_mut(Q8_1_BYTES))
    {
        let mut qs = [0i8; QK8_0];
        let d = q8_block(x, &mut qs);
        let sum: i32 = qs.iter().map(|&q| i32::from(q)).sum();
        out[0..2].copy_from_slice(&f16::from_f32(d).to_bits().to_le_bytes());
        out[2..4].copy_from_slice(&f16::from_f32(d * sum as f32).to_bits().to_le_bytes());
        for (o, q) in out[4..].iter_mut().zip(qs) {
            *o = q as u8;
        }
    }
}

/// Quantizes activations to Q8_K as ggml's reference does: the value of
/// largest magnitude maps to -127, `d = 1 / iscale`, and per-16 sums.
pub(crate) fn quantize_q8_k(src: &[f32], dst: &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    if use_avx512() {
        // SAFETY: AVX-512 F/BW/VL/DQ is present (the level in use).
        unsafe { avx512::quantize_q8_k(src, dst) };
        return;
    }
    quantize_q8_k_scalar(src, dst);
}

/// [`quantize_q8_k`] one value at a time.
pub(crate) fn quantize_q8_k_scalar(src: &[f32], dst: &mut [u8]) {
    for (x, out) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(Q8_K_BYTES)) {
        let (mut amax, mut max) = (0f32, 0f32);
        for &v in x {
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
        out.fill(0);
        if amax == 0.0 {
            continue;
        }
        let iscale = -127.0 / max;
        let mut qs = [0i8; QK_K];
        for (q, &v) in qs.iter_mut().zip(x) {
            *q = nearest_int(iscale * v).min(127) as i8;
        }
        out[0..4].copy_from_slice(&(1.0 / iscale).to_le_bytes());
        for (o, q) in out[4..4 + QK_K].iter_mut().zip(qs) {
            *o = q as u8;
        }
        for (j, g) in qs.chunks_exact(16).enumerate() {
            let s: i16 = g.iter().map(|&q| i16::from(q)).sum();
            out[4 + QK_K + 2 * j..4 + QK_K + 2 * j + 2].copy_from_slice(&s.to_le_bytes());
        }
    }
}

/// ggml's `nearest_int`: round half to even through the 1.5 * 2^23 trick.
#[inline]
pub(crate) fn nearest_int(x: f32) -> i32 {
    let v = x + 12_582_912.0;
    (v.to_bits() as i32 & 0x007f_ffff) - 0x0040_0000
}

/// The Q8_0 and Q8_K activation quantizers with AVX-512, equal to the
/// scalar ones bit for bit: the same scalar scale arithmetic, and the
/// conversion instruction rounds half to even like `nearest_int` and
/// saturates like the clamps. A value whose scaled product is NaN (a NaN
/// or infinite input) quantizes to 0, as `nearest_int` makes it.
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::{Q8_0_BYTES, Q8_K_BYTES, QK8_0, QK_K};
    use half::f16;

    /// Rounds `v` to the nearest integer (ties to even), NaN to 0, and
    /// saturates to i8.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq")]
    fn to_i8(v: __m512) -> __m128i {
        let ordered = _mm512_cmp_ps_mask::<_CMP_ORD_Q>(v, v);
        _mm512_cvtsepi32_epi8(_mm512_maskz_cvtps_epi32(ordered, v))
    }

    /// Largest |x| of 16 values folded into `m`, NaN ignored.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq")]
    fn abs_max(x: __m512, m: __m512) -> __m512 {
        // MAXPS returns its second operand when either is NaN.
        _mm512_max_ps(_mm512_abs_ps(x), m)
    }

    /// # Safety
    /// AVX-512 F/BW/VL/DQ must be present.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq")]
    pub(super) unsafe fn quantize_q8_0(src: &[f32], dst: &mut [u8]) {
        for (x, out) in src
            .chunks_exact(QK8_0)
            .zip(dst.chunks_exact_mut(Q8_0_BYTES))
        {
            // SAFETY: `x` holds 32 values.
            let (a, b) = unsafe {
                (
                    _mm512_loadu_ps(x.as_ptr()),
                    _mm512_loadu_ps(x.as_ptr().add(16)),
                )
            };
            let amax = _mm512_reduce_max_ps(abs_max(b, abs_max(a, _mm512_setzero_ps())));
            let d = amax / 127.0;
            let id = _mm512_set1_ps(if amax != 0.0 { 127.0 / amax } else { 0.0 });
            let qa = to_i8(_mm512_mul_ps(a, id));
            let qb = to_i8(_mm512_mul_ps(b, id));
            out[0..2].copy_from_slice(&f16::from_f32(d).to_bits().to_le_bytes());
            // SAFETY: `out` holds 34 bytes: 2 of scale, 32 of quants.
            unsafe {
                _mm_storeu_si128(out.as_mut_ptr().add(2) as *mut __m128i, qa);
                _mm_storeu_si128(out.as_mut_ptr().add(18) as *mut __m128i, qb);
            }
        }
    }

    /// # Safety
    /// AVX-512 F/BW/VL/DQ must be present.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq")]
    pub(super) unsafe fn quantize_q8_k(src: &[f32], dst: &mut [u8]) {
        for (x, out) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(Q8_K_BYTES)) {
            // SAFETY: `x` holds 256 values, 16 at each of these offsets.
            let v: [__m512; 16] =
                std::array::from_fn(|i| unsafe { _mm512_loadu_ps(x.as_ptr().add(16 * i)) });
            let mut m = _mm512_setzero_ps();
            for &vi in &v {
                m = abs_max(vi, m);
            }
            let amax = _mm512_reduce_max_ps(m);
            out.fill(0);
            if amax == 0.0 {
                continue;
            }
            // The first value of that magnitude, as the scalar scan finds it.
            let max = x.iter().copied().find(|v| v.abs() == amax).unwrap_or(amax);
            let iscale = -127.0 / max;
            let is = _mm512_set1_ps(iscale);
            out[0..4].copy_from_slice(&(1.0 / iscale).to_le_bytes());
            for (i, &vi) in v.iter().enumerate() {
                let q = to_i8(_mm512_mul_ps(vi, is));
                // SAFETY: quants i*16..i*16+16 lie at bytes 4.. of the block.
                unsafe { _mm_storeu_si128(out.as_mut_ptr().add(4 + 16 * i) as *mut __m128i, q) };
                let sum = _mm512_reduce_add_epi32(_mm512_cvtepi8_epi32(q)) as i16;
                let at = 4 + QK_K + 2 * i;
                out[at..at + 2].copy_from_slice(&sum.to_le_bytes());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vector quantizers equal the scalar ones, ties, zeros and
    /// non-finite values included.
    #[test]
    fn vector_quantizers_equal_scalar() {
        let mut x = data(8 * QK_K, 21);
        // Ties at 127 / amax scale, a zero block, a huge and a NaN value.
        for (i, v) in [127.0f32, 0.5, 1.5, -2.5, 3.5, -127.0].iter().enumerate() {
            x[i] = *v;
        }
        x[QK_K..QK_K + 32].fill(0.0);
        x[2 * QK_K + 5] = f32::NAN;
        x[3 * QK_K + 7] = 3.0e38;
        x[4 * QK_K + 9] = -2.0;
        x[4 * QK_K + 10] = 2.0;
        let mut a = vec![0u8; 8 * QK_K / QK8_0 * Q8_0_BYTES];
        let mut b = a.clone();
        quantize_q8_0(&x, &mut a);
        quantize_q8_0_scalar(&x, &mut b);
        assert_eq!(a, b, "Q8_0");
        let mut a = vec![0u8; 8 * Q8_K_BYTES];
        let mut b = a.clone();
        quantize_q8_k(&x, &mut a);
        quantize_q8_k_scalar(&x, &mut b);
        assert_eq!(a, b, "Q8_K");
    }

    fn data(n: usize, seed: u32) -> Vec<f32> {
        let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                (s as f32 / u32::MAX as f32) * 4.0 - 2.0
            })
            .collect()
    }

    #[test]
    fn q8_k_matches_reference_quantizer() {
        let x = data(2 * QK_K, 7);
        let mut ours = vec![0u8; 2 * Q8_K_BYTES];
        let mut theirs = ours.clone();
        quantize_q8_k(&x, &mut ours);
        quants::quantize_row(Type::Q8_K, &x, &mut theirs).unwrap();
        assert_eq!(ours, theirs);
    }

    #[test]
    fn q8_0_round_trip_is_close() {
        let x = data(4 * QK8_0, 3);
        let mut q = vec![0u8; 4 * Q8_0_BYTES];
        quantize_q8_0(&x, &mut q);
        let mut back = vec![0f32; x.len()];
        to_f32(Type::Q8_0, &q, &mut back).unwrap();
        for (a, b) in x.iter().zip(&back) {
            assert!((a - b).abs() <= 2.0 / 127.0 * 0.51 + 1e-3, "{a} {b}");
        }
        // Ties go to even: 0.5 * 127 / amax scaled values round like rint.
        let mut tie = [0f32; 32];
        tie[0] = 127.0;
        tie[1] = 0.5;
        tie[2] = 1.5;
        tie[3] = -2.5;
        let mut qb = [0u8; Q8_0_BYTES];
        quantize_q8_0(&tie, &mut qb);
        assert_eq!(&qb[2..6], &[127u8, 0, 2, (-2i8) as u8]);
    }

    #[test]
    fn f16_bytes_round_trip() {
        let x = data(300, 9);
        // Bytes at an even and at an odd address: converted in place, and
        // through a copy.
        let mut mem = vec![0u16; 301];
        let bytes: &mut [u8] = as_bytes(&mut mem);
        for at in [0, 1] {
            let b = &mut bytes[at..at + 600];
            b.fill(0);
            f32_to_f16_bytes(&x, b);
            for (a, h) in x.iter().zip(b.chunks_exact(2)) {
                assert_eq!(
                    f16::from_f32(*a).to_bits().to_le_bytes(),
                    [h[0], h[1]],
                    "at {at}"
                );
            }
            let mut y = vec![0f32; 300];
            f16_bytes_to_f32(b, &mut y);
            for (a, c) in x.iter().zip(&y) {
                assert_eq!(f16::from_f32(*a).to_f32(), *c, "at {at}");
            }
        }
    }

    /// The bytes of `v`.
    fn as_bytes(v: &mut [u16]) -> &mut [u8] {
        // SAFETY: u16 has no padding and any byte is a valid u8; the
        // length covers the same memory.
        unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr() as *mut u8, 2 * v.len()) }
    }
}
