//! The K-quant super-blocks (Q2_K .. Q6_K) against Q8_K, one 64-weight
//! chunk a step.

use std::arch::x86_64::*;

use ggml_core::Type;

use super::{f16_at, hsum256, join, load256, load512};
use crate::simd::avx2::{q3k_levels, q3k_scales};
use crate::simd::scalar::{Q8K_BSUMS, Q8K_BYTES, Q8K_QS};
use crate::simd::{by_tile, check_tile, Kernels};

/// Installs the K-quant kernels.
pub(super) fn install(k: &mut Kernels) {
    k.set(Type::Q2_K, q2_k_row);
    k.set(Type::Q3_K, q3_k_row);
    k.set(Type::Q4_K, q4_k_row);
    k.set(Type::Q5_K, q5_k_row);
    k.set(Type::Q6_K, q6_k_row);
}

/// The 6-bit scales and mins of a Q4_K / Q5_K block from its 12 packed
/// bytes, as 8 bytes each (scale or min `g` in byte `g`): groups 0..4
/// keep theirs in the low 6 bits of bytes 0..4 (scales) and 4..8 (mins);
/// groups 4..8 have their low 4 bits in bytes 8..12 (scale low nibble, min
/// high nibble) and their top 2 bits in the top bits of bytes 0..8.
#[inline]
pub(in crate::simd) fn k4_scale_bytes(b: &[u8]) -> (u64, u64) {
    const LOW6: u32 = 0x3f3f_3f3f;
    const LOW4: u32 = 0x0f0f_0f0f;
    const LOW2: u32 = 0x0303_0303;
    let w = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    let (w0, w1, w2) = (w(0), w(4), w(8));
    let sc_hi = (w2 & LOW4) | (((w0 >> 6) & LOW2) << 4);
    let m_hi = ((w2 >> 4) & LOW4) | (((w1 >> 6) & LOW2) << 4);
    (
        u64::from(w0 & LOW6) | (u64::from(sc_hi) << 32),
        u64::from(w1 & LOW6) | (u64::from(m_hi) << 32),
    )
}

