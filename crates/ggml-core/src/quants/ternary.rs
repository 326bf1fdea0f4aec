//! The ternary types TQ1_0 and TQ2_0 and the microscaling type MXFP4:
//! ggml's reference quantizers and dequantizers.

use super::blocks::{BlockMxfp4, BlockTq1_0, BlockTq2_0, QK_K};
use super::fp::{dequantize_scaled, e8m0_to_fp32_half, f2h};
use super::tables::KVALUES_MXFP4;

const POW3: [u8; 6] = [1, 3, 9, 27, 81, 243];

/// Scale `amax` and its inverse, shared by both ternary quantizers.
fn ternary_scale(x: &[f32]) -> (f32, f32) {
    let mut amax = 0f32;
    for &v in x {
        let a = v.abs();
        amax = if amax > a { amax } else { a };
    }
    (amax, if amax != 0.0 { 1.0 / amax } else { 0.0 })
}

/// `lroundf(v) + 1`: the trit of a scaled weight (rounds half away from zero).
#[inline]
fn trit(v: f32) -> u8 {
    (v.round() as i32).wrapping_add(1) as u8
}

/// Packs five trits (first is most significant) into a byte: ceil(t * 256 / 243).
#[inline]
fn pack_trits(t: u8) -> u8 {
    (u16::from(t) * 256).div_ceil(243) as u8
}

/// Trit `n` (0 = most significant) of a packed byte.
#[inline]
fn unpack_trit(q: u8, n: usize) -> i8 {
    let q = q.wrapping_mul(POW3[n]);
    ((u16::from(q) * 3) >> 8) as i8
}

impl BlockTq1_0 {
    /// The trit (0..3) of element `i`, in ggml's storage order.
    #[inline]
    pub(crate) fn trit(&self, i: usize) -> i8 {
        if i < 160 {
            unpack_trit(self.qs[i % 32], i / 32)
        } else if i < 240 {
            let r = i - 160;
            unpack_trit(self.qs[32 + r % 16], r / 16)
        } else {
            let r = i - 240;
            unpack_trit(self.qh[r % 4], r / 4)
        }
    }

    /// ggml's `quantize_row_tq1_0_ref` for one super-block.
    pub(crate) fn quantize(x: &[f32]) -> Self {
        let (d, id) = ternary_scale(x);
        let mut qs = [0u8; 48];
        let mut qh = [0u8; 4];
        for m in 0..32 {
            let mut q = 0u8;
            for n in 0..5 {
                q = q.wrapping_mul(3).wrapping_add(trit(x[m + 32 * n] * id));
            }
            qs[m] = pack_trits(q);
        }
        for m in 0..16 {
            let mut q = 0u8;
            for n in 0..5 {
                q = q
                    .wrapping_mul(3)
                    .wrapping_add(trit(x[160 + m + 16 * n] * id));
            }
            qs[32 + m] = pack_trits(q);
        }
        for (j, h) in qh.iter_mut().enumerate() {
            let mut q = 0u8;
            for m in 0..4 {
                q = q
                    .wrapping_mul(3)
                    .wrapping_add(trit(x[240 + j + 4 * m] * id));
            }
            *h = pack_trits(q.wrapping_mul(3));
        }
        Self { qs, qh, d: f2h(d) }
    }

    pub(crate) fn dequantize(&self, y: &mut [f32]) {
        dequantize_scaled(y, self.d, (0..QK_K).map(|i| self.trit(i) - 1));
    }
}

impl BlockTq2_0 {
    /// The code (0..3, meaning -1, 0, 1) of element `i`.
    #[inline]
    pub(crate) fn code(&self, i: usize) -> i8 {
        let r = i % 128;
        ((self.qs[32 * (i / 128) + r % 32] >> (2 * (r / 32))) & 3) as i8
    }

    /// ggml's `quantize_row_tq2_0_ref` for one super-block.
    pub(crate) fn quantize(x: &[f32]) -> Self {
        let (d, id) = ternary_scale(x);
        let mut qs = [0u8; QK_K / 4];
        for (c, j) in (0..QK_K / 4).step_by(32).enumerate() {
            for m in 0..32 {
                let mut q = 0u8;
                for n in 0..4 {
                    q += (trit(x[128 * c + m + 32 * n] * id) & 3) << (2 * n);
                }
                qs[j + m] = q;
            }
        }
        Self { qs, d: f2h(d) }
    }

    pub(crate) fn dequantize(&self, y: &mut [f32]) {
        dequantize_scaled(y, self.d, (0..QK_K).map(|i| self.code(i) - 1));
    }
}

impl BlockMxfp4 {
    /// The doubled FP4 value of element `j`.
    #[inline]
    pub(crate) fn value(&self, j: usize) -> i8 {
        let q = if j < 16 {
            self.qs[j] & 0x0f
        } else {
            self.qs[j - 16] >> 4
        };
        KVALUES_MXFP4[usize::from(q)]
    }

    /// ggml's `quantize_row_mxfp4_ref` for one block.
    pub(crate) fn quantize(x: &[f32]) -> Self {
        let mut amax = 0f32;
        for &v in x {
            if amax < v.abs() {
                amax = v.abs();
            }
        }
        let e = if amax > 0.0 {
            (amax.log2().floor() - 2.0 + 127.0) as u8
        } else {
            0
        };
        let d = e8m0_to_fp32_half(e);
        let best = |v: f32| {
            let mut best = 0;
            let mut best_err = (f32::from(KVALUES_MXFP4[0]) * d - v).abs();
            for (i, &k) in KVALUES_MXFP4.iter().enumerate().skip(1) {
                let err = (f32::from(k) * d - v).abs();
                if err < best_err {
                    best = i;
                    best_err = err;
                }
            }
            best as u8
        };
        let mut qs = [0u8; 16];
        for j in 0..16 {
            qs[j] = best(x[j]) | (best(x[16 + j]) << 4);
        }
        Self { e, qs }
    }

    pub(crate) fn dequantize(&self, y: &mut [f32]) {
        let d = e8m0_to_fp32_half(self.e);
        for (j, y) in y.iter_mut().enumerate() {
            *y = f32::from(self.value(j)) * d;
        }
    }
}
