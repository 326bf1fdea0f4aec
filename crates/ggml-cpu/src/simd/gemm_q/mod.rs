//! Panel matrix x matrix kernels ([`super::Gemm`]) for Q4_0, Q8_0, Q5_0
//! and MXFP4 weights: one panel layout per type, run with AVX-512 VNNI
//! ([`avx512`]) or AVX2 ([`avx2`]), so that weights stored packed serve
//! either.
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
//! Q5_0 has a layout of its own, as compact as its rows too: per block the
//! 16 scales, then the fifth bits (4 bytes a row, see [`pack_q5_0`]), then
//! the nibbles exactly as Q4_0's. Its quants of a block are the bits and
//! the nibbles (320 bytes), paired as above; its one kernel is AVX2's at
//! every level (see [`avx2`]).
//!
//! MXFP4 has a layout of its own (see [`mxfp4`]), as compact as its rows.
//!
//! Each lane sums a block exactly in integers, then adds `sum x (dx x dy)`
//! to its f32 accumulator, block after block: the same operations whatever
//! the number of columns per call, and whatever the instruction set.

use ggml_core::Type;

use super::{Gemm, Kernels, GEMM_COLS, PANEL_ROWS};
use crate::features::cpu_features;

mod avx2;
mod avx512;
mod mxfp4;

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
/// Bytes of one Q5_0 block's fifth bits for all 16 rows, and of its bits
/// and nibbles together.
const Q5_0_HIGH: usize = 4 * PANEL_ROWS;
const Q5_0_QUANTS: usize = Q5_0_HIGH + Q4_0_QUANTS;
const Q5_0_PANEL_BLOCK: usize = Q5_0_QUANTS + SCALES;

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

/// Installs the VNNI panel kernels (the caller checked AVX-512
/// F/BW/VL/DQ); without VNNI, the AVX2 ones.
pub(super) fn install(k: &mut Kernels) {
    if cpu_features().avx512_vnni {
        k.set_gemm(Type::Q4_0, &Q4_0_GEMM);
        k.set_gemm(Type::Q8_0, &Q8_0_GEMM);
        k.set_gemm(Type::Q5_0, &Q5_0_GEMM);
        k.set_gemm(Type::MXFP4, &mxfp4::MXFP4_GEMM);
    } else {
        install_avx2(k);
    }
}

/// Installs the AVX2 panel kernels (the caller checked AVX2, FMA, F16C).
pub(super) fn install_avx2(k: &mut Kernels) {
    k.set_gemm(Type::Q4_0, &Q4_0_GEMM_AVX2);
    k.set_gemm(Type::Q8_0, &Q8_0_GEMM_AVX2);
    k.set_gemm(Type::Q5_0, &Q5_0_GEMM);
    k.set_gemm(Type::MXFP4, &mxfp4::MXFP4_GEMM_AVX2);
}

static Q4_0_GEMM: Gemm = Gemm {
    panel_bytes: |n| n / 32 * Q4_0_PANEL_BLOCK,
    pack: pack_q4_0,
    act_bytes,
    prep: |n, y, out| prep(8, n, y, out),
    run: |n, panel, cols, out| {
        run_checked(n, panel, cols, out, Q4_0_PANEL_BLOCK, avx512::run::<true>)
    },
    run_pair: None,
    wide: None,
};

static Q8_0_GEMM: Gemm = Gemm {
    panel_bytes: |n| n / 32 * Q8_0_PANEL_BLOCK,
    pack: pack_q8_0,
    act_bytes,
    prep: |n, y, out| prep(128, n, y, out),
    run: |n, panel, cols, out| {
        run_checked(n, panel, cols, out, Q8_0_PANEL_BLOCK, avx512::run::<false>)
    },
    run_pair: None,
    wide: None,
};

/// Q5_0 in its own layout (levels `q + 16`, at most 31, from nibbles and
/// fifth bits), as large as its rows, so that its weights are stored
/// packed and token generation reads them through the panel kernel. The
/// AVX2 kernel serves every level: one layout for every instruction set.
static Q5_0_GEMM: Gemm = Gemm {
    panel_bytes: |n| n / 32 * Q5_0_PANEL_BLOCK,
    pack: pack_q5_0,
    act_bytes,
    prep: |n, y, out| prep(16, n, y, out),
    run: run_avx2::<{ avx2::FIVE }, Q5_0_PANEL_BLOCK>,
    run_pair: None,
    wide: None,
};

static Q4_0_GEMM_AVX2: Gemm = Gemm {
    run: run_avx2::<{ avx2::NIBBLES }, Q4_0_PANEL_BLOCK>,
    ..Q4_0_GEMM
};

