//! AVX-512 (F, BW, VL, DQ; VNNI where present) kernels: two 32-weight
//! blocks, or one 64-weight chunk of a super-block, per 512-bit register.
//!
//! As in the AVX2 kernels, integer block sums are exact and only the f32
//! accumulation order differs from the scalar path. Every `unsafe fn` here
//! is compiled for AVX-512 and reached only through [`install`], which the
//! dispatcher calls after checking the CPU's features; row slices are
//! length-checked on entry.

use std::arch::x86_64::*;

use ggml_core::quants::KVALUES_IQ4NL;
use ggml_core::Type;

use super::avx2::{
    bits_to_bytes, dec_iq4_nl, dec_q4_0, dec_q5_0, dec_q8_0, f16_elem, f32_elem, load_f16x8,
    load_f32x8, nibbles, q3k_levels, q3k_scales,
};
use super::scalar::{Q8K_BSUMS, Q8K_BYTES, Q8K_QS};
use super::{by_tile, check_tile, Kernels};
use crate::features::cpu_features;

/// Installs the AVX-512 kernels over the AVX2 ones (the caller checked
/// AVX-512 F/BW/VL/DQ).
pub(super) fn install(k: &mut Kernels) {
    k.set(Type::F32, f32_row);
    k.set(Type::F16, f16_row);
    if cpu_features().avx512_vnni {
        k.set(Type::Q4_0, q4_0_row_vnni);
        k.set(Type::Q5_0, q5_0_row_vnni);
        k.set(Type::Q8_0, q8_0_row_vnni);
        k.set(Type::IQ4_NL, iq4_nl_row_vnni);
        k.set(Type::Q4_1, q4_1_row_vnni);
        k.set(Type::Q5_1, q5_1_row_vnni);
    } else {
        k.set(Type::Q4_0, q4_0_row_bw);
        k.set(Type::Q5_0, q5_0_row_bw);
        k.set(Type::Q8_0, q8_0_row_bw);
        k.set(Type::IQ4_NL, iq4_nl_row_bw);
    }
    k.set(Type::Q2_K, q2_k_row);
    k.set(Type::Q3_K, q3_k_row);
    k.set(Type::Q4_K, q4_k_row);
    k.set(Type::Q5_K, q5_k_row);
    k.set(Type::Q6_K, q6_k_row);
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

// ------------------------------------------------------------ floats

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
            let pf = super::RowPrefetch::new(xs);
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

// ------------------------------------------------------ 32-blocks x Q8_0

/// Two blocks per step in 512 bits, a last odd block in 256 bits; `$dot`
/// and `$dot256` are the byte dot products (VNNI or BW) the features allow.
macro_rules! q8_0_kernel {
    ($tile:ident, $row:ident, $bytes:expr, $dec:ident, $feat:literal, $dot:ident, $dot256:ident) => {
        #[target_feature(enable = $feat)]
        unsafe fn $tile<const R: usize, const C: usize>(
            n: usize,
            xs: &[&[u8]],
            ys: &[&[u8]],
            out: &mut [f32],
        ) {
            let nb = n / 32;
            check_tile(nb, xs, $bytes, ys, 34, out);
            let mut acc = [[_mm512_setzero_ps(); C]; R];
            let mut acc1 = [[_mm256_setzero_ps(); C]; R];
            let pf = super::RowPrefetch::new(xs);
            let mut ib = 0;
            while ib + 2 <= nb {
                let mut dx = [_mm512_setzero_ps(); R];
                let mut ax = [_mm512_setzero_si512(); R];
                let mut neg = [0u64; R];
                pf.ahead(xs, ib * $bytes, 2 * $bytes);
                for r in 0..R {
                    // SAFETY: blocks ib and ib + 1 of every weight row are
                    // inside it (checked).
                    let ((d0, q0), (d1, q1)) = unsafe {
                        let xp = xs[r].as_ptr().add(ib * $bytes);
                        ($dec(xp), $dec(xp.add($bytes)))
                    };
                    let qx = join(q0, q1);
                    ax[r] = _mm512_abs_epi8(qx);
                    neg[r] = _mm512_movepi8_mask(qx);
                    dx[r] = _mm512_insertf32x8(_mm512_set1_ps(d0), _mm256_set1_ps(d1), 1);
                }
                for c in 0..C {
                    // SAFETY: blocks ib and ib + 1 of every activation row.
                    let (dy, qy) = unsafe {
                        let yb = ys[c].as_ptr().add(ib * 34);
                        (
                            _mm512_insertf32x8(
                                _mm512_set1_ps(f16_at(yb)),
                                _mm256_set1_ps(f16_at(yb.add(34))),
                                1,
                            ),
                            join(load256(yb.add(2)), load256(yb.add(36))),
                        )
                    };
                    for r in 0..R {
                        let sy = _mm512_mask_sub_epi8(qy, neg[r], _mm512_setzero_si512(), qy);
                        let p = $dot(ax[r], sy);
                        let d = _mm512_mul_ps(dx[r], dy);
                        acc[r][c] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(p), acc[r][c]);
                    }
                }
                ib += 2;
            }
            if ib < nb {
                let mut dx = [_mm256_setzero_ps(); R];
                let mut qx = [_mm256_setzero_si256(); R];
                for r in 0..R {
                    // SAFETY: block ib of every weight row (checked).
                    let (d, q) = unsafe { $dec(xs[r].as_ptr().add(ib * $bytes)) };
                    dx[r] = _mm256_set1_ps(d);
                    qx[r] = q;
                }
                for c in 0..C {
                    // SAFETY: block ib of every activation row.
                    let (dy, qy) = unsafe {
                        let yb = ys[c].as_ptr().add(ib * 34);
                        (_mm256_set1_ps(f16_at(yb)), load256(yb.add(2)))
                    };
                    for r in 0..R {
                        let sy = _mm256_sign_epi8(qy, qx[r]);
                        let p = $dot256(_mm256_abs_epi8(qx[r]), sy);
                        let d = _mm256_mul_ps(dx[r], dy);
                        acc1[r][c] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc1[r][c]);
                    }
                }
            }
            for r in 0..R {
                for c in 0..C {
                    out[r * C + c] = _mm512_reduce_add_ps(acc[r][c]) + hsum256(acc1[r][c]);
                }
            }
        }
        fn $row(n: usize, xs: &[&[u8]], ys: &[&[u8]], out: &mut [f32]) {
            // SAFETY: installed only on CPUs with the kernel's features
            // (AVX-512 F/BW/VL/DQ, and VNNI for the VNNI variants).
            unsafe { by_tile!($tile, n, xs, ys, out) }
        }
    };
}

