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

use super::scalar::{scale_min_k4, Q8K_BSUMS, Q8K_BYTES, Q8K_QS};
use super::{by_tile, check_tile, Kernels};

/// Installs the AVX2 kernels (the caller checked AVX2, FMA and F16C).
pub(super) fn install(k: &mut Kernels) {
    k.dot_f32 = dot_f32;
    k.dot_f16 = dot_f16;
    k.exp_sum = exp_sum;
    k.silu = silu;
    k.swiglu = swiglu;
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
    k.set(Type::Q2_K, q2_k_row);
    k.set(Type::Q3_K, q3_k_row);
    k.set(Type::IQ4_XS, iq4_xs_row);
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
pub(super) unsafe fn nibbles(p: *const u8) -> __m256i {
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
pub(super) unsafe fn bits_to_bytes(p: *const u8) -> __m256i {
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
    ($tile:ident, $row:ident, $width:expr, $load:ident, $scalar:path) => {
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn $tile<const R: usize, const C: usize>(
            n: usize,
            xs: &[&[u8]],
            ys: &[&[u8]],
            out: &mut [f32],
        ) {
            check_tile(n, xs, $width, ys, $width, out);
            // One accumulator per pair, whatever the tile, so that a pair's
            // result does not depend on the tile it was computed in.
            let mut acc = [[_mm256_setzero_ps(); C]; R];
            let mut i = 0;
            while i + 8 <= n {
                let o = i * $width;
                let xv: [__m256; R] = std::array::from_fn(|r| {
                    // SAFETY: elements i..i+8 are inside every row (checked).
                    unsafe { $load(xs[r].as_ptr().add(o)) }
                });
                for c in 0..C {
                    // SAFETY: as above.
                    let y = unsafe { $load(ys[c].as_ptr().add(o)) };
                    for r in 0..R {
                        acc[r][c] = _mm256_fmadd_ps(xv[r], y, acc[r][c]);
                    }
                }
                i += 8;
            }
            for r in 0..R {
                for c in 0..C {
                    let mut s = hsum(acc[r][c]);
                    for j in i..n {
                        s += $scalar(xs[r], j) * $scalar(ys[c], j);
                    }
                    out[r * C + c] = s;
                }
            }
        }
        fn $row(n: usize, xs: &[&[u8]], ys: &[&[u8]], out: &mut [f32]) {
            // SAFETY: installed only on CPUs with AVX2, FMA and F16C.
            unsafe { by_tile!($tile, n, xs, ys, out) }
        }
    };
}

/// # Safety
/// `p` must be readable for 32 bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn load_f32x8(p: *const u8) -> __m256 {
    // SAFETY: 32 readable bytes (caller).
    unsafe { _mm256_loadu_ps(p as *const f32) }
}

/// # Safety
/// `p` must be readable for 16 bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn load_f16x8(p: *const u8) -> __m256 {
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

pub(super) fn f32_elem(b: &[u8], j: usize) -> f32 {
    super::scalar::f32_at(b, 4 * j)
}
pub(super) fn f16_elem(b: &[u8], j: usize) -> f32 {
    // The portable conversion inlines; tails are a few elements.
    half::f16::from_bits(u16::from_le_bytes([b[2 * j], b[2 * j + 1]])).to_f32_const()
}
fn bf16_elem(b: &[u8], j: usize) -> f32 {
    f32::from_bits(u32::from(u16::from_le_bytes([b[2 * j], b[2 * j + 1]])) << 16)
}

float_kernel!(f32_tile, f32_row, 4, load_f32x8, f32_elem);
float_kernel!(f16_tile, f16_row, 2, load_f16x8, f16_elem);
float_kernel!(bf16_tile, bf16_row, 2, load_bf16x8, bf16_elem);

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
    f32_row(n, &[xb], &[yb], &mut out);
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
    f16_row(n, &[xb], &[yb], &mut out);
    out[0]
}

// ------------------------------------------------- 32-blocks x Q8_0 / Q8_1

