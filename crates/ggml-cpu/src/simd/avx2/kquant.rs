//! The K-quant super-blocks (Q2_K .. Q6_K, IQ4_XS) against Q8_K.

use std::arch::x86_64::*;

use ggml_core::quants::KVALUES_IQ4NL;
use ggml_core::Type;

use super::{f16_at, hsum, load, nibbles};
use crate::simd::avx512::k4_scale_bytes;
use crate::simd::scalar::{Q8K_BSUMS, Q8K_BYTES, Q8K_QS};
use crate::simd::{by_tile, check_tile, Kernels};

/// Installs the K-quant kernels.
pub(super) fn install(k: &mut Kernels) {
    k.set(Type::Q4_K, q4_k_row);
    k.set(Type::Q5_K, q5_k_row);
    k.set(Type::Q6_K, q6_k_row);
    k.set(Type::Q2_K, q2_k_row);
    k.set(Type::Q3_K, q3_k_row);
    k.set(Type::IQ4_XS, iq4_xs_row);
}

/// The scales and mins of a Q4_K / Q5_K block (its 12 bytes at `p`): the
/// 8 scales as i16 in both 128-bit lanes, and the mins as i16 duplicated
/// per pair of 16-sums (`m0, m0, m1, m1, ..`) for `madd` with the Q8_K
/// `bsums`. The bytes are unpacked in general registers.
///
/// # Safety
/// `p` must be readable for 12 bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn k4_scales(p: *const u8) -> (__m256i, __m256i) {
    // SAFETY: 12 readable bytes (caller).
    let b = unsafe { std::slice::from_raw_parts(p, 12) };
    let (sc, m) = k4_scale_bytes(b);
    let sc = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(sc as i64));
    let dup = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    let m2 = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(_mm_cvtsi64_si128(m as i64), dup));
    (_mm256_set_m128i(sc, sc), m2)
}

/// A `VPSHUFB` control that puts word `g` of each 128-bit lane in every
/// word of the lane.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn word_to_all(g: usize) -> __m256i {
    let w = ((2 * g as i16 + 1) << 8) | (2 * g as i16);
    _mm256_set1_epi16(w)
}

