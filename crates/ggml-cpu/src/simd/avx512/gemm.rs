//! `C += A x B` in f32 with a register tile of 8 rows x 32 columns (16
//! accumulators): each element of C takes one FMA per step of the inner
//! dimension, in order, so that it gets the same bits as the scalar
//! kernel's `mul_add` chain. Column remainders go through masked loads and
//! stores, so every column is in a register tile.

use std::arch::x86_64::*;

use crate::simd::Kernels;

/// Installs the f32 matrix product.
pub(super) fn install(k: &mut Kernels) {
    k.gemm_f32 = gemm_f32;
}

/// Rows of a register tile.
const RM: usize = 8;

fn gemm_f32(c: &mut [f32], a: &[f32], b: &[f32], m: usize, k: usize, n: usize) {
    crate::simd::check_gemm_f32(c, a, b, m, k, n);
    // SAFETY: installed only on CPUs with AVX-512 F/BW/VL/DQ; the slices
    // hold m x n, m x k and k x n elements (checked).
    unsafe { gemm_avx512(c, a, b, m, k, n) }
}

/// # Safety
/// AVX-512 F; `c`, `a`, `b` hold `m x n`, `m x k`, `k x n` elements.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn gemm_avx512(c: &mut [f32], a: &[f32], b: &[f32], m: usize, k: usize, n: usize) {
    let mut i = 0;
    while i < m {
        let rows = (m - i).min(RM);
        let mut j = 0;
        while j < n {
            let w = (n - j).min(32);
            // Lanes of the tile's two registers that hold columns.
            let lanes = |v: usize| -> __mmask16 {
                let have = w.saturating_sub(16 * v).min(16);
                ((1u32 << have) - 1) as __mmask16
            };
            let masks = [lanes(0), lanes(1)];
            // SAFETY: rows i..i + rows and the columns the masks select
            // lie inside the matrices.
            unsafe {
                match (rows, w > 16) {
                    (8, true) => tile::<8, 2>(c, a, b, (i, j), masks, k, n),
                    (8, false) => tile::<8, 1>(c, a, b, (i, j), masks, k, n),
                    (7, true) => tile::<7, 2>(c, a, b, (i, j), masks, k, n),
                    (7, false) => tile::<7, 1>(c, a, b, (i, j), masks, k, n),
                    (6, true) => tile::<6, 2>(c, a, b, (i, j), masks, k, n),
                    (6, false) => tile::<6, 1>(c, a, b, (i, j), masks, k, n),
                    (5, true) => tile::<5, 2>(c, a, b, (i, j), masks, k, n),
                    (5, false) => tile::<5, 1>(c, a, b, (i, j), masks, k, n),
                    (4, true) => tile::<4, 2>(c, a, b, (i, j), masks, k, n),
                    (4, false) => tile::<4, 1>(c, a, b, (i, j), masks, k, n),
                    (3, true) => tile::<3, 2>(c, a, b, (i, j), masks, k, n),
                    (3, false) => tile::<3, 1>(c, a, b, (i, j), masks, k, n),
                    (2, true) => tile::<2, 2>(c, a, b, (i, j), masks, k, n),
                    (2, false) => tile::<2, 1>(c, a, b, (i, j), masks, k, n),
                    (_, true) => tile::<1, 2>(c, a, b, (i, j), masks, k, n),
                    (_, false) => tile::<1, 1>(c, a, b, (i, j), masks, k, n),
                }
            }
            j += w;
        }
        i += rows;
    }
}

/// Rows `i..i + R` of C, the columns from `j` that `masks` select in `V`
/// registers of 16.
///
/// # Safety
/// AVX-512 F; those rows and columns lie inside the matrices.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn tile<const R: usize, const V: usize>(
    c: &mut [f32],
    a: &[f32],
    b: &[f32],
    (i, j): (usize, usize),
    masks: [__mmask16; 2],
    k: usize,
    n: usize,
) {
    // SAFETY: every address read or written below is a selected column of
    // a row inside the matrices (caller); masked-off lanes are not
    // accessed.
    unsafe {
        let (cp, ap, bp) = (c.as_mut_ptr(), a.as_ptr(), b.as_ptr());
        let mut acc = [[_mm512_setzero_ps(); V]; R];
        for (r, row) in acc.iter_mut().enumerate() {
            for (v, x) in row.iter_mut().enumerate() {
                *x = _mm512_maskz_loadu_ps(masks[v], cp.add((i + r) * n + j + 16 * v));
            }
        }
        for kk in 0..k {
            let bv: [__m512; V] = std::array::from_fn(|v| {
                _mm512_maskz_loadu_ps(masks[v], bp.add(kk * n + j + 16 * v))
            });
            for (r, row) in acc.iter_mut().enumerate() {
                let av = _mm512_set1_ps(*ap.add((i + r) * k + kk));
                for (v, x) in row.iter_mut().enumerate() {
                    *x = _mm512_fmadd_ps(av, bv[v], *x);
                }
            }
        }
        for (r, row) in acc.iter().enumerate() {
            for (v, x) in row.iter().enumerate() {
                _mm512_mask_storeu_ps(cp.add((i + r) * n + j + 16 * v), masks[v], *x);
            }
        }
    }
}
