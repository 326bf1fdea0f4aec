//! Panel matrix x matrix kernels ([`super::Gemm`]) for K-quant weights
//! against Q8_K activations, with AVX-512 VNNI.
//!
//! A panel holds [`PANEL_ROWS`] weight rows, one per 32-bit lane: for each
//! group of 4 consecutive weights (a k-group), the rows' 4 levels sit side
//! by side in one 64-byte vector, as unsigned bytes, so that `VPDPBUSD`
//! with the column's 4 activation bytes broadcast to every lane adds the
//! k-group's dot product to all 16 rows at once. Each super-block of the
//! panel also carries its rows' scales (and mins), laid out as 16-lane
//! vectors, so that the epilogue is vectorized over the rows too.
//!
//! Integer sums are exact per super-block; per super-block and column one
//! conversion and one fused multiply-add per term take them into the f32
//! accumulator of each (row, column) lane, the same operations in the same
//! order whatever the number of columns of a call.
//!
//! Every `unsafe fn` here is compiled for AVX-512 VNNI and reached only
//! through [`install`], which registers the kernels only on CPUs with it;
//! slices are length-checked on entry.

use std::arch::x86_64::*;

use ggml_core::Type;

use super::scalar::{f16_at, q8k_bsum, scale_min_k4, Q8K_BSUMS, Q8K_BYTES, Q8K_QS};
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
        k.set_gemm(Type::Q6_K, &Q6_K_GEMM);
    }
}

/// # Safety
/// `p` must be readable for 64 bytes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma")]
unsafe fn load(p: *const u8) -> __m512i {
    // SAFETY: 64 readable bytes (caller).
    unsafe { _mm512_loadu_si512(p as *const __m512i) }
}

/// # Safety
/// `p` must be readable for 64 bytes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma")]
unsafe fn load_ps(p: *const u8) -> __m512 {
    // SAFETY: 64 readable bytes (caller).
    unsafe { _mm512_loadu_ps(p as *const f32) }
}

