//! The AVX2 kernels of the Q4_K and Q6_K panel layouts (see the parent
//! module), and their packing without AVX-512: the same bytes, so that
//! weights stored packed serve either instruction set.
//!
//! A 256-bit register holds 8 lanes: a panel's 16 rows are two halves,
//! the first and the last 32 bytes of every 64-byte vector. Without VNNI a
//! byte dot product is `VPMADDUBSW` (pairs of unsigned x signed bytes into
//! i16) and `VPMADDWD` by ones (into i32). The i16 sums stay exact: a
//! Q4_K sub-block (32 weights, levels up to 15) sums to at most
//! 8 x 2 x 15 x 128 = 30,720 per lane; Q6_K levels (up to 63) are widened
//! every two k-groups (2 x 2 x 63 x 128 = 32,256). Q4_K's high nibbles are
//! shifted down rather than used in place (16 times the level would
//! overflow the pairs), and scaled by d where the VNNI kernel takes d / 16:
//! both products are exact, so the f32 operations give the same bits.
//! Every sum is the VNNI kernel's, applied by the same f32 operations in
//! the same order.
//!
//! A call's columns go through each half panel in passes of up to
//! [`PASS_COLS`]; a single column (token generation streaming stored
//! panels) takes both halves in one pass, so that each line is read once.

use std::arch::x86_64::*;

use super::q4q5::{
    A4_D, A4_QS, A4_SB, A4_SUM, Q4K_BYTES, Q4K_D, Q4K_DMIN, Q4K_PREFETCH, Q4K_SC, Q4_K_GEMM,
};
use super::q6::{Q6K_BYTES, Q6K_CORR, Q6K_D, Q6K_DSC, Q6K_QS, Q6K_SB, Q6_K_GEMM};
use super::{check_pack, check_run, Q4K_QS, Q4K_SB, QK, VEC};
use crate::simd::avx2::{bcast4, load};
use crate::simd::scalar::{Q8K_BSUMS, Q8K_BYTES, Q8K_QS};
use crate::simd::{Gemm, GEMM_COLS, PANEL_ROWS};

/// Q4_K with AVX2: the layout, packing and activations of the VNNI kernel.
pub(super) static Q4_K_GEMM_AVX2: Gemm = Gemm {
    pack: |n, rows, out| {
        check_pack(n, rows, Q4K_BYTES, out, Q4K_SB);
        q4k_pack(n / QK, rows, out)
    },
    run: |n, panel, cols, out| {
        check_run(n, panel, Q4K_SB, cols, A4_SB, out);
        // SAFETY: installed only on CPUs with AVX2, FMA and F16C; lengths
        // checked.
        unsafe { q4k_run(n / QK, panel, cols, out) }
    },
    ..Q4_K_GEMM
};

/// Q6_K with AVX2: the layout, packing and activations of the VNNI kernel.
pub(super) static Q6_K_GEMM_AVX2: Gemm = Gemm {
    pack: |n, rows, out| {
        check_pack(n, rows, Q6K_BYTES, out, Q6K_SB);
        q6k_pack(n / QK, rows, out)
    },
    run: |n, panel, cols, out| {
        check_run(n, panel, Q6K_SB, cols, Q8K_BYTES, out);
        // SAFETY: installed only on CPUs with AVX2, FMA and F16C; lengths
        // checked.
        unsafe { q6k_run(n / QK, panel, cols, out) }
    },
    ..Q6_K_GEMM
};

/// Lanes of a 256-bit register: rows of a half panel.
pub(super) const HALF: usize = PANEL_ROWS / 2;
/// Most columns of a pass over one half panel.
pub(super) const PASS_COLS: usize = 4;

/// 8 f16 at `p` as f32.
///
/// # Safety
/// `p` must be readable for 16 bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn load_ph(p: *const u8) -> __m256 {
    // SAFETY: 16 readable bytes (caller).
    _mm256_cvtph_ps(unsafe { _mm_loadu_si128(p as *const __m128i) })
}

