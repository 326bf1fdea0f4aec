//! AVX2 + FMA + F16C kernels.
//!
//! Integer block sums are exact (they equal the scalar kernels' sums); the
//! f32 accumulation keeps eight lanes per column and sums them at the end,
//! as ggml's AVX2 kernels do, so results differ from the scalar path only in
//! the last bits.
//!
//! Every `unsafe fn` here is compiled for AVX2/FMA/F16C and reached only
//! through [`install`], which the dispatcher calls after checking that the
//! CPU has those features; the row slices are length-checked on entry.

use std::arch::x86_64::*;

use ggml_core::quants::KVALUES_IQ4NL;
use ggml_core::Type;
use half::f16;

use super::scalar::{q8k_bsum, scale_min_k4, Q8K_BYTES, Q8K_QS};
use super::{by_cols, check_rows, Kernels};

/// Installs the AVX2 kernels (the caller checked AVX2, FMA and F16C).
pub(super) fn install(k: &mut Kernels) {
    k.dot_f32 = dot_f32;
    k.dot_f16 = dot_f16;
    k.set(Type::F32, f32_row);
    k.set(Type::F16, f16_row);
    k.set(Type::BF16, bf16_row);
    k.set(Type::Q4_0, q4_0_row);
    k.set(Type::Q5_0, q5_0_row);
    k.set(Type::Q8_0, q8_0_row);
    k.set(Type::IQ4_NL, iq4_nl_row);
    k.set(Type::Q4_1, q4_1_row);
    k.set(Type::Q5_1, q5_1_row);
    k.set(Type::Q4_K, q4_k_row);
    k.set(Type::Q5_K, q5_k_row);
    k.set(Type::Q6_K, q6_k_row);
}

// ------------------------------------------------------------ helpers

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn hsum(v: __m256) -> f32 {
    let r = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
    let r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    let r = _mm_add_ss(r, _mm_movehdup_ps(r));
    _mm_cvtss_f32(r)
}

/// f16 at `p` (unaligned) as f32.
///
/// # Safety
/// `p` must be readable for 2 bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f16_at(p: *const u8) -> f32 {
    // SAFETY: the caller guarantees 2 readable bytes.
    let h = unsafe { (p as *const u16).read_unaligned() };
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(h))))
}

/// 16 bytes at `p`: low nibbles in bytes 0..16, high nibbles in 16..32.
///
/// # Safety
/// `p` must be readable for 16 bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn nibbles(p: *const u8) -> __m256i {
    // SAFETY: 16 readable bytes (caller).
    let t = unsafe { _mm_loadu_si128(p as *const __m128i) };
    let b = _mm256_set_m128i(_mm_srli_epi16(t, 4), t);
    _mm256_and_si256(b, _mm256_set1_epi8(0x0f))
}

/// Spreads the 32 bits at `p` to 32 bytes: 0xff where the bit is set.
///
/// # Safety
/// `p` must be readable for 4 bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn bits_to_bytes(p: *const u8) -> __m256i {
    // SAFETY: 4 readable bytes (caller).
    let x = unsafe { (p as *const u32).read_unaligned() };
    let shuf = _mm256_set_epi64x(
        0x0303_0303_0303_0303,
        0x0202_0202_0202_0202,
        0x0101_0101_0101_0101,
        0,
    );
    let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(x as i32), shuf);
    let bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbf_dfef_f7fb_fdfe));
    _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1))
}

/// Eight i32 sums of four products of unsigned `a` and signed `b` bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn dot_us(a: __m256i, b: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1))
}

/// Eight i32 sums of four products of signed bytes (|x| <= 127 for one side).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn dot_ss(ax: __m256i, x: __m256i, y: __m256i) -> __m256i {
    dot_us(ax, _mm256_sign_epi8(y, x))
}

/// Loads 32 bytes.
///
/// # Safety
/// `p` must be readable for 32 bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load(p: *const u8) -> __m256i {
    // SAFETY: 32 readable bytes (caller).
    unsafe { _mm256_loadu_si256(p as *const __m256i) }
}

// ------------------------------------------------------------ floats

