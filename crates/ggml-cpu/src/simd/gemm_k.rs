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

/// Installs the K-quant panel kernels (the caller checked AVX-512).
pub(super) fn install(k: &mut Kernels) {
    if cpu_features().avx512_vnni {
        k.set_gemm(Type::Q4_K, &Q4_K_GEMM);
        k.set_gemm(Type::Q5_K, &Q5_K_GEMM);
        k.set_gemm(Type::Q6_K, &Q6_K_GEMM);
        k.set_gemm(Type::Q3_K, &Q3_K_GEMM);
    }
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

// ----------------------------------------------------------- Q4_K, Q5_K

/// Q4_K: one panel super-block, exactly as many bytes as its 16 rows'
/// blocks. First the rows' 16-byte block headers: d of the 16 rows as f16
/// (row `r` at `2r`),
const Q4K_D: usize = 0;
/// then their dmin as f16 (row `r` at 32 + `2r`),
const Q4K_DMIN: usize = 32;
/// then 3 vectors: vector `k` holds bytes `4k..4k + 4` of each row's 12
/// bytes of packed 6-bit scales and mins (as ggml's `get_scale_min_k4`
/// reads them: bytes 0..4 scales 0..4, bytes 4..8 mins 0..4, the low bits
/// of scales and mins 4..8 in bytes 8..12 and their top bits in bits 6..8
/// of bytes 0..8).
const Q4K_SC: usize = VEC;
/// then 32 vectors: vector `v` holds bytes `4v..4v + 4` of each row's
/// `qs`: its low nibbles are weights `64j + 4i ..` (`v = 8j + i`), its high
/// nibbles the same plus 32.
const Q4K_QS: usize = 4 * VEC;
/// Bytes of a panel super-block (16 Q4_K blocks).
const Q4K_SB: usize = Q4K_QS + 32 * VEC;
/// Bytes of a Q4_K block.
const Q4K_BYTES: usize = 144;
const _: () = assert!(Q4K_SB == PANEL_ROWS * Q4K_BYTES);

/// Q5_K: one panel super-block. Vector `v` of the first 64 holds weights
/// `4v..4v + 4` of each row as levels 0..31.
const Q5K_QS: usize = 0;
/// 4 vectors: the mins of sub-blocks `2p` and `2p + 1` as an i16 pair.
const Q5K_MIN: usize = Q5K_QS + 64 * VEC;
/// dmin as f32.
const Q5K_DMIN: usize = Q5K_MIN + 4 * VEC;
/// 8 vectors: d times the scale of sub-block `b` (32 weights), as f32.
const Q5K_DSC: usize = Q5K_DMIN + VEC;
/// Bytes of a panel super-block.
const Q5K_SB: usize = Q5K_DSC + 8 * VEC;
/// Bytes of a Q5_K block.
const Q5K_BYTES: usize = 176;

/// Q4_K / Q5_K activations: per super-block the 256 levels, the 8 sums of
/// 32 as i16, d as f32, padding.
const A4_QS: usize = 0;
const A4_SUM: usize = 256;
const A4_D: usize = 272;
const A4_SB: usize = 288;

/// Q4_K: at most this many columns make a call read each panel byte once
/// (token generation, a matrix x vector, streams the panels from memory).
const Q4K_FEW: usize = 4;
/// Bytes ahead of the super-block being read that such a call asks the
/// cache for: panels of a matrix lie back to back and a thread walks
/// consecutive ones, so the stream runs on into the next panel. Measured
/// best of 2 to 8 KiB on a matrix larger than the last-level cache. The
/// requests go out one cache line per vector read, next to the read: all
/// 36 lines of a super-block asked for at once generated TinyLlama Q4_K_M
/// at 43-45 tokens/s on one thread, one at a time at 52-57 (runs
/// alternated). With more columns (compute-bound, a panel read again for
/// each group of columns) the prefetches measured slower.
const Q4K_PREFETCH: usize = 6144;

static Q4_K_GEMM: Gemm = Gemm {
    panel_bytes: |n| n / QK * Q4K_SB,
    pack: q4k_pack,
    act_bytes: |n| n / QK * A4_SB,
    prep: q4k_prep,
    run: q4k_run,
};

static Q5_K_GEMM: Gemm = Gemm {
    panel_bytes: |n| n / QK * Q5K_SB,
    pack: q5k_pack,
    act_bytes: |n| n / QK * A4_SB,
    prep: q4k_prep,
    run: q5k_run,
};

fn q4k_pack(n: usize, rows: &[&[u8]], out: &mut [u8]) {
    check_pack(n, rows, Q4K_BYTES, out, Q4K_SB);
    let nb = n / QK;
    // Every byte of the panel is written below (zeros for missing rows).
    // SAFETY: installed only on CPUs with AVX-512 VNNI; lengths checked.
    unsafe { pack_levels::<4>(nb, rows, out, Q4K_BYTES, Q4K_SB, Q4K_QS, 2) };
    for ib in 0..nb {
        // SAFETY: as above; panel super-block ib is inside `out`.
        unsafe { q4k_pack_header(rows, ib * Q4K_BYTES, out.as_mut_ptr().add(ib * Q4K_SB)) };
    }
}

fn q5k_pack(n: usize, rows: &[&[u8]], out: &mut [u8]) {
    check_pack(n, rows, Q5K_BYTES, out, Q5K_SB);
    let nb = n / QK;
    // Every byte of the panel is written below (zeros for missing rows).
    // SAFETY: installed only on CPUs with AVX-512 VNNI; lengths checked.
    unsafe { pack_levels::<5>(nb, rows, out, Q5K_BYTES, Q5K_SB, Q5K_QS, 4) };
    for ib in 0..nb {
        // SAFETY: as above; panel super-block ib is inside `out`.
        unsafe { q5k_pack_scales(rows, ib * Q5K_BYTES, out.as_mut_ptr().add(ib * Q5K_SB)) };
    }
}

/// The first 16 bytes (d, dmin, the 12 bytes of 6-bit scales and mins) of
/// the 16 rows' blocks at byte `at` (zeros for missing rows), transposed to
/// 4 vectors of one row per lane.
///
/// # Safety
/// AVX-512; every row readable for 16 bytes at `at`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma")]
unsafe fn block_headers(rows: &[&[u8]], at: usize) -> [__m512i; 4] {
    let m: [__m512i; 16] = std::array::from_fn(|r| match rows.get(r) {
        Some(x) => {
            // SAFETY: 16 bytes at `at` (caller).
            let v = unsafe { _mm_loadu_si128(x.as_ptr().add(at) as *const __m128i) };
            _mm512_castsi128_si512(v)
        }
        None => _mm512_setzero_si512(),
    });
    let mut t = [0u8; 16 * VEC];
    // SAFETY: t holds 16 vectors; vectors 0..4 are read back.
    unsafe {
        transpose_store(&m, t.as_mut_ptr());
        std::array::from_fn(|k| load512(t.as_ptr().add(k * VEC)))
    }
}

/// Packs the headers of the 16 rows' Q4_K blocks at byte `at` (zeros for
/// missing rows) into the panel super-block at `o`: d and dmin as f16, the
/// scale bytes as they are.
///
/// # Safety
/// AVX-512; every row readable for a Q4_K block at `at`; `o` writable for
/// a panel super-block.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma")]
unsafe fn q4k_pack_header(rows: &[&[u8]], at: usize, o: *mut u8) {
    // SAFETY: the block headers (caller).
    let [dd, s0, s1, s2] = unsafe { block_headers(rows, at) };
    // SAFETY: the vectors below lie inside the panel super-block (caller).
    unsafe {
        let d = _mm512_cvtepi32_epi16(dd);
        let dmin = _mm512_cvtepi32_epi16(_mm512_srli_epi32::<16>(dd));
        _mm256_storeu_si256(o.add(Q4K_D) as *mut __m256i, d);
        _mm256_storeu_si256(o.add(Q4K_DMIN) as *mut __m256i, dmin);
        for (k, s) in [s0, s1, s2].iter().enumerate() {
            _mm512_storeu_si512(o.add(Q4K_SC + k * VEC) as *mut __m512i, *s);
        }
    }
}

/// Packs d * scale, the mins and dmin of the 16 rows' Q5_K blocks at byte
/// `at` (zeros for missing rows) into the panel super-block at `o`, all
/// rows at once.
///
/// # Safety
/// AVX-512; every row readable for a Q5_K block at `at`; `o` writable for
/// a panel super-block.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn q5k_pack_scales(rows: &[&[u8]], at: usize, o: *mut u8) {
    // SAFETY: the block headers (caller).
    let [dd, s0, s1, s2] = unsafe { block_headers(rows, at) };
    let d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dd));
    let dmin = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32::<16>(dd)));
    let (m63, m15, ff) = (
        _mm512_set1_epi32(63),
        _mm512_set1_epi32(15),
        _mm512_set1_epi32(255),
    );
    let byte = |v: __m512i, k: usize| {
        _mm512_and_si512(_mm512_srl_epi32(v, _mm_cvtsi32_si128(8 * k as i32)), ff)
    };
    let mut sc = [_mm512_setzero_si512(); 8];
    let mut mn = [_mm512_setzero_si512(); 8];
    // As scale_min_k4: bytes 0..4 hold scales 0..4 (and the top bits of
    // scales 4..8), bytes 4..8 mins 0..4 (and the top bits of mins 4..8),
    // bytes 8..12 the low bits of scales and mins 4..8.
    for k in 0..4 {
        let (a, b, c) = (byte(s0, k), byte(s1, k), byte(s2, k));
        sc[k] = _mm512_and_si512(a, m63);
        mn[k] = _mm512_and_si512(b, m63);
        sc[k + 4] = _mm512_or_si512(
            _mm512_and_si512(c, m15),
            _mm512_slli_epi32::<4>(_mm512_srli_epi32::<6>(a)),
        );
        mn[k + 4] = _mm512_or_si512(
            _mm512_srli_epi32::<4>(c),
            _mm512_slli_epi32::<4>(_mm512_srli_epi32::<6>(b)),
        );
    }
    // SAFETY: the vectors below lie inside the panel super-block (caller).
    unsafe {
        for (g, s) in sc.iter().enumerate() {
            let v = _mm512_mul_ps(d, _mm512_cvtepi32_ps(*s));
            _mm512_storeu_ps(o.add(Q5K_DSC + g * VEC) as *mut f32, v);
        }
        for q in 0..4 {
            let v = _mm512_or_si512(mn[2 * q], _mm512_slli_epi32::<16>(mn[2 * q + 1]));
            _mm512_storeu_si512(o.add(Q5K_MIN + q * VEC) as *mut __m512i, v);
        }
        _mm512_storeu_ps(o.add(Q5K_DMIN) as *mut f32, dmin);
    }
}

