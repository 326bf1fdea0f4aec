//! NEON kernels (aarch64, where NEON is always present): F32 and the
//! 32-weight block types against Q8_0. Products of bytes are widened with
//! `vmull_s8` / `vmlal_s8` (two products per i16 lane, at most 2 * 127 *
//! 128 in magnitude) and pairwise-added into i32 lanes; integer block sums
//! are exact, the f32 accumulation keeps four lanes per pair.
//!
//! Every `unsafe fn` here is reached only through [`install`], which the
//! dispatcher calls after checking that the CPU has NEON; row slices are
//! length-checked on entry.

use std::arch::aarch64::*;

use ggml_core::quants::{self, KVALUES_IQ4NL, KVALUES_MXFP4};
use ggml_core::Type;

use super::{by_tile, check_tile, Kernels};

/// Installs the NEON kernels (the caller checked NEON).
pub(super) fn install(k: &mut Kernels) {
    k.dot_f32 = dot_f32;
    k.set(Type::F32, f32_row);
    k.set(Type::Q4_0, q4_0_row);
    k.set(Type::Q5_0, q5_0_row);
    k.set(Type::Q8_0, q8_0_row);
    k.set(Type::IQ4_NL, iq4_nl_row);
    k.set(Type::MXFP4, mxfp4_row);
}

#[inline]
fn f16_at(b: &[u8], o: usize) -> f32 {
    super::scalar::f16_at(b, o)
}

// ------------------------------------------------------------ floats

#[target_feature(enable = "neon")]
unsafe fn f32_tile<const R: usize, const C: usize>(
    n: usize,
    xs: &[&[u8]],
    ys: &[&[u8]],
    out: &mut [f32],
) {
    check_tile(n, xs, 4, ys, 4, out);
    let mut acc = [[vdupq_n_f32(0.0); C]; R];
    let mut i = 0;
    while i + 4 <= n {
        let xv: [float32x4_t; R] = std::array::from_fn(|r| {
            // SAFETY: elements i..i+4 are inside every row (checked).
            unsafe { vld1q_f32(xs[r].as_ptr().add(4 * i) as *const f32) }
        });
        for c in 0..C {
            // SAFETY: as above.
            let y = unsafe { vld1q_f32(ys[c].as_ptr().add(4 * i) as *const f32) };
            for r in 0..R {
                acc[r][c] = vfmaq_f32(acc[r][c], xv[r], y);
            }
        }
        i += 4;
    }
    for r in 0..R {
        for c in 0..C {
            let mut s = vaddvq_f32(acc[r][c]);
            for j in i..n {
                s += super::scalar::f32_at(xs[r], 4 * j) * super::scalar::f32_at(ys[c], 4 * j);
            }
            out[r * C + c] = s;
        }
    }
}

fn f32_row(n: usize, xs: &[&[u8]], ys: &[&[u8]], out: &mut [f32]) {
    // SAFETY: installed only on CPUs with NEON.
    unsafe { by_tile!(f32_tile, n, xs, ys, out) }
}

fn dot_f32(x: &[f32], y: &[f32]) -> f32 {
    super::dot_by_row(x, y, f32_row)
}

// ------------------------------------------------------ 32-blocks x Q8_0

/// The 32 signed levels of a block as two vectors, and its scale.
type Levels = (f32, int8x16_t, int8x16_t);

/// # Safety
/// `b` must hold an 18-byte block.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn dec_q4_0(b: &[u8]) -> Levels {
    // SAFETY: 16 bytes of nibbles at offset 2 (caller).
    let v = unsafe { vld1q_u8(b.as_ptr().add(2)) };
    let lo = vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(0x0f)));
    let hi = vreinterpretq_s8_u8(vshrq_n_u8(v, 4));
    let eight = vdupq_n_s8(8);
    (f16_at(b, 0), vsubq_s8(lo, eight), vsubq_s8(hi, eight))
}

/// # Safety
/// `b` must hold a 22-byte block.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn dec_q5_0(b: &[u8]) -> Levels {
    let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
    // SAFETY: 16 bytes of nibbles at offset 6 (caller).
    let v = unsafe { vld1q_u8(b.as_ptr().add(6)) };
    let bit: [u8; 16] = [1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128];
    // SAFETY: a 16-byte local array.
    let bit = unsafe { vld1q_u8(bit.as_ptr()) };
    let h0 = vcombine_u8(vdup_n_u8(qh as u8), vdup_n_u8((qh >> 8) as u8));
    let h1 = vcombine_u8(vdup_n_u8((qh >> 16) as u8), vdup_n_u8((qh >> 24) as u8));
    let sixteen = vdupq_n_u8(16);
    let lo = vorrq_u8(
        vandq_u8(v, vdupq_n_u8(0x0f)),
        vandq_u8(vtstq_u8(h0, bit), sixteen),
    );
    let hi = vorrq_u8(vshrq_n_u8(v, 4), vandq_u8(vtstq_u8(h1, bit), sixteen));
    let s = vdupq_n_s8(16);
    (
        f16_at(b, 0),
        vsubq_s8(vreinterpretq_s8_u8(lo), s),
        vsubq_s8(vreinterpretq_s8_u8(hi), s),
    )
}