macro_rules! float_kernel {
    ($cols:ident, $row:ident, $width:expr, $load:ident, $scalar:expr) => {
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn $cols<const C: usize>(n: usize, x: &[u8], ys: &[&[u8]], out: &mut [f32]) {
            check_rows(n, x, $width, ys, $width, out);
            let xp = x.as_ptr();
            let mut acc = [[_mm256_setzero_ps(); 2]; C];
            let mut i = 0;
            while i + 16 <= n {
                // SAFETY: elements i..i+16 are inside every row (checked).
                let x0 = unsafe { $load(xp.add(i * $width)) };
                // SAFETY: as above.
                let x1 = unsafe { $load(xp.add((i + 8) * $width)) };
                for c in 0..C {
                    let yp = ys[c].as_ptr();
                    // SAFETY: as above.
                    let y0 = unsafe { $load(yp.add(i * $width)) };
                    // SAFETY: as above.
                    let y1 = unsafe { $load(yp.add((i + 8) * $width)) };
                    acc[c][0] = _mm256_fmadd_ps(x0, y0, acc[c][0]);
                    acc[c][1] = _mm256_fmadd_ps(x1, y1, acc[c][1]);
                }
                i += 16;
            }
            if i + 8 <= n {
                // SAFETY: elements i..i+8 are inside every row.
                let x0 = unsafe { $load(xp.add(i * $width)) };
                for c in 0..C {
                    // SAFETY: as above.
                    let y0 = unsafe { $load(ys[c].as_ptr().add(i * $width)) };
                    acc[c][0] = _mm256_fmadd_ps(x0, y0, acc[c][0]);
                }
                i += 8;
            }
            for c in 0..C {
                let mut s = hsum(_mm256_add_ps(acc[c][0], acc[c][1]));
                for j in i..n {
                    let g = $scalar;
                    s += g(x, j) * g(ys[c], j);
                }
                out[c] = s;
            }
        }
        fn $row(n: usize, x: &[u8], ys: &[&[u8]], out: &mut [f32]) {
            // SAFETY: installed only on CPUs with AVX2, FMA and F16C.
            unsafe { by_cols!($cols, n, x, ys, out) }
        }
    };
}

/// # Safety
/// `p` must be readable for 32 bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load_f32x8(p: *const u8) -> __m256 {
    // SAFETY: 32 readable bytes (caller).
    unsafe { _mm256_loadu_ps(p as *const f32) }
}

/// # Safety
/// `p` must be readable for 16 bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load_f16x8(p: *const u8) -> __m256 {
    // SAFETY: 16 readable bytes (caller).
    _mm256_cvtph_ps(unsafe { _mm_loadu_si128(p as *const __m128i) })
}

/// # Safety
/// `p` must be readable for 16 bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load_bf16x8(p: *const u8) -> __m256 {
    // SAFETY: 16 readable bytes (caller).
    let h = unsafe { _mm_loadu_si128(p as *const __m128i) };
    _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))
}

fn f32_elem(b: &[u8], j: usize) -> f32 {
    super::scalar::f32_at(b, 4 * j)
}
fn f16_elem(b: &[u8], j: usize) -> f32 {
    super::scalar::f16_at(b, 2 * j)
}
fn bf16_elem(b: &[u8], j: usize) -> f32 {
    f32::from_bits(u32::from(u16::from_le_bytes([b[2 * j], b[2 * j + 1]])) << 16)
}

float_kernel!(f32_cols, f32_row, 4, load_f32x8, f32_elem);
float_kernel!(f16_cols, f16_row, 2, load_f16x8, f16_elem);
float_kernel!(bf16_cols, bf16_row, 2, load_bf16x8, bf16_elem);

fn dot_f32(x: &[f32], y: &[f32]) -> f32 {
    let n = x.len().min(y.len());
    // SAFETY: f32 slices viewed as their bytes, same lifetime and length.
    let (xb, yb) = unsafe {
        (
            std::slice::from_raw_parts(x.as_ptr() as *const u8, 4 * n),
            std::slice::from_raw_parts(y.as_ptr() as *const u8, 4 * n),
        )
    };
    let mut out = [0f32];
    f32_row(n, xb, &[yb], &mut out);
    out[0]
}