/// A 32-weight block family against Q8_0: `$dec(xb)` gives (d, signed qx).
macro_rules! q8_0_kernel {
    ($tile:ident, $row:ident, $bytes:expr, $dec:ident) => {
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn $tile<const R: usize, const C: usize>(
            n: usize,
            xs: &[&[u8]],
            ys: &[&[u8]],
            out: &mut [f32],
        ) {
            let nb = n / 32;
            check_tile(nb, xs, $bytes, ys, 34, out);
            let mut acc = [[_mm256_setzero_ps(); C]; R];
            let pf = super::RowPrefetch::new(xs);
            for ib in 0..nb {
                let mut dx = [_mm256_setzero_ps(); R];
                let mut qx = [_mm256_setzero_si256(); R];
                let mut ax = [_mm256_setzero_si256(); R];
                if ib % 2 == 0 {
                    pf.ahead(xs, ib * $bytes, 2 * $bytes);
                }
                for r in 0..R {
                    // SAFETY: block ib of every weight row is inside it (checked).
                    let (d, q) = unsafe { $dec(xs[r].as_ptr().add(ib * $bytes)) };
                    dx[r] = _mm256_set1_ps(d);
                    qx[r] = q;
                    ax[r] = _mm256_sign_epi8(q, q);
                }
                for c in 0..C {
                    // SAFETY: block ib of every activation row is inside it.
                    let (dy, y) = unsafe {
                        let yb = ys[c].as_ptr().add(ib * 34);
                        (_mm256_set1_ps(f16_at(yb)), load(yb.add(2)))
                    };
                    for r in 0..R {
                        let p = dot_ss(ax[r], qx[r], y);
                        let d = _mm256_mul_ps(dx[r], dy);
                        acc[r][c] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc[r][c]);
                    }
                }
            }
            for r in 0..R {
                for c in 0..C {
                    out[r * C + c] = hsum(acc[r][c]);
                }
            }
        }
        fn $row(n: usize, xs: &[&[u8]], ys: &[&[u8]], out: &mut [f32]) {
            // SAFETY: installed only on CPUs with AVX2, FMA and F16C.
            unsafe { by_tile!($tile, n, xs, ys, out) }
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
    // SAFETY: the 16-byte table is a static array; the block has 18 bytes.
    unsafe {
        let t = _mm_loadu_si128(KVALUES_IQ4NL.as_ptr() as *const __m128i);
        let table = _mm256_set_m128i(t, t);
        (f16_at(p), _mm256_shuffle_epi8(table, nibbles(p.add(2))))
    }
}

q8_0_kernel!(q4_0_tile, q4_0_row, 18, dec_q4_0);
q8_0_kernel!(q5_0_tile, q5_0_row, 22, dec_q5_0);
q8_0_kernel!(q8_0_tile, q8_0_row, 34, dec_q8_0);
q8_0_kernel!(iq4_nl_tile, iq4_nl_row, 18, dec_iq4_nl);

/// Q4_1 / Q5_1 against Q8_1: unsigned levels, `d * sumi + m * s`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_1_tile<const R: usize, const C: usize, const FIVE: bool>(
    n: usize,
    xs: &[&[u8]],
    ys: &[&[u8]],
    out: &mut [f32],
) {
    let bytes = if FIVE { 24 } else { 20 };
    let nb = n / 32;
    check_tile(nb, xs, bytes, ys, 36, out);
    let mut acc = [[_mm256_setzero_ps(); C]; R];
    let mut summs = [[0f32; C]; R];
    let pf = super::RowPrefetch::new(xs);
    for ib in 0..nb {
        pf.ahead(xs, ib * bytes, bytes);
        let mut dx = [_mm256_setzero_ps(); R];
        let mut mx = [0f32; R];
        let mut qx = [_mm256_setzero_si256(); R];
        for r in 0..R {
            // SAFETY: block ib of every weight row is inside it (checked).
            unsafe {
                let xb = xs[r].as_ptr().add(ib * bytes);
                dx[r] = _mm256_set1_ps(f16_at(xb));
                mx[r] = f16_at(xb.add(2));
                qx[r] = if FIVE {
                    let hi = _mm256_and_si256(bits_to_bytes(xb.add(4)), _mm256_set1_epi8(0x10));
                    _mm256_or_si256(nibbles(xb.add(8)), hi)
                } else {
                    nibbles(xb.add(4))
                };
            }
        }
        for c in 0..C {
            // SAFETY: block ib of every activation row is inside it.
            let (dy, sy, y) = unsafe {
                let yb = ys[c].as_ptr().add(ib * 36);
                (
                    _mm256_set1_ps(f16_at(yb)),
                    f16_at(yb.add(2)),
                    load(yb.add(4)),
                )
            };
            for r in 0..R {
                summs[r][c] += mx[r] * sy;
                let p = dot_us(qx[r], y);
                acc[r][c] =
                    _mm256_fmadd_ps(_mm256_mul_ps(dx[r], dy), _mm256_cvtepi32_ps(p), acc[r][c]);
            }
        }
    }
    for r in 0..R {
        for c in 0..C {
            out[r * C + c] = hsum(acc[r][c]) + summs[r][c];
        }
    }
}

fn q4_1_row(n: usize, xs: &[&[u8]], ys: &[&[u8]], out: &mut [f32]) {
    // SAFETY: installed only on CPUs with AVX2, FMA and F16C.
    unsafe { by_tile!(q8_1_tile[false], n, xs, ys, out) }
}
fn q5_1_row(n: usize, xs: &[&[u8]], ys: &[&[u8]], out: &mut [f32]) {
    // SAFETY: installed only on CPUs with AVX2, FMA and F16C.
    unsafe { by_tile!(q8_1_tile[true], n, xs, ys, out) }
}

// ------------------------------------------------------ K-quants x Q8_K