/// Q4_K / Q5_K: 8 groups of 32 with 6-bit scales and mins.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn qk_tile<const R: usize, const C: usize, const FIVE: bool>(
    n: usize,
    xs: &[&[u8]],
    ys: &[&[u8]],
    out: &mut [f32],
) {
    let bytes = if FIVE { 176 } else { 144 };
    let nb = n / 256;
    check_tile(nb, xs, bytes, ys, Q8K_BYTES, out);
    let mut acc = [[_mm256_setzero_ps(); C]; R];
    let mut accm = [[_mm256_setzero_ps(); C]; R];
    let m4 = _mm256_set1_epi8(0x0f);
    let one = _mm256_set1_epi8(1);
    let pf = crate::simd::RowPrefetch::new(xs);
    for ib in 0..nb {
        let mut d = [_mm256_setzero_ps(); R];
        let mut dmin = [_mm256_setzero_ps(); R];
        let mut sc = [_mm256_setzero_si256(); R];
        let mut mins = [_mm256_setzero_si256(); R];
        pf.ahead(xs, ib * bytes, bytes);
        for r in 0..R {
            // SAFETY: the 16-byte header of block ib of the row (checked).
            unsafe {
                let xb = xs[r].as_ptr().add(ib * bytes);
                d[r] = _mm256_set1_ps(f16_at(xb));
                dmin[r] = _mm256_set1_ps(f16_at(xb.add(2)));
                (sc[r], mins[r]) = k4_scales(xb.add(4));
            }
        }
        for c in 0..C {
            // SAFETY: the Q8_K block ib of every activation row (checked).
            let (dyc, bsums) = unsafe {
                let yb = ys[c].as_ptr().add(ib * Q8K_BYTES);
                (
                    _mm256_set1_ps((yb as *const f32).read_unaligned()),
                    load(yb.add(Q8K_BSUMS)),
                )
            };
            for r in 0..R {
                let prod = _mm256_cvtepi32_ps(_mm256_madd_epi16(mins[r], bsums));
                accm[r][c] = _mm256_fmadd_ps(_mm256_mul_ps(dmin[r], dyc), prod, accm[r][c]);
            }
        }
        let mut sumi = [[_mm256_setzero_si256(); C]; R];
        for j in 0..4 {
            let mut lo = [_mm256_setzero_si256(); R];
            let mut hi = [_mm256_setzero_si256(); R];
            for r in 0..R {
                let xb = xs[r].as_ptr();
                let qo = ib * bytes + if FIVE { 48 } else { 16 } + 32 * j;
                // SAFETY: 32 bytes of nibbles of chunk j inside block ib.
                let q = unsafe { load(xb.add(qo)) };
                lo[r] = _mm256_and_si256(q, m4);
                hi[r] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
                if FIVE {
                    // SAFETY: the 32 bytes of high bits at offset 16 of block ib.
                    let hbits = unsafe { load(xb.add(ib * bytes + 16)) };
                    let b0 = _mm256_and_si256(
                        _mm256_srl_epi16(hbits, _mm_cvtsi32_si128(2 * j as i32)),
                        one,
                    );
                    let b1 = _mm256_and_si256(
                        _mm256_srl_epi16(hbits, _mm_cvtsi32_si128(2 * j as i32 + 1)),
                        one,
                    );
                    lo[r] = _mm256_or_si256(lo[r], _mm256_slli_epi16(b0, 4));
                    hi[r] = _mm256_or_si256(hi[r], _mm256_slli_epi16(b1, 4));
                }
            }
            for c in 0..C {
                // SAFETY: 64 quants of chunk j inside the Q8_K block (checked).
                let (yl, yh) = unsafe {
                    let yq = ys[c].as_ptr().add(ib * Q8K_BYTES + Q8K_QS + 64 * j);
                    (load(yq), load(yq.add(32)))
                };
                for r in 0..R {
                    let pl = _mm256_madd_epi16(
                        _mm256_maddubs_epi16(lo[r], yl),
                        _mm256_shuffle_epi8(sc[r], word_to_all(2 * j)),
                    );
                    let ph = _mm256_madd_epi16(
                        _mm256_maddubs_epi16(hi[r], yh),
                        _mm256_shuffle_epi8(sc[r], word_to_all(2 * j + 1)),
                    );
                    sumi[r][c] = _mm256_add_epi32(sumi[r][c], _mm256_add_epi32(pl, ph));
                }
            }
        }
        // SAFETY: block ib of every column (checked).
        unsafe { add_block_sums(&mut acc, &d, &sumi, ys, ib) };
    }
    for r in 0..R {
        for c in 0..C {
            out[r * C + c] = hsum(acc[r][c]) - hsum(accm[r][c]);
        }
    }
}

fn q4_k_row(n: usize, xs: &[&[u8]], ys: &[&[u8]], out: &mut [f32]) {
    // SAFETY: installed only on CPUs with AVX2, FMA and F16C.
    unsafe { by_tile!(qk_tile[false], n, xs, ys, out) }
}
fn q5_k_row(n: usize, xs: &[&[u8]], ys: &[&[u8]], out: &mut [f32]) {
    // SAFETY: installed only on CPUs with AVX2, FMA and F16C.
    unsafe { by_tile!(qk_tile[true], n, xs, ys, out) }
}