fn dot_f16(x: &[f16], y: &[f16]) -> f32 {
    let n = x.len().min(y.len());
    // SAFETY: f16 slices viewed as their bytes, same lifetime and length.
    let (xb, yb) = unsafe {
        (
            std::slice::from_raw_parts(x.as_ptr() as *const u8, 2 * n),
            std::slice::from_raw_parts(y.as_ptr() as *const u8, 2 * n),
        )
    };
    let mut out = [0f32];
    f16_row(n, xb, &[yb], &mut out);
    out[0]
}

// ------------------------------------------------- 32-blocks x Q8_0 / Q8_1

/// A 32-weight block family against Q8_0: `$dec(xb)` gives (d, signed qx).
macro_rules! q8_0_kernel {
    ($cols:ident, $row:ident, $bytes:expr, $dec:ident) => {
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn $cols<const C: usize>(n: usize, x: &[u8], ys: &[&[u8]], out: &mut [f32]) {
            let nb = n / 32;
            check_rows(nb, x, $bytes, ys, 34, out);
            let mut acc = [_mm256_setzero_ps(); C];
            for ib in 0..nb {
                // SAFETY: block ib of x and of every y is inside the rows (checked).
                unsafe {
                    let (dx, qx) = $dec(x.as_ptr().add(ib * $bytes));
                    let ax = _mm256_sign_epi8(qx, qx);
                    for c in 0..C {
                        let yb = ys[c].as_ptr().add(ib * 34);
                        let d = _mm256_set1_ps(dx * f16_at(yb));
                        let p = dot_ss(ax, qx, load(yb.add(2)));
                        acc[c] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc[c]);
                    }
                }
            }
            for c in 0..C {
                out[c] = hsum(acc[c]);
            }
        }
        fn $row(n: usize, x: &[u8], ys: &[&[u8]], out: &mut [f32]) {
            // SAFETY: installed only on CPUs with AVX2, FMA and F16C.
            unsafe { by_cols!($cols, n, x, ys, out) }
        }
    };
}

/// # Safety
/// `p` must be readable for 18 bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dec_q4_0(p: *const u8) -> (f32, __m256i) {
    // SAFETY: an 18-byte block (caller).
    unsafe {
        (
            f16_at(p),
            _mm256_sub_epi8(nibbles(p.add(2)), _mm256_set1_epi8(8)),
        )
    }
}

/// # Safety
/// `p` must be readable for 22 bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dec_q5_0(p: *const u8) -> (f32, __m256i) {
    // SAFETY: a 22-byte block (caller).
    unsafe {
        let lo = nibbles(p.add(6));
        // Elements whose fifth bit is clear get 0xf0 ORed in: nibble - 16.
        let hi = _mm256_andnot_si256(bits_to_bytes(p.add(2)), _mm256_set1_epi8(0xf0u8 as i8));
        (f16_at(p), _mm256_or_si256(lo, hi))
    }
}

/// # Safety
/// `p` must be readable for 34 bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dec_q8_0(p: *const u8) -> (f32, __m256i) {
    // SAFETY: a 34-byte block (caller).
    unsafe { (f16_at(p), load(p.add(2))) }
}

/// # Safety
/// `p` must be readable for 18 bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dec_iq4_nl(p: *const u8) -> (f32, __m256i) {
    // SAFETY: the 16-byte table is a local array; the block has 18 bytes.
    unsafe {
        let t = _mm_loadu_si128(KVALUES_IQ4NL.as_ptr() as *const __m128i);
        let table = _mm256_set_m128i(t, t);
        (f16_at(p), _mm256_shuffle_epi8(table, nibbles(p.add(2))))
    }
}

q8_0_kernel!(q4_0_cols, q4_0_row, 18, dec_q4_0);
q8_0_kernel!(q5_0_cols, q5_0_row, 22, dec_q5_0);
q8_0_kernel!(q8_0_cols, q8_0_row, 34, dec_q8_0);
q8_0_kernel!(iq4_nl_cols, iq4_nl_row, 18, dec_iq4_nl);