fn q4k_prep(n: usize, y: &[u8], out: &mut [u8]) {
    let nb = n / QK;
    assert!(
        n % QK == 0 && y.len() >= nb * Q8K_BYTES && out.len() >= nb * A4_SB,
        "panel prep: {n} elements, short slices"
    );
    for ib in 0..nb {
        let yb = &y[ib * Q8K_BYTES..(ib + 1) * Q8K_BYTES];
        let o = &mut out[ib * A4_SB..(ib + 1) * A4_SB];
        o[A4_QS..A4_QS + QK].copy_from_slice(&yb[Q8K_QS..Q8K_QS + QK]);
        for j in 0..8 {
            // Sums of 32 levels are at most 4096 in magnitude.
            let s = (q8k_bsum(yb, 2 * j) + q8k_bsum(yb, 2 * j + 1)) as i16;
            o[A4_SUM + 2 * j..A4_SUM + 2 * j + 2].copy_from_slice(&s.to_le_bytes());
        }
        o[A4_D..A4_D + 4].copy_from_slice(&yb[0..4]);
        o[A4_D + 4..A4_SB].fill(0);
    }
}

fn q4k_run(n: usize, panel: &[u8], cols: &[&[u8]], out: &mut [f32]) {
    check_run(n, panel, Q4K_SB, cols, A4_SB, out);
    // SAFETY: installed only on CPUs with AVX-512 VNNI; lengths checked.
    unsafe { by_cols!(q4k_kernel, n / QK, panel, cols, out) }
}

