//! The one-query attention kernels for F16 caches: the dot products of a
//! query with key rows, and the F16 value sum of the online softmax, both
//! with the bits of the row-by-row kernels (`dot_f16`, and `scale_f16` then
//! `mad_f16` per key), without a call or a conversion per row.

use std::arch::x86_64::*;

use half::f16;

use super::float::{f16_elem, load_f16x8};
use super::hsum;
use crate::simd::scalar::{self, check_rows};
use crate::simd::Kernels;

/// Installs the attention kernels.
pub(super) fn install(k: &mut Kernels) {
    k.scale_f16 = scale_f16;
    k.mad_f16 = mad_f16;
    k.dot_f16_rows = dot_f16_rows;
    k.attn_values_f16 = attn_values_f16;
}

/// Eight f32 lanes rounded to f16 (nearest even).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn round_f16x8(x: __m256) -> __m128i {
    _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(x)
}

#[target_feature(enable = "avx2,fma,f16c")]
fn scale_f16_avx2(acc: &mut [f16], s: f32) {
    let sv = _mm256_set1_ps(s);
    let mut chunks = acc.chunks_exact_mut(8);
    for c in &mut chunks {
        let p = c.as_mut_ptr() as *mut u8;
        // SAFETY: `c` is 8 f16 values, 16 bytes, read and written here only.
        unsafe {
            let a = load_f16x8(p);
            _mm_storeu_si128(p as *mut __m128i, round_f16x8(_mm256_mul_ps(a, sv)));
        }
    }
    let rest = chunks.into_remainder();
    if !rest.is_empty() {
        scalar::scale_f16(rest, s);
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
fn mad_f16_avx2(acc: &mut [f16], v: &[f16], s: f32) {
    let n = acc.len().min(v.len());
    let sv = _mm256_set1_ps(s);
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: elements i..i+8 of both slices (i + 8 <= n); `acc` is
        // only ours, `v` only read.
        unsafe {
            let p = acc.as_mut_ptr().add(i) as *mut u8;
            let x = load_f16x8(v.as_ptr().add(i) as *const u8);
            // Product then sum, two roundings, as the scalar kernel.
            let y = _mm256_add_ps(load_f16x8(p), _mm256_mul_ps(x, sv));
            _mm_storeu_si128(p as *mut __m128i, round_f16x8(y));
        }
        i += 8;
    }
    if i < n {
        scalar::mad_f16(&mut acc[i..n], &v[i..n], s);
    }
}

/// The dot product of the F16 row at `x` with `q`, as the AVX2 `dot_f16`
/// computes it: eight lanes of fused multiply-adds, their sum, then the
/// tail in order.
///
/// # Safety
/// `x` must be readable for `2 * q.len()` bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_f16_at(x: *const u8, q: &[f16]) -> f32 {
    let n = q.len();
    let qb = q.as_ptr() as *const u8;
    let mut acc = _mm256_setzero_ps();
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: elements i..i+8 of the row (caller) and of `q`.
        unsafe {
            acc = _mm256_fmadd_ps(load_f16x8(x.add(2 * i)), load_f16x8(qb.add(2 * i)), acc);
        }
        i += 8;
    }
    let mut s = hsum(acc);
    if i < n {
        // SAFETY: the row's 2n bytes (caller).
        let xs = unsafe { std::slice::from_raw_parts(x, 2 * n) };
        // SAFETY: `q`'s own 2n bytes.
        let qs = unsafe { std::slice::from_raw_parts(qb, 2 * n) };
        for j in i..n {
            s += f16_elem(xs, j) * f16_elem(qs, j);
        }
    }
    s
}

#[target_feature(enable = "avx2,fma,f16c")]
fn dot_f16_rows_avx2(q: &[f16], rows: &[u8], stride: usize, keys: &[u32], out: &mut [f32]) {
    check_rows(rows, stride, 2 * q.len(), keys);
    for (o, &ic) in out.iter_mut().zip(keys) {
        // SAFETY: the row of `ic` lies inside `rows` (checked above).
        *o = unsafe { dot_f16_at(rows.as_ptr().add(ic as usize * stride), q) };
    }
}

