//! Panel matrix x matrix kernels ([`super::Gemm`]) for float weights (F32,
//! F16, BF16), with AVX-512.
//!
//! Elements go by pairs (`2p`, `2p + 1`; a zero pads an odd row). Panel
//! layout, per pair: the 16 rows' two weights side by side, `[r0 w2p, r0
//! w2p+1, r1 w2p, ..., r15 w2p+1]`, as f16 for F16 weights (64 bytes) and
//! as f32 otherwise (128 bytes): two registers, rows 0-7 and rows 8-15,
//! each lane pair one row. Missing rows are zeros. A prepared column is
//! the activation row as f32 (exact for f16 and bf16), padded to whole
//! pairs, so that `run` broadcasts a column's pair as one 64-bit value to
//! every lane pair: one broadcast load feeds two FMAs, which keeps the
//! loads from limiting the FMAs.
//!
//! Each lane accumulates the products of one row and one of the two
//! positions of the pairs, pair after pair, and the two lanes of a row are
//! added at the end: the same operations whatever the number of columns
//! per call.
//!
//! Stored F16 panels stay f16: token generation reads every weight byte
//! once per token, and converting a pair's weights costs it nothing
//! measurable. With many columns (prompts) a tile's f16 panels are
//! expanded into f32 panels ([`F16_WIDE`]) and read two at a time
//! ([`super::Gemm::run_pair`]): 32 rows x 6 columns a step, 24 FMAs for
//! 4 weight loads and 6 broadcasts, against 16 FMAs for 2 converted
//! weight loads and 8 broadcasts. The conversions take the FMA ports, and
//! fewer loads per FMA keep the load ports from limiting. One thread of an
//! Ice Lake Xeon, two panels of n = 2048 against 480 columns, passes
//! alternated: medians 80-92 against 103-114 GFLOP/s, best passes about
//! 125 against 165 (FMA peak about 180). Both give the same bits. On CPUs with AVX-512 BF16, BF16 weights go
//! through VDPBF16PS instead (see [`BF16_DOT_GEMM`]).

use std::arch::x86_64::*;

use ggml_core::Type;

use super::{Gemm, Kernels, Wide, GEMM_COLS, PAIR_COLS, PANEL_ROWS};
use crate::features::cpu_features;

/// Installs the float panel kernels (the caller checked AVX-512).
pub(super) fn install(k: &mut Kernels) {
    k.set_gemm(Type::F32, &F32_GEMM);
    k.set_gemm(Type::F16, &F16_GEMM);
    if cpu_features().avx512_bf16 {
        k.set_gemm(Type::BF16, &BF16_DOT_GEMM);
    } else {
        k.set_gemm(Type::BF16, &BF16_GEMM);
    }
}

/// Element types of weight rows and activation rows.
const SRC_F32: u8 = 0;
const SRC_F16: u8 = 1;
const SRC_BF16: u8 = 2;

static F32_GEMM: Gemm = Gemm {
    panel_bytes: panel_bytes::<false>,
    pack: pack::<SRC_F32, false>,
    act_bytes,
    prep: prep::<SRC_F32>,
    run: run::<false>,
    run_pair: Some(run_pair),
    wide: None,
};

static F16_GEMM: Gemm = Gemm {
    panel_bytes: panel_bytes::<true>,
    pack: pack::<SRC_F16, true>,
    act_bytes,
    prep: prep::<SRC_F16>,
    run: run::<true>,
    run_pair: None,
    wide: Some(&F16_WIDE),
};

/// F16 panels expanded to f32 panels, for many columns: twice the bytes,
/// no conversions in the kernel, and two panels at a time.
/// Below 32 columns the f16 kernel was faster: TinyLlama-shaped F16, 2
/// threads, 16-token prompts 64 against 58 tokens/s; from 64 tokens the
/// expanded panels won (83 against 90).
static F16_WIDE: Wide = Wide {
    gemm: &F16_WIDE_GEMM,
    expand: expand_f16,
    min_cols: 32,
};

/// The kernel of [`F16_WIDE`]: F16 rows packed as f32 panels.
static F16_WIDE_GEMM: Gemm = Gemm {
    panel_bytes: panel_bytes::<false>,
    pack: pack::<SRC_F16, false>,
    act_bytes,
    prep: prep::<SRC_F16>,
    run: run::<false>,
    run_pair: Some(run_pair),
    wide: None,
};

