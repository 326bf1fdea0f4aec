//! The Q6_K panel that is as compact as its rows (16 x 210 bytes per
//! super-block), so that Q6_K weights can be stored packed and token
//! generation reads them through the panel kernel: AVX2's (see
//! [`Q6_K_ROWS_GEMM`]), and with AVX-512 one that takes both half panels
//! in one pass with the same bits ([`Q6_K_ROWS_GEMM_512`]; one column,
//! one thread, 2048 x 144 rows hot in L2: 14 GB/s -> 36 GB/s of weights).
//!
//! Layout of a panel super-block: the rows' first 208 bytes (`ql`, `qh`,
//! the 16 scales) cut into 52 chunks of 4 bytes, each chunk of the 16 rows
//! side by side in one vector (row `r` in lane `r`), then the rows' d as
//! 16 f16. `ql` chunk `16 h + m` holds in its low nibbles the low 4 bits of
//! weights `128 h + 4 m..` (one k-group), in its high nibbles those of
//! weights `128 h + 64 + 4 m..`; `qh` chunk `8 h + n` holds the top 2 bits
//! of the k-groups at `128 h + 4 n`, `+ 32`, `+ 64` and `+ 96` (bit pairs
//! 0 to 3), those of `ql` chunks `16 h + n` and `16 h + n + 8`. The
//! vectors go in the order the kernel reads them, so that a panel is read
//! front to back: the 4 scale chunks, then for each `h` and `n` the `qh`
//! chunk and its two `ql` chunks ([`slot`]).
//!
//! The kernel builds each k-group's levels (0..63, the weight plus 32) with
//! a mask, a shift and an OR, multiplies them by the activation bytes with
//! `VPMADDUBSW`, and widens every two k-groups with `VPMADDWD` by the
//! sub-block's scale (as i16 pairs): 2 x 2 x 63 x 128 = 32,256 fits the
//! i16 sums. A lane sums its whole super-block in i32, exactly
//! (`|sum| < 16 x 127 x (16 x 63 x 128 + 32 x 16 x 128) < 2^31`), the
//! offset `-32 x scale x (sum of the sub-block's 16 activations)` from the
//! Q8_K block sums included, and one FMA per super-block and column adds
//! it times `d x dy` to the lane's f32 accumulator. The same operations
//! run in the same order whatever the number of columns per call.

use std::arch::x86_64::*;

use super::avx2::{bcast_ps, by_passes, load_ph, shuffle_control, store, HALF};
use super::q6::{Q6K_CORR, Q6K_D, Q6K_DSC, Q6K_QS, Q6K_SB};
use super::{check_pack, check_run, QK, VEC};
use crate::simd::avx2::{bcast4, load};
use crate::simd::avx512::{bcast4 as bcast4_512, load256, load512};
use crate::simd::scalar::{Q8K_BSUMS, Q8K_BYTES, Q8K_QS};
use crate::simd::{Gemm, Wide, GEMM_COLS, PANEL_ROWS};

/// Bytes of a Q6_K block.
const BYTES: usize = 210;
/// The scale vectors, then for each half `hf` of the block and `n` in
/// 0..8 three vectors: `qh` chunk `8 hf + n`, `ql` chunks `16 hf + n` and
/// `16 hf + n + 8` (the order the kernel reads them in).
const SC: usize = 0;
const LEVELS: usize = SC + 4 * VEC;
/// The rows' d as f16.
const D: usize = LEVELS + 48 * VEC;
/// Bytes of a panel super-block: 16 blocks.
const SB: usize = D + 2 * PANEL_ROWS;
const _: () = assert!(SB == PANEL_ROWS * BYTES);
/// Bytes ahead of the super-block being read that a call with one column
/// (streaming stored panels from memory) asks the cache for.
const PREFETCH: usize = 6144;

/// Q6_K in the compact panel layout, with the AVX2 kernel; many columns
/// take the AVX2 kernel of the levels panel (`super::q6`).
pub(super) static Q6_K_ROWS_GEMM: Gemm = Gemm {
    panel_bytes: |n| n / QK * SB,
    pack,
    act_bytes: |n| n / QK * Q8K_BYTES,
    prep: super::q6::q8k_copy,
    run: |n, panel, cols, out| {
        check_run(n, panel, SB, cols, Q8K_BYTES, out);
        // SAFETY: installed only on CPUs with AVX2, FMA and F16C; lengths
        // checked.
        unsafe { run(n / QK, panel, cols, out) }
    },
    run_pair: None,
    wide: Some(&WIDE),
};

