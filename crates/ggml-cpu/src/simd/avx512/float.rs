//! Float rows (f32, f16), sixteen lanes a step.

use std::arch::x86_64::*;

use ggml_core::Type;

use super::hsum256;
use crate::simd::avx2::{f16_elem, f32_elem, load_f16x8, load_f32x8};
use crate::simd::{by_tile, check_tile, Kernels};

/// Installs the float kernels.
pub(super) fn install(k: &mut Kernels) {
    k.set(Type::F32, f32_row);
    k.set(Type::F16, f16_row);
}

macro_rules! float_kernel {
    ($tile:ident, $row:ident, $width:expr, $load:ident, $load8:ident, $scalar:path) => {
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
        unsafe fn $tile<const R: usize, const C: usize>(
            n: usize,
            xs: &[&[u8]],
            ys: &[&[u8]],
            out: &mut [f32],
        ) {
            check_tile(n, xs, $width, ys, $width, out);
            // One accumulator per pair, whatever the tile, so that a pair's
            // result does not depend on the tile it was computed in.
            let mut acc = [[_mm512_setzero_ps(); C]; R];
            let pf = crate::simd::RowPrefetch::new(xs);
            let mut i = 0;
            while i + 16 <= n {
                let o = i * $width;
                pf.ahead(xs, o, 16 * $width);
                let xv: [__m512; R] = std::array::from_fn(|r| {
                    // SAFETY: elements i..i+16 are inside every row (checked).
                    unsafe { $load(xs[r].as_ptr().add(o)) }
                });
                for c in 0..C {
                    // SAFETY: as above.
                    let y = unsafe { $load(ys[c].as_ptr().add(o)) };
                    for r in 0..R {
                        acc[r][c] = _mm512_fmadd_ps(xv[r], y, acc[r][c]);
                    }
                }
                i += 16;
            }
            // A last group of 8 in 256 bits (short rows: attention heads of 8).
            let mut acc8 = [[_mm256_setzero_ps(); C]; R];
            if i + 8 <= n {
                let o = i * $width;
                let xv: [__m256; R] = std::array::from_fn(|r| {
                    // SAFETY: elements i..i+8 are inside every row (checked).
                    unsafe { $load8(xs[r].as_ptr().add(o)) }
                });
                for c in 0..C {
                    // SAFETY: as above.
                    let y = unsafe { $load8(ys[c].as_ptr().add(o)) };
                    for r in 0..R {
                        acc8[r][c] = _mm256_mul_ps(xv[r], y);
                    }
                }
                i += 8;
            }
            for r in 0..R {
                for c in 0..C {
                    let mut s = _mm512_reduce_add_ps(acc[r][c]) + hsum256(acc8[r][c]);
                    for j in i..n {
                        s += $scalar(xs[r], j) * $scalar(ys[c], j);
                    }
                    out[r * C + c] = s;
                }
            }
        }
        fn $row(n: usize, xs: &[&[u8]], ys: &[&[u8]], out: &mut [f32]) {
            // SAFETY: installed only on CPUs with AVX-512 F/BW/VL/DQ.
            unsafe { by_tile!($tile, n, xs, ys, out) }
        }
    };
}

/// # Safety
/// `p` must be readable for 64 bytes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn load_f32x16(p: *const u8) -> __m512 {
    // SAFETY: 64 readable bytes (caller).
    unsafe { _mm512_loadu_ps(p as *const f32) }
}

/// # Safety
/// `p` must be readable for 32 bytes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn load_f16x16(p: *const u8) -> __m512 {
    // SAFETY: 32 readable bytes (caller).
    _mm512_cvtph_ps(unsafe { _mm256_loadu_si256(p as *const __m256i) })
}

float_kernel!(f32_tile, f32_row, 4, load_f32x16, load_f32x8, f32_elem);
float_kernel!(f16_tile, f16_row, 2, load_f16x16, load_f16x8, f16_elem);
