//! Kernels of every op but MUL_MAT, over f32 rows (other element types are
//! converted on the way in and out, as ggml computes them in f32).

pub(crate) mod binary;
pub(crate) mod copy;
pub(crate) mod flash_attn;
pub(crate) mod norm;
pub(crate) mod rope;
pub(crate) mod softmax;
pub(crate) mod unary;

use crate::tensor::View;

/// Reads element `i` of an I32 or I64 index tensor.
///
/// # Safety
/// `i` must be inside the view, which must be I32 or I64.
pub(crate) unsafe fn read_index(v: &View, i: [usize; 4]) -> i64 {
    let off = i[0] * v.nb[0] + i[1] * v.nb[1] + i[2] * v.nb[2] + i[3] * v.nb[3];
    let p = v.ptr.get().wrapping_add(off);
    if v.ty == ggml_core::Type::I64 {
        // SAFETY: in bounds (caller) and 8-byte aligned (checked by `View::of`).
        unsafe { (p as *const i64).read() }
    } else {
        // SAFETY: in bounds (caller) and 4-byte aligned (checked by `View::of`).
        i64::from(unsafe { (p as *const i32).read() })
    }
}

/// exp(x) without a library call, so that loops over it vectorise: Cody-Waite
/// reduction by ln 2 and Cephes' degree-6 polynomial (within 2 ulp of the
/// exact value; results below 2^-126 flush to zero, above f32::MAX are +inf).
#[inline(always)]
pub(crate) fn exp_f32(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const C1: f32 = 0.693_359_4;
    const C2: f32 = -2.121_944_4e-4;
    let xc = x.clamp(-87.336_54, 88.722_83);
    // Round to nearest with the 1.5 * 2^23 trick (exact for these magnitudes).
    let k = (xc * LOG2E + 12_582_912.0) - 12_582_912.0;
    let r = xc - k * C1 - k * C2;
    let z = r * r;
    let p = (((((1.987_569_1e-4 * r + 1.398_199_9e-3) * r + 8.333_452e-3) * r + 4.166_579_6e-2)
        * r
        + 1.666_666_5e-1)
        * r
        + 0.5)
        * z
        + r
        + 1.0;
    let scale = f32::from_bits((((k as i32) + 127) as u32) << 23);
    let y = p * scale;
    if x > 88.722_83 {
        f32::INFINITY
    } else if x < -87.336_54 {
        0.0
    } else if x.is_nan() {
        x
    } else {
        y
    }
}

/// ALiBi slope of head `h` of `n_head` as ggml computes it (1 without ALiBi).
pub(crate) fn alibi_slope(max_bias: f32, n_head: usize, h: usize) -> f32 {
    if max_bias <= 0.0 || n_head == 0 {
        return 1.0;
    }
    let n_head_log2 = 1u32 << (31 - (n_head as u32).leading_zeros());
    let m0 = 2f32.powf(-max_bias / n_head_log2 as f32);
    let m1 = 2f32.powf(-(max_bias / 2.0) / n_head_log2 as f32);
    if (h as u32) < n_head_log2 {
        m0.powf((h + 1) as f32)
    } else {
        m1.powf((2 * (h as u32 - n_head_log2) + 1) as f32)
    }
}

#[cfg(test)]
mod tests {
    use super::exp_f32;

    #[test]
    fn exp_is_within_two_ulp() {
        let mut worst = 0i32;
        let mut x = -87.0f32;
        while x < 88.0 {
            let want = x.exp();
            let got = exp_f32(x);
            let ulp = (got.to_bits() as i32 - want.to_bits() as i32).abs();
            worst = worst.max(ulp);
            x += 0.000_731;
        }
        assert!(worst <= 2, "worst {worst} ulp");
        assert_eq!(exp_f32(0.0), 1.0);
        assert_eq!(exp_f32(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_f32(100.0), f32::INFINITY);
        assert!(exp_f32(f32::NAN).is_nan());
    }
}