/// The panel kernels of this file that [`install`] leaves out on this CPU,
/// by name, for the benches to compare with the installed ones.
pub(super) fn variants() -> Vec<(&'static str, Type, &'static Gemm)> {
    let mut v = Vec::new();
    if cpu_features().avx512_bf16 {
        v.push(("BF16 (FMA)", Type::BF16, &BF16_GEMM));
    }
    v
}

static BF16_GEMM: Gemm = Gemm {
    panel_bytes: panel_bytes::<false>,
    pack: pack::<SRC_BF16, false>,
    act_bytes,
    prep: prep::<SRC_BF16>,
    run: run::<false>,
    run_pair: Some(run_pair),
    wide: None,
};

/// How far ahead, in pairs, `run` asks for the columns' data (1 KiB):
/// with few panels per column group the columns come from L3, and the
/// hardware prefetchers do not keep eight column streams ahead of the
/// FMAs (n=5632, one panel per column group: 174 -> 227 GFLOP/s). The
/// panel, read from L2, needs no hint (measured); a panel streamed from
/// memory by a call with few columns does (see [`PANEL_PREFETCH`]).
const PREFETCH_PAIRS: usize = 128;

/// At most this many columns make a call do few FMAs per panel byte: token
/// generation (a matrix x vector) streams the panels from memory, each
/// byte once.
const FEW_COLS: usize = 4;

/// Bytes ahead of the pairs being read that such a call asks the cache
/// for: panels of a matrix lie back to back and a thread walks consecutive
/// ones, so the stream runs on into the next panel. The hardware
/// prefetchers alone leave the F16 stream well below the memory's rate.
/// One thread, 45056 x 2048 F16 weights back to back (185 MB, far more
/// than L3), medians: one column 17-21 -> 30-31 GB/s, two 16 -> 28-30,
/// four 10 -> 29-30 (of distances of 2 to 12 KiB, 6 to 10 KiB were best
/// and alike). F32 and BF16 panels (twice the bytes per FMA) and
/// VDPBF16PS panels stream at ~27-32 GB/s with or without the hints. With
/// more columns the panels of a tile are read again from L2 for each
/// column group, where the hints measured 1-3% slower, so they ask for
/// none (though eight columns streaming from memory measured 7 -> 20
/// GB/s with them).
const PANEL_PREFETCH: usize = 8192;

/// Pairs of an `n`-element row.
const fn pairs(n: usize) -> usize {
    n.div_ceil(2)
}

/// Bytes of one pair of a panel: 16 rows x 2 weights, f16 (`HALF`) or
/// f32.
const fn pair_bytes(half: bool) -> usize {
    2 * PANEL_ROWS * if half { 2 } else { 4 }
}

fn panel_bytes<const HALF: bool>(n: usize) -> usize {
    pairs(n) * pair_bytes(HALF)
}

fn act_bytes(n: usize) -> usize {
    pairs(n) * 8
}

/// Bytes of one element of a row of type `SRC`.
const fn src_bytes(src: u8) -> usize {
    if src == SRC_F32 {
        4
    } else {
        2
    }
}

/// 16 consecutive elements of a row of type `SRC` at `p`, as f32.
///
/// # Safety
/// `p` must be readable for 16 elements.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn load16<const SRC: u8>(p: *const u8) -> __m512 {
    // SAFETY: 16 readable elements (caller).
    unsafe {
        match SRC {
            SRC_F32 => _mm512_loadu_ps(p as *const f32),
            SRC_F16 => _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i)),
            _ => _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(
                _mm256_loadu_si256(p as *const __m256i),
            ))),
        }
    }
}

/// Element `i` of a row of type `SRC`, as f32.
#[inline(always)]
fn elem<const SRC: u8>(row: &[u8], i: usize) -> f32 {
    match SRC {
        SRC_F32 => f32::from_le_bytes(row[4 * i..4 * i + 4].try_into().unwrap()),
        SRC_F16 => half::f16::from_le_bytes([row[2 * i], row[2 * i + 1]]).to_f32(),
        _ => f32::from_bits(u32::from(u16::from_le_bytes([row[2 * i], row[2 * i + 1]])) << 16),
    }
}

