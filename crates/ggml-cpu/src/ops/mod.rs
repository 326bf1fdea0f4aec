//! Kernels of every op but MUL_MAT, over f32 rows (other element types are
//! converted on the way in and out, as ggml computes them in f32).

pub(crate) mod binary;
pub(crate) mod copy;
pub(crate) mod delta_net;
pub(crate) mod flash_attn;
pub(crate) mod flash_attn_tiled;
pub(crate) mod mul_mat_id;
pub(crate) mod norm;
pub(crate) mod oai;
pub(crate) mod rope;
pub(crate) mod rope_tables;
pub(crate) mod routing;
pub(crate) mod rwkv;
pub(crate) mod softmax;
pub(crate) mod ssm;
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
