//! The MXFP4 panel layout and its kernels (AVX-512 VNNI and AVX2), so
//! that expert stacks of gpt-oss-like models are stored repacked and a
//! prompt's tokens run the panel kernel instead of the row dot products.
//!
//! Layout: as compact as the rows (16 x 17 bytes per 32-weight block), so
//! that weights can be stored packed. Per block, the 16 rows' E8M0 scale
//! bytes (16 bytes), and the nibble bytes in Q4_0's groups: 4 bytes of a
//! row per lane, the byte at `i` holding weights `i` and `i + 16`, 64
//! bytes per group and 4 groups. Blocks go in fours: the four scale sets
//! (64 bytes, one line) then the four blocks' quants, so that every quant
//! group stays 64-byte aligned relative to the panel; the last `nb % 4`
//! blocks each put their quants before their scales.
//!
//! The kernels look each nibble up in the doubled FP4 table raised by 12
//! (levels 0 to 24, unsigned as `VPDPBUSD` and `VPMADDUBSW` want them);
//! the prepared column's starting sum `-12 x sum(quants)` takes the offset
//! off, so each lane sums a block exactly in integers, then adds
//! `sum x (dx x dy)` to its f32 accumulator: the same operations at every
//! level and for every number of columns per call, so the layout and the
//! results are the same on AVX2 and AVX-512 CPUs.

use std::arch::x86_64::*;

use ggml_core::quants::KVALUES_MXFP4;

use super::{act_bytes, check_run, prep, ACT_BLOCK, PREFETCH};
use crate::simd::{avx2, avx512, Gemm, GEMM_COLS, PANEL_ROWS};

/// Bytes of an MXFP4 block: the E8M0 scale and 16 nibble bytes.
const BLOCK_BYTES: usize = 17;
/// Bytes of one block's quants for all 16 rows.
const QUANTS: usize = 4 * 64;
/// Bytes of one block's 16 scales.
const SCALES: usize = PANEL_ROWS;
/// Blocks whose scales share one line.
const GROUP: usize = 4;
/// What the kernels add to every level (the table's most negative).
const OFFSET: i32 = 12;

/// Offsets in a panel of `nb` blocks of block `b`'s quants and scales.
#[inline(always)]
fn block_at(nb: usize, b: usize) -> (usize, usize) {
    let whole = nb - nb % GROUP;
    if b < whole {
        let base = (b / GROUP) * GROUP * (QUANTS + SCALES);
        let i = b % GROUP;
        (base + GROUP * SCALES + i * QUANTS, base + i * SCALES)
    } else {
        let base = whole * (QUANTS + SCALES) + (b - whole) * (QUANTS + SCALES);
        (base, base + QUANTS)
    }
}

/// The panel kernel of this layout for CPUs with AVX-512 VNNI.
pub(super) static MXFP4_GEMM: Gemm = Gemm {
    panel_bytes: |n| n / 32 * (QUANTS + SCALES),
    pack,
    act_bytes,
    prep: |n, y, out| prep(OFFSET, n, y, out),
    run: |n, panel, cols, out| run_checked(n, panel, cols, out, run_vnni),
    run_pair: None,
    wide: None,
};

/// The same layout's AVX2 kernel (the same bits).
pub(super) static MXFP4_GEMM_AVX2: Gemm = Gemm {
    run: |n, panel, cols, out| run_checked(n, panel, cols, out, run_avx2),
    ..MXFP4_GEMM
};

/// The levels `KVALUES_MXFP4[i] + OFFSET`, indexed by nibble.
fn raised_table() -> [i8; 16] {
    std::array::from_fn(|i| KVALUES_MXFP4[i] + OFFSET as i8)
}

/// Packs 1 to 16 MXFP4 rows of `n` elements into a panel; missing rows
/// get zero nibbles (level 0) and scale byte 0.
fn pack(n: usize, rows: &[&[u8]], out: &mut [u8]) {
    let nb = n / 32;
    assert!(
        rows.len() <= PANEL_ROWS
            && rows.iter().all(|r| r.len() >= nb * BLOCK_BYTES)
            && out.len() >= nb * (QUANTS + SCALES),
        "panel pack: {} MXFP4 rows of {nb} blocks into {} bytes",
        rows.len(),
        out.len()
    );
    for b in 0..nb {
        let (qo, so) = block_at(nb, b);
        for r in 0..PANEL_ROWS {
            let block = rows
                .get(r)
                .map(|x| &x[b * BLOCK_BYTES..(b + 1) * BLOCK_BYTES]);
            let (scale, nibbles) = match block {
                Some(x) => (x[0], &x[1..]),
                None => (0, &[0u8; 16][..]),
            };
            out[so + r] = scale;
            for g in 0..4 {
                let o = qo + 64 * g + 4 * r;
                out[o..o + 4].copy_from_slice(&nibbles[4 * g..4 * g + 4]);
            }
        }
    }
}