/// The scale and min of each group of 32 of a Q4_K / Q5_K block, and the
/// mins duplicated per pair of 16-sums for `madd` with the Q8_K `bsums`.
#[inline]
pub(super) fn k4_scales(scales: &[u8]) -> ([i16; 8], [i16; 16]) {
    let mut sc = [0i16; 8];
    let mut m2 = [0i16; 16];
    for g in 0..8 {
        let (s, m) = scale_min_k4(g, scales);
        sc[g] = i16::from(s);
        m2[2 * g] = i16::from(m);
        m2[2 * g + 1] = i16::from(m);
    }
    (sc, m2)
}

/// Q4_K / Q5_K: 8 groups of 32 with 6-bit scales and mins.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn qk_tile<const R: usize, const C: usize, const FIVE: bool>(
    n: usize,
    xs: &[&[u8]],
    ys: &[&[u8]],
    out: &mut [f32],
) {
    let bytes = if FIVE { 176 } else { 144 };
    let nb = n / 256;
    check_tile(nb, xs, bytes, ys, Q8K_BYTES, out);
    let mut acc = [[_mm256_setzero_ps(); C]; R];
    let mut accm = [[_mm256_setzero_ps(); C]; R];
    let m4 = _mm256_set1_epi8(0x0f);
    let one = _mm256_set1_epi8(1);
    let pf = super::RowPrefetch::new(xs);
    for ib in 0..nb {
        let mut d = [_mm256_setzero_ps(); R];
        let mut dmin = [_mm256_setzero_ps(); R];
        let mut sc = [[0i16; 8]; R];
        let mut mins = [_mm256_setzero_si256(); R];
        pf.ahead(xs, ib * bytes, bytes);
        for r in 0..R {
            let xb = &xs[r][ib * bytes..(ib + 1) * bytes];
            d[r] = _mm256_set1_ps(super::scalar::f16_at(xb, 0));
            dmin[r] = _mm256_set1_ps(super::scalar::f16_at(xb, 2));
            let (s, m2) = k4_scales(&xb[4..16]);
            sc[r] = s;
            // SAFETY: a 16-element local array.
            mins[r] = unsafe { _mm256_loadu_si256(m2.as_ptr() as *const __m256i) };
        }
        for c in 0..C {
            // SAFETY: the Q8_K block ib of every activation row (checked).
            let (dyc, bsums) = unsafe {
                let yb = ys[c].as_ptr().add(ib * Q8K_BYTES);
                (
                    _mm256_set1_ps((yb as *const f32).read_unaligned()),
                    load(yb.add(Q8K_BSUMS)),
                )
            };
            for r in 0..R {
                let prod = _mm256_cvtepi32_ps(_mm256_madd_epi16(mins[r], bsums));
                accm[r][c] = _mm256_fmadd_ps(_mm256_mul_ps(dmin[r], dyc), prod, accm[r][c]);
            }
        }
        let mut sumi = [[_mm256_setzero_si256(); C]; R];
        for j in 0..4 {
            let mut lo = [_mm256_setzero_si256(); R];
            let mut hi = [_mm256_setzero_si256(); R];
            for r in 0..R {
                let xb = xs[r].as_ptr();
                let qo = ib * bytes + if FIVE { 48 } else { 16 } + 32 * j;
                // SAFETY: 32 bytes of nibbles of chunk j inside block ib.
                let q = unsafe { load(xb.add(qo)) };
                lo[r] = _mm256_and_si256(q, m4);
                hi[r] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
                if FIVE {
                    // SAFETY: the 32 bytes of high bits at offset 16 of block ib.
                    let hbits = unsafe { load(xb.add(ib * bytes + 16)) };
                    let b0 = _mm256_and_si256(
                        _mm256_srl_epi16(hbits, _mm_cvtsi32_si128(2 * j as i32)),
                        one,
                    );
                    let b1 = _mm256_and_si256(
                        _mm256_srl_epi16(hbits, _mm_cvtsi32_si128(2 * j as i32 + 1)),
                        one,
                    );
                    lo[r] = _mm256_or_si256(lo[r], _mm256_slli_epi16(b0, 4));
                    hi[r] = _mm256_or_si256(hi[r], _mm256_slli_epi16(b1, 4));
                }
            }
            for c in 0..C {
                // SAFETY: 64 quants of chunk j inside the Q8_K block (checked).
                let (yl, yh) = unsafe {
                    let yq = ys[c].as_ptr().add(ib * Q8K_BYTES + Q8K_QS + 64 * j);
                    (load(yq), load(yq.add(32)))
                };
                for r in 0..R {
                    let pl = _mm256_madd_epi16(
                        _mm256_maddubs_epi16(lo[r], yl),
                        _mm256_set1_epi16(sc[r][2 * j]),
                    );
                    let ph = _mm256_madd_epi16(
                        _mm256_maddubs_epi16(hi[r], yh),
                        _mm256_set1_epi16(sc[r][2 * j + 1]),
                    );
                    sumi[r][c] = _mm256_add_epi32(sumi[r][c], _mm256_add_epi32(pl, ph));
                }
            }
        }
        // SAFETY: block ib of every column (checked).
        unsafe { add_block_sums(&mut acc, &d, &sumi, ys, ib) };
    }
    for r in 0..R {
        for c in 0..C {
            out[r * C + c] = hsum(acc[r][c]) - hsum(accm[r][c]);
        }
    }
}