/// Q4_K / Q5_K: one 64-weight chunk (two groups of 32) per 512-bit step.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn qk_tile<const R: usize, const C: usize, const FIVE: bool>(
    n: usize,
    xs: &[&[u8]],
    ys: &[&[u8]],
    out: &mut [f32],
) {
    let bytes = if FIVE { 176 } else { 144 };
    let nb = n / 256;
    check_tile(nb, xs, bytes, ys, Q8K_BYTES, out);
    let mut acc = [[_mm512_setzero_ps(); C]; R];
    let mut accm = [[_mm256_setzero_ps(); C]; R];
    let m4 = _mm256_set1_epi8(0x0f);
    let one = _mm256_set1_epi8(1);
    let pf = crate::simd::RowPrefetch::new(xs);
    for ib in 0..nb {
        let mut d = [_mm512_setzero_ps(); R];
        let mut dmin = [_mm256_setzero_ps(); R];
        let mut sc = [_mm512_setzero_si512(); R];
        let mut mins = [_mm256_setzero_si256(); R];
        pf.ahead(xs, ib * bytes, bytes);
        for r in 0..R {
            let xb = &xs[r][ib * bytes..(ib + 1) * bytes];
            let dm = _mm_cvtph_ps(_mm_cvtsi32_si128(i32::from_le_bytes([
                xb[0], xb[1], xb[2], xb[3],
            ])));
            d[r] = _mm512_broadcastss_ps(dm);
            dmin[r] = _mm256_broadcastss_ps(_mm_movehdup_ps(dm));
            let (s8, m8) = k4_scale_bytes(&xb[4..16]);
            // The 8 scales as i16 in every 128-bit lane, to be picked
            // per chunk by a byte shuffle.
            sc[r] = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(s8 as i64)));
            // Each min twice, against the Q8_K sums of 16.
            let m = _mm_cvtsi64_si128(m8 as i64);
            mins[r] = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m, m));
        }
        // SAFETY: every column holds Q8_K block ib (checked).
        unsafe { add_min_sums(&mut accm, &dmin, &mins, ys, ib) };
        let mut sumi = [[_mm512_setzero_si512(); C]; R];
        for j in 0..4 {
            let mut qx = [_mm512_setzero_si512(); R];
            let mut s = [_mm512_setzero_si512(); R];
            // Byte pairs of scale 2j (low half) and 2j + 1 (high half).
            let pick = join(
                _mm256_set1_epi16(0x0100 + 0x0202 * (2 * j as i16)),
                _mm256_set1_epi16(0x0100 + 0x0202 * (2 * j as i16 + 1)),
            );
            for r in 0..R {
                let xb = xs[r].as_ptr();
                let qo = ib * bytes + if FIVE { 48 } else { 16 } + 32 * j;
                // SAFETY: 32 bytes of nibbles of chunk j inside block ib.
                let q = unsafe { load256(xb.add(qo)) };
                let mut lo = _mm256_and_si256(q, m4);
                let mut hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
                if FIVE {
                    // SAFETY: the 32 bytes of high bits at offset 16 of block ib.
                    let hbits = unsafe { load256(xb.add(ib * bytes + 16)) };
                    let b0 = _mm256_and_si256(
                        _mm256_srl_epi16(hbits, _mm_cvtsi32_si128(2 * j as i32)),
                        one,
                    );
                    let b1 = _mm256_and_si256(
                        _mm256_srl_epi16(hbits, _mm_cvtsi32_si128(2 * j as i32 + 1)),
                        one,
                    );
                    lo = _mm256_or_si256(lo, _mm256_slli_epi16(b0, 4));
                    hi = _mm256_or_si256(hi, _mm256_slli_epi16(b1, 4));
                }
                qx[r] = join(lo, hi);
                s[r] = _mm512_shuffle_epi8(sc[r], pick);
            }
            for c in 0..C {
                // SAFETY: 64 quants of chunk j inside the Q8_K block (checked).
                let y = unsafe { load512(ys[c].as_ptr().add(ib * Q8K_BYTES + Q8K_QS + 64 * j)) };
                for r in 0..R {
                    let p = _mm512_madd_epi16(_mm512_maddubs_epi16(qx[r], y), s[r]);
                    sumi[r][c] = _mm512_add_epi32(sumi[r][c], p);
                }
            }
        }
        // SAFETY: block ib of every column (checked).
        unsafe { add_block_sums(&mut acc, &d, &sumi, ys, ib) };
    }
    for r in 0..R {
        for c in 0..C {
            out[r * C + c] = _mm512_reduce_add_ps(acc[r][c]) - hsum256(accm[r][c]);
        }
    }
}

fn q4_k_row(n: usize, xs: &[&[u8]], ys: &[&[u8]], out: &mut [f32]) {
    // SAFETY: installed only on CPUs with AVX-512 F/BW/VL/DQ.
    unsafe { by_tile!(qk_tile[false], n, xs, ys, out) }
}
fn q5_k_row(n: usize, xs: &[&[u8]], ys: &[&[u8]], out: &mut [f32]) {
    // SAFETY: installed only on CPUs with AVX-512 F/BW/VL/DQ.
    unsafe { by_tile!(qk_tile[true], n, xs, ys, out) }
}

/// A `VPERMW` control that spreads i16 scales `g..g + 4` (of the 16 of a
/// super-block, one per 16 weights) each over 8 lanes: the scales of the
/// 64 weights of a 512-bit chunk, lined up with their pair sums.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
fn four_group_scales(g: i16) -> __m512i {
    join(
        _mm256_set_m128i(_mm_set1_epi16(g + 1), _mm_set1_epi16(g)),
        _mm256_set_m128i(_mm_set1_epi16(g + 3), _mm_set1_epi16(g + 2)),
    )
}

/// Adds to `acc[r][c]` the integer sums `sumi[r][c]` of Q8_K block `ib`
/// times the row's scale `d[r]` and the column's block scale.
///
/// # Safety
/// Every column holds Q8_K block `ib`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn add_block_sums<const R: usize, const C: usize>(
    acc: &mut [[__m512; C]; R],
    d: &[__m512; R],
    sumi: &[[__m512i; C]; R],
    ys: &[&[u8]],
    ib: usize,
) {
    for c in 0..C {
        // SAFETY: the scale of the Q8_K block ib (caller).
        let dy = unsafe { (ys[c].as_ptr().add(ib * Q8K_BYTES) as *const f32).read_unaligned() };
        let dy = _mm512_set1_ps(dy);
        for r in 0..R {
            acc[r][c] = _mm512_fmadd_ps(
                _mm512_mul_ps(d[r], dy),
                _mm512_cvtepi32_ps(sumi[r][c]),
                acc[r][c],
            );
        }
    }
}

