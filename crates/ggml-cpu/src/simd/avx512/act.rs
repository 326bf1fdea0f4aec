//! Activations sixteen lanes a step: `exp` with a running sum (soft_max
//! and attention), SiLU and SwiGLU. Each lane does the operations of
//! [`crate::simd::scalar::exp_f32`] in the same order (no fused
//! multiply-adds), so every value has the scalar path's bits; only the
//! order of the f64 partial sums of `exp_sum` differs.

use std::arch::x86_64::*;

use crate::simd::Kernels;

/// Installs the activation kernels over the AVX2 ones.
pub(super) fn install(k: &mut Kernels) {
    k.exp_sum = exp_sum;
    k.exp_sum_rows = exp_sum_rows;
    k.scale_mask_max = scale_mask_max;
    k.silu = silu;
    k.swiglu = swiglu;
}

/// `exp(x)` on sixteen lanes, as the scalar function computes each.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
fn exp16(x: __m512) -> __m512 {
    use crate::simd::scalar::{EXP_C1, EXP_C2, EXP_HI, EXP_LO, EXP_MAGIC, EXP_P};
    let lo = _mm512_set1_ps(EXP_LO);
    let hi = _mm512_set1_ps(EXP_HI);
    let xc = _mm512_min_ps(_mm512_max_ps(x, lo), hi);
    let magic = _mm512_set1_ps(EXP_MAGIC);
    let k = _mm512_sub_ps(
        _mm512_add_ps(
            _mm512_mul_ps(xc, _mm512_set1_ps(std::f32::consts::LOG2_E)),
            magic,
        ),
        magic,
    );
    let r = _mm512_sub_ps(
        _mm512_sub_ps(xc, _mm512_mul_ps(k, _mm512_set1_ps(EXP_C1))),
        _mm512_mul_ps(k, _mm512_set1_ps(EXP_C2)),
    );
    let z = _mm512_mul_ps(r, r);
    let mut p = _mm512_set1_ps(EXP_P[0]);
    for &c in &EXP_P[1..] {
        p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(c));
    }
    let poly = _mm512_add_ps(_mm512_add_ps(_mm512_mul_ps(p, z), r), _mm512_set1_ps(1.0));
    let e = _mm512_slli_epi32::<23>(_mm512_add_epi32(
        _mm512_cvttps_epi32(k),
        _mm512_set1_epi32(127),
    ));
    let y = _mm512_mul_ps(poly, _mm512_castsi512_ps(e));
    let y = _mm512_mask_blend_ps(
        _mm512_cmp_ps_mask::<_CMP_GT_OQ>(x, hi),
        y,
        _mm512_set1_ps(f32::INFINITY),
    );
    let y = _mm512_mask_blend_ps(
        _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, lo),
        y,
        _mm512_setzero_ps(),
    );
    _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_UNORD_Q>(x, x), y, x)
}