/// 8 f32 at `p`.
///
/// # Safety
/// `p` must be readable for 32 bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load_ps(p: *const u8) -> __m256 {
    // SAFETY: 32 readable bytes (caller).
    unsafe { _mm256_loadu_ps(p as *const f32) }
}

/// The f32 at `p` in every lane.
///
/// # Safety
/// `p` must be readable for 4 bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn bcast_ps(p: *const u8) -> __m256 {
    // SAFETY: 4 readable bytes (caller).
    _mm256_set1_ps(unsafe { (p as *const f32).read_unaligned() })
}

/// A `VPSHUFB` control that moves byte `k` of every dword to the dword's
/// low byte and zeroes the others.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn byte_to_dword(k: i32) -> __m256i {
    shuffle_control(0x8080_8000_u32 as i32 + k, 4)
}

/// A `VPSHUFB` control that moves bytes `2h` and `2h + 1` of every dword
/// to its two i16 halves, zero-extended.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn bytes_to_words(h: i32) -> __m256i {
    shuffle_control(0x8001_8000_u32 as i32 + 0x0002_0002 * h, 0x0004_0004)
}

/// A `VPSHUFB` control whose dword `j` of each 128-bit lane is `b + j s`
/// (`s` steps the byte indices to dword `j`'s bytes).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn shuffle_control(b: i32, s: i32) -> __m256i {
    _mm256_setr_epi32(
        b,
        b + s,
        b + 2 * s,
        b + 3 * s,
        b,
        b + s,
        b + 2 * s,
        b + 3 * s,
    )
}

/// Runs `$pass::<H, C>` over the 1 to [`GEMM_COLS`] columns of a call.
macro_rules! by_passes {
    ($pass:ident, $nb:expr, $panel:expr, $cols:expr, $out:expr) => {
        match $cols.len() {
            1 => $pass::<2, 1>($nb, $panel, 0, $cols, 0, $out),
            n => {
                for h in 0..2 {
                    let mut c0 = 0;
                    while c0 < n {
                        match n - c0 {
                            1 => $pass::<1, 1>($nb, $panel, h, $cols, c0, $out),
                            2 => $pass::<1, 2>($nb, $panel, h, $cols, c0, $out),
                            3 => $pass::<1, 3>($nb, $panel, h, $cols, c0, $out),
                            _ => $pass::<1, { super::avx2::PASS_COLS }>(
                                $nb, $panel, h, $cols, c0, $out,
                            ),
                        }
                        c0 += super::avx2::PASS_COLS;
                    }
                }
            }
        }
    };
}
pub(super) use by_passes;

/// Q4_K: `out[c * PANEL_ROWS + r] = dot(row r, column c)` for the 1 to
/// [`GEMM_COLS`] prepared columns `cols`.
///
/// # Safety
/// AVX2, FMA and F16C; `nb` super-blocks in `panel` and in every column,
/// `cols.len() * PANEL_ROWS` results.
pub(super) unsafe fn q4k_run(nb: usize, panel: &[u8], cols: &[&[u8]], out: &mut [f32]) {
    debug_assert!((1..=GEMM_COLS).contains(&cols.len()));
    // SAFETY: as the caller guarantees, for columns that exist.
    unsafe { by_passes!(q4k_pass, nb, panel.as_ptr(), cols, out) }
}

/// Q6_K: as [`q4k_run`].
///
/// # Safety
/// As [`q4k_run`].
pub(super) unsafe fn q6k_run(nb: usize, panel: &[u8], cols: &[&[u8]], out: &mut [f32]) {
    debug_assert!((1..=GEMM_COLS).contains(&cols.len()));
    // SAFETY: as the caller guarantees, for columns that exist.
    unsafe { by_passes!(q6k_pass, nb, panel.as_ptr(), cols, out) }
}

