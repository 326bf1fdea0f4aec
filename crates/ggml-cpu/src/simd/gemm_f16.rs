//! Panel matrix x matrix kernels ([`super::Gemm`]) for float weights (F32,
//! F16, BF16), with AVX-512.
//!
//! Panel layout: for each element index `k`, the 16 rows' weights side by
//! side (one register, one row per lane), as f32 or, for F16 weights, as
//! f16 (`HALF`: half the bytes, one conversion per `k`). Missing rows are
//! zeros. A prepared column is the activation row as f32 (exact for f16
//! and bf16), so that `run` multiplies the weights of one `k` by that
//! column's value broadcast from memory.
//!
//! Each lane keeps [`UNROLL`] f32 accumulators per column, element `k`
//! going to accumulator `k % UNROLL`, and adds them up in a fixed order at
//! the end: the same operations whatever the number of columns per call.

use std::arch::x86_64::*;

use ggml_core::Type;

use super::{Gemm, Kernels, GEMM_COLS, PANEL_ROWS};

/// Installs the float panel kernels (the caller checked AVX-512).
pub(super) fn install(k: &mut Kernels) {
    k.set_gemm(Type::F32, &F32_GEMM);
    k.set_gemm(Type::F16, &F16_GEMM);
    k.set_gemm(Type::BF16, &BF16_GEMM);
}

/// Source element types of weight rows and activation rows.
const SRC_F32: u8 = 0;
const SRC_F16: u8 = 1;
const SRC_BF16: u8 = 2;

/// Independent accumulators per column (element `k` goes to `k % UNROLL`).
const UNROLL: usize = 2;

static F32_GEMM: Gemm = Gemm {
    panel_bytes: |n| n * PANEL_ROWS * 4,
    pack: |n, rows, out| pack::<SRC_F32, false>(n, rows, out),
    act_bytes: |n| n * 4,
    prep: |n, y, out| prep::<SRC_F32>(n, y, out),
    run: |n, panel, cols, out| run::<false>(n, panel, cols, out),
};

static BF16_GEMM: Gemm = Gemm {
    panel_bytes: |n| n * PANEL_ROWS * 4,
    pack: |n, rows, out| pack::<SRC_BF16, false>(n, rows, out),
    act_bytes: |n| n * 4,
    prep: |n, y, out| prep::<SRC_BF16>(n, y, out),
    run: |n, panel, cols, out| run::<false>(n, panel, cols, out),
};

static F16_GEMM: Gemm = Gemm {
    panel_bytes: |n| n * PANEL_ROWS * 2,
    pack: |n, rows, out| pack::<SRC_F16, true>(n, rows, out),
    act_bytes: |n| n * 4,
    prep: |n, y, out| prep::<SRC_F16>(n, y, out),
    run: |n, panel, cols, out| run::<true>(n, panel, cols, out),
};

/// Bytes of one element of a row of type `SRC`.
const fn src_bytes(src: u8) -> usize {
    if src == SRC_F32 {
        4
    } else {
        2
    }
}

/// Bytes per element index of a panel (16 rows).
const fn panel_k_bytes(half: bool) -> usize {
    PANEL_ROWS * if half { 2 } else { 4 }
}

/// 16 consecutive elements of a row of type `SRC` at `p`, as f32.
///
/// # Safety
/// AVX-512 F must be present; `p` must be readable for 16 elements.
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

