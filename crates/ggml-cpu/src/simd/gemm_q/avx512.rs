//! The AVX-512 VNNI kernels of the Q4_0 / Q8_0 panel layout (see the
//! parent module): packing by register transposes, and `VPDPBUSD` runs.

use std::arch::x86_64::*;

use super::super::avx512::bcast4;
use super::{block_at, ACT_BLOCK, PREFETCH, Q4_0_QUANTS, Q8_0_QUANTS, SCALES};
use crate::simd::{GEMM_COLS, PANEL_ROWS};

/// The packing proper: per block, the quants of 4 rows at a time fill one
/// register (16 bytes a row), and four registers are transposed into the
/// 4-byte groups of all 16 rows.
///
/// # Safety
/// AVX-512 F must be present; every row holds `nb` blocks of `bytes` bytes
/// and `out` `nb` panel blocks.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn pack_blocks(
    nb: usize,
    rows: &[&[u8]],
    out: &mut [u8],
    bytes: usize,
    groups: usize,
    flip: u32,
) {
    /// Quants of a missing row (zero, scale zero).
    static ZERO: [u8; 16] = [0; 16];
    let qb = groups * 64;
    let flip = _mm512_set1_epi32(flip as i32);
    // Output group g takes lane 4j + g of the rows' registers: rows 4k..4k+4
    // from one register, two registers per permute.
    let pick: [__m512i; 4] = std::array::from_fn(|g| {
        let lanes: [i32; 16] = std::array::from_fn(|l| (4 * (l % 8) + g) as i32);
        // SAFETY: 64 readable bytes of a local array.
        unsafe { _mm512_loadu_si512(lanes.as_ptr() as *const __m512i) }
    });
    let quants = |r: usize, at: usize| -> *const __m128i {
        match rows.get(r) {
            // SAFETY: `at + 16` is inside the row's `nb` blocks (caller).
            Some(row) => unsafe { row.as_ptr().add(at) as *const __m128i },
            None => ZERO.as_ptr() as *const __m128i,
        }
    };
    for b in 0..nb {
        let (qo, so) = block_at(nb, qb, b);
        let s = &mut out[so..so + SCALES];
        for (r, d) in s.chunks_exact_mut(2).enumerate() {
            if let Some(row) = rows.get(r) {
                d.copy_from_slice(&row[b * bytes..b * bytes + 2]);
            } else {
                d.fill(0);
            }
        }
        let o = out[qo..qo + qb].as_mut_ptr();
        for half in 0..groups / 4 {
            let at = b * bytes + 2 + 16 * half;
            // SAFETY: 16 readable bytes at every `quants` pointer.
            let a: [__m512i; 4] = std::array::from_fn(|k| unsafe {
                let v = _mm512_castsi128_si512(_mm_loadu_si128(quants(4 * k, at)));
                let v = _mm512_inserti32x4::<1>(v, _mm_loadu_si128(quants(4 * k + 1, at)));
                let v = _mm512_inserti32x4::<2>(v, _mm_loadu_si128(quants(4 * k + 2, at)));
                let v = _mm512_inserti32x4::<3>(v, _mm_loadu_si128(quants(4 * k + 3, at)));
                _mm512_xor_si512(v, flip)
            });
            for (g, p) in pick.iter().enumerate() {
                let lo = _mm512_permutex2var_epi32(a[0], *p, a[1]);
                let hi = _mm512_permutex2var_epi32(a[2], *p, a[3]);
                let v = _mm512_inserti64x4::<1>(lo, _mm512_castsi512_si256(hi));
                // SAFETY: group 4 half + g of the block's quants is 64 bytes
                // inside them.
                unsafe { _mm512_storeu_si512(o.add(64 * (4 * half + g)) as *mut __m512i, v) };
            }
        }
    }
}