fn q5k_run(n: usize, panel: &[u8], cols: &[&[u8]], out: &mut [f32]) {
    check_run(n, panel, Q5K_SB, cols, A4_SB, out);
    // SAFETY: installed only on CPUs with AVX-512 VNNI; lengths checked.
    unsafe { by_cols!(q5k_kernel, n / QK, panel, cols, out) }
}

/// # Safety
/// As [`qk_kernel`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma")]
unsafe fn q4k_kernel<const C: usize>(nb: usize, panel: &[u8], cols: &[&[u8]], out: &mut [f32]) {
    // SAFETY: same contract.
    unsafe { qk_kernel::<C, false>(nb, panel, cols, out) }
}

/// # Safety
/// As [`qk_kernel`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma")]
unsafe fn q5k_kernel<const C: usize>(nb: usize, panel: &[u8], cols: &[&[u8]], out: &mut [f32]) {
    // SAFETY: same contract.
    unsafe { qk_kernel::<C, true>(nb, panel, cols, out) }
}

/// A `VPSHUFB` control that moves byte `k` of every dword to the dword's
/// low byte and zeroes the others.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma")]
fn byte_to_dword(k: i32) -> __m512i {
    let base = _mm512_set4_epi32(
        0x8080_800c_u32 as i32,
        0x8080_8008_u32 as i32,
        0x8080_8004_u32 as i32,
        0x8080_8000_u32 as i32,
    );
    _mm512_add_epi32(base, _mm512_set1_epi32(k))
}

/// A `VPSHUFB` control that moves bytes `2h` and `2h + 1` of every dword
/// to its two i16 halves, zero-extended.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma")]
fn bytes_to_words(h: i32) -> __m512i {
    let base = _mm512_set4_epi32(
        0x800d_800c_u32 as i32,
        0x8009_8008_u32 as i32,
        0x8005_8004_u32 as i32,
        0x8001_8000_u32 as i32,
    );
    _mm512_add_epi32(base, _mm512_set1_epi32(0x0002_0002 * h))
}

/// The scales of a Q4_K panel super-block, decoded for all 16 rows.
#[derive(Clone, Copy)]
struct Q4kScales {
    /// d as f32.
    d: __m512,
    /// d / 16, for the odd sub-blocks: the high nibbles, which the kernel
    /// leaves in place (16 times the level).
    d16: __m512,
    /// Byte `k` of a lane: the row's scale of sub-block `k` (6 bits).
    s03: __m512i,
    /// Byte `k` of a lane: the row's scale of sub-block `4 + k`.
    s47: __m512i,
}

