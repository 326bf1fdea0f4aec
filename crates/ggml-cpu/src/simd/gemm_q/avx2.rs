//! The AVX2 kernels of the Q4_0 / Q8_0 panel layout (see the parent
//! module). A 256-bit register holds 8 lanes, so a panel's 16 rows are two
//! halves: the first and the last 32 bytes of every 64-byte group, and of
//! the 16 scales the first and last 8.
//!
//! Without VNNI a byte dot product is `VPMADDUBSW` (pairs of unsigned x
//! signed bytes into i16) then `VPMADDWD` by ones (into i32). Q4_0's
//! levels are at most 15, so a lane's i16 sums of a whole block stay below
//! 8 x 2 x 15 x 128 = 30,720 and are widened once per block. Q8_0's stored
//! `q + 128` would overflow the pairs: its kernel takes `q` back, multiplies
//! `|q|` by the activation with `q`'s sign, and widens every k-group; it
//! skips the prepared offset sum, which only undoes the stored `+ 128`.
//! Q5_0's levels `q + 16` (at most 31) are its nibbles with its fifth bits
//! ORed in as 16s, each group's bits brought to bit 4 of every byte by one
//! shift and one mask (see `pack_q5_0`); it sums two nibble groups in i16
//! (2 x 2 x 2 x 31 x 128 = 31,744) before widening. This kernel serves
//! Q5_0 on AVX-512 CPUs too, so that its stored layout is the same
//! everywhere.
//! Both sum each block exactly in integers, as the VNNI kernels do, and
//! apply the scales with the same f32 operations in the same order: the
//! results are the same bits.
//!
//! A call's columns go through each half panel in passes of up to
//! [`PASS_COLS`] (all the i16 and f32 sums of a pass stay in registers);
//! with one or two columns (token generation streaming stored panels) both
//! halves go in one pass, so that each panel line is read once.

use std::arch::x86_64::*;

use super::{block_at, ACT_BLOCK, PREFETCH, Q4_0_QUANTS, Q5_0_HIGH, Q5_0_QUANTS, Q8_0_QUANTS};
use crate::simd::avx2::bcast4;
use crate::simd::{GEMM_COLS, PANEL_ROWS};

/// Q4_0's nibble pairs.
pub(super) const NIBBLES: u8 = 0;
/// Q8_0's `q + 128`.
pub(super) const SIGNED: u8 = 1;
/// Q5_0's fifth bits and nibble pairs.
pub(super) const FIVE: u8 = 2;

/// Lanes of a 256-bit register: rows of a half panel.
const HALF: usize = PANEL_ROWS / 2;
/// Most columns of a pass over one half panel.
const PASS_COLS: usize = 4;

