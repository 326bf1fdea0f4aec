//! The 32-weight block types (Q4_0, Q5_0, Q8_0, IQ4_NL against Q8_0; Q4_1,
//! Q5_1 against Q8_1).

use std::arch::x86_64::*;

use ggml_core::quants::KVALUES_IQ4NL;
use ggml_core::Type;

use super::{bits_to_bytes, dot_ss, dot_us, f16_at, hsum, load, nibbles};
use crate::simd::{by_tile, check_tile, Kernels};

/// Installs the 32-weight block kernels.
pub(super) fn install(k: &mut Kernels) {
    k.set(Type::Q4_0, q4_0_row);
    k.set(Type::Q5_0, q5_0_row);
    k.set(Type::Q8_0, q8_0_row);
    k.set(Type::IQ4_NL, iq4_nl_row);
    k.set(Type::Q4_1, q4_1_row);
    k.set(Type::Q5_1, q5_1_row);
}

/// Levels a kernel takes as signed bytes: `|q|` times the activation with
/// `q`'s sign.
const SIGNED: i8 = 0;

/// A 32-weight block family against Q8_0: `$levels(xb)` gives the block's
/// 32 levels, signed (`$off` [`SIGNED`]) or unsigned `q + $off`. Unsigned
/// levels go straight into `VPMADDUBSW`, and `$off` times each pair of
/// activations (computed once per column) is taken off the i16 sums: one
/// subtraction per row instead of two sign operations. Either way each
/// lane's integer sum is exact, so the results do not depend on it. The
/// rows' f16 scales are converted together and multiplied by the
/// column's scale at once: the same f32 products.
macro_rules! q8_0_kernel {
    ($tile:ident, $row:ident, $bytes:expr, $levels:ident, $off:expr) => {
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn $tile<const R: usize, const C: usize>(
            n: usize,
            xs: &[&[u8]],
            ys: &[&[u8]],
            out: &mut [f32],
        ) {
            let nb = n / 32;
            check_tile(nb, xs, $bytes, ys, 34, out);
            let mut acc = [[_mm256_setzero_ps(); C]; R];
            let pf = crate::simd::RowPrefetch::new(xs);
            let ones = _mm256_set1_epi16(1);
            let off = _mm256_set1_epi8($off);
            let xp: [*const u8; R] = std::array::from_fn(|r| xs[r].as_ptr());
            for ib in 0..nb {
                if ib % 2 == 0 {
                    pf.ahead(xs, ib * $bytes, 2 * $bytes);
                }
                // SAFETY: block ib of every weight row is inside it (checked).
                let (dx, q) = unsafe {
                    let dx = row_scales(xp, ib * $bytes);
                    let q: [__m256i; R] = std::array::from_fn(|r| $levels(xp[r].add(ib * $bytes)));
                    (dx, q)
                };
                for c in 0..C {
                    // SAFETY: block ib of every activation row is inside it.
                    let (dy, y) = unsafe {
                        let yb = ys[c].as_ptr().add(ib * 34);
                        (_mm256_set1_ps(f16_at(yb)), load(yb.add(2)))
                    };
                    let d = _mm256_mul_ps(dx, dy);
                    let ym = _mm256_maddubs_epi16(off, y);
                    for r in 0..R {
                        let p = if $off == SIGNED {
                            dot_ss(_mm256_sign_epi8(q[r], q[r]), q[r], y)
                        } else {
                            let t = _mm256_sub_epi16(_mm256_maddubs_epi16(q[r], y), ym);
                            _mm256_madd_epi16(t, ones)
                        };
                        let dr = match r {
                            0 => _mm256_permute_ps::<0x00>(d),
                            1 => _mm256_permute_ps::<0x55>(d),
                            2 => _mm256_permute_ps::<0xaa>(d),
                            _ => _mm256_permute_ps::<0xff>(d),
                        };
                        acc[r][c] = _mm256_fmadd_ps(dr, _mm256_cvtepi32_ps(p), acc[r][c]);
                    }
                }
            }
            for r in 0..R {
                for c in 0..C {
                    out[r * C + c] = hsum(acc[r][c]);
                }
            }
        }
        fn $row(n: usize, xs: &[&[u8]], ys: &[&[u8]], out: &mut [f32]) {
            // SAFETY: installed only on CPUs with AVX2, FMA and F16C.
            unsafe { by_tile!($tile, n, xs, ys, out) }
        }
    };
}

/// The f16 scales at `xp[r] + o` (1 to 4 rows) as f32, row `r` in lanes
/// `r` and `4 + r` (so that one in-lane shuffle broadcasts it): gathered
/// in a general register and converted at once.
///
/// # Safety
/// Every `xp[r] + o` must be readable for 2 bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn row_scales<const R: usize>(xp: [*const u8; R], o: usize) -> __m256 {
    let mut bits = 0u64;
    for (r, p) in xp.iter().enumerate().take(4) {
        // SAFETY: 2 readable bytes (caller).
        let h = unsafe { (p.add(o) as *const u16).read_unaligned() };
        bits |= u64::from(h) << (16 * r);
    }
    _mm256_cvtph_ps(_mm_set1_epi64x(bits as i64))
}

/// Q4_0's levels `q + 8` (its nibbles).
///
/// # Safety
/// `p` must be readable for 18 bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn levels_q4_0(p: *const u8) -> __m256i {
    // SAFETY: an 18-byte block (caller).
    unsafe { nibbles(p.add(2)) }
}

/// Q5_0's levels `q + 16`: the nibbles with the fifth bits as 16s.
///
/// # Safety
/// `p` must be readable for 22 bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn levels_q5_0(p: *const u8) -> __m256i {
    // SAFETY: a 22-byte block (caller).
    unsafe {
        let hi = _mm256_and_si256(bits_to_bytes(p.add(2)), _mm256_set1_epi8(0x10));
        _mm256_or_si256(nibbles(p.add(6)), hi)
    }
}