q8_0_kernel!(
    q4_0_tile_bw,
    q4_0_row_bw,
    18,
    dec_q4_0,
    "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c",
    dot_us_bw,
    dot_us256_bw
);
q8_0_kernel!(
    q5_0_tile_bw,
    q5_0_row_bw,
    22,
    dec_q5_0,
    "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c",
    dot_us_bw,
    dot_us256_bw
);
q8_0_kernel!(
    q8_0_tile_bw,
    q8_0_row_bw,
    34,
    dec_q8_0,
    "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c",
    dot_us_bw,
    dot_us256_bw
);
q8_0_kernel!(
    iq4_nl_tile_bw,
    iq4_nl_row_bw,
    18,
    dec_iq4_nl,
    "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c",
    dot_us_bw,
    dot_us256_bw
);

// ------------------------------------------------------ K-quants x Q8_K

/// The 6-bit scales and mins of a Q4_K / Q5_K block from its 12 packed
/// bytes, as 8 bytes each (scale or min `g` in byte `g`): groups 0..4
/// keep theirs in the low 6 bits of bytes 0..4 (scales) and 4..8 (mins);
/// groups 4..8 have their low 4 bits in bytes 8..12 (scale low nibble, min
/// high nibble) and their top 2 bits in the top bits of bytes 0..8.
#[inline]
pub(super) fn k4_scale_bytes(b: &[u8]) -> (u64, u64) {
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
    let pf = super::RowPrefetch::new(xs);
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
    let pf = super::RowPrefetch::new(xs);
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
    let pf = super::RowPrefetch::new(xs);
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
    let pf = super::RowPrefetch::new(xs);
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

/// The f16 scales at `p` and `p + stride` as f32, lane `i` holding scale
/// `spread[i]` (0 or 1).
///
/// # Safety
/// 2 bytes must be readable at both places.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn spread_pair_scales(p: *const u8, stride: usize, spread: __m512i) -> __m512 {
    // SAFETY: 2 readable bytes at both places (caller).
    let (h0, h1) = unsafe {
        (
            (p as *const u16).read_unaligned(),
            (p.add(stride) as *const u16).read_unaligned(),
        )
    };
    let v = _mm_cvtph_ps(_mm_setr_epi16(h0 as i16, h1 as i16, 0, 0, 0, 0, 0, 0));
    _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(v))
}