fn q4_k_row(n: usize, xs: &[&[u8]], ys: &[&[u8]], out: &mut [f32]) {
    // SAFETY: installed only on CPUs with AVX2, FMA and F16C.
    unsafe { by_tile!(qk_tile[false], n, xs, ys, out) }
}
fn q5_k_row(n: usize, xs: &[&[u8]], ys: &[&[u8]], out: &mut [f32]) {
    // SAFETY: installed only on CPUs with AVX2, FMA and F16C.
    unsafe { by_tile!(qk_tile[true], n, xs, ys, out) }
}

/// Q6_K: 16 groups of 16, signed 8-bit scales, levels `q - 32`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q6_k_tile<const R: usize, const C: usize>(
    n: usize,
    xs: &[&[u8]],
    ys: &[&[u8]],
    out: &mut [f32],
) {
    let nb = n / 256;
    check_tile(nb, xs, 210, ys, Q8K_BYTES, out);
    let mut acc = [[_mm256_setzero_ps(); C]; R];
    let m4 = _mm256_set1_epi8(0x0f);
    let m2 = _mm256_set1_epi8(0x03);
    let m32 = _mm256_set1_epi8(32);
    let pf = super::RowPrefetch::new(xs);
    for ib in 0..nb {
        let mut d = [_mm256_setzero_ps(); R];
        let mut sc = [[0i16; 16]; R];
        // Several rows are streamed at once: ask for what follows
        // explicitly, since a block's scales sit at its end.
        pf.ahead(xs, ib * 210, 210);
        for r in 0..R {
            let xb = &xs[r][ib * 210..(ib + 1) * 210];
            d[r] = _mm256_set1_ps(super::scalar::f16_at(xb, 208));
            sc[r] = std::array::from_fn(|g| i16::from(xb[192 + g] as i8));
        }
        let mut sumi = [[_mm256_setzero_si256(); C]; R];
        for h in 0..2 {
            let mut q = [[_mm256_setzero_si256(); 4]; R];
            let mut s = [[_mm256_setzero_si256(); 4]; R];
            for r in 0..R {
                // SAFETY: ql (64 bytes at 64h) and qh (32 bytes at 128 + 32h)
                // are inside block ib of the row.
                let (l0, l1, hb) = unsafe {
                    let p = xs[r].as_ptr().add(ib * 210);
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
                q[r] = [
                    _mm256_or_si256(_mm256_and_si256(l0, m4), h0),
                    _mm256_or_si256(_mm256_and_si256(l1, m4), h1),
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), h2),
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), h3),
                ];
                s[r] = std::array::from_fn(|k| {
                    let g = 8 * h + 2 * k;
                    _mm256_set_m128i(_mm_set1_epi16(sc[r][g + 1]), _mm_set1_epi16(sc[r][g]))
                });
            }
            for c in 0..C {
                // SAFETY: 128 quants at 128h inside the Q8_K block (checked).
                let yq = unsafe { ys[c].as_ptr().add(ib * Q8K_BYTES + Q8K_QS + 128 * h) };
                for k in 0..4 {
                    // SAFETY: 32 quants at 32k inside that half.
                    let y = unsafe { load(yq.add(32 * k)) };
                    let ym = _mm256_maddubs_epi16(m32, y);
                    for r in 0..R {
                        let p = _mm256_sub_epi16(_mm256_maddubs_epi16(q[r][k], y), ym);
                        sumi[r][c] = _mm256_add_epi32(sumi[r][c], _mm256_madd_epi16(p, s[r][k]));
                    }
                }
            }
        }
        // SAFETY: block ib of every column (checked).
        unsafe { add_block_sums(&mut acc, &d, &sumi, ys, ib) };
    }
    for r in 0..R {
        for c in 0..C {
            out[r * C + c] = hsum(acc[r][c]);
        }
    }
}

fn q6_k_row(n: usize, xs: &[&[u8]], ys: &[&[u8]], out: &mut [f32]) {
    // SAFETY: installed only on CPUs with AVX2, FMA and F16C.
    unsafe { by_tile!(q6_k_tile, n, xs, ys, out) }
}

/// Adds to `acc[r][c]` the integer sums `sumi[r][c]` of Q8_K block `ib`
/// times the row's scale `d[r]` and the column's block scale.
///
/// # Safety
/// Every column holds Q8_K block `ib`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn add_block_sums<const R: usize, const C: usize>(
    acc: &mut [[__m256; C]; R],
    d: &[__m256; R],
    sumi: &[[__m256i; C]; R],
    ys: &[&[u8]],
    ib: usize,
) {
    for c in 0..C {
        // SAFETY: the scale of the Q8_K block ib (caller).
        let dy = unsafe { (ys[c].as_ptr().add(ib * Q8K_BYTES) as *const f32).read_unaligned() };
        let dy = _mm256_set1_ps(dy);
        for r in 0..R {
            acc[r][c] = _mm256_fmadd_ps(
                _mm256_mul_ps(d[r], dy),
                _mm256_cvtepi32_ps(sumi[r][c]),
                acc[r][c],
            );
        }
    }
}