/// The 4 x 4 transpose of 128-bit lanes: lane `l` of `t[l]` is lane `g` of
/// `b[g]`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
fn transpose_lanes(b: [__m512; 4]) -> [__m512; 4] {
    let c0 = _mm512_shuffle_f32x4::<0x44>(b[0], b[1]);
    let c1 = _mm512_shuffle_f32x4::<0xee>(b[0], b[1]);
    let c2 = _mm512_shuffle_f32x4::<0x44>(b[2], b[3]);
    let c3 = _mm512_shuffle_f32x4::<0xee>(b[2], b[3]);
    [
        _mm512_shuffle_f32x4::<0x88>(c0, c2),
        _mm512_shuffle_f32x4::<0xdd>(c0, c2),
        _mm512_shuffle_f32x4::<0x88>(c1, c3),
        _mm512_shuffle_f32x4::<0xdd>(c1, c3),
    ]
}

/// Transposes a 16 x 16 block of 32-bit elements: element `r` of `t[k]` is
/// element `k` of `x[r]`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
fn transpose16x32(x: [__m512; 16]) -> [__m512; 16] {
    // a[2i + h], 128-bit lane l: rows 2i, 2i + 1 at elements 4l + 2h,
    // 4l + 2h + 1, interleaved.
    let a: [__m512; 16] = std::array::from_fn(|i| {
        let (p, q) = (x[i & !1], x[i | 1]);
        if i & 1 == 0 {
            _mm512_unpacklo_ps(p, q)
        } else {
            _mm512_unpackhi_ps(p, q)
        }
    });
    // b[4g + j], lane l: rows 4g..4g + 4 at element 4l + j.
    let b: [__m512; 16] = std::array::from_fn(|i| {
        let (g, j) = (i / 4, i % 4);
        let p = _mm512_castps_pd(a[4 * g + (j >> 1)]);
        let q = _mm512_castps_pd(a[4 * g + 2 + (j >> 1)]);
        _mm512_castpd_ps(if j & 1 == 0 {
            _mm512_unpacklo_pd(p, q)
        } else {
            _mm512_unpackhi_pd(p, q)
        })
    });
    let mut t = [_mm512_setzero_ps(); 16];
    for j in 0..4 {
        let l = transpose_lanes([b[j], b[4 + j], b[8 + j], b[12 + j]]);
        for (i, v) in l.into_iter().enumerate() {
            t[4 * i + j] = v;
        }
    }
    t
}

/// Transposes an 8 x 8 block of 64-bit elements: element `r` of `t[p]` is
/// element `p` of `x[r]`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
fn transpose8x64(x: [__m512d; 8]) -> [__m512d; 8] {
    // a[2i + h], 128-bit lane l: rows 2i, 2i + 1 at element 2l + h.
    let a: [__m512; 8] = std::array::from_fn(|i| {
        let (p, q) = (x[i & !1], x[i | 1]);
        _mm512_castpd_ps(if i & 1 == 0 {
            _mm512_unpacklo_pd(p, q)
        } else {
            _mm512_unpackhi_pd(p, q)
        })
    });
    let mut t = [_mm512_setzero_pd(); 8];
    for h in 0..2 {
        let l = transpose_lanes([a[h], a[2 + h], a[4 + h], a[6 + h]]);
        for (i, v) in l.into_iter().enumerate() {
            t[2 * i + h] = _mm512_castps_pd(v);
        }
    }
    t
}