/// Transposes a 16 x 16 block of f32: `t[k]` lane `r` = `x[r]` lane `k`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
fn transpose16(x: [__m512; 16]) -> [__m512; 16] {
    {
        // Pairs of rows interleaved within each 128-bit lane.
        let a: [__m512; 16] = std::array::from_fn(|i| {
            let (p, q) = (x[i & !1], x[i | 1]);
            if i & 1 == 0 {
                _mm512_unpacklo_ps(p, q)
            } else {
                _mm512_unpackhi_ps(p, q)
            }
        });
        // b[4g + j], lane l: rows 4g..4g+4 at element j + 4l.
        let b: [__m512; 16] = std::array::from_fn(|i| {
            let (g, j) = (i / 4, i % 4);
            let (p, q) = (
                _mm512_castps_pd(a[4 * g + (j >> 1)]),
                _mm512_castps_pd(a[4 * g + 2 + (j >> 1)]),
            );
            _mm512_castpd_ps(if j & 1 == 0 {
                _mm512_unpacklo_pd(p, q)
            } else {
                _mm512_unpackhi_pd(p, q)
            })
        });
        // A 4 x 4 transpose of 128-bit lanes for each j.
        let mut t = [_mm512_setzero_ps(); 16];
        for j in 0..4 {
            let c0 = _mm512_shuffle_f32x4::<0x44>(b[j], b[4 + j]);
            let c1 = _mm512_shuffle_f32x4::<0xee>(b[j], b[4 + j]);
            let c2 = _mm512_shuffle_f32x4::<0x44>(b[8 + j], b[12 + j]);
            let c3 = _mm512_shuffle_f32x4::<0xee>(b[8 + j], b[12 + j]);
            t[j] = _mm512_shuffle_f32x4::<0x88>(c0, c2);
            t[j + 4] = _mm512_shuffle_f32x4::<0xdd>(c0, c2);
            t[j + 8] = _mm512_shuffle_f32x4::<0x88>(c1, c3);
            t[j + 12] = _mm512_shuffle_f32x4::<0xdd>(c1, c3);
        }
        t
    }
}

/// Stores the 16 rows' weights of one element index at `p`.
///
/// # Safety
/// AVX-512 F and F16C must be present; `p` must be writable for
/// `panel_k_bytes(HALF)` bytes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn store_k<const HALF: bool>(p: *mut u8, v: __m512) {
    // SAFETY: room for one element index (caller); f16 values converted to
    // f32 and back are unchanged.
    unsafe {
        if HALF {
            let h = _mm512_cvtps_ph::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(v);
            _mm256_storeu_si256(p as *mut __m256i, h);
        } else {
            _mm512_storeu_ps(p as *mut f32, v);
        }
    }
}

/// # Safety
/// AVX-512 F/BW/VL/DQ and F16C must be present; the slices must have been
/// checked as in [`pack`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn pack_avx512<const SRC: u8, const HALF: bool>(n: usize, rows: &[&[u8]], out: &mut [u8]) {
    let kb = panel_k_bytes(HALF);
    let eb = src_bytes(SRC);
    let o = out.as_mut_ptr();
    let mut k = 0;
    while k + 16 <= n {
        let x: [__m512; 16] = std::array::from_fn(|r| match rows.get(r) {
            // SAFETY: every row holds n elements (checked) and k + 16 <= n.
            Some(row) => unsafe { load16::<SRC>(row.as_ptr().add(k * eb)) },
            None => _mm512_setzero_ps(),
        });
        let t = transpose16(x);
        for (i, v) in t.into_iter().enumerate() {
            // SAFETY: out holds n element indices (checked), k + i < n.
            unsafe { store_k::<HALF>(o.add((k + i) * kb), v) };
        }
        k += 16;
    }
    for k in k..n {
        let mut v = [0f32; PANEL_ROWS];
        for (d, row) in v.iter_mut().zip(rows) {
            *d = elem::<SRC>(row, k);
        }
        // SAFETY: 16 floats read from `v`; out holds n element indices.
        unsafe { store_k::<HALF>(o.add(k * kb), _mm512_loadu_ps(v.as_ptr())) };
    }
}

/// Packs 1 to 16 rows of `n` elements of type `SRC` into a panel.
fn pack<const SRC: u8, const HALF: bool>(n: usize, rows: &[&[u8]], out: &mut [u8]) {
    assert!(
        (1..=PANEL_ROWS).contains(&rows.len())
            && rows.iter().all(|r| r.len() >= n * src_bytes(SRC))
            && out.len() >= n * panel_k_bytes(HALF),
        "panel pack: {} rows of {n} elements into {} bytes",
        rows.len(),
        out.len()
    );
    // SAFETY: installed only on CPUs with AVX-512 F/BW/VL/DQ (and F16C);
    // the slices were checked.
    unsafe { pack_avx512::<SRC, HALF>(n, rows, out) }
}

