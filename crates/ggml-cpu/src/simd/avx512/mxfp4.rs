//! MXFP4 against Q8_0, two blocks per 512-bit register: the low half
//! accumulates the even blocks and the high half the odd ones, which are
//! exactly the two sets of eight lanes of the AVX2 kernel (and of ggml's),
//! so both levels give the same bits.

use std::arch::x86_64::*;

use ggml_core::Type;

use super::{f16_at, join, load256};
use crate::simd::avx2::{dec_mxfp4, finish_tile, MXFP4_BYTES as BLOCK_BYTES};
use crate::simd::{by_tile, check_tile, Kernels};

/// Installs the MXFP4 row kernel.
pub(super) fn install(k: &mut Kernels) {
    k.set(Type::MXFP4, mxfp4_row);
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn mxfp4_tile<const R: usize, const C: usize>(
    n: usize,
    xs: &[&[u8]],
    ys: &[&[u8]],
    out: &mut [f32],
) {
    let nb = n / 32;
    check_tile(nb, xs, BLOCK_BYTES, ys, 34, out);
    let mut acc = [[_mm512_setzero_ps(); C]; R];
    let pf = crate::simd::RowPrefetch::new(xs);
    let pairs = nb - nb % 2;
    let ones = _mm512_set1_epi16(1);
    let mut ib = 0;
    while ib < pairs {
        pf.ahead(xs, ib * BLOCK_BYTES, 2 * BLOCK_BYTES);
        let mut dx = [(0f32, 0f32); R];
        let mut ax = [_mm512_setzero_si512(); R];
        let mut neg = [0u64; R];
        for r in 0..R {
            // SAFETY: blocks ib and ib + 1 of every weight row are inside
            // it (checked).
            let ((d0, q0), (d1, q1)) = unsafe {
                let xp = xs[r].as_ptr().add(ib * BLOCK_BYTES);
                (dec_mxfp4(xp), dec_mxfp4(xp.add(BLOCK_BYTES)))
            };
            let q = join(q0, q1);
            ax[r] = _mm512_abs_epi8(q);
            neg[r] = _mm512_movepi8_mask(q);
            dx[r] = (d0, d1);
        }
        for c in 0..C {
            // SAFETY: blocks ib and ib + 1 of every activation row.
            let (dy0, dy1, qy) = unsafe {
                let yb = ys[c].as_ptr().add(ib * 34);
                (
                    f16_at(yb),
                    f16_at(yb.add(34)),
                    join(load256(yb.add(2)), load256(yb.add(36))),
                )
            };
            for r in 0..R {
                let sy = _mm512_mask_sub_epi8(qy, neg[r], _mm512_setzero_si512(), qy);
                let p = _mm512_madd_epi16(_mm512_maddubs_epi16(ax[r], sy), ones);
                // The scale products of ggml's order (dy * dx), one per half.
                let d = _mm512_insertf32x8(
                    _mm512_set1_ps(dy0 * dx[r].0),
                    _mm256_set1_ps(dy1 * dx[r].1),
                    1,
                );
                acc[r][c] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(p), acc[r][c]);
            }
        }
        ib += 2;
    }
    // The even blocks' lanes and the odd ones', added.
    let lanes = std::array::from_fn(|r| {
        std::array::from_fn(|c| {
            let v: __m512 = acc[r][c];
            _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps::<1>(v))
        })
    });
    // SAFETY: the rows hold nb blocks (checked above).
    unsafe { finish_tile::<R, C>(nb, xs, ys, lanes, out) }
}

fn mxfp4_row(n: usize, xs: &[&[u8]], ys: &[&[u8]], out: &mut [f32]) {
    // SAFETY: installed only on CPUs with AVX-512 F/BW/VL/DQ.
    unsafe { by_tile!(mxfp4_tile, n, xs, ys, out) }
}