/// Adds each row's mins (i16, one per 16 weights) against each column's
/// Q8_K sums of 16, times the row's `dmin[r]` and the column's block
/// scale, to `accm` (subtracted at the end by the K-quant tiles).
///
/// # Safety
/// Every column holds Q8_K block `ib`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn add_min_sums<const R: usize, const C: usize>(
    accm: &mut [[__m256; C]; R],
    dmin: &[__m256; R],
    mins: &[__m256i; R],
    ys: &[&[u8]],
    ib: usize,
) {
    for c in 0..C {
        // SAFETY: the Q8_K block ib of the column (caller).
        let (dyc, bsums) = unsafe {
            let yb = ys[c].as_ptr().add(ib * Q8K_BYTES);
            (
                (yb as *const f32).read_unaligned(),
                load256(yb.add(Q8K_BSUMS)),
            )
        };
        for r in 0..R {
            let prod = _mm256_cvtepi32_ps(_mm256_madd_epi16(mins[r], bsums));
            let dm = _mm256_mul_ps(dmin[r], _mm256_set1_ps(dyc));
            accm[r][c] = _mm256_fmadd_ps(dm, prod, accm[r][c]);
        }
    }
}

/// Q2_K: two 64-weight chunks per half super-block; the mins against the
/// activations' sums of 16 once per block.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn q2_k_tile<const R: usize, const C: usize>(
    n: usize,
    xs: &[&[u8]],
    ys: &[&[u8]],
    out: &mut [f32],
) {
    let nb = n / 256;
    check_tile(nb, xs, 84, ys, Q8K_BYTES, out);
    let mut acc = [[_mm512_setzero_ps(); C]; R];
    let mut accm = [[_mm256_setzero_ps(); C]; R];
    let m3 = _mm256_set1_epi8(0x03);
    let pf = crate::simd::RowPrefetch::new(xs);
    for ib in 0..nb {
        pf.ahead(xs, ib * 84, 84);
        let mut d = [_mm512_setzero_ps(); R];
        let mut dmin = [_mm256_setzero_ps(); R];
        // The 16 scales and the 16 mins of each row as i16.
        let mut sc = [_mm512_setzero_si512(); R];
        let mut mins = [_mm256_setzero_si256(); R];
        for r in 0..R {
            // SAFETY: the 16 scale bytes at the start of block ib, d and
            // dmin at 80.
            unsafe {
                let xb = xs[r].as_ptr().add(ib * 84);
                d[r] = _mm512_set1_ps(f16_at(xb.add(80)));
                dmin[r] = _mm256_set1_ps(f16_at(xb.add(82)));
                let b = _mm_loadu_si128(xb as *const __m128i);
                let m4 = _mm_set1_epi8(0x0f);
                sc[r] = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(_mm_and_si128(b, m4)));
                mins[r] = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16::<4>(b), m4));
            }
        }
        // SAFETY: every column holds Q8_K block ib (checked).
        unsafe { add_min_sums(&mut accm, &dmin, &mins, ys, ib) };
        let mut sumi = [[_mm512_setzero_si512(); C]; R];
        for h in 0..2 {
            for k in 0..2 {
                // Weights 128h + 64k..: shifts 2k and 2k + 1 of the levels.
                let (s0, s1) = (4 * k as i32, 4 * k as i32 + 2);
                let g = (8 * h + 4 * k) as i16;
                let pick = four_group_scales(g);
                // SAFETY: 64 quants at 128h + 64k inside each Q8_K block.
                let y: [__m512i; C] = std::array::from_fn(|c| unsafe {
                    load512(
                        ys[c]
                            .as_ptr()
                            .add(ib * Q8K_BYTES + Q8K_QS + 128 * h + 64 * k),
                    )
                });
                for r in 0..R {
                    // SAFETY: 32 bytes of 2-bit levels at 16 + 32h of block ib.
                    let lb = unsafe { load256(xs[r].as_ptr().add(ib * 84 + 16 + 32 * h)) };
                    let level =
                        |sl: i32| _mm256_and_si256(_mm256_srl_epi16(lb, _mm_cvtsi32_si128(sl)), m3);
                    let q = join(level(s0), level(s1));
                    let s = _mm512_permutexvar_epi16(pick, sc[r]);
                    for c in 0..C {
                        let p = _mm512_madd_epi16(_mm512_maddubs_epi16(q, y[c]), s);
                        sumi[r][c] = _mm512_add_epi32(sumi[r][c], p);
                    }
                }
            }
        }
        // SAFETY: block ib of every column (checked).
        unsafe { add_block_sums(&mut acc, &d, &sumi, ys, ib) };
    }
    for r in 0..R {
        for c in 0..C {
            out[r * C + c] = _mm512_reduce_add_ps(acc[r][c]) - hsum256(accm[r][c]);
        }
    }
}

