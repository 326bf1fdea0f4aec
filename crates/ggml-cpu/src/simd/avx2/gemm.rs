//! `C += A x B` in f32 with a register tile of 4 rows x 16 columns: each
//! element of C takes one FMA per step of the inner dimension, in order, so
//! that it gets the same bits as the scalar kernel's `mul_add` chain.

use std::arch::x86_64::*;

use crate::simd::Kernels;

/// Installs the f32 matrix product.
pub(super) fn install(k: &mut Kernels) {
    k.gemm_f32 = gemm_f32;
}

/// Rows of a register tile.
const RM: usize = 4;

fn gemm_f32(c: &mut [f32], a: &[f32], b: &[f32], m: usize, k: usize, n: usize) {
    crate::simd::check_gemm_f32(c, a, b, m, k, n);
    // SAFETY: installed only on CPUs with AVX2, FMA and F16C; the slices
    // hold m x n, m x k and k x n elements (checked).
    unsafe { gemm_avx2(c, a, b, m, k, n) }
}

/// # Safety
/// AVX2 and FMA; `c`, `a`, `b` hold `m x n`, `m x k`, `k x n` elements.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn gemm_avx2(c: &mut [f32], a: &[f32], b: &[f32], m: usize, k: usize, n: usize) {
    let mut i = 0;
    while i < m {
        let rows = (m - i).min(RM);
        // SAFETY: rows i..i + rows lie inside the matrices (caller): tiles
        // of 16 columns, then of 8.
        let j = unsafe {
            let j = tiles::<2>(c, a, b, (i, rows), 0, k, n);
            tiles::<1>(c, a, b, (i, rows), j, k, n)
        };
        for r in i..i + rows {
            for jj in j..n {
                let mut acc = c[r * n + jj];
                for kk in 0..k {
                    acc = a[r * k + kk].mul_add(b[kk * n + jj], acc);
                }
                c[r * n + jj] = acc;
            }
        }
        i += rows;
    }
}

/// Rows `i..i + rows` of C from column `j` on, `8 V` columns a tile while
/// a whole tile fits; returns the first column left.
///
/// # Safety
/// AVX2 and FMA; rows `i..i + rows` (at most [`RM`]) lie inside the
/// matrices.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tiles<const V: usize>(
    c: &mut [f32],
    a: &[f32],
    b: &[f32],
    (i, rows): (usize, usize),
    mut j: usize,
    k: usize,
    n: usize,
) -> usize {
    while j + 8 * V <= n {
        // SAFETY: rows i..i + rows and columns j..j + 8 V lie inside the
        // matrices (caller, and the loop's bound).
        unsafe {
            match rows {
                4 => tile::<4, V>(c, a, b, i, j, k, n),
                3 => tile::<3, V>(c, a, b, i, j, k, n),
                2 => tile::<2, V>(c, a, b, i, j, k, n),
                _ => tile::<1, V>(c, a, b, i, j, k, n),
            }
        }
        j += 8 * V;
    }
    j
}

/// Rows `i..i + R`, columns `j..j + 8 V` of C.
///
/// # Safety
/// AVX2 and FMA; those rows and columns lie inside the matrices.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile<const R: usize, const V: usize>(
    c: &mut [f32],
    a: &[f32],
    b: &[f32],
    i: usize,
    j: usize,
    k: usize,
    n: usize,
) {
    // SAFETY: every address below is inside the matrices (caller).
    unsafe {
        let cp = c.as_mut_ptr();
        let mut acc = [[_mm256_setzero_ps(); V]; R];
        for (r, row) in acc.iter_mut().enumerate() {
            for (v, x) in row.iter_mut().enumerate() {
                *x = _mm256_loadu_ps(cp.add((i + r) * n + j + 8 * v));
            }
        }
        for kk in 0..k {
            let bv: [__m256; V] =
                std::array::from_fn(|v| _mm256_loadu_ps(b.as_ptr().add(kk * n + j + 8 * v)));
            for (r, row) in acc.iter_mut().enumerate() {
                let av = _mm256_set1_ps(*a.get_unchecked((i + r) * k + kk));
                for (v, x) in row.iter_mut().enumerate() {
                    *x = _mm256_fmadd_ps(av, bv[v], *x);
                }
            }
        }
        for (r, row) in acc.iter().enumerate() {
            for (v, x) in row.iter().enumerate() {
                _mm256_storeu_ps(cp.add((i + r) * n + j + 8 * v), *x);
            }
        }
    }
}
