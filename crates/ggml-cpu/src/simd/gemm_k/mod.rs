//! Panel matrix x matrix kernels ([`super::Gemm`]) for K-quant weights
//! against Q8_K activations, with AVX-512 VNNI.
//!
//! A panel holds [`PANEL_ROWS`] weight rows, one per 32-bit lane: for each
//! group of 4 consecutive weights (a k-group), the rows' 4 levels sit side
//! by side in one 64-byte vector, as unsigned bytes, so that `VPDPBUSD`
//! with the column's 4 activation bytes broadcast to every lane adds the
//! k-group's dot product to all 16 rows at once. Q4_K keeps its nibbles:
//! one vector holds a k-group of a sub-block in its low nibbles and the
//! same k-group of the next sub-block in its high nibbles, used masked in
//! place (16 times the level, which the scale divides by 16). Each
//! super-block of the panel also carries its rows' scales as 16-lane
//! vectors. Q4_K keeps its rows' 16-byte block headers as they are (d and
//! dmin as f16, the 12 bytes of packed 6-bit scales and mins as 3 vectors
//! of dwords), so that its panel is exactly as large as its rows and can
//! be stored in place of them; the kernel decodes the 16 rows' scales and
//! mins per super-block with a few vector operations. Q5_K and Q6_K carry
//! them decoded: d times each sub-block scale as f32, the mins (Q5_K) or
//! -32 times the scales (Q6_K) as i16 pairs, dmin or d as f32. Q3_K takes
//! Q6_K's layout and kernel: its levels 0..7 (the weight plus 4), d times
//! its 16 signed 6-bit scales, -4 times the scales.
//!
//! Q6_K's levels panel is 1.7 times as large as its rows: weights are
//! stored, and token generation reads them, in a compact layout of its own
//! (`q6_rows`, with AVX2 and AVX-512 kernels) whose panels are expanded into levels
//! panels, tile by tile, for calls with many columns.
//!
//! Per sub-block and column the integer sum is exact (and exactly
//! converted); one FMA adds it, times d * scale, to the super-block's f32
//! sum. The mins, or the offset of Q6_K's and Q3_K's levels, come once per
//! super-block from the activations' block sums with `VPDPWSSD`; one FMA
//! per super-block and column then adds the activation scale times that
//! sum to the lane's accumulator. Every lane sees the same operations in
//! the same order whatever the number of columns of a call. Applying the
//! scales in f32 measured faster than in integers (`VPDPWSSD` per 16
//! weights, or `VPMULLD`).
//!
//! A call with few columns of Q4_K (token generation: a matrix x vector
//! streaming the panels from memory) reads each vector once for both its
//! nibbles and prefetches the panel stream ahead.
//!
//! Packing decodes 64 levels of a row at a time and transposes the 16
//! rows in registers, and transposes (Q4_K) or decodes the rows' scales 16
//! at a time.
//!
//! Every `unsafe fn` here is compiled for AVX-512 VNNI and reached only
//! through [`install`], which registers the kernels only on CPUs with it;
//! slices are length-checked on entry.

use std::arch::x86_64::*;

use ggml_core::Type;

use super::avx2::q3k_levels;
use super::avx512::{bcast4, join, load256, load512};
use super::scalar::{q8k_bsum, Q8K_BSUMS, Q8K_BYTES, Q8K_QS};
use super::{Gemm, Kernels, GEMM_COLS, PANEL_ROWS};
use crate::features::cpu_features;

/// Elements of a super-block.
const QK: usize = 256;
/// Bytes of one panel vector: [`PANEL_ROWS`] lanes of 4 bytes.
const VEC: usize = 4 * PANEL_ROWS;