/// Checks the slices, then runs `kernel` over the panel's `n / 32` blocks.
fn run_checked(
    n: usize,
    panel: &[u8],
    cols: &[&[u8]],
    out: &mut [f32],
    kernel: unsafe fn(usize, *const u8, &[&[u8]], &mut [f32]),
) {
    let nb = n / 32;
    check_run(nb, QUANTS + SCALES, panel, cols, out);
    // SAFETY: the kernel's instruction set was checked when it was
    // installed; the slices were checked above.
    unsafe { kernel(nb, panel.as_ptr(), cols, out) }
}

/// Asks for the panel line `PREFETCH` bytes after offset `o` when `ask`
/// (read once per call from [`crate::simd::stream::software_prefetch`]:
/// whether this kind of CPU streams faster with the requests). A prefetch
/// is only a hint: it never faults and reads nothing the program sees, so
/// the address may lie past the panel.
#[inline(always)]
fn ahead(ask: bool, panel: *const u8, o: usize) {
    if ask {
        // SAFETY: prefetching is valid for any address.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(panel.wrapping_add(o + PREFETCH) as *const i8) }
    }
}

/// E8M0 scales as ggml's halved f32 (see `quants::e8m0_to_fp32_half`),
/// lane by lane: `2^(e - 128)`, the two smallest as subnormals.
#[inline]
#[target_feature(enable = "avx512f")]
fn e8m0_half_512(e: __m512i) -> __m512 {
    let big = _mm512_slli_epi32::<23>(_mm512_sub_epi32(e, _mm512_set1_epi32(1)));
    let small = _mm512_sllv_epi32(_mm512_set1_epi32(0x0020_0000), e);
    let tiny = _mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2));
    _mm512_castsi512_ps(_mm512_mask_blend_epi32(tiny, big, small))
}

/// [`e8m0_half_512`] on eight lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn e8m0_half_256(e: __m256i) -> __m256 {
    let big = _mm256_slli_epi32::<23>(_mm256_sub_epi32(e, _mm256_set1_epi32(1)));
    let small = _mm256_sllv_epi32(_mm256_set1_epi32(0x0020_0000), e);
    let tiny = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
    _mm256_castsi256_ps(_mm256_blendv_epi8(big, small, tiny))
}

/// # Safety
/// AVX-512 F/BW/VL/DQ and VNNI must be present; `panel` holds `nb` blocks
/// and every column `nb` prepared blocks; `out` has room for `C` x 16
/// values.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,f16c")]
unsafe fn tile_vnni<const C: usize>(nb: usize, panel: *const u8, cols: &[&[u8]], out: &mut [f32]) {
    let y: [*const u8; C] = std::array::from_fn(|c| cols[c].as_ptr());
    let nibble = _mm512_set1_epi8(0x0f);
    let t = raised_table();
    // SAFETY: 16 readable bytes of a local array.
    let table = _mm512_broadcast_i32x4(unsafe { _mm_loadu_si128(t.as_ptr() as *const __m128i) });
    let mut acc = [_mm512_setzero_ps(); C];
    let ask = crate::simd::stream::software_prefetch();
    for b in 0..nb {
        let (qo, so) = block_at(nb, b);
        ahead(ask, panel, so);
        // SAFETY: block b of the panel and of every column lies inside the
        // slices (caller).
        unsafe {
            let p = panel.add(qo);
            let ya: [*const u8; C] = std::array::from_fn(|c| y[c].add(b * ACT_BLOCK));
            let mut sum: [__m512i; C] = std::array::from_fn(|c| avx512::bcast4(ya[c].add(4)));
            for g in 0..4 {
                ahead(ask, panel, qo + 64 * g);
                let w = _mm512_loadu_si512(p.add(64 * g) as *const __m512i);
                let lo = _mm512_shuffle_epi8(table, _mm512_and_si512(w, nibble));
                let hi =
                    _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16::<4>(w), nibble));
                for c in 0..C {
                    sum[c] = _mm512_dpbusd_epi32(sum[c], lo, avx512::bcast4(ya[c].add(8 + 4 * g)));
                    sum[c] = _mm512_dpbusd_epi32(sum[c], hi, avx512::bcast4(ya[c].add(24 + 4 * g)));
                }
            }
            let e = _mm512_cvtepu8_epi32(_mm_loadu_si128(panel.add(so) as *const __m128i));
            let dx = e8m0_half_512(e);
            for c in 0..C {
                let dy = _mm512_set1_ps((ya[c] as *const f32).read_unaligned());
                acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[c]), _mm512_mul_ps(dx, dy), acc[c]);
            }
        }
    }
    for (c, a) in acc.iter().enumerate() {
        // SAFETY: out holds C x 16 values (caller).
        unsafe { _mm512_storeu_ps(out.as_mut_ptr().add(c * PANEL_ROWS), *a) };
    }
}