/// The Q4_K dot products of halves `h0..h0 + H` of the panel with columns
/// `c0..c0 + C`, stored at their places in `out`.
///
/// # Safety
/// As [`q4k_run`], for columns `c0..c0 + C`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4k_pass<const H: usize, const C: usize>(
    nb: usize,
    panel: *const u8,
    h0: usize,
    cols: &[&[u8]],
    c0: usize,
    out: &mut [f32],
) {
    let m4 = _mm256_set1_epi8(0x0f);
    let m3f = _mm256_set1_epi8(0x3f);
    let m30 = _mm256_set1_epi8(0x30);
    let ones = _mm256_set1_epi16(1);
    let mut acc = [[_mm256_setzero_ps(); C]; H];
    let ask = C == 1 && crate::simd::stream::software_prefetch();
    for ib in 0..nb {
        // SAFETY: super-block ib of the panel and of every column (caller);
        // every offset below stays inside them.
        unsafe {
            let p = panel.add(ib * Q4K_SB);
            let ahead = p.wrapping_add(Q4K_PREFETCH);
            let y: [*const u8; C] = std::array::from_fn(|c| cols[c0 + c].as_ptr().add(ib * A4_SB));
            for h in 0..H {
                let hh = h0 + h;
                let half = |o: usize| p.add(o + 32 * hh);
                if ask {
                    // Streaming: the header's lines now, each vector of
                    // levels' as it is read. A prefetch is only a hint: it
                    // never faults, so the address may lie past the panel.
                    for o in (0..Q4K_QS).step_by(64) {
                        _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(o) as *const i8);
                    }
                }
                // The 6-bit scales of sub-blocks 0..4 and 4..8 as bytes of
                // each lane, and the mins likewise.
                let (s0, s1, s2) = (
                    load(half(Q4K_SC)),
                    load(half(Q4K_SC + VEC)),
                    load(half(Q4K_SC + 2 * VEC)),
                );
                let s03 = _mm256_and_si256(s0, m3f);
                let s47 = _mm256_or_si256(
                    _mm256_and_si256(s2, m4),
                    _mm256_and_si256(_mm256_srli_epi32::<2>(s0), m30),
                );
                let d = load_ph(p.add(Q4K_D + 2 * HALF * hh));
                let mut fsum = [_mm256_setzero_ps(); C];
                for j in 0..4 {
                    for nib in 0..2 {
                        let mut s16 = [_mm256_setzero_si256(); C];
                        for i in 0..8 {
                            let at = Q4K_QS + (8 * j + i) * VEC;
                            if ask && nib == 0 {
                                _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(at) as *const i8);
                            }
                            let v = load(half(at));
                            let w = if nib == 0 {
                                _mm256_and_si256(v, m4)
                            } else {
                                _mm256_and_si256(_mm256_srli_epi16::<4>(v), m4)
                            };
                            let ya = A4_QS + 64 * j + 32 * nib + 4 * i;
                            for c in 0..C {
                                let t = _mm256_maddubs_epi16(w, bcast4(y[c].add(ya)));
                                s16[c] = _mm256_add_epi16(s16[c], t);
                            }
                        }
                        let g = 2 * j + nib;
                        let s = if g < 4 { s03 } else { s47 };
                        let sc = _mm256_shuffle_epi8(s, byte_to_dword(g as i32 % 4));
                        let dsc = _mm256_mul_ps(d, _mm256_cvtepi32_ps(sc));
                        for c in 0..C {
                            let isub = _mm256_madd_epi16(s16[c], ones);
                            fsum[c] = _mm256_fmadd_ps(dsc, _mm256_cvtepi32_ps(isub), fsum[c]);
                        }
                    }
                }
                let m03 = _mm256_and_si256(s1, m3f);
                let m47 = _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi32::<4>(s2), m4),
                    _mm256_and_si256(_mm256_srli_epi32::<2>(s1), m30),
                );
                let (lo, hi) = (bytes_to_words(0), bytes_to_words(1));
                let mins = [
                    _mm256_shuffle_epi8(m03, lo),
                    _mm256_shuffle_epi8(m03, hi),
                    _mm256_shuffle_epi8(m47, lo),
                    _mm256_shuffle_epi8(m47, hi),
                ];
                let dmin = load_ph(p.add(Q4K_DMIN + 2 * HALF * hh));
                for c in 0..C {
                    let mut m = _mm256_setzero_si256();
                    for (q, mq) in mins.iter().enumerate() {
                        let t = _mm256_madd_epi16(*mq, bcast4(y[c].add(A4_SUM + 4 * q)));
                        m = _mm256_add_epi32(m, t);
                    }
                    let t = _mm256_fnmadd_ps(dmin, _mm256_cvtepi32_ps(m), fsum[c]);
                    acc[h][c] = _mm256_fmadd_ps(bcast_ps(y[c].add(A4_D)), t, acc[h][c]);
                }
            }
        }
    }
    store(&acc, h0, c0, out);
}