/// Installs the K-quant panel kernels (the caller checked AVX-512); without
/// VNNI, the AVX2 ones, but for the compact Q6_K panels' AVX-512 kernel.
pub(super) fn install(k: &mut Kernels) {
    if cpu_features().avx512_vnni {
        k.set_gemm(Type::Q4_K, &Q4_K_GEMM);
        k.set_gemm(Type::Q5_K, &Q5_K_GEMM);
        k.set_gemm(Type::Q6_K, &q6_rows::Q6_K_ROWS_GEMM_VNNI);
        k.set_gemm(Type::Q3_K, &Q3_K_GEMM);
    } else {
        install_avx2(k);
        k.set_gemm(Type::Q6_K, &q6_rows::Q6_K_ROWS_GEMM_512);
    }
}

/// Installs the AVX2 K-quant panel kernels (the caller checked AVX2, FMA
/// and F16C): Q4_K in the VNNI kernel's layout, Q6_K in its compact one
/// (with the levels panel's AVX2 kernel for many columns).
pub(super) fn install_avx2(k: &mut Kernels) {
    k.set_gemm(Type::Q4_K, &avx2::Q4_K_GEMM_AVX2);
    k.set_gemm(Type::Q6_K, &q6_rows::Q6_K_ROWS_GEMM);
}

/// # Safety
/// `p` must be readable for 64 bytes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma")]
unsafe fn load_ps(p: *const u8) -> __m512 {
    // SAFETY: 64 readable bytes (caller).
    unsafe { _mm512_loadu_ps(p as *const f32) }
}

/// The f32 at `p` in every lane.
///
/// # Safety
/// `p` must be readable for 4 bytes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma")]
unsafe fn bcast_ps(p: *const u8) -> __m512 {
    // SAFETY: 4 readable bytes (caller).
    _mm512_set1_ps(unsafe { (p as *const f32).read_unaligned() })
}

/// Stores the 16x16 transpose of `m` (16 rows of 16 dwords): vector `c`
/// at `dst + c * VEC` holds dword `c` of every row, row `r` in lane `r`.
///
/// # Safety
/// `dst` must be writable for 16 vectors.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma")]
unsafe fn transpose_store(m: &[__m512i; 16], dst: *mut u8) {
    // Dwords of row pairs, then quads, interleaved within 128-bit blocks:
    // u[4i + k] holds, in block b, dword 4b + k of rows 4i..4i + 4.
    let t: [__m512i; 16] = std::array::from_fn(|x| {
        let (a, b) = (m[x & !1], m[x | 1]);
        if x % 2 == 0 {
            _mm512_unpacklo_epi32(a, b)
        } else {
            _mm512_unpackhi_epi32(a, b)
        }
    });
    let u: [__m512i; 16] = std::array::from_fn(|x| {
        let (i, k) = (x / 4, x % 4);
        let (a, b) = (t[4 * i + k / 2], t[4 * i + 2 + k / 2]);
        if k % 2 == 0 {
            _mm512_unpacklo_epi64(a, b)
        } else {
            _mm512_unpackhi_epi64(a, b)
        }
    });
    // Then a 4x4 transpose of 128-bit blocks for each k.
    for k in 0..4 {
        let a = _mm512_shuffle_i32x4::<0x44>(u[k], u[4 + k]);
        let b = _mm512_shuffle_i32x4::<0xee>(u[k], u[4 + k]);
        let c = _mm512_shuffle_i32x4::<0x44>(u[8 + k], u[12 + k]);
        let d = _mm512_shuffle_i32x4::<0xee>(u[8 + k], u[12 + k]);
        let o = [
            _mm512_shuffle_i32x4::<0x88>(a, c),
            _mm512_shuffle_i32x4::<0xdd>(a, c),
            _mm512_shuffle_i32x4::<0x88>(b, d),
            _mm512_shuffle_i32x4::<0xdd>(b, d),
        ];
        for (bl, v) in o.iter().enumerate() {
            // SAFETY: vector 4 * bl + k of the 16 (caller).
            unsafe { _mm512_storeu_si512(dst.add((4 * bl + k) * VEC) as *mut __m512i, *v) };
        }
    }
}

/// Blocks ahead of the one being packed that the rows' bytes are asked for.
const PACK_AHEAD: usize = 4;