impl Q4kScales {
    /// # Safety
    /// AVX-512; `p` readable for a Q4_K panel super-block.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma")]
    unsafe fn new(p: *const u8) -> Q4kScales {
        // SAFETY: d and scale bytes 0..4 and 8..12 of the super-block (caller).
        let (dh, s0, s2) = unsafe {
            (
                _mm256_loadu_si256(p.add(Q4K_D) as *const __m256i),
                load512(p.add(Q4K_SC)),
                load512(p.add(Q4K_SC + 2 * VEC)),
            )
        };
        let d = _mm512_cvtph_ps(dh);
        let m3f = _mm512_set1_epi8(0x3f);
        // Scales 4..8: the low 4 bits from bytes 8..12, the top 2 bits from
        // bits 6..8 of bytes 0..4.
        let top = _mm512_and_si512(_mm512_srli_epi32::<2>(s0), _mm512_set1_epi8(0x30));
        Q4kScales {
            d,
            d16: _mm512_mul_ps(d, _mm512_set1_ps(1.0 / 16.0)),
            s03: _mm512_and_si512(s0, m3f),
            // (s2 & 0x0f) | top
            s47: _mm512_ternarylogic_epi32::<0xf8>(top, s2, _mm512_set1_epi8(0x0f)),
        }
    }

    /// d times the scale of sub-block `g` (32 weights), as f32 (for the odd
    /// sub-blocks, the high nibbles, divided by 16). d has 11 significant
    /// bits and the scale 6, so every product is exact, as a packed one.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma")]
    fn dsc(&self, g: usize) -> __m512 {
        let s = if g < 4 { self.s03 } else { self.s47 };
        let v = _mm512_cvtepi32_ps(_mm512_shuffle_epi8(s, byte_to_dword(g as i32 % 4)));
        _mm512_mul_ps(if g % 2 == 0 { self.d } else { self.d16 }, v)
    }
}

/// The mins of a Q4_K panel super-block: vector `q` holds those of
/// sub-blocks `2q` and `2q + 1` as an i16 pair; and dmin as f32.
///
/// # Safety
/// AVX-512; `p` readable for a Q4_K panel super-block.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma")]
unsafe fn q4k_mins(p: *const u8) -> ([__m512i; 4], __m512) {
    // SAFETY: dmin and scale bytes 4..12 of the super-block (caller).
    let (dh, s1, s2) = unsafe {
        (
            _mm256_loadu_si256(p.add(Q4K_DMIN) as *const __m256i),
            load512(p.add(Q4K_SC + VEC)),
            load512(p.add(Q4K_SC + 2 * VEC)),
        )
    };
    let m03 = _mm512_and_si512(s1, _mm512_set1_epi8(0x3f));
    // Mins 4..8: the high 4 bits of bytes 8..12, the top 2 bits from bits
    // 6..8 of bytes 4..8.
    let top = _mm512_and_si512(_mm512_srli_epi32::<2>(s1), _mm512_set1_epi8(0x30));
    let m47 =
        _mm512_ternarylogic_epi32::<0xf8>(top, _mm512_srli_epi32::<4>(s2), _mm512_set1_epi8(0x0f));
    let (lo, hi) = (bytes_to_words(0), bytes_to_words(1));
    (
        [
            _mm512_shuffle_epi8(m03, lo),
            _mm512_shuffle_epi8(m03, hi),
            _mm512_shuffle_epi8(m47, lo),
            _mm512_shuffle_epi8(m47, hi),
        ],
        _mm512_cvtph_ps(dh),
    )
}