/// Adds lanes 0-7 of `e` to `s0` and lanes 8-15 to `s1`, in f64.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
fn add_f64(s0: &mut __m512d, s1: &mut __m512d, e: __m512) {
    let hi = _mm512_extractf64x4_pd::<1>(_mm512_castps_pd(e));
    *s0 = _mm512_add_pd(*s0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
    *s1 = _mm512_add_pd(*s1, _mm512_cvtps_pd(_mm256_castpd_ps(hi)));
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
fn exp_sum_avx512(x: &mut [f32], max: f32) -> f64 {
    let m = _mm512_set1_ps(max);
    let hidden = _mm512_set1_ps(f32::NEG_INFINITY);
    let (mut s0, mut s1) = (_mm512_setzero_pd(), _mm512_setzero_pd());
    let mut chunks = x.chunks_exact_mut(16);
    for ch in &mut chunks {
        // SAFETY: a 16-element chunk, read and written in place.
        unsafe {
            let v = _mm512_loadu_ps(ch.as_ptr());
            if _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(v, hidden) == 0xffff {
                // Sixteen masked keys (a causal mask's upper half): their
                // exponentials are zeros, which add nothing to the sum.
                _mm512_storeu_ps(ch.as_mut_ptr(), _mm512_setzero_ps());
                continue;
            }
            let e = exp16(_mm512_sub_ps(v, m));
            _mm512_storeu_ps(ch.as_mut_ptr(), e);
            add_f64(&mut s0, &mut s1, e);
        }
    }
    // The last 1 to 15 values in masked lanes (a short row, such as one
    // query's keys while a cache fills, is mostly tail).
    let tail = chunks.into_remainder();
    if !tail.is_empty() {
        let k: __mmask16 = (1u32 << tail.len()) as u16 - 1;
        // SAFETY: the masked lanes are the tail's elements; the others are
        // neither read nor written.
        unsafe {
            let v = _mm512_maskz_loadu_ps(k, tail.as_ptr());
            let e = _mm512_maskz_mov_ps(k, exp16(_mm512_sub_ps(v, m)));
            _mm512_mask_storeu_ps(tail.as_mut_ptr(), k, e);
            add_f64(&mut s0, &mut s1, e);
        }
    }
    _mm512_reduce_add_pd(_mm512_add_pd(s0, s1))
}

fn exp_sum(x: &mut [f32], max: f32) -> f64 {
    // SAFETY: installed only on CPUs with AVX-512 F/BW/VL/DQ.
    unsafe { exp_sum_avx512(x, max) }
}

/// Rows whose exponentials run side by side.
const SIDE_BY_SIDE: usize = 4;

/// [`exp_sum_avx512`] of rows of `w` values: a short row (an attention
/// tile's 64 keys) is one long chain of dependent operations, so rows go
/// [`SIDE_BY_SIDE`] at a time, their chains interleaved. Each row takes the
/// same operations in the same order as alone (a chunk of hidden keys adds
/// exp's zeros to a sum of non-negative values, which leaves it as is), so
/// the bits are [`exp_sum_avx512`]'s.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
fn exp_sum_rows_avx512(x: &mut [f32], w: usize, maxes: &[f32], sums: &mut [f64]) {
    let rows = maxes.len();
    assert!(
        x.len() >= rows * w && sums.len() >= rows,
        "exp_sum_rows: {rows} rows of {w}, short slices"
    );
    let mut live = [0usize; SIDE_BY_SIDE];
    let mut n = 0;
    for (r, &m) in maxes.iter().enumerate() {
        if m == f32::NEG_INFINITY {
            continue;
        }
        live[n] = r;
        n += 1;
        if n == SIDE_BY_SIDE {
            let p: [*mut f32; SIDE_BY_SIDE] =
                std::array::from_fn(|j| x[live[j] * w..].as_mut_ptr());
            let m: [f32; SIDE_BY_SIDE] = std::array::from_fn(|j| maxes[live[j]]);
            // SAFETY: distinct rows of w values inside x (checked).
            let s = unsafe { exp_sum_side_by_side(p, w, m) };
            for (j, s) in s.into_iter().enumerate() {
                sums[live[j]] = s;
            }
            n = 0;
        }
    }
    for &r in &live[..n] {
        sums[r] = exp_sum_avx512(&mut x[r * w..(r + 1) * w], maxes[r]);
    }
}

/// # Safety
/// Each of `p` points to its own row of `w` values, read and written in
/// place.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn exp_sum_side_by_side(
    p: [*mut f32; SIDE_BY_SIDE],
    w: usize,
    max: [f32; SIDE_BY_SIDE],
) -> [f64; SIDE_BY_SIDE] {
    let m: [__m512; SIDE_BY_SIDE] = std::array::from_fn(|j| _mm512_set1_ps(max[j]));
    let mut s0 = [_mm512_setzero_pd(); SIDE_BY_SIDE];
    let mut s1 = [_mm512_setzero_pd(); SIDE_BY_SIDE];
    let mut i = 0;
    while i < w {
        let k: __mmask16 = ((1u32 << (w - i).min(16)) - 1) as u16;
        for j in 0..SIDE_BY_SIDE {
            // SAFETY: the lanes `k` selects are values i.. of row j (caller);
            // the others are neither read nor written.
            unsafe {
                let v = _mm512_maskz_loadu_ps(k, p[j].add(i));
                let e = _mm512_maskz_mov_ps(k, exp16(_mm512_sub_ps(v, m[j])));
                _mm512_mask_storeu_ps(p[j].add(i), k, e);
                add_f64(&mut s0[j], &mut s1[j], e);
            }
        }
        i += 16;
    }
    std::array::from_fn(|j| _mm512_reduce_add_pd(_mm512_add_pd(s0[j], s1[j])))
}

fn exp_sum_rows(x: &mut [f32], w: usize, maxes: &[f32], sums: &mut [f64]) {
    // SAFETY: installed only on CPUs with AVX-512 F/BW/VL/DQ.
    unsafe { exp_sum_rows_avx512(x, w, maxes, sums) }
}

/// See [`crate::simd::scalar::scale_mask_max`]: a product and a sum per
/// lane (no FMA), so the same values; the largest is the same whatever
/// the order (a signed zero aside, which `exp(x - max)` does not see).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
fn scale_mask_max_avx512(x: &mut [f32], mask: Option<&[f32]>, scale: f32) -> f32 {
    let n = x.len();
    if let Some(m) = mask {
        assert!(m.len() >= n, "scale_mask_max: mask shorter than the row");
    }
    let sc = _mm512_set1_ps(scale);
    let mut mx = _mm512_set1_ps(f32::NEG_INFINITY);
    let mut i = 0;
    while i < n {
        let k: __mmask16 = ((1u32 << (n - i).min(16)) - 1) as u16;
        // SAFETY: the lanes `k` selects are elements i.. of the row (and of
        // the mask, checked at least as long); the others are not accessed.
        unsafe {
            let mut v = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x.as_ptr().add(i)), sc);
            if let Some(m) = mask {
                v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(k, m.as_ptr().add(i)));
            }
            _mm512_mask_storeu_ps(x.as_mut_ptr().add(i), k, v);
            // A NaN in `v` leaves the lane's maximum (the second operand).
            mx = _mm512_mask_max_ps(mx, k, v, mx);
        }
        i += 16;
    }
    _mm512_reduce_max_ps(mx)
}