/// Packs the levels of `rows` (1 to 16, `bytes` per block) of Q`T`_K: for
/// each of the `chunks` 64-byte chunks of a block's levels (unsigned bytes,
/// or Q4_K's nibble pairs), 16 panel vectors at `qs + chunk * 16 * VEC` in
/// the panel super-block (`sb` bytes); missing rows get zeros.
///
/// # Safety
/// AVX-512; `out` holds `nb` panel super-blocks and every row `nb` blocks
/// (checked by [`check_pack`]).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma")]
unsafe fn pack_levels<const T: u8>(
    nb: usize,
    rows: &[&[u8]],
    out: &mut [u8],
    bytes: usize,
    sb: usize,
    qs: usize,
    chunks: usize,
) {
    for ib in 0..nb {
        // The rows are read as 16 streams: ask for their blocks a few
        // blocks ahead.
        for x in rows {
            let ahead = x.as_ptr().wrapping_add((ib + PACK_AHEAD) * bytes);
            for o in (0..bytes).step_by(64) {
                // A prefetch is only a hint: it never faults, so the
                // address may lie past the row.
                _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(o) as *const i8);
            }
        }
        for k in 0..chunks {
            let m: [__m512i; 16] = std::array::from_fn(|r| match rows.get(r) {
                // SAFETY: block ib of row r (checked).
                Some(x) => unsafe {
                    let b = x.as_ptr().add(ib * bytes);
                    match T {
                        3 => q3k_chunk(b, k),
                        4 => q4k_chunk(b, k),
                        5 => q5k_chunk(b, k),
                        _ => q6k_chunk(b, k),
                    }
                },
                None => _mm512_setzero_si512(),
            });
            // SAFETY: vectors 16k..16k + 16 of panel super-block ib.
            unsafe { transpose_store(&m, out.as_mut_ptr().add(ib * sb + qs + k * 16 * VEC)) };
        }
    }
}

/// Q3_K: the levels (0..7, the weight plus 4) of weights `64k..64k + 64`:
/// weight `128h + 32j + l` has the bits `2j, 2j + 1` of `qs` byte `32h + l`
/// (at 32) and bit `4h + j` of `hmask` byte `l` (at 0) on top.
///
/// # Safety
/// `b` must be readable for a Q3_K block, `k < 4`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma")]
unsafe fn q3k_chunk(b: *const u8, k: usize) -> __m512i {
    let h = k / 2;
    // SAFETY: hmask (32 bytes at 0) and 32 bytes of qs at 32 + 32h.
    let (hm, q) = unsafe { (load256(b), load256(b.add(32 + 32 * h))) };
    let j = 2 * (k % 2);
    join(
        q3k_levels(q, hm, j, 4 * h + j),
        q3k_levels(q, hm, j + 1, 4 * h + j + 1),
    )
}

/// Q4_K: bytes `64k..64k + 64` of the block's `qs` as they are.
///
/// # Safety
/// `b` must be readable for a Q4_K block, `k < 2`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma")]
unsafe fn q4k_chunk(b: *const u8, k: usize) -> __m512i {
    // SAFETY: 64 bytes of qs (caller).
    unsafe { load512(b.add(16 + 64 * k)) }
}

/// Q5_K: the levels (0..31) of weights `64j..64j + 64`.
///
/// # Safety
/// `b` must be readable for a Q5_K block, `j < 4`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma")]
unsafe fn q5k_chunk(b: *const u8, j: usize) -> __m512i {
    // SAFETY: qh (32 bytes at 16) and 32 bytes of qs (at 48 + 32j).
    let (qh, q) = unsafe { (load256(b.add(16)), load256(b.add(48 + 32 * j))) };
    let m4 = _mm256_set1_epi8(0x0f);
    let bit4 = _mm256_set1_epi8(0x10);
    // Bit 2j (2j + 1) of qh moved to bit 4.
    let at4 = |bit: usize| {
        let v = if bit <= 4 {
            _mm256_sll_epi16(qh, _mm_cvtsi32_si128(4 - bit as i32))
        } else {
            _mm256_srl_epi16(qh, _mm_cvtsi32_si128(bit as i32 - 4))
        };
        _mm256_and_si256(v, bit4)
    };
    let lo = _mm256_or_si256(_mm256_and_si256(q, m4), at4(2 * j));
    let hi = _mm256_or_si256(
        _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4),
        at4(2 * j + 1),
    );
    join(lo, hi)
}

