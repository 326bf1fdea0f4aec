//! Panel matrix x matrix kernels ([`super::Gemm`]) for Q4_0 and Q8_0
//! weights, with AVX-512 VNNI.
//!
//! Panel layout: a panel is exactly as large as its 16 rows (16 x 18
//! bytes per 32-weight block for Q4_0, 16 x 34 for Q8_0), so that weights
//! can be stored packed. Per block, the 16 rows' f16 scales (32 bytes) and
//! the quants in groups of 4 weights, 16 rows x 4 bytes = 64 bytes per
//! group (one register, one row per lane). Blocks go in pairs: the two
//! blocks' scales (64 bytes), then their quants, so that the quant groups
//! stay 64-byte aligned relative to the panel and the panel is read front
//! to back; an odd last block puts its quants before its scales. Panels
//! themselves may start at any even address (loads are unaligned). The
//! quants are unsigned bytes since VPDPBUSD takes its unsigned operand
//! from a register. Q4_0 keeps its nibble bytes (the
//! byte at `i` holds weights `i` and `i + 16` of the block), so that one
//! load gives two groups; Q8_0 stores `q + 128`. The offset (8 or 128)
//! times the activation block's sum is taken off through the prepared
//! column, which holds per block the scale as f32, `-offset x sum(quants)`
//! as i32 (the starting value of the block's integer sum) and the 32
//! quants, read four at a time as broadcasts.
//!
//! Each lane sums a block exactly in integers, then adds `sum x (dx x dy)`
//! to its f32 accumulator, block after block: the same operations whatever
//! the number of columns per call.

use std::arch::x86_64::*;

use ggml_core::Type;

use super::avx512::bcast4;
use super::{Gemm, Kernels, GEMM_COLS, PANEL_ROWS};
use crate::features::cpu_features;

/// Bytes of a Q4_0 or Q8_0 block and of a Q8_0 activation block.
const Q4_0_BYTES: usize = 18;
const Q8_0_BYTES: usize = 34;
/// Bytes of one prepared activation block: scale, offset sum, 32 quants.
const ACT_BLOCK: usize = 40;
/// Bytes of the 16 rows' f16 scales of one block.
const SCALES: usize = 2 * PANEL_ROWS;
/// Bytes of one block's quants for all 16 rows.
const Q4_0_QUANTS: usize = 4 * 64;
const Q8_0_QUANTS: usize = 8 * 64;
/// Bytes ahead of the block being read that a run asks the cache for.
/// Token generation streams stored panels from memory, each byte once;
/// of 0 to 12 KiB, 4 to 6 KiB read Q4_0 fastest (Q8_0 the same with or
/// without), and 8 columns from cache do not slow down. Each line is asked
/// for as a line is read: a block pair's 9 (Q4_0) or 17 (Q8_0) lines at
/// once generated TinyLlama Q8_0 at 28.9-29.8 tokens/s on one thread, one
/// at a time at 30.7-31.3 (Q4_0: 51.9-54.2 -> 53.7-55.4; runs alternated).
const PREFETCH: usize = 6144;
/// Bytes of one block of a panel, quants and scales (16 rows' worth of
/// blocks: as compact as the rows).
const Q4_0_PANEL_BLOCK: usize = Q4_0_QUANTS + SCALES;
const Q8_0_PANEL_BLOCK: usize = Q8_0_QUANTS + SCALES;

/// Offsets in a panel of `nb` blocks of block `b`'s quants (`qb` bytes)
/// and scales: blocks go in pairs, the pair's two scale sets (64 bytes)
/// then its two blocks' quants; an odd last block puts its quants first.
#[inline(always)]
fn block_at(nb: usize, qb: usize, b: usize) -> (usize, usize) {
    let pair = (b / 2) * (2 * qb + 2 * SCALES);
    if b < nb & !1 {
        (pair + 2 * SCALES + (b % 2) * qb, pair + (b % 2) * SCALES)
    } else {
        (pair, pair + qb)
    }
}

/// Installs the panel kernels (the caller checked AVX-512 F/BW/VL/DQ).
pub(super) fn install(k: &mut Kernels) {
    if cpu_features().avx512_vnni {
        k.set_gemm(Type::Q4_0, &Q4_0_GEMM);
        k.set_gemm(Type::Q8_0, &Q8_0_GEMM);
    }
}

static Q4_0_GEMM: Gemm = Gemm {
    panel_bytes: |n| n / 32 * Q4_0_PANEL_BLOCK,
    pack: pack_q4_0,
    act_bytes,
    prep: |n, y, out| prep(8, n, y, out),
    run: run_q4_0,
};

static Q8_0_GEMM: Gemm = Gemm {
    panel_bytes: |n| n / 32 * Q8_0_PANEL_BLOCK,
    pack: pack_q8_0,
    act_bytes,
    prep: |n, y, out| prep(128, n, y, out),
    run: run_q8_0,
};

fn act_bytes(n: usize) -> usize {
    n / 32 * ACT_BLOCK
}