/// # Safety
/// AVX-512 VNNI; `nb` super-blocks in `panel` and in every column, `C`
/// columns, `C * PANEL_ROWS` results (checked by [`check_run`]).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma")]
unsafe fn qk_kernel<const C: usize, const FIVE: bool>(
    nb: usize,
    panel: &[u8],
    cols: &[&[u8]],
    out: &mut [f32],
) {
    let m4 = _mm512_set1_epi8(0x0f);
    let mf0 = _mm512_set1_epi8(0xf0u8 as i8);
    let sb = if FIVE { Q5K_SB } else { Q4K_SB };
    // Q4_K with few columns reads the panel once, both nibbles of a vector
    // at a time (see below).
    let few = !FIVE && C <= Q4K_FEW;
    let mut acc = [_mm512_setzero_ps(); C];
    for ib in 0..nb {
        // SAFETY: super-block ib of the panel and of every column (checked);
        // every offset below stays inside them.
        unsafe {
            let p = panel.as_ptr().add(ib * sb);
            let ahead = p.wrapping_add(Q4K_PREFETCH);
            if few {
                // The header's lines here, each vector of levels' as it
                // is read (below): see [`Q4K_PREFETCH`].
                for o in (0..Q4K_QS).step_by(64) {
                    // A prefetch is only a hint: it never faults, so the
                    // address may lie past the panel (the next panel of
                    // the matrix, when there is one).
                    _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(o) as *const i8);
                }
            }
            let y: [*const u8; C] = std::array::from_fn(|c| cols[c].as_ptr().add(ib * A4_SB));
            // d * scale of sub-block g: Q5_K's as packed; Q4_K's decoded
            // next to its use for few columns, all up front for many
            // (which measured faster: there the columns' sums fill the
            // registers).
            let scales = (!FIVE).then(|| Q4kScales::new(p));
            let many = (!FIVE && !few).then(|| {
                let s = scales.unwrap();
                std::array::from_fn::<__m512, 8, _>(|g| s.dsc(g))
            });
            let dsc = |g: usize| match (&many, &scales) {
                (Some(m), _) => m[g],
                (None, Some(s)) => s.dsc(g),
                (None, None) => load_ps(p.add(Q5K_DSC + g * VEC)),
            };
            let mut fsum = [_mm512_setzero_ps(); C];
            for j in 0..4 {
                if few {
                    // Each vector once for both its nibbles, the sums of
                    // a sub-block split over two chains for one column
                    // (one chain of VPDPBUSDs per sub-block waits on their
                    // latency).
                    let chains = if C == 1 { 2 } else { 1 };
                    let mut part = [[[_mm512_setzero_si512(); C]; 2]; 2];
                    for i in 0..8 {
                        let at = Q4K_QS + (8 * j + i) * VEC;
                        _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(at) as *const i8);
                        let v = load512(p.add(at));
                        // The high nibbles stay in place: 16 times the
                        // level.
                        let w = [_mm512_and_si512(v, m4), _mm512_and_si512(v, mf0)];
                        for (nib, wn) in w.iter().enumerate() {
                            let at = A4_QS + 64 * j + 32 * nib + 4 * i;
                            let ch = &mut part[nib][i % chains];
                            for c in 0..C {
                                ch[c] = _mm512_dpbusd_epi32(ch[c], *wn, bcast4(y[c].add(at)));
                            }
                        }
                    }
                    for (nib, pn) in part.iter().enumerate() {
                        let dsc = dsc(2 * j + nib);
                        for c in 0..C {
                            // The same exact sum as one chain's.
                            let isub = if chains == 2 {
                                _mm512_add_epi32(pn[0][c], pn[1][c])
                            } else {
                                pn[0][c]
                            };
                            fsum[c] = _mm512_fmadd_ps(dsc, _mm512_cvtepi32_ps(isub), fsum[c]);
                        }
                    }
                    continue;
                }
                for nib in 0..2 {
                    // 32 weights: exact sums, exactly converted (below
                    // 2^24 in magnitude, also 16 times a high-nibble sum).
                    let mut isub = [_mm512_setzero_si512(); C];
                    for i in 0..8 {
                        let w = if FIVE {
                            load512(p.add(Q5K_QS + (16 * j + 8 * nib + i) * VEC))
                        } else {
                            let v = load512(p.add(Q4K_QS + (8 * j + i) * VEC));
                            // The high nibbles stay in place: 16 times
                            // the level.
                            if nib == 0 {
                                _mm512_and_si512(v, m4)
                            } else {
                                _mm512_and_si512(v, mf0)
                            }
                        };
                        let at = A4_QS + 64 * j + 32 * nib + 4 * i;
                        for c in 0..C {
                            isub[c] = _mm512_dpbusd_epi32(isub[c], w, bcast4(y[c].add(at)));
                        }
                    }
                    let dsc = dsc(2 * j + nib);
                    for c in 0..C {
                        fsum[c] = _mm512_fmadd_ps(dsc, _mm512_cvtepi32_ps(isub[c]), fsum[c]);
                    }
                }
            }
            let (mins, dmin) = if FIVE {
                (
                    std::array::from_fn(|q| load512(p.add(Q5K_MIN + q * VEC))),
                    load_ps(p.add(Q5K_DMIN)),
                )
            } else {
                q4k_mins(p)
            };
            for c in 0..C {
                let mut m = _mm512_setzero_si512();
                for (q, mq) in mins.iter().enumerate() {
                    m = _mm512_dpwssd_epi32(m, *mq, bcast4(y[c].add(A4_SUM + 4 * q)));
                }
                let t = _mm512_fnmadd_ps(dmin, _mm512_cvtepi32_ps(m), fsum[c]);
                acc[c] = _mm512_fmadd_ps(bcast_ps(y[c].add(A4_D)), t, acc[c]);
            }
        }
    }
    for (c, a) in acc.iter().enumerate() {
        // SAFETY: C * PANEL_ROWS results (checked).
        unsafe { _mm512_storeu_ps(out.as_mut_ptr().add(c * PANEL_ROWS), *a) };
    }
}

// ------------------------------------------------------------------ Q6_K

/// Q6_K: one panel super-block. Vector `v` of the first 64 holds weights
/// `4v..4v + 4` of each row as unsigned levels 0..63 (the weight plus 32).
const Q6K_QS: usize = 0;
/// 16 vectors: d times the scale of sub-block `g` (16 weights), as f32.
const Q6K_DSC: usize = Q6K_QS + 64 * VEC;
/// 8 vectors: -32 times the scales of sub-blocks `2p` and `2p + 1` as an
/// i16 pair (the offset of the levels, applied to the activation sums).
const Q6K_CORR: usize = Q6K_DSC + 16 * VEC;
/// d as f32.
const Q6K_D: usize = Q6K_CORR + 8 * VEC;
/// Bytes of a panel super-block.
const Q6K_SB: usize = Q6K_D + VEC;
/// Bytes of a Q6_K block.
const Q6K_BYTES: usize = 210;