/// Adds to `out[c * PANEL_ROWS + 8 h + r]`-ordered f32 accumulators the
/// dot products of halves `h0..h0 + H` of the panel with the `C` columns
/// `y`, for panels of `nb` blocks of the layout `KIND` names.
///
/// # Safety
/// AVX2, FMA and F16C must be present; `panel` holds `nb` blocks of the
/// layout, every `y[c]` `nb` prepared blocks, and `out` room for the
/// columns' 16 values each.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn pass<const H: usize, const C: usize, const KIND: u8>(
    nb: usize,
    panel: *const u8,
    h0: usize,
    y: [*const u8; C],
    out: *mut f32,
) {
    let qb = match KIND {
        NIBBLES => Q4_0_QUANTS,
        FIVE => Q5_0_QUANTS,
        _ => Q8_0_QUANTS,
    };
    let nibble = _mm256_set1_epi8(0x0f);
    let flip = _mm256_set1_epi8(0x80u8 as i8);
    let ones = _mm256_set1_epi16(1);
    let mut acc = [[_mm256_setzero_ps(); C]; H];
    let ask = crate::simd::stream::software_prefetch();
    for b in 0..nb {
        let (qo, so) = block_at(nb, qb, b);
        // The panel is read in order: each line is asked for PREFETCH bytes
        // on as it is read (near the end, in the next panel). A prefetch is
        // only a hint: it never faults and reads nothing the program sees,
        // so the address may lie past the panel.
        let ahead = |o: usize| {
            if ask {
                _mm_prefetch::<_MM_HINT_T0>(panel.wrapping_add(o + PREFETCH) as *const i8)
            }
        };
        ahead(so);
        // SAFETY: block b of the panel and of every column lies inside
        // them (caller).
        unsafe {
            let ya: [*const u8; C] = std::array::from_fn(|c| y[c].add(b * ACT_BLOCK));
            let mut sum = [[_mm256_setzero_si256(); C]; H];
            if KIND == NIBBLES || KIND == FIVE {
                // Groups summed in i16 before widening: Q4_0's levels
                // (at most 15) allow all four, Q5_0's (31) two.
                let per = if KIND == FIVE { 2 } else { 4 };
                let base = if KIND == FIVE { qo + Q5_0_HIGH } else { qo };
                let high: [__m256i; H] = std::array::from_fn(|h| {
                    if KIND == FIVE {
                        _mm256_loadu_si256(panel.add(qo + 32 * (h0 + h)) as *const __m256i)
                    } else {
                        _mm256_setzero_si256()
                    }
                });
                for k in 0..4 / per {
                    let mut s16 = [[_mm256_setzero_si256(); C]; H];
                    for g in per * k..per * (k + 1) {
                        let at = base + 64 * g;
                        ahead(at);
                        let w: [(__m256i, __m256i); H] = std::array::from_fn(|h| {
                            let p = panel.add(at + 32 * (h0 + h));
                            let w = _mm256_loadu_si256(p as *const __m256i);
                            let lo = _mm256_and_si256(w, nibble);
                            let hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), nibble);
                            if KIND == FIVE {
                                let (blo, bhi) = fifth_bits(high[h], g);
                                (_mm256_or_si256(lo, blo), _mm256_or_si256(hi, bhi))
                            } else {
                                (lo, hi)
                            }
                        });
                        for c in 0..C {
                            let ylo = bcast4(ya[c].add(8 + 4 * g));
                            let yhi = bcast4(ya[c].add(24 + 4 * g));
                            for (h, &(lo, hi)) in w.iter().enumerate() {
                                let s = _mm256_add_epi16(
                                    _mm256_maddubs_epi16(lo, ylo),
                                    _mm256_maddubs_epi16(hi, yhi),
                                );
                                s16[h][c] = _mm256_add_epi16(s16[h][c], s);
                            }
                        }
                    }
                    for h in 0..H {
                        for c in 0..C {
                            let start = if k == 0 {
                                bcast4(ya[c].add(4))
                            } else {
                                sum[h][c]
                            };
                            sum[h][c] = _mm256_add_epi32(start, _mm256_madd_epi16(s16[h][c], ones));
                        }
                    }
                }
            } else {
                for g in 0..8 {
                    ahead(qo + 64 * g);
                    let w: [(__m256i, __m256i); H] = std::array::from_fn(|h| {
                        let p = panel.add(qo + 64 * g + 32 * (h0 + h));
                        let q = _mm256_xor_si256(_mm256_loadu_si256(p as *const __m256i), flip);
                        (q, _mm256_abs_epi8(q))
                    });
                    for c in 0..C {
                        let yg = bcast4(ya[c].add(8 + 4 * g));
                        for (h, &(q, aq)) in w.iter().enumerate() {
                            let t = _mm256_maddubs_epi16(aq, _mm256_sign_epi8(yg, q));
                            sum[h][c] = _mm256_add_epi32(sum[h][c], _mm256_madd_epi16(t, ones));
                        }
                    }
                }
            }
            for h in 0..H {
                let s = panel.add(so + 2 * HALF * (h0 + h));
                let dx = _mm256_cvtph_ps(_mm_loadu_si128(s as *const __m128i));
                for c in 0..C {
                    let dy = _mm256_set1_ps((ya[c] as *const f32).read_unaligned());
                    acc[h][c] = _mm256_fmadd_ps(
                        _mm256_cvtepi32_ps(sum[h][c]),
                        _mm256_mul_ps(dx, dy),
                        acc[h][c],
                    );
                }
            }
        }
    }
    for (h, row) in acc.iter().enumerate() {
        for (c, a) in row.iter().enumerate() {
            // SAFETY: column c's 16 values are inside `out` (caller).
            unsafe { _mm256_storeu_ps(out.add(c * PANEL_ROWS + HALF * (h0 + h)), *a) };
        }
    }
}