/// The 32-weight block types with VNNI, two blocks per step, with levels
/// made unsigned by an offset: `sum((q - o) * y) = dpbusd(-o * sum(y), q, y)`
/// per 4-byte lane, where `o * sum(y)` is computed once per column for all
/// rows. `dec(p)` gives the unsigned levels of the blocks at `p` and `p +
/// BYTES`; with `PERM` they are laid out [lo(b0) lo(b1) hi(b0) hi(b1)] (one
/// shift and one mask for the nibbles of both blocks) and the activations
/// are permuted to match, else in natural order.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,avx512vnni")]
unsafe fn offset_pairs<const R: usize, const C: usize, const BYTES: usize, const PERM: bool>(
    n: usize,
    xs: &[&[u8]],
    ys: &[&[u8]],
    out: &mut [f32],
    offset: u8,
    dec: impl Fn(*const u8) -> __m512i,
    dec1: impl Fn(*const u8) -> (f32, __m256i),
) {
    let nb = n / 32;
    check_tile(nb, xs, BYTES, ys, 34, out);
    let mut acc = [[_mm512_setzero_ps(); C]; R];
    let mut acc1 = [[_mm256_setzero_ps(); C]; R];
    let offsets = _mm512_set1_epi8(offset as i8);
    let spread = if PERM {
        _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1)
    } else {
        _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1)
    };
    let pair_scales = |p: *const u8, stride: usize| {
        // SAFETY: two f16 scales at `p` and `p + stride`, inside the row
        // (the blocks were checked).
        unsafe { spread_pair_scales(p, stride, spread) }
    };
    let pf = super::RowPrefetch::new(xs);
    let mut ib = 0;
    while ib + 2 <= nb {
        let mut dx = [_mm512_setzero_ps(); R];
        let mut qx = [_mm512_setzero_si512(); R];
        pf.ahead(xs, ib * BYTES, 2 * BYTES);
        for r in 0..R {
            let p = xs[r][ib * BYTES..].as_ptr();
            dx[r] = pair_scales(p, BYTES);
            qx[r] = dec(p);
        }
        for c in 0..C {
            // SAFETY: blocks ib and ib + 1 of every activation row (checked).
            let (dy, y) = unsafe {
                let yb = ys[c].as_ptr().add(ib * 34);
                let y = join(load256(yb.add(2)), load256(yb.add(36)));
                let y = if PERM {
                    _mm512_shuffle_i64x2::<0b11_01_10_00>(y, y)
                } else {
                    y
                };
                (pair_scales(yb, 34), y)
            };
            let neg = _mm512_sub_epi32(
                _mm512_setzero_si512(),
                _mm512_dpbusd_epi32(_mm512_setzero_si512(), offsets, y),
            );
            for r in 0..R {
                let p = _mm512_dpbusd_epi32(neg, qx[r], y);
                acc[r][c] =
                    _mm512_fmadd_ps(_mm512_mul_ps(dx[r], dy), _mm512_cvtepi32_ps(p), acc[r][c]);
            }
        }
        ib += 2;
    }
    if ib < nb {
        let mut dx = [_mm256_setzero_ps(); R];
        let mut qx = [_mm256_setzero_si256(); R];
        for r in 0..R {
            let (d, q) = dec1(xs[r][ib * BYTES..].as_ptr());
            dx[r] = _mm256_set1_ps(d);
            qx[r] = q;
        }
        for c in 0..C {
            // SAFETY: block ib of every activation row (checked).
            let (dy, qy) = unsafe {
                let yb = ys[c].as_ptr().add(ib * 34);
                (_mm256_set1_ps(f16_at(yb)), load256(yb.add(2)))
            };
            for r in 0..R {
                let sy = _mm256_sign_epi8(qy, qx[r]);
                let p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(qx[r]), sy);
                let d = _mm256_mul_ps(dx[r], dy);
                acc1[r][c] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc1[r][c]);
            }
        }
    }
    for r in 0..R {
        for c in 0..C {
            out[r * C + c] = _mm512_reduce_add_ps(acc[r][c]) + hsum256(acc1[r][c]);
        }
    }
}

