//! The 32-element types Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and Q8_1: reference
//! quantizers and dequantizers, bit-exact with ggml's.
//!
//! ggml converts the scaled values with C casts (`(int8_t)(v + 8.5f)`,
//! truncation toward zero) or `roundf` (half away from zero); Rust's `as`
//! truncates the same way and `f32::round` is `roundf`. The first element
//! of largest magnitude fixes the sign of the symmetric scales.

use super::blocks::{BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0, BlockQ8_1};
use super::fp::{dequantize_scaled, dequantize_scaled_min, f2h, signed_absmax};

fn min_max(x: &[f32]) -> (f32, f32) {
    let (mut min, mut max) = (f32::MAX, -f32::MAX);
    for &v in x {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    (min, max)
}

#[inline]
fn inv(d: f32) -> f32 {
    if d != 0.0 {
        1.0 / d
    } else {
        0.0
    }
}

/// Scatters the fifth bits of 32 levels into the `qh` word of Q5 blocks.
pub(crate) fn pack_q5(l: &[u8; 32], qs: &mut [u8; 16]) -> [u8; 4] {
    let mut qh = 0u32;
    for j in 0..16 {
        let (a, b) = (l[j], l[j + 16]);
        qs[j] = (a & 0x0f) | ((b & 0x0f) << 4);
        qh |= u32::from((a & 0x10) >> 4) << j;
        qh |= u32::from((b & 0x10) >> 4) << (j + 16);
    }
    qh.to_le_bytes()
}

/// The 5-bit levels of a Q5 block.
fn unpack_q5(qs: &[u8; 16], qh: [u8; 4]) -> [u8; 32] {
    let qh = u32::from_le_bytes(qh);
    let mut l = [0u8; 32];
    for j in 0..16 {
        let h0 = ((qh >> j) << 4) as u8 & 0x10;
        let h1 = (qh >> (j + 12)) as u8 & 0x10;
        l[j] = (qs[j] & 0x0f) | h0;
        l[j + 16] = (qs[j] >> 4) | h1;
    }
    l
}

impl BlockQ4_0 {
    /// ggml's `quantize_row_q4_0_ref` for one block.
    pub(crate) fn quantize(x: &[f32]) -> Self {
        let (max, _) = signed_absmax(x);
        let d = max / -8.0;
        let id = inv(d);
        let mut qs = [0u8; 16];
        for j in 0..16 {
            let x0 = x[j] * id;
            let x1 = x[16 + j] * id;
            let q0 = ((x0 + 8.5) as i8).min(15) as u8;
            let q1 = ((x1 + 8.5) as i8).min(15) as u8;
            qs[j] = q0 | (q1 << 4);
        }
        Self { d: f2h(d), qs }
    }

    /// The 4-bit levels minus 8.
    pub(crate) fn levels(&self) -> [i8; 32] {
        let mut l = [0i8; 32];
        for j in 0..16 {
            l[j] = (self.qs[j] & 0x0f) as i8 - 8;
            l[j + 16] = (self.qs[j] >> 4) as i8 - 8;
        }
        l
    }

    pub(crate) fn dequantize(&self, y: &mut [f32]) {
        dequantize_scaled(y, self.d, self.levels());
    }
}

impl BlockQ4_1 {
    /// ggml's `quantize_row_q4_1_ref` for one block.
    pub(crate) fn quantize(x: &[f32]) -> Self {
        let (min, max) = min_max(x);
        let d = (max - min) / 15.0;
        let id = inv(d);
        let mut qs = [0u8; 16];
        for j in 0..16 {
            let x0 = (x[j] - min) * id;
            let x1 = (x[16 + j] - min) * id;
            let q0 = ((x0 + 0.5) as i8).min(15) as u8;
            let q1 = ((x1 + 0.5) as i8).min(15) as u8;
            qs[j] = q0 | (q1 << 4);
        }
        Self {
            d: f2h(d),
            m: f2h(min),
            qs,
        }
    }

    /// The 4-bit levels.
    pub(crate) fn levels(&self) -> [u8; 32] {
        let mut l = [0u8; 32];
        for j in 0..16 {
            l[j] = self.qs[j] & 0x0f;
            l[j + 16] = self.qs[j] >> 4;
        }
        l
    }

    pub(crate) fn dequantize(&self, y: &mut [f32]) {
        dequantize_scaled_min(y, self.d, self.m, self.levels());
    }
}

impl BlockQ5_0 {
    /// ggml's `quantize_row_q5_0_ref` for one block.
    pub(crate) fn quantize(x: &[f32]) -> Self {
        let (max, _) = signed_absmax(x);
        let d = max / -16.0;
        let id = inv(d);
        let mut l = [0u8; 32];
        for (l, &v) in l.iter_mut().zip(x) {
            *l = ((v * id + 16.5) as i8).min(31) as u8;
        }
        let mut qs = [0u8; 16];
        let qh = pack_q5(&l, &mut qs);
        Self { d: f2h(d), qh, qs }
    }

    /// The 5-bit levels minus 16.
    pub(crate) fn levels(&self) -> [i8; 32] {
        unpack_q5(&self.qs, self.qh).map(|l| l as i8 - 16)
    }

    pub(crate) fn dequantize(&self, y: &mut [f32]) {
        dequantize_scaled(y, self.d, self.levels());
    }
}

impl BlockQ5_1 {
    /// ggml's `quantize_row_q5_1_ref` for one block.
    pub(crate) fn quantize(x: &[f32]) -> Self {
        let (min, max) = min_max(x);
        let d = (max - min) / 31.0;
        let id = inv(d);
        let mut l = [0u8; 32];
        for (l, &v) in l.iter_mut().zip(x) {
            *l = ((v - min) * id + 0.5) as u8;
        }
        let mut qs = [0u8; 16];
        let qh = pack_q5(&l, &mut qs);
        Self {
            d: f2h(d),
            m: f2h(min),
            qh,
            qs,
        }
    }

    /// The 5-bit levels.
    pub(crate) fn levels(&self) -> [u8; 32] {
        unpack_q5(&self.qs, self.qh)
    }

    pub(crate) fn dequantize(&self, y: &mut [f32]) {
        dequantize_scaled_min(y, self.d, self.m, self.levels());
    }
}

/// Scale and rounded levels shared by Q8_0 and Q8_1.
fn quantize_q8(x: &[f32]) -> (f32, [i8; 32]) {
    let mut amax = 0f32;
    for &v in x {
        let a = v.abs();
        amax = if amax > a { amax } else { a };
    }
    let d = amax / 127.0;
    let id = inv(d);
    let mut qs = [0i8; 32];
    for (q, &v) in qs.iter_mut().zip(x) {
        *q = (v * id).round() as i8;
    }
    (d, qs)
}

impl BlockQ8_0 {
    /// ggml's `quantize_row_q8_0_ref` for one block.
    pub(crate) fn quantize(x: &[f32]) -> Self {
        let (d, qs) = quantize_q8(x);
        Self { d: f2h(d), qs }
    }

    pub(crate) fn dequantize(&self, y: &mut [f32]) {
        dequantize_scaled(y, self.d, self.qs);
    }
}

impl BlockQ8_1 {
    /// ggml's `quantize_row_q8_1_ref` for one block.
    pub(crate) fn quantize(x: &[f32]) -> Self {
        let (d, qs) = quantize_q8(x);
        let sum: i32 = qs.iter().map(|&q| i32::from(q)).sum();
        Self {
            d: f2h(d),
            s: f2h(sum as f32 * d),
            qs,
        }
    }

    pub(crate) fn dequantize(&self, y: &mut [f32]) {
        dequantize_scaled(y, self.d, self.qs);
    }
}