/// # Safety
/// The slices must have been checked as in [`pack`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn pack_avx512<const SRC: u8, const HALF: bool>(n: usize, rows: &[&[u8]], out: &mut [u8]) {
    const { assert!(!HALF || SRC == SRC_F16) };
    let pb = pair_bytes(HALF);
    let o = out.as_mut_ptr();
    let mut p = 0;
    if HALF {
        // An f16 pair is 32 bits: 16 pairs of the 16 rows per transpose.
        while 2 * (p + 16) <= n {
            let x: [__m512; 16] = std::array::from_fn(|r| match rows.get(r) {
                // SAFETY: every row holds n elements (checked), and
                // 2p + 32 <= n.
                Some(row) => unsafe { _mm512_loadu_ps(row.as_ptr().add(4 * p) as *const f32) },
                None => _mm512_setzero_ps(),
            });
            for (i, v) in transpose16x32(x).into_iter().enumerate() {
                // SAFETY: out holds pairs(n) pairs (checked), p + i < n / 2.
                unsafe { _mm512_storeu_ps(o.add((p + i) * pb) as *mut f32, v) };
            }
            p += 16;
        }
    } else {
        // An f32 pair is 64 bits: 8 pairs of rows 0-7, then of rows 8-15,
        // per transpose.
        let eb = src_bytes(SRC);
        while 2 * (p + 8) <= n {
            for g in 0..2 {
                let x: [__m512d; 8] = std::array::from_fn(|i| match rows.get(8 * g + i) {
                    Some(row) => {
                        // SAFETY: every row holds n elements (checked), and
                        // 2p + 16 <= n.
                        let v = unsafe { load16::<SRC>(row.as_ptr().add(2 * p * eb)) };
                        _mm512_castps_pd(v)
                    }
                    None => _mm512_setzero_pd(),
                });
                for (i, v) in transpose8x64(x).into_iter().enumerate() {
                    // SAFETY: out holds pairs(n) pairs (checked), p + i < n / 2.
                    unsafe { _mm512_storeu_pd(o.add((p + i) * pb + 64 * g) as *mut f64, v) };
                }
            }
            p += 8;
        }
    }
    // The last pairs, one element at a time.
    for p in p..pairs(n) {
        let dst = &mut out[p * pb..(p + 1) * pb];
        dst.fill(0);
        for (r, row) in rows.iter().enumerate() {
            for k in 2 * p..n.min(2 * p + 2) {
                let at = 2 * r + k - 2 * p;
                if HALF {
                    dst[2 * at..2 * at + 2].copy_from_slice(&row[2 * k..2 * k + 2]);
                } else {
                    dst[4 * at..4 * at + 4].copy_from_slice(&elem::<SRC>(row, k).to_le_bytes());
                }
            }
        }
    }
}

/// Packs 1 to 16 rows of `n` elements of type `SRC` into a panel, as f16
/// (`HALF`, F16 rows only) or f32.
fn pack<const SRC: u8, const HALF: bool>(n: usize, rows: &[&[u8]], out: &mut [u8]) {
    assert!(
        (1..=PANEL_ROWS).contains(&rows.len())
            && rows.iter().all(|r| r.len() >= n * src_bytes(SRC))
            && out.len() >= panel_bytes::<HALF>(n),
        "panel pack: {} rows of {n} elements into {} bytes",
        rows.len(),
        out.len()
    );
    // SAFETY: installed only on CPUs with AVX-512 F/BW/VL/DQ (and F16C);
    // the slices were checked.
    unsafe { pack_avx512::<SRC, HALF>(n, rows, out) }
}

/// # Safety
/// The slices must have been checked as in [`prep`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn prep_avx512<const SRC: u8>(n: usize, y: &[u8], out: &mut [u8]) {
    let eb = src_bytes(SRC);
    let mut k = 0;
    while k + 16 <= n {
        // SAFETY: k + 16 <= n elements in y and out (checked).
        unsafe {
            let v = load16::<SRC>(y.as_ptr().add(k * eb));
            _mm512_storeu_ps(out.as_mut_ptr().add(4 * k) as *mut f32, v);
        }
        k += 16;
    }
    for k in k..n {
        out[4 * k..4 * k + 4].copy_from_slice(&elem::<SRC>(y, k).to_le_bytes());
    }
    out[4 * n..act_bytes(n)].fill(0);
}

/// Prepares an activation row of `n` elements of type `SRC`: as f32, with
/// a zero after an odd row.
fn prep<const SRC: u8>(n: usize, y: &[u8], out: &mut [u8]) {
    assert!(
        y.len() >= n * src_bytes(SRC) && out.len() >= act_bytes(n),
        "panel prep: {n} elements from {} bytes into {}",
        y.len(),
        out.len()
    );
    // SAFETY: installed only on CPUs with AVX-512 F/BW/VL/DQ (and F16C);
    // the slices were checked.
    unsafe { prep_avx512::<SRC>(n, y, out) }
}

/// The weights of pair `p` of a panel at `panel`: rows 0-7 and rows 8-15.
///
/// # Safety
/// The panel must hold pair `p`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn weights<const HALF: bool>(panel: *const u8, p: usize) -> (__m512, __m512) {
    // SAFETY: pair p lies in the panel (caller).
    unsafe {
        let w = panel.add(p * pair_bytes(HALF));
        if HALF {
            (
                _mm512_cvtph_ps(_mm256_loadu_si256(w as *const __m256i)),
                _mm512_cvtph_ps(_mm256_loadu_si256(w.add(32) as *const __m256i)),
            )
        } else {
            (
                _mm512_loadu_ps(w as *const f32),
                _mm512_loadu_ps(w.add(64) as *const f32),
            )
        }
    }
}