/// Q6_K: 16 groups of 16, signed 8-bit scales, levels `q - 32`.
///
/// Per half block, each row is decoded and then multiplied by every
/// column before the next row is decoded, so that a row's levels and
/// scales (8 registers) stay in registers: decoding all the rows first
/// spilled them. The columns' 32 x pair sums (`ym`) are computed once per
/// half.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q6_k_tile<const R: usize, const C: usize>(
    n: usize,
    xs: &[&[u8]],
    ys: &[&[u8]],
    out: &mut [f32],
) {
    let nb = n / 256;
    check_tile(nb, xs, 210, ys, Q8K_BYTES, out);
    let mut acc = [[_mm256_setzero_ps(); C]; R];
    let m4 = _mm256_set1_epi8(0x0f);
    let m30 = _mm256_set1_epi8(0x30);
    let m32 = _mm256_set1_epi8(32);
    // Shuffle controls that put word 2k of a lane's 8 scales in every
    // word of the low lane and word 2k + 1 in every word of the high lane.
    // Opaque to the compiler, which otherwise sees that the scales are the
    // same 128 bits twice and replaces each shuffle by three.
    let pick: [__m256i; 4] = std::hint::black_box(std::array::from_fn(|k| {
        let word = |w: i16| _mm_set1_epi16(((2 * w + 1) << 8) | (2 * w));
        _mm256_set_m128i(word(2 * k as i16 + 1), word(2 * k as i16))
    }));
    let pf = crate::simd::RowPrefetch::new(xs);
    for ib in 0..nb {
        let mut d = [_mm256_setzero_ps(); R];
        // Several rows are streamed at once: ask for what follows
        // explicitly, since a block's scales sit at its end.
        pf.ahead(xs, ib * 210, 210);
        for r in 0..R {
            // SAFETY: d (2 bytes at 208) is inside block ib of the row
            // (checked).
            d[r] = _mm256_set1_ps(unsafe { f16_at(xs[r].as_ptr().add(ib * 210 + 208)) });
        }
        let mut sumi = [[_mm256_setzero_si256(); C]; R];
        for h in 0..2 {
            // SAFETY: 128 quants at 128h inside every Q8_K block ib
            // (checked).
            let yq: [*const u8; C] = std::array::from_fn(|c| unsafe {
                ys[c].as_ptr().add(ib * Q8K_BYTES + Q8K_QS + 128 * h)
            });
            let ym: [[__m256i; 4]; C] = std::array::from_fn(|c| {
                std::array::from_fn(|k| {
                    // SAFETY: 32 quants at 32k inside that half.
                    unsafe { _mm256_maddubs_epi16(m32, load(yq[c].add(32 * k))) }
                })
            });
            for r in 0..R {
                // SAFETY: ql (64 bytes at 64h), qh (32 bytes at 128 + 32h)
                // and the half's 8 scales (at 192 + 8h) are inside block
                // ib of the row.
                let (l0, l1, hb, scales) = unsafe {
                    let p = xs[r].as_ptr().add(ib * 210);
                    (
                        load(p.add(64 * h)),
                        load(p.add(64 * h + 32)),
                        load(p.add(128 + 32 * h)),
                        _mm_cvtepi8_epi16(_mm_loadl_epi64(p.add(192 + 8 * h) as *const __m128i)),
                    )
                };
                let scales = _mm256_set_m128i(scales, scales);
                // Bits 2i, 2i + 1 of each qh byte at bits 4, 5 (16-bit
                // shifts: what crosses into the neighbouring byte is
                // masked off).
                let q = [
                    _mm256_or_si256(
                        _mm256_and_si256(l0, m4),
                        _mm256_and_si256(_mm256_slli_epi16::<4>(hb), m30),
                    ),
                    _mm256_or_si256(
                        _mm256_and_si256(l1, m4),
                        _mm256_and_si256(_mm256_slli_epi16::<2>(hb), m30),
                    ),
                    _mm256_or_si256(
                        _mm256_and_si256(_mm256_srli_epi16::<4>(l0), m4),
                        _mm256_and_si256(hb, m30),
                    ),
                    _mm256_or_si256(
                        _mm256_and_si256(_mm256_srli_epi16::<4>(l1), m4),
                        _mm256_and_si256(_mm256_srli_epi16::<2>(hb), m30),
                    ),
                ];
                for c in 0..C {
                    // Each row reads the activations again (from L1): the
                    // compiler, seeing the same loads, would keep them in
                    // registers it does not have and copy them to the stack.
                    let yc = std::hint::black_box(yq[c]);
                    for k in 0..4 {
                        // SAFETY: 32 quants at 32k inside the half.
                        let y = unsafe { load(yc.add(32 * k)) };
                        let p = _mm256_sub_epi16(_mm256_maddubs_epi16(q[k], y), ym[c][k]);
                        // Scales 8h + 2k (low lane) and 8h + 2k + 1 (high
                        // lane).
                        let s = _mm256_shuffle_epi8(scales, pick[k]);
                        sumi[r][c] = _mm256_add_epi32(sumi[r][c], _mm256_madd_epi16(p, s));
                    }
                }
            }
        }
        // SAFETY: block ib of every column (checked).
        unsafe { add_block_sums(&mut acc, &d, &sumi, ys, ib) };
    }
    for r in 0..R {
        for c in 0..C {
            out[r * C + c] = hsum(acc[r][c]);
        }
    }
}

