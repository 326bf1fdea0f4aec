//! AVX2 + FMA + F16C kernels.
//!
//! Integer block sums are exact (they equal the scalar kernels' sums); the
//! f32 accumulation keeps eight lanes per column and sums them at the end,
//! as ggml's AVX2 kernels do, so results differ from the scalar path only in
//! the last bits.
//!
//! Every `unsafe fn` here is compiled for AVX2/FMA/F16C and reached only
//! through [`install`], which the dispatcher calls after checking that the
//! CPU has those features; the row slices are length-checked on entry.

use std::arch::x86_64::*;

use super::Kernels;

mod act;
mod attn;
mod float;
mod gemm;
mod kquant;
mod legacy;
mod mxfp4;
mod ssm;

pub(super) use float::{f16_elem, f32_elem, load_f16x8, load_f32x8};
pub(super) use kquant::{q3k_levels, q3k_scales};
pub(super) use legacy::{dec_iq4_nl, dec_q4_0, dec_q5_0, dec_q8_0};
pub(super) use mxfp4::{dec_mxfp4, finish_tile, BLOCK_BYTES as MXFP4_BYTES};

/// Installs the AVX2 kernels (the caller checked AVX2, FMA and F16C).
pub(super) fn install(k: &mut Kernels) {
    float::install(k);
    legacy::install(k);
    mxfp4::install(k);
    kquant::install(k);
    act::install(k);
    attn::install(k);
    gemm::install(k);
    ssm::install(k);
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn hsum(v: __m256) -> f32 {
    let r = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
    let r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    let r = _mm_add_ss(r, _mm_movehdup_ps(r));
    _mm_cvtss_f32(r)
}

/// f16 at `p` (unaligned) as f32.
///
/// # Safety
/// `p` must be readable for 2 bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f16_at(p: *const u8) -> f32 {
    // SAFETY: the caller guarantees 2 readable bytes.
    let h = unsafe { (p as *const u16).read_unaligned() };
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(h))))
}

/// 16 bytes at `p`: low nibbles in bytes 0..16, high nibbles in 16..32.
///
/// # Safety
/// `p` must be readable for 16 bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn nibbles(p: *const u8) -> __m256i {
    // SAFETY: 16 readable bytes (caller).
    let t = unsafe { _mm_loadu_si128(p as *const __m128i) };
    // The bytes in both lanes (a broadcast load), the high lane's shifted
    // by 4: one shift instead of a shift and an insert.
    let b = _mm256_srlv_epi64(
        _mm256_broadcastsi128_si256(t),
        _mm256_set_epi64x(4, 4, 0, 0),
    );
    _mm256_and_si256(b, _mm256_set1_epi8(0x0f))
}

/// Spreads the 32 bits at `p` to 32 bytes: 0xff where the bit is set.
///
/// # Safety
/// `p` must be readable for 4 bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn bits_to_bytes(p: *const u8) -> __m256i {
    // SAFETY: 4 readable bytes (caller).
    let x = unsafe { (p as *const u32).read_unaligned() };
    let shuf = _mm256_set_epi64x(
        0x0303_0303_0303_0303,
        0x0202_0202_0202_0202,
        0x0101_0101_0101_0101,
        0,
    );
    let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(x as i32), shuf);
    let bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbf_dfef_f7fb_fdfe));
    _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1))
}

/// Eight i32 sums of four products of unsigned `a` and signed `b` bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn dot_us(a: __m256i, b: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1))
}

/// Eight i32 sums of four products of signed bytes (|x| <= 127 for one side).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn dot_ss(ax: __m256i, x: __m256i, y: __m256i) -> __m256i {
    dot_us(ax, _mm256_sign_epi8(y, x))
}

/// Loads 32 bytes.
///
/// # Safety
/// `p` must be readable for 32 bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn load(p: *const u8) -> __m256i {
    // SAFETY: 32 readable bytes (caller).
    unsafe { _mm256_loadu_si256(p as *const __m256i) }
}

/// The 4 bytes at `p` in every 32-bit lane.
///
/// # Safety
/// `p` must be readable for 4 bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn bcast4(p: *const u8) -> __m256i {
    // SAFETY: 4 readable bytes (caller).
    _mm256_set1_epi32(unsafe { (p as *const i32).read_unaligned() })
}
