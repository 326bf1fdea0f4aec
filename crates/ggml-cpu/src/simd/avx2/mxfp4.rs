//! MXFP4 against Q8_0, with the f32 operations of ggml's AVX2 kernel:
//! the even blocks and the odd blocks of a pair accumulate in two sets of
//! eight lanes (one fused multiply-add of the block's scale product and the
//! exact integer sum of the weights in that lane), the two sets are added
//! and summed across lanes, and a last odd block is added after that as a
//! scalar product. The same rows therefore give llama.cpp's dot bit for
//! bit; the AVX-512 kernel keeps this order too.

use std::arch::x86_64::*;

use ggml_core::quants::{self, KVALUES_MXFP4};
use ggml_core::Type;

use super::{dot_ss, f16_at, hsum, load, nibbles};
use crate::simd::{by_tile, check_tile, Kernels};

/// Bytes of one block: the E8M0 scale and 16 bytes of nibbles.
pub(in crate::simd) const BLOCK_BYTES: usize = 17;

/// Installs the MXFP4 row kernel.
pub(super) fn install(k: &mut Kernels) {
    k.set(Type::MXFP4, mxfp4_row);
}

/// A block's scale (halved, as ggml stores the FP4 values doubled) and its
/// 32 signed levels from the doubled FP4 table.
///
/// # Safety
/// `p` must be readable for 17 bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::simd) unsafe fn dec_mxfp4(p: *const u8) -> (f32, __m256i) {
    // SAFETY: the 16-byte table is a static array; the block has 17 bytes.
    unsafe {
        let t = _mm_loadu_si128(KVALUES_MXFP4.as_ptr() as *const __m128i);
        let table = _mm256_set_m128i(t, t);
        (
            quants::e8m0_to_fp32_half(*p),
            _mm256_shuffle_epi8(table, nibbles(p.add(1))),
        )
    }
}

/// The sum of the eight i32 lanes of `v` (exact: block sums are small).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::simd) fn hsum_i32(v: __m256i) -> i32 {
    let r = _mm_add_epi32(_mm256_extracti128_si256(v, 1), _mm256_castsi256_si128(v));
    let r = _mm_add_epi32(r, _mm_unpackhi_epi64(r, r));
    let r = _mm_add_epi32(r, _mm_shuffle_epi32::<0b01>(r));
    _mm_cvtsi128_si32(r)
}

/// The last block of a row with an odd number of blocks, added to the
/// lane sums `s` as ggml does: `s + (dy * dx) * sumi`.
///
/// # Safety
/// `xb` must be readable for 17 bytes and `yb` for 34.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn add_last_block(s: f32, xb: *const u8, yb: *const u8) -> f32 {
    // SAFETY: one block of each row (caller).
    unsafe {
        let (dx, q) = dec_mxfp4(xb);
        let sumi = hsum_i32(dot_ss(_mm256_sign_epi8(q, q), q, load(yb.add(2))));
        s + (f16_at(yb) * dx) * sumi as f32
    }
}

/// The end of a tile of both levels: each (row, column)'s even and odd
/// lane sets, already added into `lanes[r][c]`, summed across lanes, then
/// the last block of rows with an odd number of blocks `nb` added as a
/// scalar product; into `out[r * C + c]`.
///
/// # Safety
/// Every `xs[r]` and `ys[c]` must hold `nb` blocks (checked by the
/// tile's `check_tile`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::simd) unsafe fn finish_tile<const R: usize, const C: usize>(
    nb: usize,
    xs: &[&[u8]],
    ys: &[&[u8]],
    lanes: [[__m256; C]; R],
    out: &mut [f32],
) {
    let pairs = nb - nb % 2;
    for r in 0..R {
        for c in 0..C {
            let mut s = hsum(lanes[r][c]);
            if pairs < nb {
                // SAFETY: the last block of both rows is inside them
                // (caller).
                s = unsafe {
                    add_last_block(
                        s,
                        xs[r].as_ptr().add(pairs * BLOCK_BYTES),
                        ys[c].as_ptr().add(pairs * 34),
                    )
                };
            }
            out[r * C + c] = s;
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn mxfp4_tile<const R: usize, const C: usize>(
    n: usize,
    xs: &[&[u8]],
    ys: &[&[u8]],
    out: &mut [f32],
) {
    let nb = n / 32;
    check_tile(nb, xs, BLOCK_BYTES, ys, 34, out);
    // [even blocks, odd blocks] of every (row, column).
    let mut acc = [[[_mm256_setzero_ps(); C]; R]; 2];
    let pf = crate::simd::RowPrefetch::new(xs);
    let pairs = nb - nb % 2;
    for ib in 0..pairs {
        if ib % 2 == 0 {
            pf.ahead(xs, ib * BLOCK_BYTES, 2 * BLOCK_BYTES);
        }
        // SAFETY: block ib of every weight row is inside it (checked).
        let dq: [(f32, __m256i); R] =
            unsafe { std::array::from_fn(|r| dec_mxfp4(xs[r].as_ptr().add(ib * BLOCK_BYTES))) };
        let a = &mut acc[ib % 2];
        for c in 0..C {
            // SAFETY: block ib of every activation row is inside it.
            let (dy, y) = unsafe {
                let yb = ys[c].as_ptr().add(ib * 34);
                (f16_at(yb), load(yb.add(2)))
            };
            for r in 0..R {
                let (dx, q) = dq[r];
                let p = dot_ss(_mm256_sign_epi8(q, q), q, y);
                let d = _mm256_set1_ps(dy * dx);
                a[r][c] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), a[r][c]);
            }
        }
    }
    let lanes =
        std::array::from_fn(|r| std::array::from_fn(|c| _mm256_add_ps(acc[0][r][c], acc[1][r][c])));
    // SAFETY: the rows hold nb blocks (checked above).
    unsafe { finish_tile::<R, C>(nb, xs, ys, lanes, out) }
}

fn mxfp4_row(n: usize, xs: &[&[u8]], ys: &[&[u8]], out: &mut [f32]) {
    // SAFETY: installed only on CPUs with AVX2, FMA and F16C.
    unsafe { by_tile!(mxfp4_tile, n, xs, ys, out) }
}