/// Q6_K: the levels (0..63) of weights `64k..64k + 64`.
///
/// # Safety
/// `b` must be readable for a Q6_K block, `k < 4`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma")]
unsafe fn q6k_chunk(b: *const u8, k: usize) -> __m512i {
    let h = k / 2;
    // SAFETY: ql (64 bytes at 64h) and qh (32 bytes at 128 + 32h).
    let (a, c, qh) = unsafe {
        (
            load256(b.add(64 * h)),
            load256(b.add(64 * h + 32)),
            load256(b.add(128 + 32 * h)),
        )
    };
    let m4 = _mm256_set1_epi8(0x0f);
    let m30 = _mm256_set1_epi8(0x30);
    let (lo, hi) = if k % 2 == 0 {
        (
            _mm256_or_si256(
                _mm256_and_si256(a, m4),
                _mm256_and_si256(_mm256_slli_epi16::<4>(qh), m30),
            ),
            _mm256_or_si256(
                _mm256_and_si256(c, m4),
                _mm256_and_si256(_mm256_slli_epi16::<2>(qh), m30),
            ),
        )
    } else {
        (
            _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16::<4>(a), m4),
                _mm256_and_si256(qh, m30),
            ),
            _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16::<4>(c), m4),
                _mm256_and_si256(_mm256_srli_epi16::<2>(qh), m30),
            ),
        )
    };
    join(lo, hi)
}

/// Checks what a `run` relies on (an internal invariant of the caller, so
/// a failure is a bug): whole super-blocks, a full panel, 1 to
/// [`GEMM_COLS`] prepared columns and room for the results.
fn check_run(n: usize, panel: &[u8], sb: usize, cols: &[&[u8]], asb: usize, out: &[f32]) {
    let nb = n / QK;
    assert!(
        n % QK == 0
            && panel.len() >= nb * sb
            && (1..=GEMM_COLS).contains(&cols.len())
            && cols.iter().all(|c| c.len() >= nb * asb)
            && out.len() >= cols.len() * PANEL_ROWS,
        "panel kernel: {n} elements, {} columns, short slices",
        cols.len()
    );
}

/// Checks what a `pack` relies on.
fn check_pack(n: usize, rows: &[&[u8]], bytes: usize, out: &[u8], sb: usize) {
    let nb = n / QK;
    assert!(
        n % QK == 0
            && rows.len() <= PANEL_ROWS
            && rows.iter().all(|x| x.len() >= nb * bytes)
            && out.len() >= nb * sb,
        "panel pack: {n} elements, {} rows, short slices",
        rows.len()
    );
}

/// Calls `$f::<C>(args)` with `C = $cols.len()` (1..=GEMM_COLS).
macro_rules! by_cols {
    ($f:ident, $nb:expr, $panel:expr, $cols:expr, $out:expr) => {
        match $cols.len() {
            1 => $f::<1>($nb, $panel, $cols, $out),
            2 => $f::<2>($nb, $panel, $cols, $out),
            3 => $f::<3>($nb, $panel, $cols, $out),
            4 => $f::<4>($nb, $panel, $cols, $out),
            5 => $f::<5>($nb, $panel, $cols, $out),
            6 => $f::<6>($nb, $panel, $cols, $out),
            7 => $f::<7>($nb, $panel, $cols, $out),
            8 => $f::<8>($nb, $panel, $cols, $out),
            c => panic!("panel kernel called with {c} columns"),
        }
    };
}

mod avx2;
mod q4q5;
mod q6;
mod q6_rows;

pub(crate) use q4q5::{A4_SB, Q4K_QS, Q4K_SB};
use q4q5::{Q4_K_GEMM, Q5_K_GEMM};
use q6::Q3_K_GEMM;