/// Q8_0's levels (signed).
///
/// # Safety
/// `p` must be readable for 34 bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn levels_q8_0(p: *const u8) -> __m256i {
    // SAFETY: a 34-byte block (caller).
    unsafe { load(p.add(2)) }
}

/// IQ4_NL's levels (signed, from its table).
///
/// # Safety
/// `p` must be readable for 18 bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn levels_iq4_nl(p: *const u8) -> __m256i {
    // SAFETY: an 18-byte block (caller).
    unsafe { dec_iq4_nl(p).1 }
}

/// # Safety
/// `p` must be readable for 18 bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::simd) unsafe fn dec_q4_0(p: *const u8) -> (f32, __m256i) {
    // SAFETY: an 18-byte block (caller).
    unsafe {
        (
            f16_at(p),
            _mm256_sub_epi8(nibbles(p.add(2)), _mm256_set1_epi8(8)),
        )
    }
}

/// # Safety
/// `p` must be readable for 22 bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::simd) unsafe fn dec_q5_0(p: *const u8) -> (f32, __m256i) {
    // SAFETY: a 22-byte block (caller).
    unsafe {
        let lo = nibbles(p.add(6));
        // Elements whose fifth bit is clear get 0xf0 ORed in: nibble - 16.
        let hi = _mm256_andnot_si256(bits_to_bytes(p.add(2)), _mm256_set1_epi8(0xf0u8 as i8));
        (f16_at(p), _mm256_or_si256(lo, hi))
    }
}

/// # Safety
/// `p` must be readable for 34 bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::simd) unsafe fn dec_q8_0(p: *const u8) -> (f32, __m256i) {
    // SAFETY: a 34-byte block (caller).
    unsafe { (f16_at(p), load(p.add(2))) }
}

/// # Safety
/// `p` must be readable for 18 bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::simd) unsafe fn dec_iq4_nl(p: *const u8) -> (f32, __m256i) {
    // SAFETY: the 16-byte table is a static array; the block has 18 bytes.
    unsafe {
        let t = _mm_loadu_si128(KVALUES_IQ4NL.as_ptr() as *const __m128i);
        let table = _mm256_set_m128i(t, t);
        (f16_at(p), _mm256_shuffle_epi8(table, nibbles(p.add(2))))
    }
}

q8_0_kernel!(q4_0_tile, q4_0_row, 18, levels_q4_0, 8);
q8_0_kernel!(q5_0_tile, q5_0_row, 22, levels_q5_0, 16);
q8_0_kernel!(q8_0_tile, q8_0_row, 34, levels_q8_0, SIGNED);
q8_0_kernel!(iq4_nl_tile, iq4_nl_row, 18, levels_iq4_nl, SIGNED);

/// Q4_1 / Q5_1 against Q8_1: unsigned levels, `d * sumi + m * s`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_1_tile<const R: usize, const C: usize, const FIVE: bool>(
    n: usize,
    xs: &[&[u8]],
    ys: &[&[u8]],
    out: &mut [f32],
) {
    let bytes = if FIVE { 24 } else { 20 };
    let nb = n / 32;
    check_tile(nb, xs, bytes, ys, 36, out);
    let mut acc = [[_mm256_setzero_ps(); C]; R];
    let mut summs = [[0f32; C]; R];
    let pf = crate::simd::RowPrefetch::new(xs);
    for ib in 0..nb {
        pf.ahead(xs, ib * bytes, bytes);
        let mut dx = [_mm256_setzero_ps(); R];
        let mut mx = [0f32; R];
        let mut qx = [_mm256_setzero_si256(); R];
        for r in 0..R {
            // SAFETY: block ib of every weight row is inside it (checked).
            unsafe {
                let xb = xs[r].as_ptr().add(ib * bytes);
                dx[r] = _mm256_set1_ps(f16_at(xb));
                mx[r] = f16_at(xb.add(2));
                qx[r] = if FIVE {
                    let hi = _mm256_and_si256(bits_to_bytes(xb.add(4)), _mm256_set1_epi8(0x10));
                    _mm256_or_si256(nibbles(xb.add(8)), hi)
                } else {
                    nibbles(xb.add(4))
                };
            }
        }
        for c in 0..C {
            // SAFETY: block ib of every activation row is inside it.
            let (dy, sy, y) = unsafe {
                let yb = ys[c].as_ptr().add(ib * 36);
                (
                    _mm256_set1_ps(f16_at(yb)),
                    f16_at(yb.add(2)),
                    load(yb.add(4)),
                )
            };
            for r in 0..R {
                summs[r][c] += mx[r] * sy;
                let p = dot_us(qx[r], y);
                acc[r][c] =
                    _mm256_fmadd_ps(_mm256_mul_ps(dx[r], dy), _mm256_cvtepi32_ps(p), acc[r][c]);
            }
        }
    }
    for r in 0..R {
        for c in 0..C {
            out[r * C + c] = hsum(acc[r][c]) + summs[r][c];
        }
    }
}

fn q4_1_row(n: usize, xs: &[&[u8]], ys: &[&[u8]], out: &mut [f32]) {
    // SAFETY: installed only on CPUs with AVX2, FMA and F16C.
    unsafe { by_tile!(q8_1_tile[false], n, xs, ys, out) }
}
fn q5_1_row(n: usize, xs: &[&[u8]], ys: &[&[u8]], out: &mut [f32]) {
    // SAFETY: installed only on CPUs with AVX2, FMA and F16C.
    unsafe { by_tile!(q8_1_tile[true], n, xs, ys, out) }
}