/// Q4_1 / Q5_1 against Q8_1 with VNNI, two blocks per step: unsigned
/// levels, `d * dy * sum(q * y) + m * s` per block (`s`: the activation
/// block's scaled sum). The levels are laid out [lo(b0) lo(b1) hi(b0)
/// hi(b1)] and the activations permuted to match, as in [`offset_pairs`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,avx512vnni")]
unsafe fn q8_1_tile_vnni<const R: usize, const C: usize, const FIVE: bool>(
    n: usize,
    xs: &[&[u8]],
    ys: &[&[u8]],
    out: &mut [f32],
) {
    let bytes = if FIVE { 24 } else { 20 };
    // Offset of the nibbles in a block (after d, m and, for Q5_1, qh).
    let qo = if FIVE { 8 } else { 4 };
    let nb = n / 32;
    check_tile(nb, xs, bytes, ys, 36, out);
    let mut acc = [[_mm512_setzero_ps(); C]; R];
    let mut acc1 = [[_mm256_setzero_ps(); C]; R];
    let mut summs = [[0f32; C]; R];
    let spread = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1);
    let pair_scales = |p: *const u8, stride: usize| {
        // SAFETY: two f16 scales at `p` and `p + stride`, inside the row
        // (the blocks were checked).
        unsafe { spread_pair_scales(p, stride, spread) }
    };
    let pf = super::RowPrefetch::new(xs);
    let mut ib = 0;
    while ib + 2 <= nb {
        let mut dx = [_mm512_setzero_ps(); R];
        let mut mx = [[0f32; 2]; R];
        let mut qx = [_mm512_setzero_si512(); R];
        pf.ahead(xs, ib * bytes, 2 * bytes);
        for r in 0..R {
            // SAFETY: blocks ib and ib + 1 of every weight row (checked).
            unsafe {
                let p = xs[r].as_ptr().add(ib * bytes);
                dx[r] = pair_scales(p, bytes);
                mx[r] = [f16_at(p.add(2)), f16_at(p.add(2 + bytes))];
                let q = nibble_pairs(p.add(qo), bytes);
                qx[r] = if FIVE {
                    let h0 = u64::from((p.add(4) as *const u32).read_unaligned());
                    let h1 = u64::from((p.add(4 + bytes) as *const u32).read_unaligned());
                    // Fifth bits in the nibbles' order.
                    let m =
                        (h0 & 0xffff) | (h1 & 0xffff) << 16 | (h0 >> 16) << 32 | (h1 >> 16) << 48;
                    _mm512_mask_add_epi8(q, m, q, _mm512_set1_epi8(16))
                } else {
                    q
                };
            }
        }
        for c in 0..C {
            // SAFETY: blocks ib and ib + 1 of every activation row (checked).
            let (dy, sy, y) = unsafe {
                let yb = ys[c].as_ptr().add(ib * 36);
                let y = join(load256(yb.add(4)), load256(yb.add(40)));
                (
                    pair_scales(yb, 36),
                    [f16_at(yb.add(2)), f16_at(yb.add(38))],
                    _mm512_shuffle_i64x2::<0b11_01_10_00>(y, y),
                )
            };
            for r in 0..R {
                let p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), qx[r], y);
                acc[r][c] =
                    _mm512_fmadd_ps(_mm512_mul_ps(dx[r], dy), _mm512_cvtepi32_ps(p), acc[r][c]);
                summs[r][c] += mx[r][0] * sy[0] + mx[r][1] * sy[1];
            }
        }
        ib += 2;
    }
    if ib < nb {
        let mut dx = [_mm256_setzero_ps(); R];
        let mut mx = [0f32; R];
        let mut qx = [_mm256_setzero_si256(); R];
        for r in 0..R {
            // SAFETY: block ib of every weight row (checked).
            unsafe {
                let p = xs[r].as_ptr().add(ib * bytes);
                dx[r] = _mm256_set1_ps(f16_at(p));
                mx[r] = f16_at(p.add(2));
                let q = nibbles(p.add(qo));
                qx[r] = if FIVE {
                    let hi = _mm256_and_si256(bits_to_bytes(p.add(4)), _mm256_set1_epi8(0x10));
                    _mm256_or_si256(q, hi)
                } else {
                    q
                };
            }
        }
        for c in 0..C {
            // SAFETY: block ib of every activation row (checked).
            let (dy, sy, y) = unsafe {
                let yb = ys[c].as_ptr().add(ib * 36);
                (
                    _mm256_set1_ps(f16_at(yb)),
                    f16_at(yb.add(2)),
                    load256(yb.add(4)),
                )
            };
            for r in 0..R {
                let p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), qx[r], y);
                let d = _mm256_mul_ps(dx[r], dy);
                acc1[r][c] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc1[r][c]);
                summs[r][c] += mx[r] * sy;
            }
        }
    }
    for r in 0..R {
        for c in 0..C {
            out[r * C + c] = _mm512_reduce_add_ps(acc[r][c]) + hsum256(acc1[r][c]) + summs[r][c];
        }
    }
}