fn q2_k_row(n: usize, xs: &[&[u8]], ys: &[&[u8]], out: &mut [f32]) {
    // SAFETY: installed only on CPUs with AVX-512 F/BW/VL/DQ.
    unsafe { by_tile!(q2_k_tile, n, xs, ys, out) }
}

/// Q3_K: two 64-weight chunks per half super-block, levels `low2 + 4 *
/// high` (0..7) against the activations, minus 4 times their sums.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn q3_k_tile<const R: usize, const C: usize>(
    n: usize,
    xs: &[&[u8]],
    ys: &[&[u8]],
    out: &mut [f32],
) {
    let nb = n / 256;
    check_tile(nb, xs, 110, ys, Q8K_BYTES, out);
    let mut acc = [[_mm512_setzero_ps(); C]; R];
    let m4 = _mm512_set1_epi8(4);
    let pf = crate::simd::RowPrefetch::new(xs);
    for ib in 0..nb {
        let mut d = [_mm512_setzero_ps(); R];
        let mut sc = [_mm512_setzero_si512(); R];
        pf.ahead(xs, ib * 110, 110);
        for r in 0..R {
            // SAFETY: the 12 scale bytes at 96 and the f16 scale at 108 lie
            // inside block ib of the row.
            unsafe {
                let xb = xs[r].as_ptr().add(ib * 110);
                d[r] = _mm512_set1_ps(f16_at(xb.add(108)));
                sc[r] = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(q3k_scales(xb.add(96))));
            }
        }
        let mut sumi = [[_mm512_setzero_si512(); C]; R];
        for h in 0..2 {
            for k in 0..2 {
                // Weights 128h + 64k..: shifts 2k and 2k + 1 of the low bits,
                // bits 4h + 2k and 4h + 2k + 1 of the high ones.
                let g = (8 * h + 4 * k) as i16;
                let pick = four_group_scales(g);
                // SAFETY: 64 quants at 128h + 64k inside each Q8_K block.
                let y: [__m512i; C] = std::array::from_fn(|c| unsafe {
                    load512(
                        ys[c]
                            .as_ptr()
                            .add(ib * Q8K_BYTES + Q8K_QS + 128 * h + 64 * k),
                    )
                });
                let ym: [__m512i; C] = std::array::from_fn(|c| _mm512_maddubs_epi16(m4, y[c]));
                for r in 0..R {
                    // SAFETY: the high bits (32 bytes at the start of block
                    // ib) and 32 bytes of low bits at 32 + 32h.
                    let (hb, lb) = unsafe {
                        let p = xs[r].as_ptr().add(ib * 110);
                        (load256(p), load256(p.add(32 + 32 * h)))
                    };
                    let j = 2 * k;
                    let q = join(
                        q3k_levels(lb, hb, j, 4 * h + j),
                        q3k_levels(lb, hb, j + 1, 4 * h + j + 1),
                    );
                    let s = _mm512_permutexvar_epi16(pick, sc[r]);
                    for c in 0..C {
                        let p = _mm512_sub_epi16(_mm512_maddubs_epi16(q, y[c]), ym[c]);
                        sumi[r][c] = _mm512_add_epi32(sumi[r][c], _mm512_madd_epi16(p, s));
                    }
                }
            }
        }
        // SAFETY: block ib of every column (checked).
        unsafe { add_block_sums(&mut acc, &d, &sumi, ys, ib) };
    }
    for r in 0..R {
        for c in 0..C {
            out[r * C + c] = _mm512_reduce_add_ps(acc[r][c]);
        }
    }
}

fn q3_k_row(n: usize, xs: &[&[u8]], ys: &[&[u8]], out: &mut [f32]) {
    // SAFETY: installed only on CPUs with AVX-512 F/BW/VL/DQ.
    unsafe { by_tile!(q3_k_tile, n, xs, ys, out) }
}