/// The 4 bytes at `p` in every 32-bit lane (an embedded broadcast once
/// folded into the instruction that uses it).
///
/// # Safety
/// `p` must be readable for 4 bytes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma")]
unsafe fn bcast(p: *const u8) -> __m512i {
    // SAFETY: 4 readable bytes (caller).
    _mm512_set1_epi32(unsafe { (p as *const i32).read_unaligned() })
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

/// Writes `v` into the 4 bytes of lane `r` of the panel vector at `o`.
fn put4(out: &mut [u8], o: usize, r: usize, v: [u8; 4]) {
    out[o + 4 * r..o + 4 * r + 4].copy_from_slice(&v);
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

// ------------------------------------------------------------------ Q4_K

/// Q4_K: one panel super-block. Vector `v` of the first 32 holds bytes
/// `4v..4v + 4` of each row's `qs`: its low nibbles are weights `64j + 16p
/// + 4i ..` (`v = 8j + 4p + i`), its high nibbles the same plus 32.
const Q4K_QS: usize = 0;
/// 8 vectors: the 6-bit scale of sub-block `b` (32 weights) as i32.
const Q4K_SC: usize = Q4K_QS + 32 * VEC;
/// 4 vectors: the mins of sub-blocks `2p` and `2p + 1` as an i16 pair.
const Q4K_MIN: usize = Q4K_SC + 8 * VEC;
/// d as f32.
const Q4K_D: usize = Q4K_MIN + 4 * VEC;
/// dmin as f32.
const Q4K_DMIN: usize = Q4K_D + VEC;
/// Bytes of a panel super-block.
const Q4K_SB: usize = Q4K_DMIN + VEC;
/// Bytes of a Q4_K block.
const Q4K_BYTES: usize = 144;

/// Q4_K activations: per super-block the 256 levels, the 8 sums of 32 as
/// i16, d as f32, padding.
const A4_QS: usize = 0;
const A4_SUM: usize = 256;
const A4_D: usize = 272;
const A4_SB: usize = 288;

static Q4_K_GEMM: Gemm = Gemm {
    panel_bytes: |n| n / QK * Q4K_SB,
    pack: q4k_pack,
    act_bytes: |n| n / QK * A4_SB,
    prep: q4k_prep,
    run: q4k_run,
};

fn q4k_pack(n: usize, rows: &[&[u8]], out: &mut [u8]) {
    check_pack(n, rows, Q4K_BYTES, out, Q4K_SB);
    let nb = n / QK;
    out[..nb * Q4K_SB].fill(0);
    for (r, x) in rows.iter().enumerate() {
        for ib in 0..nb {
            let b = &x[ib * Q4K_BYTES..(ib + 1) * Q4K_BYTES];
            let o = &mut out[ib * Q4K_SB..(ib + 1) * Q4K_SB];
            for v in 0..32 {
                put4(
                    o,
                    Q4K_QS + v * VEC,
                    r,
                    b[16 + 4 * v..20 + 4 * v].try_into().unwrap(),
                );
            }
            for g in 0..8 {
                let (s, m) = scale_min_k4(g, &b[4..16]);
                put4(o, Q4K_SC + g * VEC, r, i32::from(s).to_le_bytes());
                let at = Q4K_MIN + (g / 2) * VEC + 4 * r + 2 * (g % 2);
                o[at..at + 2].copy_from_slice(&i16::from(m).to_le_bytes());
            }
            put4(o, Q4K_D, r, f16_at(b, 0).to_le_bytes());
            put4(o, Q4K_DMIN, r, f16_at(b, 2).to_le_bytes());
        }
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

/// # Safety
/// AVX-512 VNNI; `nb` super-blocks in `panel` and in every column, `C`
/// columns, `C * PANEL_ROWS` results (checked by [`check_run`]).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma")]
unsafe fn q4k_kernel<const C: usize>(nb: usize, panel: &[u8], cols: &[&[u8]], out: &mut [f32]) {
    let m4 = _mm512_set1_epi8(0x0f);
    let mut acc = [_mm512_setzero_ps(); C];
    for ib in 0..nb {
        // SAFETY: super-block ib of the panel and of every column (checked);
        // every offset below stays inside them.
        unsafe {
            let p = panel.as_ptr().add(ib * Q4K_SB);
            let y: [*const u8; C] = std::array::from_fn(|c| cols[c].as_ptr().add(ib * A4_SB));
            let d = load_ps(p.add(Q4K_D));
            let dmin = load_ps(p.add(Q4K_DMIN));
            // The mins: sum over sub-blocks of min * (sum of 32 levels).
            for c in 0..C {
                let mut m = _mm512_setzero_si512();
                for q in 0..4 {
                    m = _mm512_dpwssd_epi32(
                        m,
                        load(p.add(Q4K_MIN + q * VEC)),
                        bcast(y[c].add(A4_SUM + 4 * q)),
                    );
                }
                let dm = _mm512_mul_ps(dmin, bcast_ps(y[c].add(A4_D)));
                acc[c] = _mm512_fnmadd_ps(dm, _mm512_cvtepi32_ps(m), acc[c]);
            }
            let mut isum = [_mm512_setzero_si512(); C];
            for j in 0..4 {
                for nib in 0..2 {
                    for part in 0..2 {
                        // 16 weights: the sums (at most 16 * 15 * 128) fit
                        // in 16 bits, so that one VPDPWSSD applies the scale.
                        let mut isub = [_mm512_setzero_si512(); C];
                        for i in 0..4 {
                            let v = load(p.add(Q4K_QS + (8 * j + 4 * part + i) * VEC));
                            let w = if nib == 0 {
                                _mm512_and_si512(v, m4)
                            } else {
                                _mm512_and_si512(_mm512_srli_epi16(v, 4), m4)
                            };
                            let at = A4_QS + 64 * j + 32 * nib + 16 * part + 4 * i;
                            for c in 0..C {
                                isub[c] = _mm512_dpbusd_epi32(isub[c], w, bcast(y[c].add(at)));
                            }
                        }
                        let sc = load(p.add(Q4K_SC + (2 * j + nib) * VEC));
                        for c in 0..C {
                            isum[c] = _mm512_dpwssd_epi32(isum[c], isub[c], sc);
                        }
                    }
                }
            }
            for c in 0..C {
                let dd = _mm512_mul_ps(d, bcast_ps(y[c].add(A4_D)));
                acc[c] = _mm512_fmadd_ps(dd, _mm512_cvtepi32_ps(isum[c]), acc[c]);
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
/// 16 vectors: the i8 scale of sub-block `g` (16 weights) as i32.
const Q6K_SC: usize = Q6K_QS + 64 * VEC;
/// 8 vectors: -32 times the scales of sub-blocks `2p` and `2p + 1` as an
/// i16 pair (the offset of the levels, applied to the activation sums).
const Q6K_CORR: usize = Q6K_SC + 16 * VEC;
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

/// The unsigned levels (0..63) of a Q6_K block.
fn q6k_levels(b: &[u8]) -> [u8; QK] {
    let mut q = [0u8; QK];
    for half in 0..2 {
        let (ql, qh) = (
            &b[64 * half..64 * half + 64],
            &b[128 + 32 * half..160 + 32 * half],
        );
        let o = 128 * half;
        for l in 0..32 {
            q[o + l] = (ql[l] & 15) | ((qh[l] & 3) << 4);
            q[o + l + 32] = (ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4);
            q[o + l + 64] = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
            q[o + l + 96] = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
        }
    }
    q
}

fn q6k_pack(n: usize, rows: &[&[u8]], out: &mut [u8]) {
    check_pack(n, rows, Q6K_BYTES, out, Q6K_SB);
    let nb = n / QK;
    out[..nb * Q6K_SB].fill(0);
    for (r, x) in rows.iter().enumerate() {
        for ib in 0..nb {
            let b = &x[ib * Q6K_BYTES..(ib + 1) * Q6K_BYTES];
            let o = &mut out[ib * Q6K_SB..(ib + 1) * Q6K_SB];
            let q = q6k_levels(b);
            for v in 0..64 {
                put4(
                    o,
                    Q6K_QS + v * VEC,
                    r,
                    q[4 * v..4 * v + 4].try_into().unwrap(),
                );
            }
            for g in 0..16 {
                let s = b[192 + g] as i8;
                put4(o, Q6K_SC + g * VEC, r, i32::from(s).to_le_bytes());
                let at = Q6K_CORR + (g / 2) * VEC + 4 * r + 2 * (g % 2);
                o[at..at + 2].copy_from_slice(&(-32 * i16::from(s)).to_le_bytes());
            }
            put4(o, Q6K_D, r, f16_at(b, 208).to_le_bytes());
        }
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
            // The offset: -32 * sum over sub-blocks of scale * (sum of 16 levels).
            let mut isum = [_mm512_setzero_si512(); C];
            for q in 0..8 {
                let corr = load(p.add(Q6K_CORR + q * VEC));
                for c in 0..C {
                    isum[c] =
                        _mm512_dpwssd_epi32(isum[c], corr, bcast(y[c].add(Q8K_BSUMS + 4 * q)));
                }
            }
            for g in 0..16 {
                let mut isub = [_mm512_setzero_si512(); C];
                for i in 0..4 {
                    let w = load(p.add(Q6K_QS + (4 * g + i) * VEC));
                    let at = Q8K_QS + 16 * g + 4 * i;
                    for c in 0..C {
                        isub[c] = _mm512_dpbusd_epi32(isub[c], w, bcast(y[c].add(at)));
                    }
                }
                let sc = load(p.add(Q6K_SC + g * VEC));
                for c in 0..C {
                    isum[c] = _mm512_add_epi32(isum[c], _mm512_mullo_epi32(isub[c], sc));
                }
            }
            let d = load_ps(p.add(Q6K_D));
            for c in 0..C {
                let dd = _mm512_mul_ps(d, bcast_ps(y[c]));
                acc[c] = _mm512_fmadd_ps(dd, _mm512_cvtepi32_ps(isum[c]), acc[c]);
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
    use super::{Q4_K_GEMM, Q6_K_GEMM};

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
        let rows: Vec<&[u8]> = xs.iter().map(|v| &v[..]).collect();
        let mut panel = vec![0u8; (g.panel_bytes)(n)];
        (g.pack)(n, &rows, &mut panel);
        let prepped: Vec<Vec<u8>> = ys
            .iter()
            .map(|y| {
                let mut p = vec![0u8; (g.act_bytes)(n)];
                (g.prep)(n, y, &mut p);
                p
            })
            .collect();
        let cols: Vec<&[u8]> = prepped.iter().map(|v| &v[..]).collect();
        let mut out = vec![0f32; GEMM_COLS * PANEL_ROWS];
        let iters = 20_000;
        for _ in 0..100 {
            (g.run)(n, &panel, &cols, &mut out);
        }
        let t = Instant::now();
        for _ in 0..iters {
            (g.run)(n, std::hint::black_box(&panel), &cols, &mut out);
        }
        let s = t.elapsed().as_secs_f64();
        let macs = (iters * n * PANEL_ROWS * GEMM_COLS) as f64;
        println!(
            "{name}: {:.1} GMAC/s (n={n}, 16 rows x 8 columns per call)",
            macs / s / 1e9
        );
    }

    #[test]
    #[ignore]
    fn gemm_k_throughput() {
        throughput("Q4_K", Type::Q4_K, &Q4_K_GEMM);
        throughput("Q6_K", Type::Q6_K, &Q6_K_GEMM);
    }
}
