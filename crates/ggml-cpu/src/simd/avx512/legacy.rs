//! The 32-weight block types, two blocks a step: Q4_0, Q5_0, Q8_0, IQ4_NL
//! against Q8_0 (with VNNI or BW), Q4_1 and Q5_1 against Q8_1 (VNNI only;
//! without it the AVX2 kernels stay).

use std::arch::x86_64::*;

use ggml_core::quants::KVALUES_IQ4NL;
use ggml_core::Type;

use super::{dot_us256_bw, dot_us_bw, f16_at, hsum256, join, load256};
use crate::features::cpu_features;
use crate::simd::avx2::{bits_to_bytes, dec_iq4_nl, dec_q4_0, dec_q5_0, dec_q8_0, nibbles};
use crate::simd::{by_tile, check_tile, Kernels};

/// Installs the 32-weight block kernels: with VNNI where the CPU has it,
/// else with AVX-512 BW.
pub(super) fn install(k: &mut Kernels) {
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
}

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
            let pf = crate::simd::RowPrefetch::new(xs);
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
    let pf = crate::simd::RowPrefetch::new(xs);
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
    let pf = crate::simd::RowPrefetch::new(xs);
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