/// # Safety
/// `panel` holds the pairs of `n` elements in the layout `HALF` selects,
/// `cols` has `C` prepared columns of `n` elements and `out` room for `C`
/// x 16 values (see [`run`]).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn run_tile<const C: usize, const HALF: bool>(
    n: usize,
    panel: *const u8,
    cols: &[&[u8]],
    out: &mut [f32],
) {
    let y: [*const f64; C] = std::array::from_fn(|c| cols[c].as_ptr() as *const f64);
    let mut lo = [_mm512_setzero_ps(); C];
    let mut hi = [_mm512_setzero_ps(); C];
    let np = pairs(n);
    let step = |p: usize| {
        // SAFETY: pair p lies in the panel and in every column (caller).
        unsafe {
            let (wl, wh) = weights::<HALF>(panel, p);
            for c in 0..C {
                let yv = _mm512_castpd_ps(_mm512_set1_pd(y[c].add(p).read_unaligned()));
                lo[c] = _mm512_fmadd_ps(wl, yv, lo[c]);
                hi[c] = _mm512_fmadd_ps(wh, yv, hi[c]);
            }
        }
    };
    let ahead = if C <= FEW_COLS && super::stream::software_prefetch() {
        PANEL_PREFETCH
    } else {
        0
    };
    stream_steps(np, &y, panel, pair_bytes(HALF), ahead, step);
    // SAFETY: out holds C x 16 values (caller).
    unsafe { store_row_sums(&lo, &hi, out) };
}

/// Runs `step(i)` for every `i < steps`, where a step reads 8 bytes of
/// every column and `step_bytes` bytes of the panel at `panel`: eight
/// steps (a cache line of every column) at a time, asking for the columns'
/// lines [`PREFETCH_PAIRS`] steps ahead and, when `ahead` is not zero, for
/// the panel's lines of the eight steps `ahead` bytes on.
#[inline(always)]
fn stream_steps<T, const C: usize>(
    steps: usize,
    y: &[*const T; C],
    panel: *const u8,
    step_bytes: usize,
    ahead: usize,
    mut step: impl FnMut(usize),
) {
    let mut i = 0;
    while i + 8 <= steps {
        for yc in y {
            // SAFETY: a prefetch is only a hint: it never faults, even past
            // the column, and SSE is part of every x86-64 CPU.
            unsafe {
                _mm_prefetch::<_MM_HINT_T0>(
                    (*yc as *const u8).wrapping_add(8 * (i + PREFETCH_PAIRS)) as *const i8,
                )
            };
        }
        if ahead != 0 {
            let at = panel.wrapping_add(i * step_bytes + ahead);
            for o in (0..8 * step_bytes).step_by(64) {
                // SAFETY: a prefetch is only a hint: it never faults, so the
                // address may lie past the panel (the next panel of the
                // matrix, when there is one); SSE is part of every x86-64
                // CPU.
                unsafe { _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(o) as *const i8) };
            }
        }
        for k in 0..8 {
            step(i + k);
        }
        i += 8;
    }
    for k in i..steps {
        step(k);
    }
}

/// Stores, for each column c, the 16 rows' sums of their two lanes (the
/// even lanes of `lo:hi` plus the odd ones) at `out[16 c..]`.
///
/// # Safety
/// AVX-512 F must be present and `out` hold `C` x 16 values.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn store_row_sums<const C: usize>(lo: &[__m512; C], hi: &[__m512; C], out: &mut [f32]) {
    let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    let odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    for c in 0..C {
        let s = _mm512_add_ps(
            _mm512_permutex2var_ps(lo[c], even, hi[c]),
            _mm512_permutex2var_ps(lo[c], odd, hi[c]),
        );
        // SAFETY: out holds C x 16 values (caller).
        unsafe { _mm512_storeu_ps(out.as_mut_ptr().add(c * PANEL_ROWS), s) };
    }
}