fn q6_k_row(n: usize, xs: &[&[u8]], ys: &[&[u8]], out: &mut [f32]) {
    // SAFETY: installed only on CPUs with AVX2, FMA and F16C.
    unsafe { by_tile!(q6_k_tile, n, xs, ys, out) }
}

/// Adds to `acc[r][c]` the integer sums `sumi[r][c]` of Q8_K block `ib`
/// times the row's scale `d[r]` and the column's block scale.
///
/// # Safety
/// Every column holds Q8_K block `ib`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn add_block_sums<const R: usize, const C: usize>(
    acc: &mut [[__m256; C]; R],
    d: &[__m256; R],
    sumi: &[[__m256i; C]; R],
    ys: &[&[u8]],
    ib: usize,
) {
    for c in 0..C {
        // SAFETY: the scale of the Q8_K block ib (caller).
        let dy = unsafe { (ys[c].as_ptr().add(ib * Q8K_BYTES) as *const f32).read_unaligned() };
        let dy = _mm256_set1_ps(dy);
        for r in 0..R {
            acc[r][c] = _mm256_fmadd_ps(
                _mm256_mul_ps(d[r], dy),
                _mm256_cvtepi32_ps(sumi[r][c]),
                acc[r][c],
            );
        }
    }
}

/// Q2_K: 16 groups of 16, 2-bit levels, 4-bit scales and mins.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q2_k_tile<const R: usize, const C: usize>(
    n: usize,
    xs: &[&[u8]],
    ys: &[&[u8]],
    out: &mut [f32],
) {
    let nb = n / 256;
    check_tile(nb, xs, 84, ys, Q8K_BYTES, out);
    let mut acc = [[_mm256_setzero_ps(); C]; R];
    let mut accm = [[_mm256_setzero_ps(); C]; R];
    let m3 = _mm256_set1_epi8(3);
    let pf = crate::simd::RowPrefetch::new(xs);
    for ib in 0..nb {
        pf.ahead(xs, ib * 84, 84);
        let mut d = [_mm256_setzero_ps(); R];
        let mut dmin = [_mm256_setzero_ps(); R];
        // The 16 scales of each row as i16 (scales 0..8 in the low lane,
        // 8..16 in the high one), and the 16 mins.
        let mut sc = [_mm256_setzero_si256(); R];
        let mut mins = [_mm256_setzero_si256(); R];
        for r in 0..R {
            let xb = &xs[r][ib * 84..(ib + 1) * 84];
            // SAFETY: d and dmin at 80 of block ib.
            let (dr, mr) = unsafe { (f16_at(xb.as_ptr().add(80)), f16_at(xb.as_ptr().add(82))) };
            d[r] = _mm256_set1_ps(dr);
            dmin[r] = _mm256_set1_ps(mr);
            // SAFETY: the 16 scale bytes at the start of block ib.
            let b = unsafe { _mm_loadu_si128(xb.as_ptr() as *const __m128i) };
            let m4 = _mm_set1_epi8(0x0f);
            sc[r] = _mm256_cvtepu8_epi16(_mm_and_si128(b, m4));
            mins[r] = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16::<4>(b), m4));
        }
        for c in 0..C {
            // SAFETY: the Q8_K block ib of every activation row (checked).
            let (dyc, bsums) = unsafe {
                let yb = ys[c].as_ptr().add(ib * Q8K_BYTES);
                (
                    _mm256_set1_ps((yb as *const f32).read_unaligned()),
                    load(yb.add(Q8K_BSUMS)),
                )
            };
            for r in 0..R {
                let prod = _mm256_cvtepi32_ps(_mm256_madd_epi16(mins[r], bsums));
                accm[r][c] = _mm256_fmadd_ps(_mm256_mul_ps(dmin[r], dyc), prod, accm[r][c]);
            }
        }
        let mut sumi = [[_mm256_setzero_si256(); C]; R];
        for h in 0..2 {
            // SAFETY: 32 bytes of 2-bit levels at 16 + 32h of block ib.
            let q: [__m256i; R] =
                std::array::from_fn(|r| unsafe { load(xs[r].as_ptr().add(ib * 84 + 16 + 32 * h)) });
            let sh: [__m256i; R] = std::array::from_fn(|r| scales_half(sc[r], h));
            for shift in 0..4 {
                let cnt = _mm_cvtsi32_si128(2 * shift as i32);
                let pick = scale_pair(shift);
                let v: [__m256i; R] =
                    std::array::from_fn(|r| _mm256_and_si256(_mm256_srl_epi16(q[r], cnt), m3));
                let s: [__m256i; R] = std::array::from_fn(|r| _mm256_shuffle_epi8(sh[r], pick));
                for c in 0..C {
                    // SAFETY: 32 quants of this chunk inside the Q8_K block.
                    let y = unsafe {
                        load(
                            ys[c]
                                .as_ptr()
                                .add(ib * Q8K_BYTES + Q8K_QS + 128 * h + 32 * shift),
                        )
                    };
                    for r in 0..R {
                        let p = _mm256_madd_epi16(_mm256_maddubs_epi16(v[r], y), s[r]);
                        sumi[r][c] = _mm256_add_epi32(sumi[r][c], p);
                    }
                }
            }
        }
        // SAFETY: block ib of every column (checked).
        unsafe { add_block_sums(&mut acc, &d, &sumi, ys, ib) };
    }
    for r in 0..R {
        for c in 0..C {
            out[r * C + c] = hsum(acc[r][c]) - hsum(accm[r][c]);
        }
    }
}

