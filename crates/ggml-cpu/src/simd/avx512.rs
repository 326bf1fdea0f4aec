//! AVX-512 (F, BW, VL, DQ; VNNI where present) kernels: two 32-weight
//! blocks, or one 64-weight chunk of a super-block, per 512-bit register.
//!
//! As in the AVX2 kernels, integer block sums are exact and only the f32
//! accumulation order differs from the scalar path. Every `unsafe fn` here
//! is compiled for AVX-512 and reached only through [`install`], which the
//! dispatcher calls after checking the CPU's features; row slices are
//! length-checked on entry.

use std::arch::x86_64::*;

use ggml_core::Type;

use super::avx2::{dec_iq4_nl, dec_q4_0, dec_q5_0, dec_q8_0};
use super::scalar::{q8k_bsum, scale_min_k4, Q8K_BYTES, Q8K_QS};
use super::{by_cols, check_rows, Kernels};
use crate::features::cpu_features;

/// Installs the AVX-512 kernels over the AVX2 ones (the caller checked
/// AVX-512 F/BW/VL/DQ).
pub(super) fn install(k: &mut Kernels) {
    k.set(Type::F32, f32_row);
    k.set(Type::F16, f16_row);
    if cpu_features().avx512_vnni {
        k.set(Type::Q4_0, q4_0_row_vnni);
        k.set(Type::Q5_0, q5_0_row_vnni);
        k.set(Type::Q8_0, q8_0_row_vnni);
        k.set(Type::IQ4_NL, iq4_nl_row_vnni);
    } else {
        k.set(Type::Q4_0, q4_0_row_bw);
        k.set(Type::Q5_0, q5_0_row_bw);
        k.set(Type::Q8_0, q8_0_row_bw);
        k.set(Type::IQ4_NL, iq4_nl_row_bw);
    }
    k.set(Type::Q4_K, q4_k_row);
    k.set(Type::Q5_K, q5_k_row);
    k.set(Type::Q6_K, q6_k_row);
}

/// # Safety
/// `p` must be readable for 2 bytes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn f16_at(p: *const u8) -> f32 {
    // SAFETY: 2 readable bytes (caller).
    let h = unsafe { (p as *const u16).read_unaligned() };
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(h))))
}

/// # Safety
/// `p` must be readable for 32 bytes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn load256(p: *const u8) -> __m256i {
    // SAFETY: 32 readable bytes (caller).
    unsafe { _mm256_loadu_si256(p as *const __m256i) }
}

/// # Safety
/// `p` must be readable for 64 bytes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn load512(p: *const u8) -> __m512i {
    // SAFETY: 64 readable bytes (caller).
    unsafe { _mm512_loadu_si512(p as *const __m512i) }
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
fn join(lo: __m256i, hi: __m256i) -> __m512i {
    _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1)
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
fn hsum256(v: __m256) -> f32 {
    let r = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
    let r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    let r = _mm_add_ss(r, _mm_movehdup_ps(r));
    _mm_cvtss_f32(r)
}