/// Lanes `l0..l0 + 8 * R` of the value sum over every listed row, kept in
/// registers across the rows (each lane's operations are those of
/// `scale_f16` and `mad_f16`, so the order of lanes and rows does not
/// change a bit).
///
/// # Safety
/// Every listed row must be readable for `2 * (l0 + 8 * R)` bytes and
/// `acc` must hold `l0 + 8 * R` values.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn values_lanes<const R: usize>(
    acc: &mut [f16],
    l0: usize,
    rows: &[u8],
    stride: usize,
    keys: &[u32],
    ms: &[f32],
    vs: &[f32],
) {
    let ap = acc.as_mut_ptr() as *mut u8;
    // SAFETY: lanes l0..l0 + 8R of `acc` (caller).
    let mut a: [__m256; R] =
        std::array::from_fn(|r| unsafe { load_f16x8(ap.add(2 * (l0 + 8 * r))) });
    for ((&ic, &m), &s) in keys.iter().zip(ms).zip(vs) {
        if m != 1.0 {
            let mv = _mm256_set1_ps(m);
            for x in a.iter_mut() {
                *x = _mm256_cvtph_ps(round_f16x8(_mm256_mul_ps(*x, mv)));
            }
        }
        let sv = _mm256_set1_ps(s);
        // SAFETY: the row of `ic` holds lanes l0..l0 + 8R (caller).
        let vp = unsafe { rows.as_ptr().add(ic as usize * stride + 2 * l0) };
        for (r, x) in a.iter_mut().enumerate() {
            // SAFETY: as above.
            let v = unsafe { load_f16x8(vp.add(16 * r)) };
            *x = _mm256_cvtph_ps(round_f16x8(_mm256_add_ps(*x, _mm256_mul_ps(v, sv))));
        }
    }
    for (r, x) in a.iter().enumerate() {
        // SAFETY: lanes of `acc` as above, written only here.
        unsafe { _mm_storeu_si128(ap.add(2 * (l0 + 8 * r)) as *mut __m128i, round_f16x8(*x)) };
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
fn attn_values_f16_avx2(
    acc: &mut [f16],
    rows: &[u8],
    stride: usize,
    keys: &[u32],
    ms: &[f32],
    vs: &[f32],
) {
    let dv = acc.len();
    check_rows(rows, stride, 2 * dv, keys);
    let n = keys.len().min(ms.len()).min(vs.len());
    let (keys, ms, vs) = (&keys[..n], &ms[..n], &vs[..n]);
    // Four registers (a 64-byte line of each row) per pass over the rows.
    let mut l0 = 0;
    while l0 + 32 <= dv {
        // SAFETY: lanes l0..l0 + 32 lie in `acc` and in every listed row
        // (checked: rows of 2 * dv bytes).
        unsafe { values_lanes::<4>(acc, l0, rows, stride, keys, ms, vs) };
        l0 += 32;
    }
    while l0 + 8 <= dv {
        // SAFETY: as above, lanes l0..l0 + 8.
        unsafe { values_lanes::<1>(acc, l0, rows, stride, keys, ms, vs) };
        l0 += 8;
    }
    if l0 < dv {
        // The last lanes one by one, as the tail of `mad_f16`.
        let tail = &mut acc[l0..];
        for ((&ic, &m), &s) in keys.iter().zip(ms).zip(vs) {
            let r = &rows[ic as usize * stride + 2 * l0..ic as usize * stride + 2 * dv];
            for (j, a) in tail.iter_mut().enumerate() {
                let mut x = a.to_f32();
                if m != 1.0 {
                    x = f16::from_f32(x * m).to_f32();
                }
                *a = f16::from_f32(x + f16_elem(r, j) * s);
            }
        }
    }
}

fn scale_f16(acc: &mut [f16], s: f32) {
    // SAFETY: installed only on CPUs with AVX2, FMA and F16C.
    unsafe { scale_f16_avx2(acc, s) }
}

fn mad_f16(acc: &mut [f16], v: &[f16], s: f32) {
    // SAFETY: installed only on CPUs with AVX2, FMA and F16C.
    unsafe { mad_f16_avx2(acc, v, s) }
}

fn dot_f16_rows(q: &[f16], rows: &[u8], stride: usize, keys: &[u32], out: &mut [f32]) {
    // SAFETY: installed only on CPUs with AVX2, FMA and F16C.
    unsafe { dot_f16_rows_avx2(q, rows, stride, keys, out) }
}

fn attn_values_f16(
    acc: &mut [f16],
    rows: &[u8],
    stride: usize,
    keys: &[u32],
    ms: &[f32],
    vs: &[f32],
) {
    // SAFETY: installed only on CPUs with AVX2, FMA and F16C.
    unsafe { attn_values_f16_avx2(acc, rows, stride, keys, ms, vs) }
}