fn f16_le(b: &[u8]) -> f32 {
    half::f16::from_le_bytes([b[0], b[1]]).to_f32()
}

/// Prepares a Q8_0 activation row for weights whose quants are stored
/// `offset` above their value.
fn prep(offset: i32, n: usize, y: &[u8], out: &mut [u8]) {
    let nb = n / 32;
    assert!(y.len() >= nb * Q8_0_BYTES && out.len() >= nb * ACT_BLOCK);
    for (yb, o) in y
        .chunks_exact(Q8_0_BYTES)
        .zip(out.chunks_exact_mut(ACT_BLOCK))
        .take(nb)
    {
        let sum: i32 = yb[2..].iter().map(|&q| i32::from(q as i8)).sum();
        o[0..4].copy_from_slice(&f16_le(yb).to_le_bytes());
        o[4..8].copy_from_slice(&(-offset * sum).to_le_bytes());
        o[8..].copy_from_slice(&yb[2..]);
    }
}

/// Packs rows of blocks of `bytes` bytes (an f16 scale, then `groups` x 4
/// quant bytes, each 4-byte group xor-ed with `flip`) into panel blocks.
fn pack_with(n: usize, rows: &[&[u8]], out: &mut [u8], bytes: usize, groups: usize, flip: u32) {
    let nb = n / 32;
    let pb = groups * 64 + SCALES;
    assert!(
        rows.len() <= PANEL_ROWS
            && rows.iter().all(|r| r.len() >= nb * bytes)
            && out.len() >= nb * pb,
        "panel pack: {} rows of {} blocks into {} bytes",
        rows.len(),
        nb,
        out.len()
    );
    // SAFETY: AVX-512 F is present (the panel kernels are installed only
    // with it); the lengths were checked above.
    unsafe { pack_blocks(nb, rows, out, bytes, groups, flip) };
}

/// The packing proper: per block, the quants of 4 rows at a time fill one
/// register (16 bytes a row), and four registers are transposed into the
/// 4-byte groups of all 16 rows.
///
/// # Safety
/// AVX-512 F must be present; every row holds `nb` blocks of `bytes` bytes
/// and `out` `nb` panel blocks.
#[target_feature(enable = "avx512f")]
unsafe fn pack_blocks(
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

fn pack_q4_0(n: usize, rows: &[&[u8]], out: &mut [u8]) {
    pack_with(n, rows, out, Q4_0_BYTES, 4, 0);
}

fn pack_q8_0(n: usize, rows: &[&[u8]], out: &mut [u8]) {
    pack_with(n, rows, out, Q8_0_BYTES, 8, 0x8080_8080);
}

/// Checks the slices a run relies on (an internal invariant of the MUL_MAT
/// driver: a failure is a bug, not bad input).
fn check_run(nb: usize, pb: usize, panel: &[u8], cols: &[&[u8]], out: &[f32]) {
    assert!(
        (1..=GEMM_COLS).contains(&cols.len())
            && panel.len() >= nb * pb
            && cols.iter().all(|c| c.len() >= nb * ACT_BLOCK)
            && out.len() >= cols.len() * PANEL_ROWS,
        "panel kernel: slices shorter than {nb} blocks"
    );
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
    for b in 0..nb {
        if b % 2 == 0 {
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
        let ahead =
            |o: usize| _mm_prefetch::<_MM_HINT_T0>(panel.wrapping_add(o + PREFETCH) as *const i8);
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

/// Runs `run_tile` for `cols.len()` columns.
macro_rules! by_cols {
    ($q4:expr, $nb:expr, $panel:expr, $cols:expr, $out:expr) => {
        // SAFETY: installed only on CPUs with AVX-512 F/BW/VL/DQ and VNNI;
        // the slices were checked.
        unsafe {
            match $cols.len() {
                1 => run_tile::<1, $q4>($nb, $panel, $cols, $out),
                2 => run_tile::<2, $q4>($nb, $panel, $cols, $out),
                3 => run_tile::<3, $q4>($nb, $panel, $cols, $out),
                4 => run_tile::<4, $q4>($nb, $panel, $cols, $out),
                5 => run_tile::<5, $q4>($nb, $panel, $cols, $out),
                6 => run_tile::<6, $q4>($nb, $panel, $cols, $out),
                7 => run_tile::<7, $q4>($nb, $panel, $cols, $out),
                _ => run_tile::<8, $q4>($nb, $panel, $cols, $out),
            }
        }
    };
}

fn run_q4_0(n: usize, panel: &[u8], cols: &[&[u8]], out: &mut [f32]) {
    let nb = n / 32;
    check_run(nb, Q4_0_PANEL_BLOCK, panel, cols, out);
    by_cols!(true, nb, panel.as_ptr(), cols, out)
}

fn run_q8_0(n: usize, panel: &[u8], cols: &[&[u8]], out: &mut [f32]) {
    let nb = n / 32;
    check_run(nb, Q8_0_PANEL_BLOCK, panel, cols, out);
    by_cols!(false, nb, panel.as_ptr(), cols, out)
}
