//! AVX-512 (F, BW, VL, DQ; VNNI where present) kernels: two 32-weight
//! blocks, or one 64-weight chunk of a super-block, per 512-bit register.
//!
//! As in the AVX2 kernels, integer block sums are exact and only the f32
//! accumulation order differs from the scalar path. Every `unsafe fn` here
//! is compiled for AVX-512 and reached only through [`install`], which the
//! dispatcher calls after checking the CPU's features; row slices are
//! length-checked on entry.

use std::arch::x86_64::*;

use super::Kernels;

mod act;
mod float;
mod gemm;
mod kquant;
mod legacy;
mod mxfp4;

/// Also unpacks the Q4_K / Q5_K scales of the AVX2 row kernel.
pub(super) use kquant::k4_scale_bytes;

/// Installs the AVX-512 kernels over the AVX2 ones (the caller checked
/// AVX-512 F/BW/VL/DQ).
pub(super) fn install(k: &mut Kernels) {
    act::install(k);
    float::install(k);
    gemm::install(k);
    legacy::install(k);
    mxfp4::install(k);
    kquant::install(k);
}

/// # Safety
/// `p` must be readable for 2 bytes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn f16_at(p: *const u8) -> f32 {
    // SAFETY: 2 readable bytes (caller).
    let h = unsafe { (p as *const u16).read_unaligned() };
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(h))))
}

/// # Safety
/// `p` must be readable for 32 bytes.
#[inline]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn load256(p: *const u8) -> __m256i {
    // SAFETY: 32 readable bytes (caller).
    unsafe { _mm256_loadu_si256(p as *const __m256i) }
}

/// # Safety
/// `p` must be readable for 64 bytes.
#[inline]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn load512(p: *const u8) -> __m512i {
    // SAFETY: 64 readable bytes (caller).
    unsafe { _mm512_loadu_si512(p as *const __m512i) }
}

/// `lo` in the low half and `hi` in the high half.
#[inline]
#[target_feature(enable = "avx512f")]
pub(super) fn join(lo: __m256i, hi: __m256i) -> __m512i {
    _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1)
}

/// The 4 bytes at `p` in every 32-bit lane (an embedded broadcast once
/// folded into the instruction that uses it).
///
/// # Safety
/// `p` must be readable for 4 bytes.
#[inline]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn bcast4(p: *const u8) -> __m512i {
    // SAFETY: 4 readable bytes (caller).
    _mm512_set1_epi32(unsafe { (p as *const i32).read_unaligned() })
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
fn hsum256(v: __m256) -> f32 {
    let r = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
    let r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    let r = _mm_add_ss(r, _mm_movehdup_ps(r));
    _mm_cvtss_f32(r)
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
fn dot_us_bw(a: __m512i, b: __m512i) -> __m512i {
    _mm512_madd_epi16(_mm512_maddubs_epi16(a, b), _mm512_set1_epi16(1))
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
fn dot_us256_bw(a: __m256i, b: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1))
}