/// Q2_K: 16 groups of 16, 2-bit levels, 4-bit scales and mins.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q2_k_tile<const R: usize, const C: usize>(
    n: usize,
    xs: &[&[u8]],
    ys: &[&[u8]],
    out: &mut [f32],
) {
    let nb = n / 256;
    check_tile(nb, xs, 84, ys, Q8K_BYTES, out);
    let mut acc = [[_mm256_setzero_ps(); C]; R];
    let mut accm = [[_mm256_setzero_ps(); C]; R];
    let m3 = _mm256_set1_epi8(3);
    let pf = super::RowPrefetch::new(xs);
    for ib in 0..nb {
        pf.ahead(xs, ib * 84, 84);
        let mut d = [_mm256_setzero_ps(); R];
        let mut dmin = [_mm256_setzero_ps(); R];
        // The 16 scales of each row as i16 (scales 0..8 in the low lane,
        // 8..16 in the high one), and the 16 mins.
        let mut sc = [_mm256_setzero_si256(); R];
        let mut mins = [_mm256_setzero_si256(); R];
        for r in 0..R {
            let xb = &xs[r][ib * 84..(ib + 1) * 84];
            // SAFETY: d and dmin at 80 of block ib.
            let (dr, mr) = unsafe { (f16_at(xb.as_ptr().add(80)), f16_at(xb.as_ptr().add(82))) };
            d[r] = _mm256_set1_ps(dr);
            dmin[r] = _mm256_set1_ps(mr);
            // SAFETY: the 16 scale bytes at the start of block ib.
            let b = unsafe { _mm_loadu_si128(xb.as_ptr() as *const __m128i) };
            let m4 = _mm_set1_epi8(0x0f);
            sc[r] = _mm256_cvtepu8_epi16(_mm_and_si128(b, m4));
            mins[r] = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16::<4>(b), m4));
        }
        for c in 0..C {
            // SAFETY: the Q8_K block ib of every activation row (checked).
            let (dyc, bsums) = unsafe {
                let yb = ys[c].as_ptr().add(ib * Q8K_BYTES);
                (
                    _mm256_set1_ps((yb as *const f32).read_unaligned()),
                    load(yb.add(Q8K_BSUMS)),
                )
            };
            for r in 0..R {
                let prod = _mm256_cvtepi32_ps(_mm256_madd_epi16(mins[r], bsums));
                accm[r][c] = _mm256_fmadd_ps(_mm256_mul_ps(dmin[r], dyc), prod, accm[r][c]);
            }
        }
        let mut sumi = [[_mm256_setzero_si256(); C]; R];
        for h in 0..2 {
            // SAFETY: 32 bytes of 2-bit levels at 16 + 32h of block ib.
            let q: [__m256i; R] =
                std::array::from_fn(|r| unsafe { load(xs[r].as_ptr().add(ib * 84 + 16 + 32 * h)) });
            let sh: [__m256i; R] = std::array::from_fn(|r| scales_half(sc[r], h));
            for shift in 0..4 {
                let cnt = _mm_cvtsi32_si128(2 * shift as i32);
                let pick = scale_pair(shift);
                let v: [__m256i; R] =
                    std::array::from_fn(|r| _mm256_and_si256(_mm256_srl_epi16(q[r], cnt), m3));
                let s: [__m256i; R] = std::array::from_fn(|r| _mm256_shuffle_epi8(sh[r], pick));
                for c in 0..C {
                    // SAFETY: 32 quants of this chunk inside the Q8_K block.
                    let y = unsafe {
                        load(
                            ys[c]
                                .as_ptr()
                                .add(ib * Q8K_BYTES + Q8K_QS + 128 * h + 32 * shift),
                        )
                    };
                    for r in 0..R {
                        let p = _mm256_madd_epi16(_mm256_maddubs_epi16(v[r], y), s[r]);
                        sumi[r][c] = _mm256_add_epi32(sumi[r][c], p);
                    }
                }
            }
        }
        // SAFETY: block ib of every column (checked).
        unsafe { add_block_sums(&mut acc, &d, &sumi, ys, ib) };
    }
    for r in 0..R {
        for c in 0..C {
            out[r * C + c] = hsum(acc[r][c]) - hsum(accm[r][c]);
        }
    }
}

fn q2_k_row(n: usize, xs: &[&[u8]], ys: &[&[u8]], out: &mut [f32]) {
    // SAFETY: installed only on CPUs with AVX2, FMA and F16C.
    unsafe { by_tile!(q2_k_tile, n, xs, ys, out) }
}