static Q6_K_GEMM: Gemm = Gemm {
    panel_bytes: |n| n / QK * Q6K_SB,
    pack: q6k_pack,
    act_bytes: |n| n / QK * Q8K_BYTES,
    prep: q8k_copy,
    run: q6k_run,
};

/// Q3_K in the Q6_K panel layout and kernel: levels 0..7 (the weight plus
/// 4), d times the 16 signed 6-bit scales, -4 times the scales.
static Q3_K_GEMM: Gemm = Gemm {
    panel_bytes: |n| n / QK * Q6K_SB,
    pack: q3k_pack,
    act_bytes: |n| n / QK * Q8K_BYTES,
    prep: q8k_copy,
    run: q6k_run,
};

/// Bytes of a Q3_K block.
const Q3K_BYTES: usize = 110;

fn q3k_pack(n: usize, rows: &[&[u8]], out: &mut [u8]) {
    check_pack(n, rows, Q3K_BYTES, out, Q6K_SB);
    let nb = n / QK;
    // Every byte of the panel is written below (zeros for missing rows).
    // SAFETY: installed only on CPUs with AVX-512 VNNI; lengths checked.
    unsafe { pack_levels::<3>(nb, rows, out, Q3K_BYTES, Q6K_SB, Q6K_QS, 4) };
    for ib in 0..nb {
        let at = ib * Q3K_BYTES;
        let mut d = [0u16; PANEL_ROWS];
        for (dr, x) in d.iter_mut().zip(rows) {
            *dr = u16::from_le_bytes([x[at + 108], x[at + 109]]);
        }
        // SAFETY: as above; the 12 scale bytes at 96 of every row's block
        // ib; panel super-block ib is inside `out`.
        unsafe {
            let sc: [__m128i; PANEL_ROWS] = std::array::from_fn(|r| match rows.get(r) {
                Some(x) => super::avx2::q3k_scales(x.as_ptr().add(at + 96)),
                None => _mm_setzero_si128(),
            });
            pack_i8_scales(&sc, &d, 4, out.as_mut_ptr().add(ib * Q6K_SB));
        }
    }
}

fn q6k_pack(n: usize, rows: &[&[u8]], out: &mut [u8]) {
    check_pack(n, rows, Q6K_BYTES, out, Q6K_SB);
    let nb = n / QK;
    // Every byte of the panel is written below (zeros for missing rows).
    // SAFETY: installed only on CPUs with AVX-512 VNNI; lengths checked.
    unsafe { pack_levels::<6>(nb, rows, out, Q6K_BYTES, Q6K_SB, Q6K_QS, 4) };
    for ib in 0..nb {
        let mut d = [0u16; PANEL_ROWS];
        for (dr, x) in d.iter_mut().zip(rows) {
            let o = ib * Q6K_BYTES + 208;
            *dr = u16::from_le_bytes([x[o], x[o + 1]]);
        }
        // SAFETY: as above; panel super-block ib is inside `out`.
        unsafe { q6k_pack_scales(rows, ib * Q6K_BYTES, &d, out.as_mut_ptr().add(ib * Q6K_SB)) };
    }
}

/// Packs d * scale, the offset pairs and d of the 16 rows' Q6_K blocks at
/// byte `at` (d given as f16 bits; zeros for missing rows) into the panel
/// super-block at `o`.
///
/// # Safety
/// AVX-512; every row readable for a Q6_K block at `at`; `o` writable for
/// a panel super-block.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn q6k_pack_scales(rows: &[&[u8]], at: usize, d: &[u16; PANEL_ROWS], o: *mut u8) {
    let sc: [__m128i; PANEL_ROWS] = std::array::from_fn(|r| match rows.get(r) {
        // SAFETY: the 16 scales at 192 of the block (caller).
        Some(x) => unsafe { _mm_loadu_si128(x.as_ptr().add(at + 192) as *const __m128i) },
        None => _mm_setzero_si128(),
    });
    // SAFETY: `o` holds a panel super-block (caller).
    unsafe { pack_i8_scales(&sc, d, 32, o) };
}

