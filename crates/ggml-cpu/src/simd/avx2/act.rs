//! Activations: `exp` with a running sum (soft_max), SiLU, SwiGLU and
//! GEGLU.

use std::arch::x86_64::*;

use crate::simd::Kernels;

/// Installs the activation kernels.
pub(super) fn install(k: &mut Kernels) {
    k.exp_sum = exp_sum;
    k.exp_sum_rows = exp_sum_rows;
    k.silu = silu;
    k.swiglu = swiglu;
    k.geglu = geglu;
}

/// [`crate::simd::scalar::exp_f32`] on eight lanes, with the same operations in
/// the same order (no fused multiply-adds), so the same bits.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn exp8(x: __m256) -> __m256 {
    use crate::simd::scalar::{EXP_C1, EXP_C2, EXP_HI, EXP_LO, EXP_MAGIC, EXP_P};
    let lo = _mm256_set1_ps(EXP_LO);
    let hi = _mm256_set1_ps(EXP_HI);
    let xc = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
    let magic = _mm256_set1_ps(EXP_MAGIC);
    let k = _mm256_sub_ps(
        _mm256_add_ps(
            _mm256_mul_ps(xc, _mm256_set1_ps(std::f32::consts::LOG2_E)),
            magic,
        ),
        magic,
    );
    let r = _mm256_sub_ps(
        _mm256_sub_ps(xc, _mm256_mul_ps(k, _mm256_set1_ps(EXP_C1))),
        _mm256_mul_ps(k, _mm256_set1_ps(EXP_C2)),
    );
    let z = _mm256_mul_ps(r, r);
    let mut p = _mm256_set1_ps(EXP_P[0]);
    for &c in &EXP_P[1..] {
        p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(c));
    }
    let poly = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(p, z), r), _mm256_set1_ps(1.0));
    let e = _mm256_slli_epi32(
        _mm256_add_epi32(_mm256_cvttps_epi32(k), _mm256_set1_epi32(127)),
        23,
    );
    let y = _mm256_mul_ps(poly, _mm256_castsi256_ps(e));
    let y = _mm256_blendv_ps(
        y,
        _mm256_set1_ps(f32::INFINITY),
        _mm256_cmp_ps::<_CMP_GT_OQ>(x, hi),
    );
    let y = _mm256_blendv_ps(y, _mm256_setzero_ps(), _mm256_cmp_ps::<_CMP_LT_OQ>(x, lo));
    _mm256_blendv_ps(y, x, _mm256_cmp_ps::<_CMP_UNORD_Q>(x, x))
}

#[target_feature(enable = "avx2,fma,f16c")]
fn exp_sum_avx2(x: &mut [f32], max: f32) -> f64 {
    let m = _mm256_set1_ps(max);
    let hidden = _mm256_set1_ps(f32::NEG_INFINITY);
    let (mut s0, mut s1) = (_mm256_setzero_pd(), _mm256_setzero_pd());
    let mut chunks = x.chunks_exact_mut(8);
    for ch in &mut chunks {
        // SAFETY: an 8-element chunk, read and written in place.
        unsafe {
            let v = _mm256_loadu_ps(ch.as_ptr());
            if _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_EQ_OQ>(v, hidden)) == 0xff {
                // Eight masked keys (a causal mask's upper half): their
                // exponentials are zeros, which add nothing to the sum.
                _mm256_storeu_ps(ch.as_mut_ptr(), _mm256_setzero_ps());
                continue;
            }
            let e = exp8(_mm256_sub_ps(v, m));
            _mm256_storeu_ps(ch.as_mut_ptr(), e);
            s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
            s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
        }
    }
    let mut lanes = [0f64; 4];
    // SAFETY: a 4-element local array.
    unsafe { _mm256_storeu_pd(lanes.as_mut_ptr(), _mm256_add_pd(s0, s1)) };
    let mut sum: f64 = lanes.iter().sum();
    for v in chunks.into_remainder() {
        let e = crate::simd::scalar::exp_f32(*v - max);
        sum += f64::from(e);
        *v = e;
    }
    sum
}