/// Scales `8h..8h + 8` of a row's 16 (i16, scales 0..8 in the low lane,
/// 8..16 in the high one) in both lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn scales_half(sc: __m256i, h: usize) -> __m256i {
    if h == 0 {
        _mm256_permute2x128_si256::<0x00>(sc, sc)
    } else {
        _mm256_permute2x128_si256::<0x11>(sc, sc)
    }
}

/// The Q3_K levels (0..7, the weight plus 4) of 32 weights: bits `2 shift,
/// 2 shift + 1` of the 32 `qs` bytes `q`, plus 4 times bit `hbit` of the
/// 32 `hmask` bytes `hm`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn q3k_levels(q: __m256i, hm: __m256i, shift: usize, hbit: usize) -> __m256i {
    let low = _mm256_srl_epi16(q, _mm_cvtsi32_si128(2 * shift as i32));
    let high = _mm256_srl_epi16(hm, _mm_cvtsi32_si128(hbit as i32));
    _mm256_or_si256(
        _mm256_and_si256(low, _mm256_set1_epi8(3)),
        _mm256_slli_epi16::<2>(_mm256_and_si256(high, _mm256_set1_epi8(1))),
    )
}

/// A `VPSHUFB` control that puts, from 8 i16 scales in each lane, scale
/// `2 shift` in every i16 of the low lane and scale `2 shift + 1` in the
/// high lane: the scales of the two groups of 16 of a 32-weight chunk.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn scale_pair(shift: usize) -> __m256i {
    let k = 2 * shift as i16;
    _mm256_set_m128i(
        _mm_set1_epi16(((2 * k + 3) << 8) | (2 * k + 2)),
        _mm_set1_epi16(((2 * k + 1) << 8) | (2 * k)),
    )
}

/// The 16 scales of a Q3_K block (the 12 bytes at `p`: low 4 bits of
/// scales 0..8 in the low nibbles of bytes 0..8, of scales 8..16 in their
/// high nibbles; the top 2 bits of scale `j` in bits `2 (j / 4)` of byte
/// `8 + j % 4`), minus 32, as i8.
///
/// # Safety
/// AVX2; `p` readable for 12 bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q3k_scales(p: *const u8) -> __m128i {
    // SAFETY: 12 readable bytes (caller).
    let (lo8, aux) = unsafe {
        (
            _mm_loadl_epi64(p as *const __m128i),
            (p.add(8) as *const i32).read_unaligned(),
        )
    };
    let m4 = _mm_set1_epi8(0x0f);
    let low = _mm_unpacklo_epi64(
        _mm_and_si128(lo8, m4),
        _mm_and_si128(_mm_srli_epi16::<4>(lo8), m4),
    );
    // Dword k of the 4 copies shifted right by 2k: byte j % 4 of dword
    // j / 4 holds the top bits of scale j in its bits 0..2.
    let top = _mm_and_si128(
        _mm_srlv_epi32(_mm_set1_epi32(aux), _mm_setr_epi32(0, 2, 4, 6)),
        _mm_set1_epi8(3),
    );
    _mm_sub_epi8(
        _mm_or_si128(low, _mm_slli_epi16::<4>(top)),
        _mm_set1_epi8(32),
    )
}

/// Q3_K: 16 groups of 16, levels `low2 + 4 * high - 4`, 6-bit signed scales.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q3_k_tile<const R: usize, const C: usize>(
    n: usize,
    xs: &[&[u8]],
    ys: &[&[u8]],
    out: &mut [f32],
) {
    let nb = n / 256;
    check_tile(nb, xs, 110, ys, Q8K_BYTES, out);
    let mut acc = [[_mm256_setzero_ps(); C]; R];
    let four = _mm256_set1_epi8(4);
    let pf = super::RowPrefetch::new(xs);
    for ib in 0..nb {
        pf.ahead(xs, ib * 110, 110);
        let mut d = [_mm256_setzero_ps(); R];
        // The 16 scales of each row as i16: scales 0..8 in the low lane,
        // 8..16 in the high one.
        let mut sc = [_mm256_setzero_si256(); R];
        for r in 0..R {
            let xb = &xs[r][ib * 110..(ib + 1) * 110];
            // SAFETY: d at 108 of block ib.
            d[r] = _mm256_set1_ps(unsafe { f16_at(xb.as_ptr().add(108)) });
            // SAFETY: the 12 scale bytes at 96 of block ib.
            sc[r] = _mm256_cvtepi8_epi16(unsafe { q3k_scales(xb.as_ptr().add(96)) });
        }
        let mut sumi = [[_mm256_setzero_si256(); C]; R];
        for h in 0..2 {
            for shift in 0..4 {
                let pick = scale_pair(shift);
                // SAFETY: 32 quants of this chunk inside each Q8_K block.
                let y: [__m256i; C] = std::array::from_fn(|c| unsafe {
                    load(
                        ys[c]
                            .as_ptr()
                            .add(ib * Q8K_BYTES + Q8K_QS + 128 * h + 32 * shift),
                    )
                });
                let y4: [__m256i; C] = std::array::from_fn(|c| _mm256_maddubs_epi16(four, y[c]));
                // Row by row, reading the row's bytes again from the cache
                // for each chunk: a tile of rows' worth of them would not
                // stay in the 16 registers.
                for r in 0..R {
                    // SAFETY: the high bits (32 bytes at the start of block
                    // ib) and 32 bytes of low bits at 32 + 32h.
                    let (hm, q) = unsafe {
                        let b = xs[r].as_ptr().add(ib * 110);
                        (load(b), load(b.add(32 + 32 * h)))
                    };
                    let v = q3k_levels(q, hm, shift, 4 * h + shift);
                    let s = _mm256_shuffle_epi8(scales_half(sc[r], h), pick);
                    for c in 0..C {
                        let p = _mm256_sub_epi16(_mm256_maddubs_epi16(v, y[c]), y4[c]);
                        sumi[r][c] = _mm256_add_epi32(sumi[r][c], _mm256_madd_epi16(p, s));
                    }
                }
            }
        }
        // SAFETY: block ib of every column (checked).
        unsafe { add_block_sums(&mut acc, &d, &sumi, ys, ib) };
    }
    for r in 0..R {
        for c in 0..C {
            out[r * C + c] = hsum(acc[r][c]);
        }
    }
}