fn q2_k_row(n: usize, xs: &[&[u8]], ys: &[&[u8]], out: &mut [f32]) {
    // SAFETY: installed only on CPUs with AVX2, FMA and F16C.
    unsafe { by_tile!(q2_k_tile, n, xs, ys, out) }
}

/// Scales `8h..8h + 8` of a row's 16 (i16, scales 0..8 in the low lane,
/// 8..16 in the high one) in both lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn scales_half(sc: __m256i, h: usize) -> __m256i {
    if h == 0 {
        _mm256_permute2x128_si256::<0x00>(sc, sc)
    } else {
        _mm256_permute2x128_si256::<0x11>(sc, sc)
    }
}

/// The Q3_K levels (0..7, the weight plus 4) of 32 weights: bits `2 shift,
/// 2 shift + 1` of the 32 `qs` bytes `q`, plus 4 times bit `hbit` of the
/// 32 `hmask` bytes `hm`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::simd) fn q3k_levels(q: __m256i, hm: __m256i, shift: usize, hbit: usize) -> __m256i {
    let low = _mm256_srl_epi16(q, _mm_cvtsi32_si128(2 * shift as i32));
    let high = _mm256_srl_epi16(hm, _mm_cvtsi32_si128(hbit as i32));
    _mm256_or_si256(
        _mm256_and_si256(low, _mm256_set1_epi8(3)),
        _mm256_slli_epi16::<2>(_mm256_and_si256(high, _mm256_set1_epi8(1))),
    )
}

/// A `VPSHUFB` control that puts, from 8 i16 scales in each lane, scale
/// `2 shift` in every i16 of the low lane and scale `2 shift + 1` in the
/// high lane: the scales of the two groups of 16 of a 32-weight chunk.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn scale_pair(shift: usize) -> __m256i {
    let k = 2 * shift as i16;
    _mm256_set_m128i(
        _mm_set1_epi16(((2 * k + 3) << 8) | (2 * k + 2)),
        _mm_set1_epi16(((2 * k + 1) << 8) | (2 * k)),
    )
}