/// `out[c * 16 + r] = dot(row r of the panel, column c)`.
fn run<const HALF: bool>(n: usize, panel: &[u8], cols: &[&[u8]], out: &mut [f32]) {
    assert!(
        (1..=GEMM_COLS).contains(&cols.len())
            && panel.len() >= panel_bytes::<HALF>(n)
            && cols.iter().all(|c| c.len() >= act_bytes(n))
            && out.len() >= cols.len() * PANEL_ROWS,
        "panel kernel: slices shorter than {n} elements"
    );
    let p = panel.as_ptr();
    // SAFETY: installed only on CPUs with AVX-512 F/BW/VL/DQ (and F16C);
    // the slices were checked.
    unsafe {
        match cols.len() {
            1 => run_tile::<1, HALF>(n, p, cols, out),
            2 => run_tile::<2, HALF>(n, p, cols, out),
            3 => run_tile::<3, HALF>(n, p, cols, out),
            4 => run_tile::<4, HALF>(n, p, cols, out),
            5 => run_tile::<5, HALF>(n, p, cols, out),
            6 => run_tile::<6, HALF>(n, p, cols, out),
            7 => run_tile::<7, HALF>(n, p, cols, out),
            _ => run_tile::<8, HALF>(n, p, cols, out),
        }
    }
}

/// Expands an f16 panel into the f32 panel of the same rows (what packing
/// the rows as f32 gives).
fn expand_f16(n: usize, panel: &[u8], out: &mut [u8]) {
    assert!(
        panel.len() >= panel_bytes::<true>(n) && out.len() >= panel_bytes::<false>(n),
        "panel expand: {n} elements, short slices"
    );
    // SAFETY: installed only on CPUs with AVX-512 F/BW/VL/DQ (and F16C);
    // both hold every pair (checked).
    unsafe { expand_f16_avx512(n, panel.as_ptr(), out.as_mut_ptr()) }
}

/// # Safety
/// `panel` holds the f16 pairs of `n` elements and `out` room for the f32
/// ones.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn expand_f16_avx512(n: usize, panel: *const u8, out: *mut u8) {
    let pb = pair_bytes(false);
    for p in 0..pairs(n) {
        // SAFETY: pair p lies in both (caller).
        unsafe {
            let (lo, hi) = weights::<true>(panel, p);
            _mm512_storeu_ps(out.add(p * pb) as *mut f32, lo);
            _mm512_storeu_ps(out.add(p * pb + 64) as *mut f32, hi);
        }
    }
}

/// # Safety
/// `a` and `b` hold the f32 pairs of `n` elements, `cols` has `C` prepared
/// columns of `n` elements and `out` room for 2 x `C` x 16 values (see
/// [`run_pair`]).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn run_pair_tile<const C: usize>(
    n: usize,
    a: *const u8,
    b: *const u8,
    cols: &[&[u8]],
    out: &mut [f32],
) {
    let y: [*const f64; C] = std::array::from_fn(|c| cols[c].as_ptr() as *const f64);
    let mut acc = [[_mm512_setzero_ps(); C]; 4];
    let step = |p: usize| {
        // SAFETY: pair p lies in both panels and in every column (caller).
        unsafe {
            let (al, ah) = weights::<false>(a, p);
            let (bl, bh) = weights::<false>(b, p);
            for c in 0..C {
                let yv = _mm512_castpd_ps(_mm512_set1_pd(y[c].add(p).read_unaligned()));
                acc[0][c] = _mm512_fmadd_ps(al, yv, acc[0][c]);
                acc[1][c] = _mm512_fmadd_ps(ah, yv, acc[1][c]);
                acc[2][c] = _mm512_fmadd_ps(bl, yv, acc[2][c]);
                acc[3][c] = _mm512_fmadd_ps(bh, yv, acc[3][c]);
            }
        }
    };
    stream_steps(pairs(n), &y, a, pair_bytes(false), 0, step);
    let (oa, ob) = out.split_at_mut(C * PANEL_ROWS);
    // SAFETY: out holds 2 x C x 16 values (caller).
    unsafe {
        store_row_sums(&acc[0], &acc[1], oa);
        store_row_sums(&acc[2], &acc[3], ob);
    }
}

/// `run::<false>` on the f32 panels `a` and `b` at once: `a`'s results at
/// `out[c * 16 + r]`, then `b`'s at `out[(cols + c) * 16 + r]`. Each lane
/// does what it does in `run`, so the bits are `run`'s.
fn run_pair(n: usize, a: &[u8], b: &[u8], cols: &[&[u8]], out: &mut [f32]) {
    assert!(
        (1..=PAIR_COLS).contains(&cols.len())
            && a.len() >= panel_bytes::<false>(n)
            && b.len() >= panel_bytes::<false>(n)
            && cols.iter().all(|c| c.len() >= act_bytes(n))
            && out.len() >= 2 * cols.len() * PANEL_ROWS,
        "panel pair kernel: slices shorter than {n} elements"
    );
    let (a, b) = (a.as_ptr(), b.as_ptr());
    // SAFETY: installed only on CPUs with AVX-512 F/BW/VL/DQ (and F16C);
    // the slices were checked.
    unsafe {
        match cols.len() {
            1 => run_pair_tile::<1>(n, a, b, cols, out),
            2 => run_pair_tile::<2>(n, a, b, cols, out),
            3 => run_pair_tile::<3>(n, a, b, cols, out),
            4 => run_pair_tile::<4>(n, a, b, cols, out),
            5 => run_pair_tile::<5>(n, a, b, cols, out),
            _ => run_pair_tile::<6>(n, a, b, cols, out),
        }
    }
}

