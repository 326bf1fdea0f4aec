//! The float panel kernels ([`super::Gemm`]) for F16 and F32 weights with
//! AVX2 and F16C, in the layouts of the AVX-512 ones (see `gemm_f16`): per
//! pair of elements, the 16 rows' two weights side by side, as f16 or as
//! f32, so that weights stored packed serve either. Each 16 bytes of an
//! F16 pair (4 rows) widen to one register of f32, each lane pair one row;
//! an F32 pair's 4 rows load as one register. A prepared column is the
//! activation row as f32, a pair broadcast as one 64-bit value to every
//! lane pair. Each lane accumulates one row's products of one position of
//! the pairs, pair after pair, and a row's two lanes are added at the end,
//! as the AVX-512 kernels do: the same bits.
//!
//! A call's columns go through each half panel (rows 0-7, 8-15) in passes
//! of up to [`PASS_COLS`]: two registers of weights per pair and half, each
//! feeding an FMA per column, which keeps the FMAs busy rather than the
//! conversions. One column (token generation streaming stored panels)
//! takes both halves in one pass, with the stream asked for ahead.

use std::arch::x86_64::*;

use ggml_core::Type;

use super::{Gemm, Kernels, GEMM_COLS, PANEL_ROWS};

/// Installs the float panel kernels (the caller checked AVX2, FMA, F16C).
pub(super) fn install(k: &mut Kernels) {
    k.set_gemm(Type::F16, &F16_GEMM_AVX2);
    k.set_gemm(Type::F32, &F32_GEMM_AVX2);
}

static F16_GEMM_AVX2: Gemm = Gemm {
    panel_bytes: panel_bytes::<2>,
    pack: pack::<2>,
    act_bytes,
    prep: prep::<2>,
    run: run::<2>,
    run_pair: None,
    wide: None,
};

static F32_GEMM_AVX2: Gemm = Gemm {
    panel_bytes: panel_bytes::<4>,
    pack: pack::<4>,
    act_bytes,
    prep: prep::<4>,
    run: run::<4>,
    run_pair: None,
    wide: None,
};

/// Most columns of a pass over a half panel.
const PASS_COLS: usize = 4;
/// Bytes of one pair of a panel of `E`-byte weights: 16 rows x 2 weights.
const fn pair_bytes(e: usize) -> usize {
    2 * e * PANEL_ROWS
}
/// Bytes ahead of the pair being read that a one-column call asks the
/// cache for (the panels of a matrix lie back to back).
const PANEL_PREFETCH: usize = 8192;

/// Pairs of an `n`-element row.
const fn pairs(n: usize) -> usize {
    n.div_ceil(2)
}

fn panel_bytes<const E: usize>(n: usize) -> usize {
    pairs(n) * pair_bytes(E)
}

fn act_bytes(n: usize) -> usize {
    pairs(n) * 8
}

/// Packs 1 to 16 rows of `n` `E`-byte weights (F16 or F32): pair `p` of
/// row `r` at bytes `2Er..2E(r + 1)` of the pair; a zero pads an odd row,
/// missing rows are zero.
fn pack<const E: usize>(n: usize, rows: &[&[u8]], out: &mut [u8]) {
    assert!(
        (1..=PANEL_ROWS).contains(&rows.len())
            && rows.iter().all(|r| r.len() >= E * n)
            && out.len() >= panel_bytes::<E>(n),
        "panel pack: {} rows of {n} elements into {} bytes",
        rows.len(),
        out.len()
    );
    let pb = 2 * E;
    for (p, dst) in out[..panel_bytes::<E>(n)]
        .chunks_exact_mut(pair_bytes(E))
        .enumerate()
    {
        dst.fill(0);
        for (r, row) in rows.iter().enumerate() {
            let len = E * (n.min(2 * p + 2) - 2 * p);
            dst[pb * r..pb * r + len].copy_from_slice(&row[pb * p..pb * p + len]);
        }
    }
}

/// Prepares an activation row of `n` `E`-byte elements (F16 or F32): as
/// f32, with a zero after an odd row.
fn prep<const E: usize>(n: usize, y: &[u8], out: &mut [u8]) {
    assert!(
        y.len() >= E * n && out.len() >= act_bytes(n),
        "panel prep: {n} elements from {} bytes into {}",
        y.len(),
        out.len()
    );
    if E == 4 {
        out[..4 * n].copy_from_slice(&y[..4 * n]);
    } else {
        for (o, h) in out.chunks_exact_mut(4).zip(y[..2 * n].chunks_exact(2)) {
            o.copy_from_slice(
                &half::f16::from_le_bytes([h[0], h[1]])
                    .to_f32()
                    .to_le_bytes(),
            );
        }
    }
    out[4 * n..act_bytes(n)].fill(0);
}