/// Q6_K: two 64-weight chunks per half super-block.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn q6_k_tile<const R: usize, const C: usize>(
    n: usize,
    xs: &[&[u8]],
    ys: &[&[u8]],
    out: &mut [f32],
) {
    let nb = n / 256;
    check_tile(nb, xs, 210, ys, Q8K_BYTES, out);
    let mut acc = [[_mm512_setzero_ps(); C]; R];
    let m4 = _mm256_set1_epi8(0x0f);
    let m2 = _mm256_set1_epi8(0x03);
    let m32 = _mm512_set1_epi8(32);
    let pf = crate::simd::RowPrefetch::new(xs);
    for ib in 0..nb {
        let mut d = [_mm512_setzero_ps(); R];
        let mut sc = [_mm512_setzero_si512(); R];
        // Several rows are streamed at once: ask for what follows
        // explicitly, since a block's scales sit at its end.
        pf.ahead(xs, ib * 210, 210);
        for r in 0..R {
            let xb = &xs[r][ib * 210..(ib + 1) * 210];
            // SAFETY: the f16 scale at 208 and the 16 i8 scales at 192 lie
            // inside the block.
            unsafe {
                d[r] = _mm512_set1_ps(f16_at(xb.as_ptr().add(208)));
                let s8 = _mm_loadu_si128(xb.as_ptr().add(192) as *const __m128i);
                sc[r] = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(s8));
            }
        }
        let mut sumi = [[_mm512_setzero_si512(); C]; R];
        for h in 0..2 {
            let mut q = [[_mm512_setzero_si512(); 2]; R];
            let mut s = [[_mm512_setzero_si512(); 2]; R];
            for r in 0..R {
                // SAFETY: ql (64 bytes at 64h) and qh (32 bytes at 128 + 32h)
                // are inside block ib of the row.
                let (l0, l1, hb) = unsafe {
                    let p = xs[r].as_ptr().add(ib * 210);
                    (
                        load256(p.add(64 * h)),
                        load256(p.add(64 * h + 32)),
                        load256(p.add(128 + 32 * h)),
                    )
                };
                let h0 = _mm256_slli_epi16(_mm256_and_si256(hb, m2), 4);
                let h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2), m2), 4);
                let h2 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 4), m2), 4);
                let h3 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 6), m2), 4);
                q[r] = [
                    join(
                        _mm256_or_si256(_mm256_and_si256(l0, m4), h0),
                        _mm256_or_si256(_mm256_and_si256(l1, m4), h1),
                    ),
                    join(
                        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), h2),
                        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), h3),
                    ),
                ];
                // Scales g..g+4 of the 16-weight groups, each over 8 lanes.
                s[r] = std::array::from_fn(|k| {
                    let g = (8 * h + 4 * k) as i16;
                    _mm512_permutexvar_epi16(four_group_scales(g), sc[r])
                });
            }
            for c in 0..C {
                // SAFETY: 128 quants at 128h inside the Q8_K block (checked).
                let yq = unsafe { ys[c].as_ptr().add(ib * Q8K_BYTES + Q8K_QS + 128 * h) };
                for k in 0..2 {
                    // SAFETY: 64 quants at 64k inside that half.
                    let y = unsafe { load512(yq.add(64 * k)) };
                    let ym = _mm512_maddubs_epi16(m32, y);
                    for r in 0..R {
                        let p = _mm512_sub_epi16(_mm512_maddubs_epi16(q[r][k], y), ym);
                        sumi[r][c] = _mm512_add_epi32(sumi[r][c], _mm512_madd_epi16(p, s[r][k]));
                    }
                }
            }
        }
        // SAFETY: block ib of every column (checked).
        unsafe { add_block_sums(&mut acc, &d, &sumi, ys, ib) };
    }
    for r in 0..R {
        for c in 0..C {
            out[r * C + c] = _mm512_reduce_add_ps(acc[r][c]);
        }
    }
}

fn q6_k_row(n: usize, xs: &[&[u8]], ys: &[&[u8]], out: &mut [f32]) {
    // SAFETY: installed only on CPUs with AVX-512 F/BW/VL/DQ.
    unsafe { by_tile!(q6_k_tile, n, xs, ys, out) }
}