/// As [`Q6_K_ROWS_GEMM`], with the AVX-512 kernel (both half panels in
/// one pass, the same operations per lane, so the same bits), for
/// AVX-512 CPUs without VNNI.
pub(super) static Q6_K_ROWS_GEMM_512: Gemm = Gemm {
    run: |n, panel, cols, out| {
        check_run(n, panel, SB, cols, Q8K_BYTES, out);
        // SAFETY: installed only on CPUs with AVX-512 F/BW/VL/DQ; lengths
        // checked.
        unsafe { run512(n / QK, panel, cols, out) }
    },
    ..Q6_K_ROWS_GEMM
};

/// As [`Q6_K_ROWS_GEMM_512`], with the levels panel's AVX-512 VNNI kernel
/// for many columns.
pub(super) static Q6_K_ROWS_GEMM_VNNI: Gemm = Gemm {
    wide: Some(&WIDE_VNNI),
    ..Q6_K_ROWS_GEMM_512
};

static WIDE: Wide = Wide {
    gemm: &super::avx2::Q6_K_GEMM_AVX2,
    expand,
    min_cols: crate::matmul::GEMM_MIN_COLS,
};

static WIDE_VNNI: Wide = Wide {
    gemm: &super::q6::Q6_K_GEMM,
    expand,
    min_cols: crate::matmul::GEMM_MIN_COLS,
};

/// Expands one compact panel into the levels panel (the same bytes as
/// packing its rows there).
fn expand(n: usize, panel: &[u8], out: &mut [u8]) {
    let nb = n / QK;
    assert!(
        n % QK == 0 && panel.len() >= nb * SB && out.len() >= nb * Q6K_SB,
        "panel expand: {n} elements, short slices"
    );
    for ib in 0..nb {
        // SAFETY: installed only on CPUs with AVX2, FMA and F16C; super-block
        // ib of both lies inside them (checked).
        unsafe {
            expand_block(
                panel.as_ptr().add(ib * SB),
                out.as_mut_ptr().add(ib * Q6K_SB),
            )
        }
    }
}

/// One super-block of [`expand`], half panel by half panel: the levels
/// of every k-group, d x scale as f32, -32 x the scales as i16 pairs, d.
///
/// # Safety
/// AVX2, FMA and F16C; `p` readable for a compact super-block, `o`
/// writable for a levels one.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn expand_block(p: *const u8, o: *mut u8) {
    for h in 0..2 {
        // SAFETY: every offset is inside the two super-blocks (caller).
        unsafe {
            let half = |at: usize| p.add(at + 32 * h);
            let put =
                |at: usize, v: __m256i| _mm256_storeu_si256(o.add(at + 32 * h) as *mut __m256i, v);
            for hf in 0..2 {
                for n in 0..8 {
                    let v = half(LEVELS + 3 * (8 * hf + n) * VEC);
                    for f in 0..4 {
                        put(Q6K_QS + (32 * hf + 8 * f + n) * VEC, levels(v, f));
                    }
                }
            }
            let sc: [__m256i; 4] = std::array::from_fn(|q| load(half(SC + q * VEC)));
            let d = load_ph(p.add(D + 2 * HALF * h));
            for g in 0..16 {
                let s = _mm256_srai_epi32::<16>(scale_words(&sc, g, false));
                let dsc = _mm256_mul_ps(d, _mm256_cvtepi32_ps(s));
                put(Q6K_DSC + g * VEC, _mm256_castps_si256(dsc));
            }
            for q in 0..8 {
                let w = _mm256_slli_epi16::<5>(scale_words(&sc, 2 * q, true));
                put(
                    Q6K_CORR + q * VEC,
                    _mm256_sub_epi16(_mm256_setzero_si256(), w),
                );
            }
            put(Q6K_D, _mm256_castps_si256(d));
        }
    }
}

/// Packs 1 to 16 rows: their bytes transposed 4 at a time, then their d
/// (zeros for missing rows).
fn pack(n: usize, rows: &[&[u8]], out: &mut [u8]) {
    check_pack(n, rows, BYTES, out, SB);
    for ib in 0..n / QK {
        let o = &mut out[ib * SB..(ib + 1) * SB];
        for r in 0..PANEL_ROWS {
            let x = rows.get(r).map(|x| &x[ib * BYTES..(ib + 1) * BYTES]);
            for k in 0..D / VEC {
                let v = slot(k) * VEC + 4 * r;
                match x {
                    Some(x) => o[v..v + 4].copy_from_slice(&x[4 * k..4 * k + 4]),
                    None => o[v..v + 4].fill(0),
                }
            }
            let v = D + 2 * r;
            match x {
                Some(x) => o[v..v + 2].copy_from_slice(&x[208..210]),
                None => o[v..v + 2].fill(0),
            }
        }
    }
}