/// Group `g`'s fifth bits from a half panel's packed bits `q` (bit
/// `2g + s` of each byte, see `pack_q5_0`) as 16s: those of its low
/// nibbles (weights `4g..4g + 4`) and of its high ones (`16 + 4g..`). The
/// 16-bit shifts move bits across bytes too, but the mask keeps bit 4,
/// which comes from the same byte.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn fifth_bits(q: __m256i, g: usize) -> (__m256i, __m256i) {
    let m = _mm256_set1_epi8(0x10);
    let (lo, hi) = match g {
        0 => (_mm256_slli_epi16(q, 4), _mm256_slli_epi16(q, 3)),
        1 => (_mm256_slli_epi16(q, 2), _mm256_slli_epi16(q, 1)),
        2 => (q, _mm256_srli_epi16(q, 1)),
        _ => (_mm256_srli_epi16(q, 2), _mm256_srli_epi16(q, 3)),
    };
    (_mm256_and_si256(lo, m), _mm256_and_si256(hi, m))
}

/// One pass of `C` columns, those of `cols` from `c0`.
///
/// # Safety
/// As [`pass`], for columns `c0..c0 + C` of `cols`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn pass_cols<const H: usize, const C: usize, const KIND: u8>(
    nb: usize,
    panel: *const u8,
    h0: usize,
    cols: &[&[u8]],
    c0: usize,
    out: &mut [f32],
) {
    let y: [*const u8; C] = std::array::from_fn(|c| cols[c0 + c].as_ptr());
    // SAFETY: as the caller guarantees; column c0 + c's values start at
    // (c0 + c) x 16 in `out`.
    unsafe { pass::<H, C, KIND>(nb, panel, h0, y, out.as_mut_ptr().add(c0 * PANEL_ROWS)) }
}

/// `out[c * PANEL_ROWS + r] = dot(row r of the panel, column c)` for the
/// 1 to [`GEMM_COLS`] columns `cols`.
///
/// # Safety
/// AVX2, FMA and F16C must be present; `panel` holds `nb` blocks of the
/// layout `KIND` selects, every column `nb` prepared blocks, and `out` room
/// for `cols.len()` x 16 values.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn run<const KIND: u8>(
    nb: usize,
    panel: *const u8,
    cols: &[&[u8]],
    out: &mut [f32],
) {
    debug_assert!((1..=GEMM_COLS).contains(&cols.len()));
    // SAFETY: every call below is within the caller's guarantees, for
    // columns that exist.
    unsafe {
        match cols.len() {
            1 => pass_cols::<2, 1, KIND>(nb, panel, 0, cols, 0, out),
            2 => pass_cols::<2, 2, KIND>(nb, panel, 0, cols, 0, out),
            n => {
                for h in 0..2 {
                    let mut c0 = 0;
                    while c0 < n {
                        match n - c0 {
                            1 => pass_cols::<1, 1, KIND>(nb, panel, h, cols, c0, out),
                            2 => pass_cols::<1, 2, KIND>(nb, panel, h, cols, c0, out),
                            3 => pass_cols::<1, 3, KIND>(nb, panel, h, cols, c0, out),
                            _ => pass_cols::<1, PASS_COLS, KIND>(nb, panel, h, cols, c0, out),
                        }
                        c0 += PASS_COLS;
                    }
                }
            }
        }
    }
}