/// Packs the 16 rows' 16 signed scales (`sc[r]`, i8), d (f16 bits) and the
/// offset `off` of their levels into the panel super-block at `o`: d times
/// each scale as f32, `-off` times the scales as i16 pairs, d as f32. The
/// 16 scales of every row are transposed to 4 vectors of one row per lane.
///
/// # Safety
/// AVX-512; `o` writable for a panel super-block.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn pack_i8_scales(sc: &[__m128i; PANEL_ROWS], d: &[u16; PANEL_ROWS], off: i32, o: *mut u8) {
    let m: [__m512i; 16] = std::array::from_fn(|r| _mm512_castsi128_si512(sc[r]));
    let mut t = [0u8; 16 * VEC];
    // SAFETY: t holds 16 vectors, d 16 halves; vectors 0..4 are read back.
    let (sv, d) = unsafe {
        transpose_store(&m, t.as_mut_ptr());
        let sv: [__m512i; 4] = std::array::from_fn(|k| load512(t.as_ptr().add(k * VEC)));
        (
            sv,
            _mm512_cvtph_ps(_mm256_loadu_si256(d.as_ptr() as *const __m256i)),
        )
    };
    // Scale g, sign-extended: byte g % 4 of vector g / 4.
    let scale = |g: usize| {
        let v = _mm512_sll_epi32(sv[g / 4], _mm_cvtsi32_si128(24 - 8 * (g % 4) as i32));
        _mm512_srai_epi32::<24>(v)
    };
    let low16 = _mm512_set1_epi32(0xffff);
    let neg_off = _mm512_set1_epi32(-off);
    // SAFETY: the vectors below lie inside the panel super-block (caller).
    unsafe {
        for g in 0..16 {
            let v = _mm512_mul_ps(d, _mm512_cvtepi32_ps(scale(g)));
            _mm512_storeu_ps(o.add(Q6K_DSC + g * VEC) as *mut f32, v);
        }
        for q in 0..8 {
            let lo = _mm512_mullo_epi32(neg_off, scale(2 * q));
            let hi = _mm512_mullo_epi32(neg_off, scale(2 * q + 1));
            let v = _mm512_or_si512(_mm512_and_si512(lo, low16), _mm512_slli_epi32::<16>(hi));
            _mm512_storeu_si512(o.add(Q6K_CORR + q * VEC) as *mut __m512i, v);
        }
        _mm512_storeu_ps(o.add(Q6K_D) as *mut f32, d);
    }
}

/// Activations the kernel reads as Q8_K blocks as they are.
fn q8k_copy(n: usize, y: &[u8], out: &mut [u8]) {
    let len = n / QK * Q8K_BYTES;
    assert!(
        n % QK == 0 && y.len() >= len && out.len() >= len,
        "panel prep: {n} elements, short slices"
    );
    out[..len].copy_from_slice(&y[..len]);
}

fn q6k_run(n: usize, panel: &[u8], cols: &[&[u8]], out: &mut [f32]) {
    check_run(n, panel, Q6K_SB, cols, Q8K_BYTES, out);
    // SAFETY: installed only on CPUs with AVX-512 VNNI; lengths checked.
    unsafe { by_cols!(q6k_kernel, n / QK, panel, cols, out) }
}

/// # Safety
/// AVX-512 VNNI; `nb` super-blocks in `panel` and in every column, `C`
/// columns, `C * PANEL_ROWS` results (checked by [`check_run`]).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma")]
unsafe fn q6k_kernel<const C: usize>(nb: usize, panel: &[u8], cols: &[&[u8]], out: &mut [f32]) {
    let mut acc = [_mm512_setzero_ps(); C];
    for ib in 0..nb {
        // SAFETY: super-block ib of the panel and Q8_K block ib of every
        // column (checked); every offset below stays inside them.
        unsafe {
            let p = panel.as_ptr().add(ib * Q6K_SB);
            let y: [*const u8; C] = std::array::from_fn(|c| cols[c].as_ptr().add(ib * Q8K_BYTES));
            let mut fsum = [_mm512_setzero_ps(); C];
            for g in 0..16 {
                // 16 weights: exact sums, exactly converted.
                let mut isub = [_mm512_setzero_si512(); C];
                for i in 0..4 {
                    let w = load512(p.add(Q6K_QS + (4 * g + i) * VEC));
                    let at = Q8K_QS + 16 * g + 4 * i;
                    for c in 0..C {
                        isub[c] = _mm512_dpbusd_epi32(isub[c], w, bcast4(y[c].add(at)));
                    }
                }
                let dsc = load_ps(p.add(Q6K_DSC + g * VEC));
                for c in 0..C {
                    fsum[c] = _mm512_fmadd_ps(dsc, _mm512_cvtepi32_ps(isub[c]), fsum[c]);
                }
            }
            // The offset: -32 * sum over sub-blocks of scale * (sum of 16 levels).
            let d = load_ps(p.add(Q6K_D));
            for c in 0..C {
                let mut m = _mm512_setzero_si512();
                for q in 0..8 {
                    m = _mm512_dpwssd_epi32(
                        m,
                        load512(p.add(Q6K_CORR + q * VEC)),
                        bcast4(y[c].add(Q8K_BSUMS + 4 * q)),
                    );
                }
                let t = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(m), fsum[c]);
                acc[c] = _mm512_fmadd_ps(bcast_ps(y[c]), t, acc[c]);
            }
        }
    }
    for (c, a) in acc.iter().enumerate() {
        // SAFETY: C * PANEL_ROWS results (checked).
        unsafe { _mm512_storeu_ps(out.as_mut_ptr().add(c * PANEL_ROWS), *a) };
    }
}

#[cfg(test)]
mod bench {
    use std::time::Instant;

    use ggml_core::Type;

    use super::super::tests::{quantize, Rng};
    use super::super::{Gemm, GEMM_COLS, PANEL_ROWS};
    use super::{Q4_K_GEMM, Q5_K_GEMM, Q6_K_GEMM};