/// The vector that holds chunk `k` (bytes `4k..4k + 4`) of the rows.
fn slot(k: usize) -> usize {
    let levels = |hf: usize, n: usize, i: usize| (LEVELS / VEC) + 3 * (8 * hf + n) + i;
    match k {
        0..32 => levels(k / 16, k % 8, 1 + k % 16 / 8),
        32..48 => levels((k - 32) / 8, k % 8, 0),
        _ => k - 48,
    }
}

/// `out[c * PANEL_ROWS + r] = dot(row r, column c)` for the 1 to
/// [`GEMM_COLS`] Q8_K columns `cols`.
///
/// # Safety
/// AVX2, FMA and F16C; `nb` super-blocks in `panel` and in every column,
/// `cols.len() * PANEL_ROWS` results.
unsafe fn run(nb: usize, panel: &[u8], cols: &[&[u8]], out: &mut [f32]) {
    debug_assert!((1..=GEMM_COLS).contains(&cols.len()));
    // SAFETY: as the caller guarantees, for columns that exist.
    unsafe { by_passes!(pass, nb, panel.as_ptr(), cols, out) }
}

/// A `VPSHUFB` control that puts byte `k` of every dword in the high byte
/// of both its i16 halves (`k + 1` in the second with `pair`), zeroing the
/// low bytes: an arithmetic shift right by 8 then gives the signed byte(s)
/// as i16.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn byte_to_words(k: i32, pair: bool) -> __m256i {
    let b = 0x0080_0080 | (k << 8) | ((k + i32::from(pair)) << 24);
    shuffle_control(b, 0x0400_0400)
}

/// The scales of sub-block `s` (`pair`: and `s + 1`) as i16 words of every
/// lane, from the half panel's scale vectors `sc`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn scale_words(sc: &[__m256i; 4], s: usize, pair: bool) -> __m256i {
    let w = _mm256_shuffle_epi8(sc[s / 4], byte_to_words((s % 4) as i32, pair));
    _mm256_srai_epi16::<8>(w)
}

/// The levels (0..63) of field `f` of the k-group whose three vectors
/// (`qh`, then the two of `ql`) start at `v` in a half panel.
///
/// # Safety
/// `v` must be readable for the three vectors' halves (32 bytes at 0,
/// [`VEC`] and 2 [`VEC`]).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn levels(v: *const u8, f: usize) -> __m256i {
    let m4 = _mm256_set1_epi8(0x0f);
    let m30 = _mm256_set1_epi8(0x30);
    // SAFETY: as the caller guarantees.
    let (qh, q) = unsafe { (load(v), load(v.add(VEC * (1 + f % 2)))) };
    let (low, high) = match f {
        0 => (q, _mm256_slli_epi16::<4>(qh)),
        1 => (q, _mm256_slli_epi16::<2>(qh)),
        2 => (_mm256_srli_epi16::<4>(q), qh),
        _ => (_mm256_srli_epi16::<4>(q), _mm256_srli_epi16::<2>(qh)),
    };
    _mm256_or_si256(_mm256_and_si256(low, m4), _mm256_and_si256(high, m30))
}