/// Sums of four products of unsigned `a` and signed `b` bytes, per i32 lane.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,avx512vnni")]
fn dot_us_vnni(a: __m512i, b: __m512i) -> __m512i {
    _mm512_dpbusd_epi32(_mm512_setzero_si512(), a, b)
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
fn dot_us_bw(a: __m512i, b: __m512i) -> __m512i {
    _mm512_madd_epi16(_mm512_maddubs_epi16(a, b), _mm512_set1_epi16(1))
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,avx512vnni")]
fn dot_us256_vnni(a: __m256i, b: __m256i) -> __m256i {
    _mm256_dpbusd_epi32(_mm256_setzero_si256(), a, b)
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
fn dot_us256_bw(a: __m256i, b: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1))
}

// ------------------------------------------------------------ floats

macro_rules! float_kernel {
    ($cols:ident, $row:ident, $width:expr, $load:ident, $scalar:path) => {
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
        unsafe fn $cols<const C: usize>(n: usize, x: &[u8], ys: &[&[u8]], out: &mut [f32]) {
            check_rows(n, x, $width, ys, $width, out);
            let xp = x.as_ptr();
            let mut acc = [[_mm512_setzero_ps(); 2]; C];
            let mut i = 0;
            while i + 32 <= n {
                // SAFETY: elements i..i+32 are inside every row (checked).
                let x0 = unsafe { $load(xp.add(i * $width)) };
                // SAFETY: as above.
                let x1 = unsafe { $load(xp.add((i + 16) * $width)) };
                for c in 0..C {
                    let yp = ys[c].as_ptr();
                    // SAFETY: as above.
                    let y0 = unsafe { $load(yp.add(i * $width)) };
                    // SAFETY: as above.
                    let y1 = unsafe { $load(yp.add((i + 16) * $width)) };
                    acc[c][0] = _mm512_fmadd_ps(x0, y0, acc[c][0]);
                    acc[c][1] = _mm512_fmadd_ps(x1, y1, acc[c][1]);
                }
                i += 32;
            }
            if i + 16 <= n {
                // SAFETY: elements i..i+16 are inside every row.
                let x0 = unsafe { $load(xp.add(i * $width)) };
                for c in 0..C {
                    // SAFETY: as above.
                    let y0 = unsafe { $load(ys[c].as_ptr().add(i * $width)) };
                    acc[c][0] = _mm512_fmadd_ps(x0, y0, acc[c][0]);
                }
                i += 16;
            }
            for c in 0..C {
                let mut s = _mm512_reduce_add_ps(_mm512_add_ps(acc[c][0], acc[c][1]));
                for j in i..n {
                    s += $scalar(x, j) * $scalar(ys[c], j);
                }
                out[c] = s;
            }
        }
        fn $row(n: usize, x: &[u8], ys: &[&[u8]], out: &mut [f32]) {
            // SAFETY: installed only on CPUs with AVX-512 F/BW/VL/DQ.
            unsafe { by_cols!($cols, n, x, ys, out) }
        }
    };
}

/// # Safety
/// `p` must be readable for 64 bytes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn load_f32x16(p: *const u8) -> __m512 {
    // SAFETY: 64 readable bytes (caller).
    unsafe { _mm512_loadu_ps(p as *const f32) }
}

/// # Safety
/// `p` must be readable for 32 bytes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn load_f16x16(p: *const u8) -> __m512 {
    // SAFETY: 32 readable bytes (caller).
    _mm512_cvtph_ps(unsafe { _mm256_loadu_si256(p as *const __m256i) })
}

fn f32_elem(b: &[u8], j: usize) -> f32 {
    super::scalar::f32_at(b, 4 * j)
}
fn f16_elem(b: &[u8], j: usize) -> f32 {
    super::scalar::f16_at(b, 2 * j)
}

float_kernel!(f32_cols, f32_row, 4, load_f32x16, f32_elem);
float_kernel!(f16_cols, f16_row, 2, load_f16x16, f16_elem);

// ------------------------------------------------------ 32-blocks x Q8_0