/// The 16 scales of a Q3_K block (the 12 bytes at `p`: low 4 bits of
/// scales 0..8 in the low nibbles of bytes 0..8, of scales 8..16 in their
/// high nibbles; the top 2 bits of scale `j` in bits `2 (j / 4)` of byte
/// `8 + j % 4`), minus 32, as i8.
///
/// # Safety
/// AVX2; `p` readable for 12 bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::simd) unsafe fn q3k_scales(p: *const u8) -> __m128i {
    // SAFETY: 12 readable bytes (caller).
    let (lo8, aux) = unsafe {
        (
            _mm_loadl_epi64(p as *const __m128i),
            (p.add(8) as *const i32).read_unaligned(),
        )
    };
    let m4 = _mm_set1_epi8(0x0f);
    let low = _mm_unpacklo_epi64(
        _mm_and_si128(lo8, m4),
        _mm_and_si128(_mm_srli_epi16::<4>(lo8), m4),
    );
    // Dword k of the 4 copies shifted right by 2k: byte j % 4 of dword
    // j / 4 holds the top bits of scale j in its bits 0..2.
    let top = _mm_and_si128(
        _mm_srlv_epi32(_mm_set1_epi32(aux), _mm_setr_epi32(0, 2, 4, 6)),
        _mm_set1_epi8(3),
    );
    _mm_sub_epi8(
        _mm_or_si128(low, _mm_slli_epi16::<4>(top)),
        _mm_set1_epi8(32),
    )
}

/// Q3_K: 16 groups of 16, levels `low2 + 4 * high - 4`, 6-bit signed scales.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q3_k_tile<const R: usize, const C: usize>(
    n: usize,
    xs: &[&[u8]],
    ys: &[&[u8]],
    out: &mut [f32],
) {
    let nb = n / 256;
    check_tile(nb, xs, 110, ys, Q8K_BYTES, out);
    let mut acc = [[_mm256_setzero_ps(); C]; R];
    let four = _mm256_set1_epi8(4);
    let pf = crate::simd::RowPrefetch::new(xs);
    for ib in 0..nb {
        pf.ahead(xs, ib * 110, 110);
        let mut d = [_mm256_setzero_ps(); R];
        // The 16 scales of each row as i16: scales 0..8 in the low lane,
        // 8..16 in the high one.
        let mut sc = [_mm256_setzero_si256(); R];
        for r in 0..R {
            let xb = &xs[r][ib * 110..(ib + 1) * 110];
            // SAFETY: d at 108 of block ib.
            d[r] = _mm256_set1_ps(unsafe { f16_at(xb.as_ptr().add(108)) });
            // SAFETY: the 12 scale bytes at 96 of block ib.
            sc[r] = _mm256_cvtepi8_epi16(unsafe { q3k_scales(xb.as_ptr().add(96)) });
        }
        let mut sumi = [[_mm256_setzero_si256(); C]; R];
        for h in 0..2 {
            for shift in 0..4 {
                let pick = scale_pair(shift);
                // SAFETY: 32 quants of this chunk inside each Q8_K block.
                let y: [__m256i; C] = std::array::from_fn(|c| unsafe {
                    load(
                        ys[c]
                            .as_ptr()
                            .add(ib * Q8K_BYTES + Q8K_QS + 128 * h + 32 * shift),
                    )
                });
                let y4: [__m256i; C] = std::array::from_fn(|c| _mm256_maddubs_epi16(four, y[c]));
                // Row by row, reading the row's bytes again from the cache
                // for each chunk: a tile of rows' worth of them would not
                // stay in the 16 registers.
                for r in 0..R {
                    // SAFETY: the high bits (32 bytes at the start of block
                    // ib) and 32 bytes of low bits at 32 + 32h.
                    let (hm, q) = unsafe {
                        let b = xs[r].as_ptr().add(ib * 110);
                        (load(b), load(b.add(32 + 32 * h)))
                    };
                    let v = q3k_levels(q, hm, shift, 4 * h + shift);
                    let s = _mm256_shuffle_epi8(scales_half(sc[r], h), pick);
                    for c in 0..C {
                        let p = _mm256_sub_epi16(_mm256_maddubs_epi16(v, y[c]), y4[c]);
                        sumi[r][c] = _mm256_add_epi32(sumi[r][c], _mm256_madd_epi16(p, s));
                    }
                }
            }
        }
        // SAFETY: block ib of every column (checked).
        unsafe { add_block_sums(&mut acc, &d, &sumi, ys, ib) };
    }
    for r in 0..R {
        for c in 0..C {
            out[r * C + c] = hsum(acc[r][c]);
        }
    }
}