fn exp_sum(x: &mut [f32], max: f32) -> f64 {
    // SAFETY: installed only on CPUs with AVX2, FMA and F16C.
    unsafe { exp_sum_avx2(x, max) }
}

fn exp_sum_rows(x: &mut [f32], w: usize, maxes: &[f32], sums: &mut [f64]) {
    crate::simd::exp_sum_rows_by(exp_sum, x, w, maxes, sums);
}

/// `v / (1 + exp(-v))` on eight lanes, as [`crate::simd::scalar::silu`]
/// computes each.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn silu8(v: __m256) -> __m256 {
    let e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), v));
    _mm256_div_ps(v, _mm256_add_ps(_mm256_set1_ps(1.0), e))
}

#[target_feature(enable = "avx2,fma,f16c")]
fn silu_avx2(x: &[f32], out: &mut [f32]) {
    let n = x.len().min(out.len());
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: elements i..i+8 of both slices.
        unsafe {
            let v = _mm256_loadu_ps(x.as_ptr().add(i));
            _mm256_storeu_ps(out.as_mut_ptr().add(i), silu8(v));
        }
        i += 8;
    }
    crate::simd::scalar::silu(&x[i..n], &mut out[i..n]);
}

fn silu(x: &[f32], out: &mut [f32]) {
    // SAFETY: installed only on CPUs with AVX2, FMA and F16C.
    unsafe { silu_avx2(x, out) }
}

#[target_feature(enable = "avx2,fma,f16c")]
fn swiglu_avx2(g: &[f32], u: &[f32], out: &mut [f32]) {
    let n = g.len().min(u.len()).min(out.len());
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: elements i..i+8 of the three slices.
        unsafe {
            let s = silu8(_mm256_loadu_ps(g.as_ptr().add(i)));
            let w = _mm256_mul_ps(s, _mm256_loadu_ps(u.as_ptr().add(i)));
            _mm256_storeu_ps(out.as_mut_ptr().add(i), w);
        }
        i += 8;
    }
    crate::simd::scalar::swiglu(&g[i..n], &u[i..n], &mut out[i..n]);
}

fn swiglu(g: &[f32], u: &[f32], out: &mut [f32]) {
    // SAFETY: installed only on CPUs with AVX2, FMA and F16C.
    unsafe { swiglu_avx2(g, u, out) }
}

/// [`crate::simd::scalar::geglu`] eight lanes at a time: the f16 rounding
/// of x (F16C rounds to nearest even, as `half` does), the table looked up
/// lane by lane, the bounds at -10 and 10 as blends; the same bits.
#[target_feature(enable = "avx2,fma,f16c")]
fn geglu_avx2(g: &[f32], u: &[f32], out: &mut [f32]) {
    let table = crate::simd::scalar::gelu_table();
    let n = g.len().min(u.len()).min(out.len());
    let (lo, hi) = (_mm256_set1_ps(-10.0), _mm256_set1_ps(10.0));
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: elements i..i+8 of the three slices; the lanes' f16 bits
        // index the 65,536-entry table.
        unsafe {
            let x = _mm256_loadu_ps(g.as_ptr().add(i));
            let mut h = [0u16; 8];
            _mm_storeu_si128(
                h.as_mut_ptr() as *mut __m128i,
                _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(x),
            );
            let t = h.map(|b| table[b as usize]);
            let v = _mm256_cvtph_ps(_mm_loadu_si128(t.as_ptr() as *const __m128i));
            let v = _mm256_blendv_ps(v, x, _mm256_cmp_ps::<_CMP_GE_OQ>(x, hi));
            let v = _mm256_andnot_ps(_mm256_cmp_ps::<_CMP_LE_OQ>(x, lo), v);
            let w = _mm256_mul_ps(v, _mm256_loadu_ps(u.as_ptr().add(i)));
            _mm256_storeu_ps(out.as_mut_ptr().add(i), w);
        }
        i += 8;
    }
    crate::simd::scalar::geglu(&g[i..n], &u[i..n], &mut out[i..n]);
}

fn geglu(g: &[f32], u: &[f32], out: &mut [f32]) {
    // SAFETY: installed only on CPUs with AVX2, FMA and F16C.
    unsafe { geglu_avx2(g, u, out) }
}