fn q4_1_row_vnni(n: usize, xs: &[&[u8]], ys: &[&[u8]], out: &mut [f32]) {
    // SAFETY: installed only on CPUs with AVX-512 F/BW/VL/DQ and VNNI.
    unsafe { by_tile!(q8_1_tile_vnni[false], n, xs, ys, out) }
}

fn q5_1_row_vnni(n: usize, xs: &[&[u8]], ys: &[&[u8]], out: &mut [f32]) {
    // SAFETY: installed only on CPUs with AVX-512 F/BW/VL/DQ and VNNI.
    unsafe { by_tile!(q8_1_tile_vnni[true], n, xs, ys, out) }
}

/// The nibbles of two blocks at `p` (first nibble byte) and `p + stride`,
/// as [lo(b0) lo(b1) hi(b0) hi(b1)].
///
/// # Safety
/// 16 bytes must be readable at both places.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,avx512vnni")]
unsafe fn nibble_pairs(p: *const u8, stride: usize) -> __m512i {
    // SAFETY: 16 readable bytes at both places (caller).
    let t = unsafe {
        _mm256_set_m128i(
            _mm_loadu_si128(p.add(stride) as *const __m128i),
            _mm_loadu_si128(p as *const __m128i),
        )
    };
    _mm512_and_si512(join(t, _mm256_srli_epi16(t, 4)), _mm512_set1_epi8(0x0f))
}

macro_rules! offset_kernel {
    ($tile:ident, $row:ident, $bytes:expr, $perm:expr, $offset:expr, $dec:expr, $dec1:ident) => {
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,avx512vnni")]
        unsafe fn $tile<const R: usize, const C: usize>(
            n: usize,
            xs: &[&[u8]],
            ys: &[&[u8]],
            out: &mut [f32],
        ) {
            let dec = $dec;
            let dec1 = |p: *const u8| {
                // SAFETY: a whole block at `p` (the kernel checked the rows).
                unsafe { $dec1(p) }
            };
            // SAFETY: same contract as this function's.
            unsafe { offset_pairs::<R, C, $bytes, $perm>(n, xs, ys, out, $offset, dec, dec1) }
        }
        fn $row(n: usize, xs: &[&[u8]], ys: &[&[u8]], out: &mut [f32]) {
            // SAFETY: installed only on CPUs with AVX-512 F/BW/VL/DQ and VNNI.
            unsafe { by_tile!($tile, n, xs, ys, out) }
        }
    };
}

offset_kernel!(
    q4_0_tile_vnni,
    q4_0_row_vnni,
    18,
    true,
    8,
    |p: *const u8| {
        // SAFETY: two 18-byte blocks at `p`.
        unsafe { nibble_pairs(p.add(2), 18) }
    },
    dec_q4_0
);
offset_kernel!(
    q5_0_tile_vnni,
    q5_0_row_vnni,
    22,
    true,
    16,
    |p: *const u8| {
        // SAFETY: two 22-byte blocks at `p`.
        unsafe {
            let q = nibble_pairs(p.add(6), 22);
            let h0 = u64::from((p.add(2) as *const u32).read_unaligned());
            let h1 = u64::from((p.add(24) as *const u32).read_unaligned());
            // Fifth bits in the nibbles' order: [lo(b0) lo(b1) hi(b0) hi(b1)].
            let m = (h0 & 0xffff) | (h1 & 0xffff) << 16 | (h0 >> 16) << 32 | (h1 >> 16) << 48;
            _mm512_mask_add_epi8(q, m, q, _mm512_set1_epi8(16))
        }
    },
    dec_q5_0
);
offset_kernel!(
    q8_0_tile_vnni,
    q8_0_row_vnni,
    34,
    false,
    128,
    |p: *const u8| {
        // SAFETY: two 34-byte blocks at `p`.
        unsafe {
            _mm512_xor_si512(
                join(load256(p.add(2)), load256(p.add(36))),
                _mm512_set1_epi8(-128),
            )
        }
    },
    dec_q8_0
);
offset_kernel!(
    iq4_nl_tile_vnni,
    iq4_nl_row_vnni,
    18,
    true,
    128,
    |p: *const u8| {
        // SAFETY: two 18-byte blocks at `p`; a 16-entry static table.
        unsafe {
            let t = _mm_loadu_si128(KVALUES_IQ4NL.as_ptr() as *const __m128i);
            let table = _mm512_broadcast_i32x4(t);
            let v = _mm512_shuffle_epi8(table, nibble_pairs(p.add(2), 18));
            _mm512_xor_si512(v, _mm512_set1_epi8(-128))
        }
    },
    dec_iq4_nl
);