/// [`tile_vnni`] for the 1 to [`GEMM_COLS`] columns `cols`.
///
/// # Safety
/// As [`tile_vnni`].
unsafe fn run_vnni(nb: usize, panel: *const u8, cols: &[&[u8]], out: &mut [f32]) {
    debug_assert!((1..=GEMM_COLS).contains(&cols.len()));
    // SAFETY: as the caller guarantees.
    unsafe {
        match cols.len() {
            1 => tile_vnni::<1>(nb, panel, cols, out),
            2 => tile_vnni::<2>(nb, panel, cols, out),
            3 => tile_vnni::<3>(nb, panel, cols, out),
            4 => tile_vnni::<4>(nb, panel, cols, out),
            5 => tile_vnni::<5>(nb, panel, cols, out),
            6 => tile_vnni::<6>(nb, panel, cols, out),
            7 => tile_vnni::<7>(nb, panel, cols, out),
            _ => tile_vnni::<8>(nb, panel, cols, out),
        }
    }
}

/// Lanes of a 256-bit register: rows of a half panel.
const HALF: usize = PANEL_ROWS / 2;
/// Most columns of one AVX2 pass over a half panel.
const PASS_COLS: usize = 4;

/// The AVX2 kernel on halves `h0..h0 + H` of the panel (8 rows each) and
/// the `C` columns `y`, into `out[c * PANEL_ROWS + 8 h + r]`. Without VNNI
/// a byte dot product is `VPMADDUBSW` then `VPMADDWD` by ones; two groups
/// are summed in i16 before widening (2 x 2 x 2 x 24 x 128 = 24,576).
///
/// # Safety
/// AVX2, FMA and F16C must be present; `panel` holds `nb` blocks, every
/// `y[c]` `nb` prepared blocks, and `out` room for the columns' 16 values
/// each.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn pass<const H: usize, const C: usize>(
    nb: usize,
    panel: *const u8,
    h0: usize,
    y: [*const u8; C],
    out: *mut f32,
) {
    let nibble = _mm256_set1_epi8(0x0f);
    let ones = _mm256_set1_epi16(1);
    let t = raised_table();
    // SAFETY: 16 readable bytes of a local array.
    let t = unsafe { _mm_loadu_si128(t.as_ptr() as *const __m128i) };
    let table = _mm256_set_m128i(t, t);
    let mut acc = [[_mm256_setzero_ps(); C]; H];
    let ask = crate::simd::stream::software_prefetch();
    for b in 0..nb {
        let (qo, so) = block_at(nb, b);
        ahead(ask, panel, so);
        // SAFETY: block b of the panel and of every column lies inside
        // them (caller).
        unsafe {
            let ya: [*const u8; C] = std::array::from_fn(|c| y[c].add(b * ACT_BLOCK));
            let mut sum: [[__m256i; C]; H] =
                std::array::from_fn(|_| std::array::from_fn(|c| avx2::bcast4(ya[c].add(4))));
            for k in 0..2 {
                let mut s16 = [[_mm256_setzero_si256(); C]; H];
                for g in 2 * k..2 * k + 2 {
                    let at = qo + 64 * g;
                    ahead(ask, panel, at);
                    let w: [(__m256i, __m256i); H] = std::array::from_fn(|h| {
                        let p = panel.add(at + 32 * (h0 + h));
                        let w = _mm256_loadu_si256(p as *const __m256i);
                        let lo = _mm256_and_si256(w, nibble);
                        let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(w), nibble);
                        (
                            _mm256_shuffle_epi8(table, lo),
                            _mm256_shuffle_epi8(table, hi),
                        )
                    });
                    for c in 0..C {
                        let ylo = avx2::bcast4(ya[c].add(8 + 4 * g));
                        let yhi = avx2::bcast4(ya[c].add(24 + 4 * g));
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
                        sum[h][c] = _mm256_add_epi32(sum[h][c], _mm256_madd_epi16(s16[h][c], ones));
                    }
                }
            }
            for h in 0..H {
                let s = panel.add(so + HALF * (h0 + h));
                let e = _mm256_cvtepu8_epi32(_mm_loadl_epi64(s as *const __m128i));
                let dx = e8m0_half_256(e);
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

/// One pass of `C` columns, those of `cols` from `c0`.
///
/// # Safety
/// As [`pass`], for columns `c0..c0 + C` of `cols`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn pass_cols<const H: usize, const C: usize>(
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
    unsafe { pass::<H, C>(nb, panel, h0, y, out.as_mut_ptr().add(c0 * PANEL_ROWS)) }
}

/// The AVX2 kernel for the 1 to [`GEMM_COLS`] columns `cols`: one or two
/// columns (token generation streaming stored panels) take both halves in
/// one pass, so that each panel line is read once; more go through each
/// half in passes of up to [`PASS_COLS`].
///
/// # Safety
/// AVX2, FMA and F16C must be present; `panel` holds `nb` blocks, every
/// column `nb` prepared blocks, and `out` room for `cols.len()` x 16
/// values.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn run_avx2(nb: usize, panel: *const u8, cols: &[&[u8]], out: &mut [f32]) {
    debug_assert!((1..=GEMM_COLS).contains(&cols.len()));
    // SAFETY: every call below is within the caller's guarantees, for
    // columns that exist.
    unsafe {
        match cols.len() {
            1 => pass_cols::<2, 1>(nb, panel, 0, cols, 0, out),
            2 => pass_cols::<2, 2>(nb, panel, 0, cols, 0, out),
            n => {
                for h in 0..2 {
                    let mut c0 = 0;
                    while c0 < n {
                        match n - c0 {
                            1 => pass_cols::<1, 1>(nb, panel, h, cols, c0, out),
                            2 => pass_cols::<1, 2>(nb, panel, h, cols, c0, out),
                            3 => pass_cols::<1, 3>(nb, panel, h, cols, c0, out),
                            _ => pass_cols::<1, PASS_COLS>(nb, panel, h, cols, c0, out),
                        }
                        c0 += PASS_COLS;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The blocks of a panel tile it exactly: no two overlap, none
    /// reaches past the end, for every block count's remainder.
    #[test]
    fn blocks_tile_the_panel() {
        for nb in 1..=13 {
            let mut used = vec![false; nb * (QUANTS + SCALES)];
            for b in 0..nb {
                let (qo, so) = block_at(nb, b);
                for i in (qo..qo + QUANTS).chain(so..so + SCALES) {
                    assert!(!used[i], "nb {nb} block {b} byte {i} used twice");
                    used[i] = true;
                }
            }
            assert!(used.iter().all(|&u| u), "nb {nb}: gaps");
            // Whole groups of four keep every quant group on a line.
            for b in 0..nb - nb % GROUP {
                assert_eq!(block_at(nb, b).0 % 64, 0, "nb {nb} block {b}");
            }
        }
    }

    /// The lane conversions of the E8M0 scales are the scalar one's bits
    /// for every byte.
    #[test]
    fn scale_conversions_match_the_scalar_one() {
        let f = crate::features::cpu_features();
        if !f.avx2 {
            return;
        }
        for base in (0..256).step_by(16) {
            let e: [i32; 16] = std::array::from_fn(|i| (base + i) as i32);
            let want: Vec<u32> = e
                .iter()
                .map(|&x| ggml_core::quants::e8m0_to_fp32_half(x as u8).to_bits())
                .collect();
            let mut got = [0f32; 16];
            // SAFETY: AVX2/FMA/F16C present (checked); 64 bytes in `e` and
            // `got`.
            unsafe {
                for h in 0..2 {
                    let v = _mm256_loadu_si256(e.as_ptr().add(8 * h) as *const __m256i);
                    _mm256_storeu_ps(got.as_mut_ptr().add(8 * h), e8m0_half_256(v));
                }
            }
            let bits: Vec<u32> = got.iter().map(|v| v.to_bits()).collect();
            assert_eq!(bits, want, "AVX2, bytes from {base}");
            if f.avx512 {
                // SAFETY: AVX-512 F present (checked); 64 bytes each.
                unsafe {
                    let v = _mm512_loadu_si512(e.as_ptr() as *const __m512i);
                    _mm512_storeu_ps(got.as_mut_ptr(), e8m0_half_512(v));
                }
                let bits: Vec<u32> = got.iter().map(|v| v.to_bits()).collect();
                assert_eq!(bits, want, "AVX-512, bytes from {base}");
            }
        }
    }
}