/// `out[c * 16 + r] = dot(row r of the panel, column c)`.
fn run<const E: usize>(n: usize, panel: &[u8], cols: &[&[u8]], out: &mut [f32]) {
    assert!(
        (1..=GEMM_COLS).contains(&cols.len())
            && panel.len() >= panel_bytes::<E>(n)
            && cols.iter().all(|c| c.len() >= act_bytes(n))
            && out.len() >= cols.len() * PANEL_ROWS,
        "panel kernel: slices shorter than {n} elements"
    );
    let np = pairs(n);
    let p = panel.as_ptr();
    // SAFETY: installed only on CPUs with AVX2, FMA and F16C; the slices
    // were checked, and every call takes columns that exist.
    unsafe {
        match cols.len() {
            1 => pass::<2, 1, E>(np, p, 0, cols, 0, out),
            c => {
                for h in 0..2 {
                    let mut c0 = 0;
                    while c0 < c {
                        match c - c0 {
                            1 => pass::<1, 1, E>(np, p, h, cols, c0, out),
                            2 => pass::<1, 2, E>(np, p, h, cols, c0, out),
                            3 => pass::<1, 3, E>(np, p, h, cols, c0, out),
                            _ => pass::<1, PASS_COLS, E>(np, p, h, cols, c0, out),
                        }
                        c0 += PASS_COLS;
                    }
                }
            }
        }
    }
}

/// Rows of halves `h0..h0 + H` against columns `c0..c0 + C`, stored at
/// their places in `out`.
///
/// # Safety
/// AVX2, FMA and F16C; `panel` holds `np` pairs, columns `c0..c0 + C` of
/// `cols` `np` prepared pairs each, `out` their 16 values each.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn pass<const H: usize, const C: usize, const E: usize>(
    np: usize,
    panel: *const u8,
    h0: usize,
    cols: &[&[u8]],
    c0: usize,
    out: &mut [f32],
) {
    let y: [*const f64; C] = std::array::from_fn(|c| cols[c0 + c].as_ptr() as *const f64);
    // acc[h][q][c]: rows 8(h0 + h) + 4q .. + 4 of column c.
    let mut acc = [[[_mm256_setzero_ps(); C]; 2]; H];
    let ask = C == 1 && super::stream::software_prefetch();
    for p in 0..np {
        if ask && p % 2 == 0 {
            // A prefetch is only a hint: it never faults, so the address
            // may lie past the panel.
            let at = panel.wrapping_add(p * pair_bytes(E) + PANEL_PREFETCH);
            // Two pairs: E lines of 64 bytes.
            for l in 0..E {
                _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(64 * l) as *const i8);
            }
        }
        // SAFETY: pair p lies in the panel and in every column (caller).
        unsafe {
            let yv: [__m256; C] = std::array::from_fn(|c| {
                _mm256_castpd_ps(_mm256_set1_pd(y[c].add(p).read_unaligned()))
            });
            for (h, ah) in acc.iter_mut().enumerate() {
                let w = panel.add(p * pair_bytes(E) + 16 * E * (h0 + h));
                for (q, aq) in ah.iter_mut().enumerate() {
                    let wq = if E == 4 {
                        _mm256_loadu_ps(w.add(32 * q) as *const f32)
                    } else {
                        _mm256_cvtph_ps(_mm_loadu_si128(w.add(16 * q) as *const __m128i))
                    };
                    for (c, a) in aq.iter_mut().enumerate() {
                        *a = _mm256_fmadd_ps(wq, yv[c], *a);
                    }
                }
            }
        }
    }
    for (h, ah) in acc.iter().enumerate() {
        for c in 0..C {
            // Lanes 2r and 2r + 1 of the two registers are row r's halves
            // of the sum: even lanes plus odd lanes.
            let (a, b) = (ah[0][c], ah[1][c]);
            let even = _mm256_shuffle_ps::<0b10_00_10_00>(a, b);
            let odd = _mm256_shuffle_ps::<0b11_01_11_01>(a, b);
            // Within each 128-bit lane: [a0 a2 b0 b2] + [a1 a3 b1 b3] gives
            // rows (0, 1, 4, 5) in the low lane and (2, 3, 6, 7) in the high.
            let s = _mm256_add_ps(even, odd);
            let s = _mm256_castpd_ps(_mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(s)));
            let o = (c0 + c) * PANEL_ROWS + 8 * (h0 + h);
            let dst: &mut [f32; 8] = (&mut out[o..o + 8]).try_into().unwrap();
            // SAFETY: `dst` holds 8 f32.
            unsafe { _mm256_storeu_ps(dst.as_mut_ptr(), s) };
        }
    }
}