/// # Safety
/// AVX-512 F/BW/VL/DQ and VNNI must be present; `panel` holds `nb` blocks
/// of the layout `Q4` selects and every column `nb` prepared blocks (see
/// [`check_run`]); `out` has room for `C` x 16 values.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,f16c")]
unsafe fn run_tile<const C: usize, const Q4: bool>(
    nb: usize,
    panel: *const u8,
    cols: &[&[u8]],
    out: &mut [f32],
) {
    let qb = if Q4 { Q4_0_QUANTS } else { Q8_0_QUANTS };
    let y: [*const u8; C] = std::array::from_fn(|c| cols[c].as_ptr());
    let nibble = _mm512_set1_epi8(0x0f);
    let mut acc = [_mm512_setzero_ps(); C];
    let ask = crate::simd::stream::software_prefetch();
    for b in 0..nb {
        if b % 2 == 0 && ask {
            // The panel is read in order, a block pair (a whole number of
            // cache lines) at a time: ask for the pair PREFETCH bytes on,
            // which near the end lies in the next panel. A prefetch is only
            // a hint: it never faults and reads nothing the program sees,
            // so the address may lie past the panel.
            let at = panel.wrapping_add(b * (qb + SCALES) + PREFETCH);
            for l in 0..2 * (qb + SCALES) / 64 {
                _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(64 * l) as *const i8);
            }
        }
        let (qo, so) = block_at(nb, qb, b);
        // The panel is read in order: each line is asked for PREFETCH bytes
        // on as a line is read (near the end, in the next panel). A
        // prefetch is only a hint: it never faults and reads nothing the
        // program sees, so the address may lie past the panel.
        let ahead = |o: usize| {
            if ask {
                _mm_prefetch::<_MM_HINT_T0>(panel.wrapping_add(o + PREFETCH) as *const i8)
            }
        };
        ahead(so);
        // SAFETY: block b of the panel and of every column lies inside the
        // slices (caller).
        unsafe {
            let p = panel.add(qo);
            let ya: [*const u8; C] = std::array::from_fn(|c| y[c].add(b * ACT_BLOCK));
            let mut sum: [__m512i; C] = std::array::from_fn(|c| bcast4(ya[c].add(4)));
            if Q4 {
                for g in 0..4 {
                    ahead(qo + 64 * g);
                    let w = _mm512_loadu_si512(p.add(64 * g) as *const __m512i);
                    let lo = _mm512_and_si512(w, nibble);
                    let hi = _mm512_and_si512(_mm512_srli_epi16(w, 4), nibble);
                    for c in 0..C {
                        sum[c] = _mm512_dpbusd_epi32(sum[c], lo, bcast4(ya[c].add(8 + 4 * g)));
                        sum[c] = _mm512_dpbusd_epi32(sum[c], hi, bcast4(ya[c].add(24 + 4 * g)));
                    }
                }
            } else {
                for g in 0..8 {
                    ahead(qo + 64 * g);
                    let w = _mm512_loadu_si512(p.add(64 * g) as *const __m512i);
                    for c in 0..C {
                        sum[c] = _mm512_dpbusd_epi32(sum[c], w, bcast4(ya[c].add(8 + 4 * g)));
                    }
                }
            }
            let dx = _mm512_cvtph_ps(_mm256_loadu_si256(panel.add(so) as *const __m256i));
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

/// Runs [`run_tile`] for the 1 to [`GEMM_COLS`] columns `cols`.
///
/// # Safety
/// As [`run_tile`].
pub(super) unsafe fn run<const Q4: bool>(
    nb: usize,
    panel: *const u8,
    cols: &[&[u8]],
    out: &mut [f32],
) {
    debug_assert!((1..=GEMM_COLS).contains(&cols.len()));
    // SAFETY: as the caller guarantees.
    unsafe {
        match cols.len() {
            1 => run_tile::<1, Q4>(nb, panel, cols, out),
            2 => run_tile::<2, Q4>(nb, panel, cols, out),
            3 => run_tile::<3, Q4>(nb, panel, cols, out),
            4 => run_tile::<4, Q4>(nb, panel, cols, out),
            5 => run_tile::<5, Q4>(nb, panel, cols, out),
            6 => run_tile::<6, Q4>(nb, panel, cols, out),
            7 => run_tile::<7, Q4>(nb, panel, cols, out),
            _ => run_tile::<8, Q4>(nb, panel, cols, out),
        }
    }
}