fn q3_k_row(n: usize, xs: &[&[u8]], ys: &[&[u8]], out: &mut [f32]) {
    // SAFETY: installed only on CPUs with AVX2, FMA and F16C.
    unsafe { by_tile!(q3_k_tile, n, xs, ys, out) }
}

/// IQ4_XS: 8 groups of 32 non-linear 4-bit levels, 6-bit scales minus 32.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn iq4_xs_tile<const R: usize, const C: usize>(
    n: usize,
    xs: &[&[u8]],
    ys: &[&[u8]],
    out: &mut [f32],
) {
    let nb = n / 256;
    check_tile(nb, xs, 136, ys, Q8K_BYTES, out);
    let mut acc = [[_mm256_setzero_ps(); C]; R];
    // SAFETY: the 16-entry table is a static array.
    let t = unsafe { _mm_loadu_si128(KVALUES_IQ4NL.as_ptr() as *const __m128i) };
    let table = _mm256_set_m128i(t, t);
    let pf = crate::simd::RowPrefetch::new(xs);
    for ib in 0..nb {
        pf.ahead(xs, ib * 136, 136);
        let mut d = [_mm256_setzero_ps(); R];
        let mut sc = [[0i16; 8]; R];
        for r in 0..R {
            let xb = &xs[r][ib * 136..(ib + 1) * 136];
            d[r] = _mm256_set1_ps(crate::simd::scalar::f16_at(xb, 0));
            let sh = u16::from_le_bytes([xb[2], xb[3]]);
            sc[r] = std::array::from_fn(|g| {
                let lo = (xb[4 + g / 2] >> (4 * (g % 2))) & 15;
                let hi = ((sh >> (2 * g)) & 3) as u8;
                i16::from(lo | (hi << 4)) - 32
            });
        }
        let mut sumi = [[_mm256_setzero_si256(); C]; R];
        for g in 0..8 {
            let mut qx = [_mm256_setzero_si256(); R];
            let mut ax = [_mm256_setzero_si256(); R];
            for r in 0..R {
                // SAFETY: 16 bytes of nibbles of group g inside block ib.
                let q = _mm256_shuffle_epi8(table, unsafe {
                    nibbles(xs[r].as_ptr().add(ib * 136 + 8 + 16 * g))
                });
                qx[r] = q;
                ax[r] = _mm256_sign_epi8(q, q);
            }
            for c in 0..C {
                // SAFETY: 32 quants of group g inside the Q8_K block.
                let y = unsafe { load(ys[c].as_ptr().add(ib * Q8K_BYTES + Q8K_QS + 32 * g)) };
                for r in 0..R {
                    let p = _mm256_maddubs_epi16(ax[r], _mm256_sign_epi8(y, qx[r]));
                    let p = _mm256_madd_epi16(p, _mm256_set1_epi16(sc[r][g]));
                    sumi[r][c] = _mm256_add_epi32(sumi[r][c], p);
                }
            }
        }
        // SAFETY: block ib of every column (checked).
        unsafe { add_block_sums(&mut acc, &d, &sumi, ys, ib) };
    }
    for r in 0..R {
        for c in 0..C {
            out[r * C + c] = hsum(acc[r][c]);
        }
    }
}

fn iq4_xs_row(n: usize, xs: &[&[u8]], ys: &[&[u8]], out: &mut [f32]) {
    // SAFETY: installed only on CPUs with AVX2, FMA and F16C.
    unsafe { by_tile!(iq4_xs_tile, n, xs, ys, out) }
}