fn scale_mask_max(x: &mut [f32], mask: Option<&[f32]>, scale: f32) -> f32 {
    // SAFETY: installed only on CPUs with AVX-512 F/BW/VL/DQ.
    unsafe { scale_mask_max_avx512(x, mask, scale) }
}

/// `v / (1 + exp(-v))` on sixteen lanes, as the scalar SiLU computes each.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
fn silu16(v: __m512) -> __m512 {
    let e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), v));
    _mm512_div_ps(v, _mm512_add_ps(_mm512_set1_ps(1.0), e))
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
fn silu_avx512(x: &[f32], out: &mut [f32]) {
    let n = x.len().min(out.len());
    let mut i = 0;
    while i + 16 <= n {
        // SAFETY: elements i..i+16 of both slices.
        unsafe {
            let v = _mm512_loadu_ps(x.as_ptr().add(i));
            _mm512_storeu_ps(out.as_mut_ptr().add(i), silu16(v));
        }
        i += 16;
    }
    crate::simd::scalar::silu(&x[i..n], &mut out[i..n]);
}

fn silu(x: &[f32], out: &mut [f32]) {
    // SAFETY: installed only on CPUs with AVX-512 F/BW/VL/DQ.
    unsafe { silu_avx512(x, out) }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
fn swiglu_avx512(g: &[f32], u: &[f32], out: &mut [f32]) {
    let n = g.len().min(u.len()).min(out.len());
    let mut i = 0;
    while i + 16 <= n {
        // SAFETY: elements i..i+16 of the three slices.
        unsafe {
            let s = silu16(_mm512_loadu_ps(g.as_ptr().add(i)));
            let w = _mm512_mul_ps(s, _mm512_loadu_ps(u.as_ptr().add(i)));
            _mm512_storeu_ps(out.as_mut_ptr().add(i), w);
        }
        i += 16;
    }
    crate::simd::scalar::swiglu(&g[i..n], &u[i..n], &mut out[i..n]);
}

fn swiglu(g: &[f32], u: &[f32], out: &mut [f32]) {
    // SAFETY: installed only on CPUs with AVX-512 F/BW/VL/DQ.
    unsafe { swiglu_avx512(g, u, out) }
}