// ------------------------------------------------- BF16 with AVX-512 BF16

/// BF16 weights on CPUs with AVX-512 BF16: VDPBF16PS adds the products of
/// a lane's two bf16 pairs (each product exact in f32) to its f32
/// accumulator, so elements go by quads. Panel layout, per quad: the 16
/// rows' four weights side by side, as bf16 (128 bytes: rows 0-7, then
/// rows 8-15); lane `2r + j` of a register holds row `r`'s pair `j` of
/// the quad. A prepared column is the bf16 row padded with zeros to whole
/// quads; a quad is broadcast as one 64-bit value, and the two lanes of a
/// row are added at the end. VDPBF16PS takes denormal inputs as zero and
/// flushes denormal results (bf16 denormals lie below 1.2e-38). Twice the
/// FMA path's rate: run() on one panel, n=2048, 8 columns, ~465 against
/// ~232 GFLOP/s.
static BF16_DOT_GEMM: Gemm = Gemm {
    panel_bytes: |n| quads(n) * 8 * PANEL_ROWS,
    pack: pack_bf16_quads,
    act_bytes: |n| quads(n) * 8,
    prep: prep_bf16_quads,
    run: run_bf16_dot,
    run_pair: None,
    wide: None,
};

/// Quads of an `n`-element row.
const fn quads(n: usize) -> usize {
    n.div_ceil(4)
}

/// # Safety
/// The slices must have been checked as in [`pack_bf16_quads`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn pack_bf16_quads_avx512(n: usize, rows: &[&[u8]], out: &mut [u8]) {
    let qb = 8 * PANEL_ROWS;
    let o = out.as_mut_ptr();
    // A quad is 64 bits: 8 quads of rows 0-7, then of rows 8-15, per
    // transpose.
    let mut q = 0;
    while 4 * (q + 8) <= n {
        for g in 0..2 {
            let x: [__m512d; 8] = std::array::from_fn(|i| match rows.get(8 * g + i) {
                // SAFETY: every row holds n elements (checked), and
                // 4q + 32 <= n.
                Some(row) => unsafe { _mm512_loadu_pd(row.as_ptr().add(8 * q) as *const f64) },
                None => _mm512_setzero_pd(),
            });
            for (i, v) in transpose8x64(x).into_iter().enumerate() {
                // SAFETY: out holds quads(n) quads (checked), q + i < n / 4.
                unsafe { _mm512_storeu_pd(o.add((q + i) * qb + 64 * g) as *mut f64, v) };
            }
        }
        q += 8;
    }
    // The last quads, one element at a time.
    for q in q..quads(n) {
        let dst = &mut out[q * qb..(q + 1) * qb];
        dst.fill(0);
        for (r, row) in rows.iter().enumerate() {
            for k in 4 * q..n.min(4 * q + 4) {
                let at = 4 * r + k - 4 * q;
                dst[2 * at..2 * at + 2].copy_from_slice(&row[2 * k..2 * k + 2]);
            }
        }
    }
}

/// Packs 1 to 16 BF16 rows of `n` elements into a quad panel.
fn pack_bf16_quads(n: usize, rows: &[&[u8]], out: &mut [u8]) {
    assert!(
        (1..=PANEL_ROWS).contains(&rows.len())
            && rows.iter().all(|r| r.len() >= 2 * n)
            && out.len() >= quads(n) * 8 * PANEL_ROWS,
        "panel pack: {} rows of {n} elements into {} bytes",
        rows.len(),
        out.len()
    );
    // SAFETY: installed only on CPUs with AVX-512 F/BW/VL/DQ; the slices
    // were checked.
    unsafe { pack_bf16_quads_avx512(n, rows, out) }
}