/// Two blocks per step in 512 bits, a last odd block in 256 bits; `$dot`
/// and `$dot256` are the byte dot products (VNNI or BW) the features allow.
macro_rules! q8_0_kernel {
    ($cols:ident, $row:ident, $bytes:expr, $dec:ident, $feat:literal, $dot:ident, $dot256:ident) => {
        #[target_feature(enable = $feat)]
        unsafe fn $cols<const C: usize>(n: usize, x: &[u8], ys: &[&[u8]], out: &mut [f32]) {
            let nb = n / 32;
            check_rows(nb, x, $bytes, ys, 34, out);
            let mut acc = [_mm512_setzero_ps(); C];
            let mut acc1 = [_mm256_setzero_ps(); C];
            let xp = x.as_ptr();
            let mut ib = 0;
            while ib + 2 <= nb {
                // SAFETY: blocks ib and ib + 1 of x and of every y are inside
                // the rows (checked).
                unsafe {
                    let (d0, q0) = $dec(xp.add(ib * $bytes));
                    let (d1, q1) = $dec(xp.add((ib + 1) * $bytes));
                    let qx = join(q0, q1);
                    let ax = _mm512_abs_epi8(qx);
                    let neg = _mm512_movepi8_mask(qx);
                    for c in 0..C {
                        let yb = ys[c].as_ptr().add(ib * 34);
                        let qy = join(load256(yb.add(2)), load256(yb.add(36)));
                        let sy = _mm512_mask_sub_epi8(qy, neg, _mm512_setzero_si512(), qy);
                        let p = $dot(ax, sy);
                        let d = _mm512_insertf32x8(
                            _mm512_set1_ps(d0 * f16_at(yb)),
                            _mm256_set1_ps(d1 * f16_at(yb.add(34))),
                            1,
                        );
                        acc[c] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(p), acc[c]);
                    }
                }
                ib += 2;
            }
            if ib < nb {
                // SAFETY: block ib is inside every row (checked).
                unsafe {
                    let (d0, qx) = $dec(xp.add(ib * $bytes));
                    let ax = _mm256_abs_epi8(qx);
                    for c in 0..C {
                        let yb = ys[c].as_ptr().add(ib * 34);
                        let sy = _mm256_sign_epi8(load256(yb.add(2)), qx);
                        let p = $dot256(ax, sy);
                        let d = _mm256_set1_ps(d0 * f16_at(yb));
                        acc1[c] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc1[c]);
                    }
                }
            }
            for c in 0..C {
                out[c] = _mm512_reduce_add_ps(acc[c]) + hsum256(acc1[c]);
            }
        }
        fn $row(n: usize, x: &[u8], ys: &[&[u8]], out: &mut [f32]) {
            // SAFETY: installed only on CPUs with the kernel's features
            // (AVX-512 F/BW/VL/DQ, and VNNI for the VNNI variants).
            unsafe { by_cols!($cols, n, x, ys, out) }
        }
    };
}

q8_0_kernel!(
    q4_0_cols_bw,
    q4_0_row_bw,
    18,
    dec_q4_0,
    "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c",
    dot_us_bw,
    dot_us256_bw
);
q8_0_kernel!(
    q5_0_cols_bw,
    q5_0_row_bw,
    22,
    dec_q5_0,
    "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c",
    dot_us_bw,
    dot_us256_bw
);
q8_0_kernel!(
    q8_0_cols_bw,
    q8_0_row_bw,
    34,
    dec_q8_0,
    "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c",
    dot_us_bw,
    dot_us256_bw
);
q8_0_kernel!(
    iq4_nl_cols_bw,
    iq4_nl_row_bw,
    18,
    dec_iq4_nl,
    "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c",
    dot_us_bw,
    dot_us256_bw
);
q8_0_kernel!(
    q4_0_cols_vnni,
    q4_0_row_vnni,
    18,
    dec_q4_0,
    "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,avx512vnni",
    dot_us_vnni,
    dot_us256_vnni
);
q8_0_kernel!(
    q5_0_cols_vnni,
    q5_0_row_vnni,
    22,
    dec_q5_0,
    "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,avx512vnni",
    dot_us_vnni,
    dot_us256_vnni
);
q8_0_kernel!(
    q8_0_cols_vnni,
    q8_0_row_vnni,
    34,
    dec_q8_0,
    "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,avx512vnni",
    dot_us_vnni,
    dot_us256_vnni
);
q8_0_kernel!(
    iq4_nl_cols_vnni,
    iq4_nl_row_vnni,
    18,
    dec_iq4_nl,
    "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,avx512vnni",
    dot_us_vnni,
    dot_us256_vnni
);

// ------------------------------------------------------ K-quants x Q8_K