/// The dot products of halves `h0..h0 + H` of the panel with columns
/// `c0..c0 + C`, stored at their places in `out`.
///
/// # Safety
/// As [`run`], for columns `c0..c0 + C`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn pass<const H: usize, const C: usize>(
    nb: usize,
    panel: *const u8,
    h0: usize,
    cols: &[&[u8]],
    c0: usize,
    out: &mut [f32],
) {
    let mut acc = [[_mm256_setzero_ps(); C]; H];
    let ask = C == 1 && crate::simd::stream::software_prefetch();
    for ib in 0..nb {
        // SAFETY: super-block ib of the panel and Q8_K block ib of every
        // column (caller); every offset below stays inside them.
        unsafe {
            let p = panel.add(ib * SB);
            let y: [*const u8; C] =
                std::array::from_fn(|c| cols[c0 + c].as_ptr().add(ib * Q8K_BYTES));
            // One column streams the panels from memory: each line is
            // asked for PREFETCH bytes on as it is first read. A prefetch
            // is only a hint: it never faults, so the address may lie past
            // the panel.
            let ahead = |o: usize| {
                if ask {
                    _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(o + PREFETCH) as *const i8);
                }
            };
            for o in (SC..LEVELS).step_by(64).chain([D]) {
                ahead(o);
            }
            for h in 0..H {
                let half = |o: usize| p.add(o + 32 * (h0 + h));
                let sc: [__m256i; 4] = std::array::from_fn(|q| load(half(SC + q * VEC)));
                let mut isum = [_mm256_setzero_si256(); C];
                for hf in 0..2 {
                    for sb4 in 0..2 {
                        if h == 0 {
                            for n in 4 * sb4..4 * sb4 + 4 {
                                for i in 0..3 {
                                    ahead(LEVELS + (3 * (8 * hf + n) + i) * VEC);
                                }
                            }
                        }
                        // Field f of k-groups n holds sub-block 8 hf + 2 f + sb4.
                        for f in 0..4 {
                            let sw = scale_words(&sc, 8 * hf + 2 * f + sb4, false);
                            for pr in 0..2 {
                                let mut s16 = [_mm256_setzero_si256(); C];
                                for n in 4 * sb4 + 2 * pr..4 * sb4 + 2 * pr + 2 {
                                    let w = levels(half(LEVELS + 3 * (8 * hf + n) * VEC), f);
                                    let at = Q8K_QS + 128 * hf + 32 * f + 4 * n;
                                    for c in 0..C {
                                        let t = _mm256_maddubs_epi16(w, bcast4(y[c].add(at)));
                                        s16[c] = _mm256_add_epi16(s16[c], t);
                                    }
                                }
                                for c in 0..C {
                                    let t = _mm256_madd_epi16(s16[c], sw);
                                    isum[c] = _mm256_add_epi32(isum[c], t);
                                }
                            }
                        }
                    }
                }
                // The offset: -32 x the sum over sub-blocks of scale x the
                // sum of its 16 activations.
                let mut m = [_mm256_setzero_si256(); C];
                for q in 0..8 {
                    let pq = scale_words(&sc, 2 * q, true);
                    for c in 0..C {
                        let t = _mm256_madd_epi16(pq, bcast4(y[c].add(Q8K_BSUMS + 4 * q)));
                        m[c] = _mm256_add_epi32(m[c], t);
                    }
                }
                let d = load_ph(p.add(D + 2 * HALF * (h0 + h)));
                for c in 0..C {
                    let s = _mm256_sub_epi32(isum[c], _mm256_slli_epi32::<5>(m[c]));
                    let dd = _mm256_mul_ps(d, bcast_ps(y[c]));
                    acc[h][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), dd, acc[h][c]);
                }
            }
        }
    }
    store(&acc, h0, c0, out);
}

/// [`run`] with AVX-512: a vector holds the 16 rows, so one pass does
/// what [`pass`] does for each half panel, with the same integer sums and
/// the same f32 operations per row.
///
/// # Safety
/// AVX-512 F/BW/VL/DQ; `nb` super-blocks in `panel` and in every column,
/// `cols.len() * PANEL_ROWS` results.
unsafe fn run512(nb: usize, panel: &[u8], cols: &[&[u8]], out: &mut [f32]) {
    debug_assert!((1..=GEMM_COLS).contains(&cols.len()));
    let p = panel.as_ptr();
    let mut c0 = 0;
    // SAFETY: as the caller guarantees, for columns that exist.
    unsafe {
        while c0 < cols.len() {
            match cols.len() - c0 {
                1 => pass512::<1>(nb, p, cols, c0, out),
                2 => pass512::<2>(nb, p, cols, c0, out),
                3 => pass512::<3>(nb, p, cols, c0, out),
                _ => pass512::<4>(nb, p, cols, c0, out),
            }
            c0 += 4;
        }
    }
}

/// [`scale_words`] for the 16 rows, from the scale vectors `sc`: the same
/// control in each 128-bit lane.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
fn scale_words512(sc: &[__m512i; 4], s: usize, pair: bool) -> __m512i {
    let ctrl = byte_to_words((s % 4) as i32, pair);
    let ctrl = _mm512_broadcast_i32x4(_mm256_castsi256_si128(ctrl));
    _mm512_srai_epi16::<8>(_mm512_shuffle_epi8(sc[s / 4], ctrl))
}