/// # Safety
/// `b` must hold a 34-byte block.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn dec_q8_0(b: &[u8]) -> Levels {
    // SAFETY: 32 quants at offset 2 (caller).
    unsafe {
        let p = b.as_ptr().add(2) as *const i8;
        (f16_at(b, 0), vld1q_s8(p), vld1q_s8(p.add(16)))
    }
}

/// # Safety
/// `b` must hold an 18-byte block.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn dec_iq4_nl(b: &[u8]) -> Levels {
    // SAFETY: 16 bytes of nibbles at offset 2 (caller); a 16-entry table.
    unsafe {
        let v = vld1q_u8(b.as_ptr().add(2));
        let t = vld1q_s8(KVALUES_IQ4NL.as_ptr());
        let lo = vqtbl1q_s8(t, vandq_u8(v, vdupq_n_u8(0x0f)));
        let hi = vqtbl1q_s8(t, vshrq_n_u8(v, 4));
        (f16_at(b, 0), lo, hi)
    }
}

/// # Safety
/// `b` must hold a 17-byte block.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn dec_mxfp4(b: &[u8]) -> Levels {
    // SAFETY: 16 bytes of nibbles at offset 1 (caller); a 16-entry table.
    unsafe {
        let v = vld1q_u8(b.as_ptr().add(1));
        let t = vld1q_s8(KVALUES_MXFP4.as_ptr());
        let lo = vqtbl1q_s8(t, vandq_u8(v, vdupq_n_u8(0x0f)));
        let hi = vqtbl1q_s8(t, vshrq_n_u8(v, 4));
        (quants::e8m0_to_fp32_half(b[0]), lo, hi)
    }
}

/// Four i32 lanes summing the 32 products of two blocks' levels.
#[inline]
#[target_feature(enable = "neon")]
fn block_dot(x0: int8x16_t, x1: int8x16_t, y0: int8x16_t, y1: int8x16_t) -> int32x4_t {
    let p0 = vmlal_s8(
        vmull_s8(vget_low_s8(x0), vget_low_s8(y0)),
        vget_high_s8(x0),
        vget_high_s8(y0),
    );
    let p1 = vmlal_s8(
        vmull_s8(vget_low_s8(x1), vget_low_s8(y1)),
        vget_high_s8(x1),
        vget_high_s8(y1),
    );
    vaddq_s32(vpaddlq_s16(p0), vpaddlq_s16(p1))
}

macro_rules! q8_0_kernel {
    ($tile:ident, $row:ident, $bytes:expr, $dec:ident) => {
        #[target_feature(enable = "neon")]
        unsafe fn $tile<const R: usize, const C: usize>(
            n: usize,
            xs: &[&[u8]],
            ys: &[&[u8]],
            out: &mut [f32],
        ) {
            let nb = n / 32;
            check_tile(nb, xs, $bytes, ys, 34, out);
            let mut acc = [[vdupq_n_f32(0.0); C]; R];
            for ib in 0..nb {
                let lv: [Levels; R] = std::array::from_fn(|r| {
                    // SAFETY: block ib of every weight row is inside it (checked).
                    unsafe { $dec(&xs[r][ib * $bytes..(ib + 1) * $bytes]) }
                });
                for c in 0..C {
                    let yb = &ys[c][ib * 34..(ib + 1) * 34];
                    let dy = f16_at(yb, 0);
                    // SAFETY: 32 quants at offset 2 of the activation block.
                    let (y0, y1) = unsafe {
                        let p = yb.as_ptr().add(2) as *const i8;
                        (vld1q_s8(p), vld1q_s8(p.add(16)))
                    };
                    for r in 0..R {
                        let (dx, x0, x1) = lv[r];
                        let s = vcvtq_f32_s32(block_dot(x0, x1, y0, y1));
                        acc[r][c] = vfmaq_n_f32(acc[r][c], s, dx * dy);
                    }
                }
            }
            for r in 0..R {
                for c in 0..C {
                    out[r * C + c] = vaddvq_f32(acc[r][c]);
                }
            }
        }
        fn $row(n: usize, xs: &[&[u8]], ys: &[&[u8]], out: &mut [f32]) {
            // SAFETY: installed only on CPUs with NEON.
            unsafe { by_tile!($tile, n, xs, ys, out) }
        }
    };
}

q8_0_kernel!(q4_0_tile, q4_0_row, 18, dec_q4_0);
q8_0_kernel!(q5_0_tile, q5_0_row, 22, dec_q5_0);
q8_0_kernel!(q8_0_tile, q8_0_row, 34, dec_q8_0);
q8_0_kernel!(iq4_nl_tile, iq4_nl_row, 18, dec_iq4_nl);
q8_0_kernel!(mxfp4_tile, mxfp4_row, 17, dec_mxfp4);