fn q3_k_row(n: usize, xs: &[&[u8]], ys: &[&[u8]], out: &mut [f32]) {
    // SAFETY: installed only on CPUs with AVX2, FMA and F16C.
    unsafe { by_tile!(q3_k_tile, n, xs, ys, out) }
}

/// IQ4_XS: 8 groups of 32 non-linear 4-bit levels, 6-bit scales minus 32.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn iq4_xs_tile<const R: usize, const C: usize>(
    n: usize,
    xs: &[&[u8]],
    ys: &[&[u8]],
    out: &mut [f32],
) {
    let nb = n / 256;
    check_tile(nb, xs, 136, ys, Q8K_BYTES, out);
    let mut acc = [[_mm256_setzero_ps(); C]; R];
    // SAFETY: the 16-entry table is a static array.
    let t = unsafe { _mm_loadu_si128(KVALUES_IQ4NL.as_ptr() as *const __m128i) };
    let table = _mm256_set_m128i(t, t);
    let pf = super::RowPrefetch::new(xs);
    for ib in 0..nb {
        pf.ahead(xs, ib * 136, 136);
        let mut d = [_mm256_setzero_ps(); R];
        let mut sc = [[0i16; 8]; R];
        for r in 0..R {
            let xb = &xs[r][ib * 136..(ib + 1) * 136];
            d[r] = _mm256_set1_ps(super::scalar::f16_at(xb, 0));
            let sh = u16::from_le_bytes([xb[2], xb[3]]);
            sc[r] = std::array::from_fn(|g| {
                let lo = (xb[4 + g / 2] >> (4 * (g % 2))) & 15;
                let hi = ((sh >> (2 * g)) & 3) as u8;
                i16::from(lo | (hi << 4)) - 32
            });
        }
        let mut sumi = [[_mm256_setzero_si256(); C]; R];
        for g in 0..8 {
            let mut qx = [_mm256_setzero_si256(); R];
            let mut ax = [_mm256_setzero_si256(); R];
            for r in 0..R {
                // SAFETY: 16 bytes of nibbles of group g inside block ib.
                let q = _mm256_shuffle_epi8(table, unsafe {
                    nibbles(xs[r].as_ptr().add(ib * 136 + 8 + 16 * g))
                });
                qx[r] = q;
                ax[r] = _mm256_sign_epi8(q, q);
            }
            for c in 0..C {
                // SAFETY: 32 quants of group g inside the Q8_K block.
                let y = unsafe { load(ys[c].as_ptr().add(ib * Q8K_BYTES + Q8K_QS + 32 * g)) };
                for r in 0..R {
                    let p = _mm256_maddubs_epi16(ax[r], _mm256_sign_epi8(y, qx[r]));
                    let p = _mm256_madd_epi16(p, _mm256_set1_epi16(sc[r][g]));
                    sumi[r][c] = _mm256_add_epi32(sumi[r][c], p);
                }
            }
        }
        // SAFETY: block ib of every column (checked).
        unsafe { add_block_sums(&mut acc, &d, &sumi, ys, ib) };
    }
    for r in 0..R {
        for c in 0..C {
            out[r * C + c] = hsum(acc[r][c]);
        }
    }
}

fn iq4_xs_row(n: usize, xs: &[&[u8]], ys: &[&[u8]], out: &mut [f32]) {
    // SAFETY: installed only on CPUs with AVX2, FMA and F16C.
    unsafe { by_tile!(iq4_xs_tile, n, xs, ys, out) }
}

// ------------------------------------------------------ activations