/// Q4_K / Q5_K: one 64-weight chunk (two groups of 32) per 512-bit step.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn qk_cols<const C: usize, const FIVE: bool>(
    n: usize,
    x: &[u8],
    ys: &[&[u8]],
    out: &mut [f32],
) {
    let bytes = if FIVE { 176 } else { 144 };
    let nb = n / 256;
    check_rows(nb, x, bytes, ys, Q8K_BYTES, out);
    let mut acc = [_mm512_setzero_ps(); C];
    let mut accm = [0f32; C];
    let m4 = _mm256_set1_epi8(0x0f);
    let one = _mm256_set1_epi8(1);
    for ib in 0..nb {
        let xb = &x[ib * bytes..(ib + 1) * bytes];
        let d = super::scalar::f16_at(xb, 0);
        let dmin = super::scalar::f16_at(xb, 2);
        let mut sc = [0i16; 8];
        let mut mn = [0i32; 8];
        for g in 0..8 {
            let (s, m) = scale_min_k4(g, &xb[4..16]);
            sc[g] = i16::from(s);
            mn[g] = i32::from(m);
        }
        let mut dy = [0f32; C];
        for c in 0..C {
            let yb = &ys[c][ib * Q8K_BYTES..(ib + 1) * Q8K_BYTES];
            dy[c] = super::scalar::f32_at(yb, 0);
            let summ: i32 = (0..8)
                .map(|g| mn[g] * (q8k_bsum(yb, 2 * g) + q8k_bsum(yb, 2 * g + 1)))
                .sum();
            accm[c] += (dmin * dy[c]) * summ as f32;
        }
        let qs = if FIVE { &xb[48..176] } else { &xb[16..144] };
        let hbits = if FIVE {
            // SAFETY: 32 bytes of high bits at offset 16 of a Q5_K block.
            unsafe { load256(xb.as_ptr().add(16)) }
        } else {
            _mm256_setzero_si256()
        };
        let mut sumi = [_mm512_setzero_si512(); C];
        for j in 0..4 {
            // SAFETY: 32 bytes of nibbles at 32 * j inside `qs`.
            let q = unsafe { load256(qs.as_ptr().add(32 * j)) };
            let mut lo = _mm256_and_si256(q, m4);
            let mut hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            if FIVE {
                let s0 = _mm_cvtsi32_si128(2 * j as i32);
                let s1 = _mm_cvtsi32_si128(2 * j as i32 + 1);
                let b0 = _mm256_and_si256(_mm256_srl_epi16(hbits, s0), one);
                let b1 = _mm256_and_si256(_mm256_srl_epi16(hbits, s1), one);
                lo = _mm256_or_si256(lo, _mm256_slli_epi16(b0, 4));
                hi = _mm256_or_si256(hi, _mm256_slli_epi16(b1, 4));
            }
            let qx = join(lo, hi);
            let s = join(
                _mm256_set1_epi16(sc[2 * j]),
                _mm256_set1_epi16(sc[2 * j + 1]),
            );
            for c in 0..C {
                // SAFETY: 64 quants at 64 * j inside the Q8_K block (checked).
                let y = unsafe { load512(ys[c].as_ptr().add(ib * Q8K_BYTES + Q8K_QS + 64 * j)) };
                let p = _mm512_madd_epi16(_mm512_maddubs_epi16(qx, y), s);
                sumi[c] = _mm512_add_epi32(sumi[c], p);
            }
        }
        for c in 0..C {
            let dd = _mm512_set1_ps(d * dy[c]);
            acc[c] = _mm512_fmadd_ps(dd, _mm512_cvtepi32_ps(sumi[c]), acc[c]);
        }
    }
    for c in 0..C {
        out[c] = _mm512_reduce_add_ps(acc[c]) - accm[c];
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn q4_k_cols<const C: usize>(n: usize, x: &[u8], ys: &[&[u8]], out: &mut [f32]) {
    // SAFETY: same contract.
    unsafe { qk_cols::<C, false>(n, x, ys, out) }
}
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn q5_k_cols<const C: usize>(n: usize, x: &[u8], ys: &[&[u8]], out: &mut [f32]) {
    // SAFETY: same contract.
    unsafe { qk_cols::<C, true>(n, x, ys, out) }
}
fn q4_k_row(n: usize, x: &[u8], ys: &[&[u8]], out: &mut [f32]) {
    // SAFETY: installed only on CPUs with AVX-512 F/BW/VL/DQ.
    unsafe { by_cols!(q4_k_cols, n, x, ys, out) }
}
fn q5_k_row(n: usize, x: &[u8], ys: &[&[u8]], out: &mut [f32]) {
    // SAFETY: installed only on CPUs with AVX-512 F/BW/VL/DQ.
    unsafe { by_cols!(q5_k_cols, n, x, ys, out) }
}

/// Q6_K: two 64-weight chunks per half super-block.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn q6_k_cols<const C: usize>(n: usize, x: &[u8], ys: &[&[u8]], out: &mut [f32]) {
    let nb = n / 256;
    check_rows(nb, x, 210, ys, Q8K_BYTES, out);
    let mut acc = [_mm512_setzero_ps(); C];
    let m4 = _mm256_set1_epi8(0x0f);
    let m2 = _mm256_set1_epi8(0x03);
    let m32 = _mm512_set1_epi8(32);
    for ib in 0..nb {
        let xb = &x[ib * 210..(ib + 1) * 210];
        let d = super::scalar::f16_at(xb, 208);
        let sc: [i16; 16] = std::array::from_fn(|g| i16::from(xb[192 + g] as i8));
        let mut sumi = [_mm512_setzero_si512(); C];
        for h in 0..2 {
            // SAFETY: ql (64 bytes at 64h) and qh (32 bytes at 128 + 32h)
            // are inside the 210-byte block.
            let (l0, l1, hb) = unsafe {
                let p = xb.as_ptr();
                (
                    load256(p.add(64 * h)),
                    load256(p.add(64 * h + 32)),
                    load256(p.add(128 + 32 * h)),
                )
            };
            let h0 = _mm256_slli_epi16(_mm256_and_si256(hb, m2), 4);
            let h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2), m2), 4);
            let h2 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 4), m2), 4);
            let h3 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 6), m2), 4);
            let q = [
                join(
                    _mm256_or_si256(_mm256_and_si256(l0, m4), h0),
                    _mm256_or_si256(_mm256_and_si256(l1, m4), h1),
                ),
                join(
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), h2),
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), h3),
                ),
            ];
            let s: [__m512i; 2] = std::array::from_fn(|k| {
                let g = 8 * h + 4 * k;
                let lo = _mm256_set_m128i(_mm_set1_epi16(sc[g + 1]), _mm_set1_epi16(sc[g]));
                let hi = _mm256_set_m128i(_mm_set1_epi16(sc[g + 3]), _mm_set1_epi16(sc[g + 2]));
                join(lo, hi)
            });
            for c in 0..C {
                // SAFETY: 128 quants at 128h inside the Q8_K block (checked).
                let yq = unsafe { ys[c].as_ptr().add(ib * Q8K_BYTES + Q8K_QS + 128 * h) };
                for k in 0..2 {
                    // SAFETY: 64 quants at 64k inside that half.
                    let y = unsafe { load512(yq.add(64 * k)) };
                    let p = _mm512_sub_epi16(
                        _mm512_maddubs_epi16(q[k], y),
                        _mm512_maddubs_epi16(m32, y),
                    );
                    sumi[c] = _mm512_add_epi32(sumi[c], _mm512_madd_epi16(p, s[k]));
                }
            }
        }
        for c in 0..C {
            let dy = super::scalar::f32_at(&ys[c][ib * Q8K_BYTES..], 0);
            acc[c] = _mm512_fmadd_ps(_mm512_set1_ps(d * dy), _mm512_cvtepi32_ps(sumi[c]), acc[c]);
        }
    }
    for c in 0..C {
        out[c] = _mm512_reduce_add_ps(acc[c]);
    }
}

fn q6_k_row(n: usize, x: &[u8], ys: &[&[u8]], out: &mut [f32]) {
    // SAFETY: installed only on CPUs with AVX-512 F/BW/VL/DQ.
    unsafe { by_cols!(q6_k_cols, n, x, ys, out) }
}