static Q8_0_GEMM_AVX2: Gemm = Gemm {
    run: run_avx2::<{ avx2::SIGNED }, Q8_0_PANEL_BLOCK>,
    ..Q8_0_GEMM
};

/// The AVX2 kernel for weights stored as `KIND` (see [`avx2::run`]) in
/// panel blocks of `BLOCK` bytes, through [`run_checked`].
fn run_avx2<const KIND: u8, const BLOCK: usize>(
    n: usize,
    panel: &[u8],
    cols: &[&[u8]],
    out: &mut [f32],
) {
    run_checked(n, panel, cols, out, BLOCK, avx2::run::<KIND>)
}

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
    if cpu_features().avx512 {
        // SAFETY: AVX-512 F is present; the lengths were checked above.
        unsafe { avx512::pack_blocks(nb, rows, out, bytes, groups, flip) };
        return;
    }
    let qb = groups * 64;
    for b in 0..nb {
        let (qo, so) = block_at(nb, qb, b);
        for r in 0..PANEL_ROWS {
            let block = rows.get(r).map(|x| &x[b * bytes..(b + 1) * bytes]);
            let scale = block.map_or([0, 0], |x| [x[0], x[1]]);
            out[so + 2 * r..so + 2 * r + 2].copy_from_slice(&scale);
            for g in 0..groups {
                let q = block.map_or(0, |x| {
                    u32::from_le_bytes([x[2 + 4 * g], x[3 + 4 * g], x[4 + 4 * g], x[5 + 4 * g]])
                });
                let o = qo + 64 * g + 4 * r;
                out[o..o + 4].copy_from_slice(&(q ^ flip).to_le_bytes());
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

/// Bytes of a Q5_0 block.
const Q5_0_BYTES: usize = 22;

/// Packs Q5_0 rows: per block the 16 rows' scales, then each row's 32
/// fifth bits rearranged into 4 bytes, then the nibble bytes in Q4_0's
/// groups. Bit `2g + s` of a row's byte `k` is the fifth bit of weight
/// `4g + k + 16s`: the bits that group `g`'s weights need sit at the same
/// place in every byte, so one shift and one mask bring them to bit 4
/// (see [`avx2`]).
fn pack_q5_0(n: usize, rows: &[&[u8]], out: &mut [u8]) {
    let nb = n / 32;
    assert!(
        rows.len() <= PANEL_ROWS
            && rows.iter().all(|r| r.len() >= nb * Q5_0_BYTES)
            && out.len() >= nb * Q5_0_PANEL_BLOCK,
        "panel pack: {} Q5_0 rows of {nb} blocks into {} bytes",
        rows.len(),
        out.len()
    );
    for b in 0..nb {
        let (qo, so) = block_at(nb, Q5_0_QUANTS, b);
        for r in 0..PANEL_ROWS {
            let block = rows
                .get(r)
                .map(|x| &x[b * Q5_0_BYTES..(b + 1) * Q5_0_BYTES]);
            let (scale, qh, nibbles) = match block {
                Some(x) => (
                    [x[0], x[1]],
                    u32::from_le_bytes([x[2], x[3], x[4], x[5]]),
                    &x[6..22],
                ),
                None => ([0, 0], 0, &[0u8; 16][..]),
            };
            out[so + 2 * r..so + 2 * r + 2].copy_from_slice(&scale);
            out[qo + 4 * r..qo + 4 * r + 4].copy_from_slice(&spread_fifth_bits(qh));
            for g in 0..4 {
                let o = qo + Q5_0_HIGH + 64 * g + 4 * r;
                out[o..o + 4].copy_from_slice(&nibbles[4 * g..4 * g + 4]);
            }
        }
    }
}

/// A row's 32 fifth bits `qh` as the 4 bytes of [`pack_q5_0`]: bit
/// `2g + s` of byte `k` is bit `4g + k + 16s` of `qh`.
fn spread_fifth_bits(qh: u32) -> [u8; 4] {
    std::array::from_fn(|k| {
        (0..8).fold(0u8, |byte, bit| {
            let (g, s) = (bit / 2, bit % 2);
            let at = 4 * g + k + 16 * s;
            byte | ((((qh >> at) & 1) as u8) << bit)
        })
    })
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

/// Checks the slices, then runs `kernel` over the panel's `n / 32`
/// blocks.
fn run_checked(
    n: usize,
    panel: &[u8],
    cols: &[&[u8]],
    out: &mut [f32],
    block: usize,
    kernel: unsafe fn(usize, *const u8, &[&[u8]], &mut [f32]),
) {
    let nb = n / 32;
    check_run(nb, block, panel, cols, out);
    // SAFETY: the kernel's instruction set was checked when it was
    // installed; the slices were checked above.
    unsafe { kernel(nb, panel.as_ptr(), cols, out) }
}