/// # Safety
/// AVX-512 F/BW/VL/DQ and F16C must be present; `y` holds `n` elements,
/// `out` `4 n` bytes.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn prep_avx512<const SRC: u8>(n: usize, y: &[u8], out: &mut [u8]) {
    let eb = src_bytes(SRC);
    let mut k = 0;
    while k + 16 <= n {
        // SAFETY: k + 16 <= n elements in y and out (caller).
        unsafe {
            let v = load16::<SRC>(y.as_ptr().add(k * eb));
            _mm512_storeu_ps(out.as_mut_ptr().add(4 * k) as *mut f32, v);
        }
        k += 16;
    }
    for k in k..n {
        out[4 * k..4 * k + 4].copy_from_slice(&elem::<SRC>(y, k).to_le_bytes());
    }
}

/// Prepares an activation row of `n` elements of type `SRC`: as f32.
fn prep<const SRC: u8>(n: usize, y: &[u8], out: &mut [u8]) {
    assert!(
        y.len() >= n * src_bytes(SRC) && out.len() >= 4 * n,
        "panel prep: {n} elements from {} bytes into {}",
        y.len(),
        out.len()
    );
    // SAFETY: installed only on CPUs with AVX-512 F/BW/VL/DQ (and F16C);
    // the slices were checked.
    unsafe { prep_avx512::<SRC>(n, y, out) }
}

/// The 16 rows' weights of element index `k` of a panel at `p`.
///
/// # Safety
/// AVX-512 F must be present; the panel must hold element index `k`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn weights<const HALF: bool>(p: *const u8, k: usize) -> __m512 {
    // SAFETY: element index k lies in the panel (caller).
    unsafe {
        if HALF {
            _mm512_cvtph_ps(_mm256_loadu_si256(p.add(k * 32) as *const __m256i))
        } else {
            _mm512_loadu_ps(p.add(k * 64) as *const f32)
        }
    }
}

/// # Safety
/// AVX-512 F/BW/VL/DQ and F16C must be present; `panel` holds `n` element
/// indices of the layout `HALF` selects, `cols` has `C` columns of `n` f32
/// each and `out` room for `C` x 16 values (see [`run`]).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn run_tile<const C: usize, const HALF: bool>(
    n: usize,
    panel: *const u8,
    cols: &[&[u8]],
    out: &mut [f32],
) {
    let y: [*const f32; C] = std::array::from_fn(|c| cols[c].as_ptr() as *const f32);
    let mut acc = [[_mm512_setzero_ps(); C]; UNROLL];
    let mut k = 0;
    while k + UNROLL <= n {
        // SAFETY: element indices k..k + UNROLL lie in the panel and every
        // column (caller).
        unsafe {
            for (u, a) in acc.iter_mut().enumerate() {
                let w = weights::<HALF>(panel, k + u);
                for c in 0..C {
                    let yv = _mm512_set1_ps(y[c].add(k + u).read_unaligned());
                    a[c] = _mm512_fmadd_ps(w, yv, a[c]);
                }
            }
        }
        k += UNROLL;
    }
    for (u, a) in acc.iter_mut().enumerate().take(n - k) {
        // SAFETY: as above, k + u < n.
        unsafe {
            let w = weights::<HALF>(panel, k + u);
            for c in 0..C {
                let yv = _mm512_set1_ps(y[c].add(k + u).read_unaligned());
                a[c] = _mm512_fmadd_ps(w, yv, a[c]);
            }
        }
    }
    for c in 0..C {
        let mut s = acc[0][c];
        for a in &acc[1..] {
            s = _mm512_add_ps(s, a[c]);
        }
        // SAFETY: out holds C x 16 values (caller).
        unsafe { _mm512_storeu_ps(out.as_mut_ptr().add(c * PANEL_ROWS), s) };
    }
}

/// `out[c * 16 + r] = dot(row r of the panel, column c)`.
fn run<const HALF: bool>(n: usize, panel: &[u8], cols: &[&[u8]], out: &mut [f32]) {
    assert!(
        (1..=GEMM_COLS).contains(&cols.len())
            && panel.len() >= n * panel_k_bytes(HALF)
            && cols.iter().all(|c| c.len() >= 4 * n)
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