/// [`super::scalar::exp_f32`] on eight lanes, with the same operations in
/// the same order (no fused multiply-adds), so the same bits.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn exp8(x: __m256) -> __m256 {
    use super::scalar::{EXP_C1, EXP_C2, EXP_HI, EXP_LO, EXP_MAGIC, EXP_P};
    let lo = _mm256_set1_ps(EXP_LO);
    let hi = _mm256_set1_ps(EXP_HI);
    let xc = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
    let magic = _mm256_set1_ps(EXP_MAGIC);
    let k = _mm256_sub_ps(
        _mm256_add_ps(
            _mm256_mul_ps(xc, _mm256_set1_ps(std::f32::consts::LOG2_E)),
            magic,
        ),
        magic,
    );
    let r = _mm256_sub_ps(
        _mm256_sub_ps(xc, _mm256_mul_ps(k, _mm256_set1_ps(EXP_C1))),
        _mm256_mul_ps(k, _mm256_set1_ps(EXP_C2)),
    );
    let z = _mm256_mul_ps(r, r);
    let mut p = _mm256_set1_ps(EXP_P[0]);
    for &c in &EXP_P[1..] {
        p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(c));
    }
    let poly = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(p, z), r), _mm256_set1_ps(1.0));
    let e = _mm256_slli_epi32(
        _mm256_add_epi32(_mm256_cvttps_epi32(k), _mm256_set1_epi32(127)),
        23,
    );
    let y = _mm256_mul_ps(poly, _mm256_castsi256_ps(e));
    let y = _mm256_blendv_ps(
        y,
        _mm256_set1_ps(f32::INFINITY),
        _mm256_cmp_ps::<_CMP_GT_OQ>(x, hi),
    );
    let y = _mm256_blendv_ps(y, _mm256_setzero_ps(), _mm256_cmp_ps::<_CMP_LT_OQ>(x, lo));
    _mm256_blendv_ps(y, x, _mm256_cmp_ps::<_CMP_UNORD_Q>(x, x))
}

#[target_feature(enable = "avx2,fma,f16c")]
fn exp_sum_avx2(x: &mut [f32], max: f32) -> f64 {
    let m = _mm256_set1_ps(max);
    let (mut s0, mut s1) = (_mm256_setzero_pd(), _mm256_setzero_pd());
    let mut chunks = x.chunks_exact_mut(8);
    for ch in &mut chunks {
        // SAFETY: an 8-element chunk, read and written in place.
        unsafe {
            let e = exp8(_mm256_sub_ps(_mm256_loadu_ps(ch.as_ptr()), m));
            _mm256_storeu_ps(ch.as_mut_ptr(), e);
            s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
            s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
        }
    }
    let mut lanes = [0f64; 4];
    // SAFETY: a 4-element local array.
    unsafe { _mm256_storeu_pd(lanes.as_mut_ptr(), _mm256_add_pd(s0, s1)) };
    let mut sum: f64 = lanes.iter().sum();
    for v in chunks.into_remainder() {
        let e = super::scalar::exp_f32(*v - max);
        sum += f64::from(e);
        *v = e;
    }
    sum
}

fn exp_sum(x: &mut [f32], max: f32) -> f64 {
    // SAFETY: installed only on CPUs with AVX2, FMA and F16C.
    unsafe { exp_sum_avx2(x, max) }
}

#[target_feature(enable = "avx2,fma,f16c")]
fn silu_avx2(x: &[f32], out: &mut [f32]) {
    let n = x.len().min(out.len());
    let one = _mm256_set1_ps(1.0);
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: elements i..i+8 of both slices.
        unsafe {
            let v = _mm256_loadu_ps(x.as_ptr().add(i));
            let e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), v));
            _mm256_storeu_ps(
                out.as_mut_ptr().add(i),
                _mm256_div_ps(v, _mm256_add_ps(one, e)),
            );
        }
        i += 8;
    }
    super::scalar::silu(&x[i..n], &mut out[i..n]);
}

fn silu(x: &[f32], out: &mut [f32]) {
    // SAFETY: installed only on CPUs with AVX2, FMA and F16C.
    unsafe { silu_avx2(x, out) }
}

#[target_feature(enable = "avx2,fma,f16c")]
fn swiglu_avx2(g: &[f32], u: &[f32], out: &mut [f32]) {
    let n = g.len().min(u.len()).min(out.len());
    let one = _mm256_set1_ps(1.0);
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: elements i..i+8 of the three slices.
        unsafe {
            let v = _mm256_loadu_ps(g.as_ptr().add(i));
            let e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), v));
            let s = _mm256_div_ps(v, _mm256_add_ps(one, e));
            let w = _mm256_mul_ps(s, _mm256_loadu_ps(u.as_ptr().add(i)));
            _mm256_storeu_ps(out.as_mut_ptr().add(i), w);
        }
        i += 8;
    }
    super::scalar::swiglu(&g[i..n], &u[i..n], &mut out[i..n]);
}

fn swiglu(g: &[f32], u: &[f32], out: &mut [f32]) {
    // SAFETY: installed only on CPUs with AVX2, FMA and F16C.
    unsafe { swiglu_avx2(g, u, out) }
}
