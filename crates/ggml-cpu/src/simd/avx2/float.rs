//! Float rows (f32, f16, bf16) and the plain f32 / f16 dot products.

use std::arch::x86_64::*;

use ggml_core::Type;
use half::f16;

use super::hsum;
use crate::simd::{by_tile, check_tile, dot_by_row, Kernels};

/// Installs the float kernels.
pub(super) fn install(k: &mut Kernels) {
    k.dot_f32 = dot_f32;
    k.dot_f16 = dot_f16;
    k.set(Type::F32, f32_row);
    k.set(Type::F16, f16_row);
    k.set(Type::BF16, bf16_row);
}

macro_rules! float_kernel {
    ($tile:ident, $row:ident, $width:expr, $load:ident, $scalar:path) => {
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn $tile<const R: usize, const C: usize>(
            n: usize,
            xs: &[&[u8]],
            ys: &[&[u8]],
            out: &mut [f32],
        ) {
            check_tile(n, xs, $width, ys, $width, out);
            // One accumulator per pair, whatever the tile, so that a pair's
            // result does not depend on the tile it was computed in.
            let mut acc = [[_mm256_setzero_ps(); C]; R];
            let mut i = 0;
            while i + 8 <= n {
                let o = i * $width;
                let xv: [__m256; R] = std::array::from_fn(|r| {
                    // SAFETY: elements i..i+8 are inside every row (checked).
                    unsafe { $load(xs[r].as_ptr().add(o)) }
                });
                for c in 0..C {
                    // SAFETY: as above.
                    let y = unsafe { $load(ys[c].as_ptr().add(o)) };
                    for r in 0..R {
                        acc[r][c] = _mm256_fmadd_ps(xv[r], y, acc[r][c]);
                    }
                }
                i += 8;
            }
            for r in 0..R {
                for c in 0..C {
                    let mut s = hsum(acc[r][c]);
                    for j in i..n {
                        s += $scalar(xs[r], j) * $scalar(ys[c], j);
                    }
                    out[r * C + c] = s;
                }
            }
        }
        fn $row(n: usize, xs: &[&[u8]], ys: &[&[u8]], out: &mut [f32]) {
            // SAFETY: installed only on CPUs with AVX2, FMA and F16C.
            unsafe { by_tile!($tile, n, xs, ys, out) }
        }
    };
}

/// # Safety
/// `p` must be readable for 32 bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::simd) unsafe fn load_f32x8(p: *const u8) -> __m256 {
    // SAFETY: 32 readable bytes (caller).
    unsafe { _mm256_loadu_ps(p as *const f32) }
}

/// # Safety
/// `p` must be readable for 16 bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::simd) unsafe fn load_f16x8(p: *const u8) -> __m256 {
    // SAFETY: 16 readable bytes (caller).
    _mm256_cvtph_ps(unsafe { _mm_loadu_si128(p as *const __m128i) })
}

/// # Safety
/// `p` must be readable for 16 bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load_bf16x8(p: *const u8) -> __m256 {
    // SAFETY: 16 readable bytes (caller).
    let h = unsafe { _mm_loadu_si128(p as *const __m128i) };
    _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))
}

pub(in crate::simd) fn f32_elem(b: &[u8], j: usize) -> f32 {
    crate::simd::scalar::f32_at(b, 4 * j)
}
pub(in crate::simd) fn f16_elem(b: &[u8], j: usize) -> f32 {
    // The portable conversion inlines; tails are a few elements.
    half::f16::from_bits(u16::from_le_bytes([b[2 * j], b[2 * j + 1]])).to_f32_const()
}
fn bf16_elem(b: &[u8], j: usize) -> f32 {
    f32::from_bits(u32::from(u16::from_le_bytes([b[2 * j], b[2 * j + 1]])) << 16)
}

float_kernel!(f32_tile, f32_row, 4, load_f32x8, f32_elem);
float_kernel!(f16_tile, f16_row, 2, load_f16x8, f16_elem);
float_kernel!(bf16_tile, bf16_row, 2, load_bf16x8, bf16_elem);

fn dot_f32(x: &[f32], y: &[f32]) -> f32 {
    dot_by_row(x, y, f32_row)
}

fn dot_f16(x: &[f16], y: &[f16]) -> f32 {
    dot_by_row(x, y, f16_row)
}