/// Q4_1 / Q5_1 against Q8_1: unsigned levels, `d * sumi + m * s`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_1_cols<const C: usize, const FIVE: bool>(
    n: usize,
    x: &[u8],
    ys: &[&[u8]],
    out: &mut [f32],
) {
    let bytes = if FIVE { 24 } else { 20 };
    let nb = n / 32;
    check_rows(nb, x, bytes, ys, 36, out);
    let mut acc = [_mm256_setzero_ps(); C];
    let mut summs = [0f32; C];
    for ib in 0..nb {
        // SAFETY: block ib of x and of every y is inside the rows (checked).
        unsafe {
            let xb = x.as_ptr().add(ib * bytes);
            let (dx, mx) = (f16_at(xb), f16_at(xb.add(2)));
            let qx = if FIVE {
                let hi = _mm256_and_si256(bits_to_bytes(xb.add(4)), _mm256_set1_epi8(0x10));
                _mm256_or_si256(nibbles(xb.add(8)), hi)
            } else {
                nibbles(xb.add(4))
            };
            for c in 0..C {
                let yb = ys[c].as_ptr().add(ib * 36);
                summs[c] += mx * f16_at(yb.add(2));
                let d = _mm256_set1_ps(dx * f16_at(yb));
                let p = dot_us(qx, load(yb.add(4)));
                acc[c] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc[c]);
            }
        }
    }
    for c in 0..C {
        out[c] = hsum(acc[c]) + summs[c];
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_1_cols<const C: usize>(n: usize, x: &[u8], ys: &[&[u8]], out: &mut [f32]) {
    // SAFETY: same contract.
    unsafe { q8_1_cols::<C, false>(n, x, ys, out) }
}
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q5_1_cols<const C: usize>(n: usize, x: &[u8], ys: &[&[u8]], out: &mut [f32]) {
    // SAFETY: same contract.
    unsafe { q8_1_cols::<C, true>(n, x, ys, out) }
}
fn q4_1_row(n: usize, x: &[u8], ys: &[&[u8]], out: &mut [f32]) {
    // SAFETY: installed only on CPUs with AVX2, FMA and F16C.
    unsafe { by_cols!(q4_1_cols, n, x, ys, out) }
}
fn q5_1_row(n: usize, x: &[u8], ys: &[&[u8]], out: &mut [f32]) {
    // SAFETY: installed only on CPUs with AVX2, FMA and F16C.
    unsafe { by_cols!(q5_1_cols, n, x, ys, out) }
}

// ------------------------------------------------------ K-quants x Q8_K

/// Q4_K / Q5_K: 8 groups of 32 with 6-bit scales and mins.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn qk_cols<const C: usize, const FIVE: bool>(
    n: usize,
    x: &[u8],
    ys: &[&[u8]],
    out: &mut [f32],
) {
    let bytes = if FIVE { 176 } else { 144 };
    let nb = n / 256;
    check_rows(nb, x, bytes, ys, Q8K_BYTES, out);
    let mut acc = [_mm256_setzero_ps(); C];
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
            unsafe { load(xb.as_ptr().add(16)) }
        } else {
            _mm256_setzero_si256()
        };
        let mut sumi = [_mm256_setzero_si256(); C];
        for j in 0..4 {
            // SAFETY: 32 bytes of nibbles at 32 * j inside `qs`.
            let q = unsafe { load(qs.as_ptr().add(32 * j)) };
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
            let s_lo = _mm256_set1_epi16(sc[2 * j]);
            let s_hi = _mm256_set1_epi16(sc[2 * j + 1]);
            for c in 0..C {
                // SAFETY: 64 quants at 64 * j inside the Q8_K block (checked).
                let (yl, yh) = unsafe {
                    let yq = ys[c].as_ptr().add(ib * Q8K_BYTES + Q8K_QS + 64 * j);
                    (load(yq), load(yq.add(32)))
                };
                let pl = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, yl), s_lo);
                let ph = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, yh), s_hi);
                sumi[c] = _mm256_add_epi32(sumi[c], _mm256_add_epi32(pl, ph));
            }
        }
        for c in 0..C {
            let dd = _mm256_set1_ps(d * dy[c]);
            acc[c] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(sumi[c]), acc[c]);
        }
    }
    for c in 0..C {
        out[c] = hsum(acc[c]) - accm[c];
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_k_cols<const C: usize>(n: usize, x: &[u8], ys: &[&[u8]], out: &mut [f32]) {
    // SAFETY: same contract.
    unsafe { qk_cols::<C, false>(n, x, ys, out) }
}
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q5_k_cols<const C: usize>(n: usize, x: &[u8], ys: &[&[u8]], out: &mut [f32]) {
    // SAFETY: same contract.
    unsafe { qk_cols::<C, true>(n, x, ys, out) }
}
fn q4_k_row(n: usize, x: &[u8], ys: &[&[u8]], out: &mut [f32]) {
    // SAFETY: installed only on CPUs with AVX2, FMA and F16C.
    unsafe { by_cols!(q4_k_cols, n, x, ys, out) }
}
fn q5_k_row(n: usize, x: &[u8], ys: &[&[u8]], out: &mut [f32]) {
    // SAFETY: installed only on CPUs with AVX2, FMA and F16C.
    unsafe { by_cols!(q5_k_cols, n, x, ys, out) }
}

/// Q6_K: 16 groups of 16, signed 8-bit scales, levels `q - 32`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q6_k_cols<const C: usize>(n: usize, x: &[u8], ys: &[&[u8]], out: &mut [f32]) {
    let nb = n / 256;
    check_rows(nb, x, 210, ys, Q8K_BYTES, out);
    let mut acc = [_mm256_setzero_ps(); C];
    let m4 = _mm256_set1_epi8(0x0f);
    let m2 = _mm256_set1_epi8(0x03);
    let m32 = _mm256_set1_epi8(32);
    for ib in 0..nb {
        let xb = &x[ib * 210..(ib + 1) * 210];
        let d = super::scalar::f16_at(xb, 208);
        let sc: [i16; 16] = std::array::from_fn(|g| i16::from(xb[192 + g] as i8));
        let mut sumi = [_mm256_setzero_si256(); C];
        for h in 0..2 {
            // SAFETY: ql (64 bytes at 64h) and qh (32 bytes at 128 + 32h)
            // are inside the 210-byte block.
            let (l0, l1, hb) = unsafe {
                let p = xb.as_ptr();
                (
                    load(p.add(64 * h)),
                    load(p.add(64 * h + 32)),
                    load(p.add(128 + 32 * h)),
                )
            };
            let h0 = _mm256_slli_epi16(_mm256_and_si256(hb, m2), 4);
            let h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2), m2), 4);
            let h2 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 4), m2), 4);
            let h3 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 6), m2), 4);
            let q = [
                _mm256_or_si256(_mm256_and_si256(l0, m4), h0),
                _mm256_or_si256(_mm256_and_si256(l1, m4), h1),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), h2),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), h3),
            ];
            let s: [__m256i; 4] = std::array::from_fn(|k| {
                let g = 8 * h + 2 * k;
                _mm256_set_m128i(_mm_set1_epi16(sc[g + 1]), _mm_set1_epi16(sc[g]))
            });
            for c in 0..C {
                // SAFETY: 128 quants at 128h inside the Q8_K block (checked).
                let yq = unsafe { ys[c].as_ptr().add(ib * Q8K_BYTES + Q8K_QS + 128 * h) };
                for k in 0..4 {
                    // SAFETY: 32 quants at 32k inside that half.
                    let y = unsafe { load(yq.add(32 * k)) };
                    let p = _mm256_sub_epi16(
                        _mm256_maddubs_epi16(q[k], y),
                        _mm256_maddubs_epi16(m32, y),
                    );
                    sumi[c] = _mm256_add_epi32(sumi[c], _mm256_madd_epi16(p, s[k]));
                }
            }
        }
        for c in 0..C {
            let dy = super::scalar::f32_at(&ys[c][ib * Q8K_BYTES..], 0);
            acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(d * dy), _mm256_cvtepi32_ps(sumi[c]), acc[c]);
        }
    }
    for c in 0..C {
        out[c] = hsum(acc[c]);
    }
}

fn q6_k_row(n: usize, x: &[u8], ys: &[&[u8]], out: &mut [f32]) {
    // SAFETY: installed only on CPUs with AVX2, FMA and F16C.
    unsafe { by_cols!(q6_k_cols, n, x, ys, out) }
}