/// [`levels`] for the 16 rows.
///
/// # Safety
/// `v` must be readable for the three vectors (64 bytes at 0, [`VEC`] and
/// 2 [`VEC`]).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn levels512(v: *const u8, f: usize) -> __m512i {
    let m4 = _mm512_set1_epi8(0x0f);
    let m30 = _mm512_set1_epi8(0x30);
    // SAFETY: as the caller guarantees.
    let (qh, q) = unsafe { (load512(v), load512(v.add(VEC * (1 + f % 2)))) };
    let (low, high) = match f {
        0 => (q, _mm512_slli_epi16::<4>(qh)),
        1 => (q, _mm512_slli_epi16::<2>(qh)),
        2 => (_mm512_srli_epi16::<4>(q), qh),
        _ => (_mm512_srli_epi16::<4>(q), _mm512_srli_epi16::<2>(qh)),
    };
    _mm512_or_si512(_mm512_and_si512(low, m4), _mm512_and_si512(high, m30))
}

/// The dot products of the panel's 16 rows with columns `c0..c0 + C`,
/// stored at their places in `out`.
///
/// # Safety
/// As [`run512`], for columns `c0..c0 + C`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn pass512<const C: usize>(
    nb: usize,
    panel: *const u8,
    cols: &[&[u8]],
    c0: usize,
    out: &mut [f32],
) {
    let mut acc = [_mm512_setzero_ps(); C];
    let ask = C == 1 && crate::simd::stream::software_prefetch();
    for ib in 0..nb {
        // SAFETY: super-block ib of the panel and Q8_K block ib of every
        // column (caller); every offset below stays inside them.
        unsafe {
            let p = panel.add(ib * SB);
            let y: [*const u8; C] =
                std::array::from_fn(|c| cols[c0 + c].as_ptr().add(ib * Q8K_BYTES));
            // As in `pass`: one column streams the panels from memory. A
            // prefetch is only a hint: it never faults.
            let ahead = |o: usize| {
                if ask {
                    _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(o + PREFETCH) as *const i8);
                }
            };
            for o in (SC..LEVELS).step_by(64).chain([D]) {
                ahead(o);
            }
            let sc: [__m512i; 4] = std::array::from_fn(|q| load512(p.add(SC + q * VEC)));
            let mut isum = [_mm512_setzero_si512(); C];
            for hf in 0..2 {
                for sb4 in 0..2 {
                    for n in 4 * sb4..4 * sb4 + 4 {
                        for i in 0..3 {
                            ahead(LEVELS + (3 * (8 * hf + n) + i) * VEC);
                        }
                    }
                    // Field f of k-groups n holds sub-block 8 hf + 2 f + sb4.
                    for f in 0..4 {
                        let sw = scale_words512(&sc, 8 * hf + 2 * f + sb4, false);
                        for pr in 0..2 {
                            let mut s16 = [_mm512_setzero_si512(); C];
                            for n in 4 * sb4 + 2 * pr..4 * sb4 + 2 * pr + 2 {
                                let w = levels512(p.add(LEVELS + 3 * (8 * hf + n) * VEC), f);
                                let at = Q8K_QS + 128 * hf + 32 * f + 4 * n;
                                for c in 0..C {
                                    let t = _mm512_maddubs_epi16(w, bcast4_512(y[c].add(at)));
                                    s16[c] = _mm512_add_epi16(s16[c], t);
                                }
                            }
                            for c in 0..C {
                                let t = _mm512_madd_epi16(s16[c], sw);
                                isum[c] = _mm512_add_epi32(isum[c], t);
                            }
                        }
                    }
                }
            }
            // The offset: -32 x the sum over sub-blocks of scale x the sum
            // of its 16 activations.
            let mut m = [_mm512_setzero_si512(); C];
            for q in 0..8 {
                let pq = scale_words512(&sc, 2 * q, true);
                for c in 0..C {
                    let t = _mm512_madd_epi16(pq, bcast4_512(y[c].add(Q8K_BSUMS + 4 * q)));
                    m[c] = _mm512_add_epi32(m[c], t);
                }
            }
            let d = _mm512_cvtph_ps(load256(p.add(D)));
            for c in 0..C {
                let s = _mm512_sub_epi32(isum[c], _mm512_slli_epi32::<5>(m[c]));
                let dy = (y[c] as *const f32).read_unaligned();
                let dd = _mm512_mul_ps(d, _mm512_set1_ps(dy));
                acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), dd, acc[c]);
            }
        }
    }
    for (c, a) in acc.iter().enumerate() {
        let o = (c0 + c) * PANEL_ROWS;
        let dst: &mut [f32; PANEL_ROWS] = (&mut out[o..o + PANEL_ROWS]).try_into().unwrap();
        // SAFETY: `dst` holds 16 f32.
        unsafe { _mm512_storeu_ps(dst.as_mut_ptr(), *a) };
    }
}