    fn throughput(name: &str, ty: Type, g: &Gemm) {
        if !crate::features::cpu_features().avx512_vnni {
            return;
        }
        let n = 2048;
        let mut rng = Rng(12345);
        let xs: Vec<Vec<u8>> = (0..PANEL_ROWS).map(|_| quantize(ty, &rng.vec(n))).collect();
        let ys: Vec<Vec<u8>> = (0..GEMM_COLS)
            .map(|_| quantize(Type::Q8_K, &rng.vec(n)))
            .collect();
        let (mut panel, prepped) = super::super::gemm_tests::packed(g, n, &xs, &ys);
        let rows: Vec<&[u8]> = xs.iter().map(|v| &v[..]).collect();
        let cols: Vec<&[u8]> = prepped.iter().map(|v| &v[..]).collect();
        let mut out = vec![0f32; GEMM_COLS * PANEL_ROWS];
        // The best of several short runs, as other work shares the cores.
        let iters = 1000;
        let mut best = f64::INFINITY;
        for _ in 0..40 {
            let t = Instant::now();
            for _ in 0..iters {
                (g.run)(n, std::hint::black_box(&panel), &cols, &mut out);
            }
            best = best.min(t.elapsed().as_secs_f64());
        }
        let macs = (iters * n * PANEL_ROWS * GEMM_COLS) as f64;
        let mut pack = f64::INFINITY;
        for _ in 0..40 {
            let t = Instant::now();
            for _ in 0..100 {
                (g.pack)(n, std::hint::black_box(&rows), &mut panel);
            }
            pack = pack.min(t.elapsed().as_secs_f64() / 100.0);
        }
        let sbs = (n / 256) as f64;
        println!(
            "{name}: {:.1} GMAC/s (n={n}, 16 rows x 8 columns per call, best of 40); \
             per 16 x 256 weights: run {:.0} ns per 8 columns, pack {:.0} ns",
            macs / best / 1e9,
            best / iters as f64 / sbs * 1e9,
            pack / sbs * 1e9
        );
    }

    /// The ceiling: only the VPDPBUSDs of the Q4_K kernel (same loads
    /// and broadcasts, no unpacking, scales or mins).
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
    unsafe fn dpbusd_only<const REGS: bool>(
        nb: usize,
        panel: &[u8],
        cols: &[&[u8]],
        out: &mut [f32],
    ) {
        use std::arch::x86_64::*;
        let mut acc = [_mm512_setzero_si512(); 8];
        for ib in 0..nb {
            // SAFETY: as in q4k_kernel.
            unsafe {
                let p = panel.as_ptr().add(ib * super::Q4K_SB);
                let y: [*const u8; 8] =
                    std::array::from_fn(|c| cols[c].as_ptr().add(ib * super::A4_SB));
                if REGS {
                    let bs: [__m512i; 8] = std::array::from_fn(|c| {
                        _mm512_set1_epi32((y[c] as *const i32).read_unaligned())
                    });
                    for v in 0..64 {
                        let w = _mm512_loadu_si512(
                            p.add(super::Q4K_QS + (v % 32) * 64) as *const __m512i
                        );
                        for c in 0..8 {
                            acc[c] = _mm512_dpbusd_epi32(acc[c], w, bs[c]);
                        }
                    }
                } else {
                    for v in 0..64 {
                        let w = _mm512_loadu_si512(
                            p.add(super::Q4K_QS + (v % 32) * 64) as *const __m512i
                        );
                        for c in 0..8 {
                            let b =
                                _mm512_set1_epi32((y[c].add(4 * v) as *const i32).read_unaligned());
                            acc[c] = _mm512_dpbusd_epi32(acc[c], w, b);
                        }
                    }
                }
            }
        }
        for (c, a) in acc.iter().enumerate() {
            let v = _mm512_cvtepi32_ps(*a);
            // SAFETY: 8 * 16 results (the Q4_K lengths).
            unsafe { _mm512_storeu_ps(out.as_mut_ptr().add(c * 16), v) };
        }
    }

    fn dpbusd_ceiling(n: usize, panel: &[u8], cols: &[&[u8]], out: &mut [f32]) {
        // SAFETY: VNNI checked by the caller; the Q4_K lengths.
        unsafe { dpbusd_only::<false>(n / 256, panel, cols, out) }
    }

    fn dpbusd_ceiling_regs(n: usize, panel: &[u8], cols: &[&[u8]], out: &mut [f32]) {
        // SAFETY: VNNI checked by the caller; the Q4_K lengths.
        unsafe { dpbusd_only::<true>(n / 256, panel, cols, out) }
    }

    #[test]
    #[ignore]
    fn gemm_k_ceiling() {
        let g = Gemm {
            run: dpbusd_ceiling_regs,
            ..Q4_K_GEMM
        };
        throughput("dpbusd only, registers", Type::Q4_K, &g);
        let g = Gemm {
            run: dpbusd_ceiling,
            ..Q4_K_GEMM
        };
        throughput("dpbusd only", Type::Q4_K, &g);
    }

    #[test]
    #[ignore]
    fn gemm_k_throughput() {
        throughput("Q4_K", Type::Q4_K, &Q4_K_GEMM);
        throughput("Q5_K", Type::Q5_K, &Q5_K_GEMM);
        throughput("Q6_K", Type::Q6_K, &Q6_K_GEMM);
    }
}