/// The Q6_K dot products of halves `h0..h0 + H` of the panel with columns
/// `c0..c0 + C`, stored at their places in `out`.
///
/// # Safety
/// As [`q6k_run`], for columns `c0..c0 + C`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q6k_pass<const H: usize, const C: usize>(
    nb: usize,
    panel: *const u8,
    h0: usize,
    cols: &[&[u8]],
    c0: usize,
    out: &mut [f32],
) {
    let ones = _mm256_set1_epi16(1);
    let mut acc = [[_mm256_setzero_ps(); C]; H];
    for ib in 0..nb {
        // SAFETY: super-block ib of the panel and Q8_K block ib of every
        // column (caller); every offset below stays inside them.
        unsafe {
            let p = panel.add(ib * Q6K_SB);
            let y: [*const u8; C] =
                std::array::from_fn(|c| cols[c0 + c].as_ptr().add(ib * Q8K_BYTES));
            for h in 0..H {
                let half = |o: usize| p.add(o + 32 * (h0 + h));
                let mut fsum = [_mm256_setzero_ps(); C];
                for g in 0..16 {
                    // 16 weights: two i16 sums of two k-groups each.
                    let mut isub = [_mm256_setzero_si256(); C];
                    for pair in 0..2 {
                        let i = 2 * pair;
                        let w0 = load(half(Q6K_QS + (4 * g + i) * VEC));
                        let w1 = load(half(Q6K_QS + (4 * g + i + 1) * VEC));
                        let at = Q8K_QS + 16 * g + 4 * i;
                        for c in 0..C {
                            let t = _mm256_add_epi16(
                                _mm256_maddubs_epi16(w0, bcast4(y[c].add(at))),
                                _mm256_maddubs_epi16(w1, bcast4(y[c].add(at + 4))),
                            );
                            isub[c] = _mm256_add_epi32(isub[c], _mm256_madd_epi16(t, ones));
                        }
                    }
                    let dsc = load_ps(half(Q6K_DSC + g * VEC));
                    for c in 0..C {
                        fsum[c] = _mm256_fmadd_ps(dsc, _mm256_cvtepi32_ps(isub[c]), fsum[c]);
                    }
                }
                // The offset: -32 * sum over sub-blocks of scale * (sum of
                // 16 activations).
                let d = load_ps(half(Q6K_D));
                for c in 0..C {
                    let mut m = _mm256_setzero_si256();
                    for q in 0..8 {
                        let t = _mm256_madd_epi16(
                            load(half(Q6K_CORR + q * VEC)),
                            bcast4(y[c].add(Q8K_BSUMS + 4 * q)),
                        );
                        m = _mm256_add_epi32(m, t);
                    }
                    let t = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(m), fsum[c]);
                    acc[h][c] = _mm256_fmadd_ps(bcast_ps(y[c]), t, acc[h][c]);
                }
            }
        }
    }
    store(&acc, h0, c0, out);
}

/// Stores the sums of halves `h0..h0 + H` for columns `c0..c0 + C`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn store<const H: usize, const C: usize>(
    acc: &[[__m256; C]; H],
    h0: usize,
    c0: usize,
    out: &mut [f32],
) {
    for (h, row) in acc.iter().enumerate() {
        for (c, a) in row.iter().enumerate() {
            let o = (c0 + c) * PANEL_ROWS + HALF * (h0 + h);
            let dst: &mut [f32; HALF] = (&mut out[o..o + HALF]).try_into().unwrap();
            // SAFETY: `dst` holds 8 f32.
            unsafe { _mm256_storeu_ps(dst.as_mut_ptr(), *a) };
        }
    }
}