/// Prepares a BF16 activation row: the row, padded with zeros to whole
/// quads.
fn prep_bf16_quads(n: usize, y: &[u8], out: &mut [u8]) {
    let bytes = quads(n) * 8;
    assert!(
        y.len() >= 2 * n && out.len() >= bytes,
        "panel prep: {n} elements from {} bytes into {}",
        y.len(),
        out.len()
    );
    out[..2 * n].copy_from_slice(&y[..2 * n]);
    out[2 * n..bytes].fill(0);
}

/// # Safety
/// AVX-512 BF16 must be present; `panel` holds the quads of `n` elements,
/// `cols` has `C` prepared columns of `n` elements and `out` room for `C`
/// x 16 values (see [`run_bf16_dot`]).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,avx512bf16")]
unsafe fn run_bf16_dot_tile<const C: usize>(
    n: usize,
    panel: *const u8,
    cols: &[&[u8]],
    out: &mut [f32],
) {
    let y: [*const u64; C] = std::array::from_fn(|c| cols[c].as_ptr() as *const u64);
    let mut lo = [_mm512_setzero_ps(); C];
    let mut hi = [_mm512_setzero_ps(); C];
    let nq = quads(n);
    let step = |q: usize| {
        // SAFETY: quad q lies in the panel and in every column (caller);
        // the transmutes reinterpret 512 bits as 32 bf16.
        unsafe {
            let w = panel.add(q * 8 * PANEL_ROWS);
            let wl: __m512bh = std::mem::transmute(_mm512_loadu_si512(w as *const __m512i));
            let wh: __m512bh = std::mem::transmute(_mm512_loadu_si512(w.add(64) as *const __m512i));
            for c in 0..C {
                let yv: __m512bh =
                    std::mem::transmute(_mm512_set1_epi64(y[c].add(q).read_unaligned() as i64));
                lo[c] = _mm512_dpbf16_ps(lo[c], wl, yv);
                hi[c] = _mm512_dpbf16_ps(hi[c], wh, yv);
            }
        }
    };
    let ahead = if C <= FEW_COLS { PANEL_PREFETCH } else { 0 };
    stream_steps(nq, &y, panel, 8 * PANEL_ROWS, ahead, step);
    // SAFETY: out holds C x 16 values (caller).
    unsafe { store_row_sums(&lo, &hi, out) };
}

/// `out[c * 16 + r] = dot(row r of the quad panel, column c)`.
fn run_bf16_dot(n: usize, panel: &[u8], cols: &[&[u8]], out: &mut [f32]) {
    assert!(
        (1..=GEMM_COLS).contains(&cols.len())
            && panel.len() >= quads(n) * 8 * PANEL_ROWS
            && cols.iter().all(|c| c.len() >= quads(n) * 8)
            && out.len() >= cols.len() * PANEL_ROWS,
        "panel kernel: slices shorter than {n} elements"
    );
    let p = panel.as_ptr();
    // SAFETY: installed only on CPUs with AVX-512 F/BW/VL/DQ and BF16; the
    // slices were checked.
    unsafe {
        match cols.len() {
            1 => run_bf16_dot_tile::<1>(n, p, cols, out),
            2 => run_bf16_dot_tile::<2>(n, p, cols, out),
            3 => run_bf16_dot_tile::<3>(n, p, cols, out),
            4 => run_bf16_dot_tile::<4>(n, p, cols, out),
            5 => run_bf16_dot_tile::<5>(n, p, cols, out),
            6 => run_bf16_dot_tile::<6>(n, p, cols, out),
            7 => run_bf16_dot_tile::<7>(n, p, cols, out),
            _ => run_bf16_dot_tile::<8>(n, p, cols, out),
        }
    }
}

#[cfg(test)]
mod tests {
    use ggml_core::Type;

    use super::super::gemm_tests;
    use super::*;
    use crate::features::{is_available, Isa};

    /// The FMA BF16 kernel, which CPUs with AVX-512 BF16 do not install:
    /// within f32 rounding of the scalar row kernel, and independent of the
    /// tiling, as every installed panel kernel.
    #[test]
    fn bf16_fma_panel_kernel_matches_the_row_kernel() {
        if !is_available(Isa::Avx512) {
            return;
        }
        gemm_tests::check_against_row_kernels(Type::BF16, &BF16_GEMM, "FMA");
        gemm_tests::check_tiling_independence(Type::BF16, &BF16_GEMM, "FMA");
    }
}