/// Q4_K packed without AVX-512: the rows' headers and `qs` bytes
/// transposed 4 bytes at a time (zeros for missing rows).
pub(super) fn q4k_pack(nb: usize, rows: &[&[u8]], out: &mut [u8]) {
    for ib in 0..nb {
        let o = &mut out[ib * Q4K_SB..(ib + 1) * Q4K_SB];
        for r in 0..PANEL_ROWS {
            let x = rows
                .get(r)
                .map(|x| &x[ib * Q4K_BYTES..(ib + 1) * Q4K_BYTES]);
            let at = |k: usize| x.map_or([0; 4], |x| [x[k], x[k + 1], x[k + 2], x[k + 3]]);
            let [d0, d1, m0, m1] = at(0);
            o[Q4K_D + 2 * r..Q4K_D + 2 * r + 2].copy_from_slice(&[d0, d1]);
            o[Q4K_DMIN + 2 * r..Q4K_DMIN + 2 * r + 2].copy_from_slice(&[m0, m1]);
            for k in 0..3 {
                let v = Q4K_SC + k * VEC + 4 * r;
                o[v..v + 4].copy_from_slice(&at(4 + 4 * k));
            }
            for k in 0..32 {
                let v = Q4K_QS + k * VEC + 4 * r;
                o[v..v + 4].copy_from_slice(&at(16 + 4 * k));
            }
        }
    }
}

/// Q6_K packed without AVX-512: the levels (0..63) transposed 4 at a time,
/// d times each scale, `-32` times the scales as i16 pairs, d (zeros for
/// missing rows).
pub(super) fn q6k_pack(nb: usize, rows: &[&[u8]], out: &mut [u8]) {
    for ib in 0..nb {
        let o = &mut out[ib * Q6K_SB..(ib + 1) * Q6K_SB];
        for r in 0..PANEL_ROWS {
            let x = rows
                .get(r)
                .map(|x| &x[ib * Q6K_BYTES..(ib + 1) * Q6K_BYTES]);
            let (levels, sc, d) = match x {
                Some(x) => {
                    let d = half::f16::from_le_bytes([x[208], x[209]]).to_f32();
                    (
                        q6k_levels(x),
                        std::array::from_fn(|g| i32::from(x[192 + g] as i8)),
                        d,
                    )
                }
                None => ([0u8; QK], [0i32; 16], 0.0),
            };
            for k in 0..QK / 4 {
                let v = Q6K_QS + k * VEC + 4 * r;
                o[v..v + 4].copy_from_slice(&levels[4 * k..4 * k + 4]);
            }
            for (g, &s) in sc.iter().enumerate() {
                let v = Q6K_DSC + g * VEC + 4 * r;
                o[v..v + 4].copy_from_slice(&(d * s as f32).to_le_bytes());
            }
            for q in 0..8 {
                let v = Q6K_CORR + q * VEC + 4 * r;
                let lo = (-32 * sc[2 * q]) as i16;
                let hi = (-32 * sc[2 * q + 1]) as i16;
                o[v..v + 2].copy_from_slice(&lo.to_le_bytes());
                o[v + 2..v + 4].copy_from_slice(&hi.to_le_bytes());
            }
            let v = Q6K_D + 4 * r;
            o[v..v + 4].copy_from_slice(&d.to_le_bytes());
        }
    }
}

/// The 256 levels (0..63, the weight plus 32) of a Q6_K block.
fn q6k_levels(b: &[u8]) -> [u8; QK] {
    let (ql, qh) = (&b[0..128], &b[128..192]);
    let mut q = [0u8; QK];
    for half in 0..2 {
        let (ql, qh, o) = (&ql[64 * half..], &qh[32 * half..], 128 * half);
        for l in 0..32 {
            q[o + l] = (ql[l] & 15) | ((qh[l] & 3) << 4);
            q[o + l + 32] = (ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4);
            q[o + l + 64] = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
            q[o + l + 96] = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
        }
    }
    q
}
