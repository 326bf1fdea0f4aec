//! The cases of the conformance suite, one function per op family.

use super::{Case, Check, Fill};
use crate::op::{GluOp, Op, RopeMode, RopeParams, UnaryOp};
use crate::Type;
use crate::MATMUL_TYPES;

pub(super) const ACT: Check = Check::Close {
    atol: 1e-6,
    rtol: 1e-5,
};
const GELU: Check = Check::Close {
    atol: 1e-4,
    rtol: 2e-3,
};
const ROPE: Check = Check::Close {
    atol: 1e-4,
    rtol: 1e-4,
};

/// Widens a Close check for F16 results.
fn for_type(c: Check, ty: Type) -> Check {
    match (c, ty) {
        (Check::Close { atol, rtol }, Type::F16) => Check::Close {
            atol,
            rtol: rtol + 1e-3,
        },
        _ => c,
    }
}

/// The MUL_MAT tolerance for weights of `ty`.
pub fn mul_mat_check(ty: Type) -> Check {
    match ty {
        Type::F32 => Check::Nmse(1e-10),
        Type::F16 => Check::Nmse(1e-6),
        Type::BF16 => Check::Nmse(5e-5),
        _ => Check::Nmse(5e-4),
    }
}

/// The check of a copy that quantizes floats to `ty`: exact, but for
/// Q8_0, checked within an NMSE of 1e-5.
pub fn quantizing_copy_check(ty: Type) -> Check {
    if ty == Type::Q8_0 {
        Check::Nmse(1e-5)
    } else {
        Check::Exact
    }
}

/// Every case of the suite.
pub fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    copy_cases(&mut v);
    elementwise_cases(&mut v);
    row_cases(&mut v);
    rows_index_cases(&mut v);
    mul_mat_cases(&mut v);
    rope_cases(&mut v);
    soft_max_cases(&mut v);
    flash_attn_cases(&mut v);
    super::moe_cases::moe_cases(&mut v);
    super::ssm_cases::ssm_cases(&mut v);
    super::rwkv_cases::rwkv_cases(&mut v);
    super::delta_net_cases::delta_net_cases(&mut v);
    super::oai_cases::oai_cases(&mut v);
    v
}

fn copy_cases(v: &mut Vec<Case>) {
    for (a, b) in [
        (Type::F32, Type::F32),
        (Type::F32, Type::F16),
        (Type::F16, Type::F32),
        (Type::F16, Type::F16),
        (Type::F32, Type::BF16),
        (Type::I32, Type::I32),
    ] {
        v.push(Case::new(
            format!("CONT {a}->{a} [7,5,3] permuted (0,2,1,3) then CPY to {b}"),
            Check::Exact,
            move |c| {
                let x = c.permuted("x", a, &[7, 5, 3], [0, 2, 1, 3])?;
                let y = c.g.cont(x)?;
                let d = c.rand("dst", b, &[7, 5, 3]);
                c.g.cpy(y, d)?;
                Ok(d)
            },
        ));
        v.push(Case::new(
            format!("CPY {a}->{b} [9,4,2] transposed source"),
            Check::Exact,
            move |c| {
                let x = c.permuted("x", a, &[9, 4, 2], [1, 0, 2, 3])?;
                let d = c.rand("dst", b, &[9, 4, 2]);
                c.g.cpy(x, d)?;
                Ok(d)
            },
        ));
    }
    v.push(Case::new(
        "DUP F32 [5,3,2,2] permuted (2,0,3,1)",
        Check::Exact,
        |c| {
            let x = c.permuted("x", Type::F32, &[5, 3, 2, 2], [2, 0, 3, 1])?;
            c.g.dup(x)
        },
    ));
    v.push(Case::new(
        "CONT F32 [6,4,3] reshaped to [12,6]",
        Check::Exact,
        |c| {
            let x = c.permuted("x", Type::F32, &[6, 4, 3], [0, 2, 1, 3])?;
            c.g.cont_shape(x, &[12, 6])
        },
    ));
    v.push(Case::new(
        "CPY F32->F16 into a strided 2-d view of a cache [64,10] at rows 3..7",
        Check::Exact,
        |c| {
            let x = c.rand("x", Type::F32, &[32, 4]);
            let cache = c.rand("cache", Type::F16, &[64, 10]);
            let row = 64 * 2;
            let view = c.g.view_2d(cache, 32, 4, row, 3 * row + 16 * 2)?;
            c.g.cpy(x, view)?;
            Ok(cache)
        },
    ));
    for n_tokens in [1usize, 3] {
        v.push(Case::new(
            format!(
                "CPY F32->F16 of {n_tokens} transposed token(s) into a transposed V cache [16,40]"
            ),
            Check::Exact,
            move |c| {
                let x = c.rand("x", Type::F32, &[40, n_tokens]);
                let xt = c.g.transpose(x)?;
                let cache = c.rand("cache", Type::F16, &[16, 40]);
                let view = c.g.view_2d(cache, n_tokens, 40, 16 * 2, 5 * 2)?;
                c.g.cpy(xt, view)?;
                Ok(cache)
            },
        ));
    }
    for ty in [
        Type::Q4_0,
        Type::Q4_1,
        Type::Q5_0,
        Type::Q5_1,
        Type::IQ4_NL,
        Type::Q8_0,
    ] {
        v.push(Case::new(
            format!("CPY F32->{ty} [64,3,2] permuted source"),
            quantizing_copy_check(ty),
            move |c| {
                let x = c.permuted("x", Type::F32, &[64, 3, 2], [0, 2, 1, 3])?;
                let d = c.rand("dst", ty, &[64, 3, 2]);
                c.g.cpy(x, d)?;
                Ok(d)
            },
        ));
    }
    v.push(Case::new(
        "CONT Q4_K [256,4] reshaped to [512,2] (same bytes)",
        Check::Exact,
        |c| {
            let x = c.rand("x", Type::Q4_K, &[256, 4]);
            c.g.cont_shape(x, &[512, 2])
        },
    ));
    v.push(Case::copy(
        "CPY Q8_0->F32 [96,5] (dequantize)",
        Check::Exact,
        Type::Q8_0,
        Type::F32,
        &[96, 5],
    ));
}

fn elementwise_cases(v: &mut Vec<Case>) {
    for ty in [Type::F32, Type::F16] {
        for (bne, label) in [
            ([13usize, 5, 3, 2], "same shape"),
            ([13, 1, 1, 1], "row broadcast"),
            ([13, 5, 1, 2], "dim 2 broadcast"),
            ([1, 5, 3, 1], "column broadcast"),
        ] {
            for add in [true, false] {
                let name = if add { "ADD" } else { "MUL" };
                v.push(Case::new(
                    format!("{name} {ty} [13,5,3,2] + {bne:?} ({label})"),
                    Check::Exact,
                    move |c| {
                        let a = c.rand("a", ty, &[13, 5, 3, 2]);
                        let b = c.rand("b", Type::F32, &bne);
                        if add {
                            c.g.add_op(a, b)
                        } else {
                            c.g.mul(a, b)
                        }
                    },
                ));
            }
        }
        v.push(Case::new(
            format!("ADD {ty} permuted a [11,4,3] + permuted b"),
            Check::Exact,
            move |c| {
                let a = c.permuted("a", ty, &[11, 4, 3], [0, 2, 1, 3])?;
                let b = c.permuted("b", Type::F32, &[11, 4, 3], [1, 0, 2, 3])?;
                c.g.add_op(a, b)
            },
        ));
        v.push(Case::new(
            format!("SCALE {ty} [17,3] by 0.37"),
            Check::Exact,
            move |c| {
                let a = c.rand("a", ty, &[17, 3]);
                c.g.scale(a, 0.37)
            },
        ));
        for (u, check) in [
            (UnaryOp::Silu, ACT),
            (UnaryOp::Gelu, GELU),
            (UnaryOp::Relu, Check::Exact),
            (UnaryOp::Neg, Check::Exact),
            (UnaryOp::Tanh, ACT),
        ] {
            let check = for_type(check, ty);
            v.push(Case::new(
                format!("UNARY {u:?} {ty} [37,3,2]"),
                check,
                move |c| {
                    let a = c.input("a", ty, &[37, 3, 2], Fill::Uniform(-6.0, 6.0));
                    c.g.unary(a, u)
                },
            ));
            v.push(Case::new(
                format!("UNARY {u:?} {ty} [9,5,4] permuted (1,2,0,3)"),
                check,
                move |c| {
                    let a = c.permuted("a", ty, &[9, 5, 4], [1, 2, 0, 3])?;
                    c.g.unary(a, u)
                },
            ));
        }
        v.push(Case::new(
            format!("UNARY Gelu {ty} [64] beyond +-10"),
            Check::Exact,
            move |c| {
                let a = c.input("a", ty, &[64], Fill::Uniform(10.5, 30.0));
                let n = c.g.unary(a, UnaryOp::Neg)?;
                let g1 = c.g.gelu(a)?;
                let g2 = c.g.gelu(n)?;
                c.g.add_op(g1, g2)
            },
        ));
        for (op, check) in [(GluOp::Swiglu, ACT), (GluOp::Geglu, GELU)] {
            let check = for_type(check, ty);
            for swapped in [false, true] {
                v.push(Case::new(
                    format!("GLU {op:?} {ty} [2x19,3,2] swapped={swapped}"),
                    check,
                    move |c| {
                        let a = c.input("a", ty, &[38, 3, 2], Fill::Uniform(-4.0, 4.0));
                        c.g.glu(a, op, swapped)
                    },
                ));
            }
            v.push(Case::new(
                format!("GLU {op:?} {ty} split [21,4], gate permuted"),
                check,
                move |c| {
                    let g = c.permuted("gate", ty, &[21, 4], [1, 0, 2, 3])?;
                    let u = c.rand("up", ty, &[21, 4]);
                    c.g.glu_split(g, u, op)
                },
            ));
        }
    }
    v.push(Case::new("ARGMAX F32 [67,9]", Check::Exact, |c| {
        let a = c.rand("a", Type::F32, &[67, 9]);
        c.g.argmax(a)
    }));
}

fn row_cases(v: &mut Vec<Case>) {
    for ty in [Type::F32, Type::F16] {
        for (rms, n) in [(true, 67usize), (false, 67), (true, 4096), (false, 129)] {
            let name = if rms { "RMS_NORM" } else { "NORM" };
            let check = for_type(ACT, ty);
            v.push(Case::new(
                format!("{name} {ty} [{n},3,2]"),
                check,
                move |c| {
                    let a = c.input("a", ty, &[n, 3, 2], Fill::Uniform(-3.0, 5.0));
                    if rms {
                        c.g.rms_norm(a, 1e-5)
                    } else {
                        c.g.norm(a, 1e-5)
                    }
                },
            ));
        }
        v.push(Case::new(
            format!("RMS_NORM {ty} [33,4,3] permuted (0,2,1,3)"),
            for_type(ACT, ty),
            move |c| {
                let a = c.permuted("a", ty, &[33, 4, 3], [0, 2, 1, 3])?;
                c.g.rms_norm(a, 1e-6)
            },
        ));
    }
    v.push(Case::new(
        "RMS_NORM F32 [64,5] then MUL by weight (in-place friendly)",
        ACT,
        |c| {
            let a = c.rand("a", Type::F32, &[64, 5]);
            let w = c.rand("w", Type::F32, &[64]);
            let n = c.g.rms_norm(a, 1e-5)?;
            c.g.mul(n, w)
        },
    ));
}

fn rows_index_cases(v: &mut Vec<Case>) {
    // GET_ROWS and SET_ROWS take every matrix weight type and I32 ids.
    let types = MATMUL_TYPES.iter().copied().chain([Type::I32]);
    for ty in types {
        let ne0 = if ty.block_size() > 32 { 256 } else { 64 };
        v.push(Case::new(
            format!("GET_ROWS {ty} [{ne0},10,2] by I32 [7,2]"),
            Check::Exact,
            move |c| {
                let a = c.rand("a", ty, &[ne0, 10, 2]);
                let i = c.input("idx", Type::I32, &[7, 2], Fill::Index(10));
                c.g.get_rows(a, i)
            },
        ));
    }
    for (dty, ity) in [
        (Type::F32, Type::I32),
        (Type::F16, Type::I64),
        (Type::F16, Type::I32),
        (Type::BF16, Type::I64),
        (Type::Q8_0, Type::I64),
        (Type::Q4_0, Type::I32),
    ] {
        v.push(Case::set_rows(dty, ity, [64, 5, 2], 12));
    }
    v.push(Case::new(
        "SET_ROWS F32 permuted src [32,3,4] into F16 [32,9,4] by I64 [3,1] (broadcast)",
        Check::Exact,
        |c| {
            let dst = c.rand("dst", Type::F16, &[32, 9, 4]);
            let src = c.permuted("src", Type::F32, &[32, 3, 4], [0, 2, 1, 3])?;
            let idx = c.input("idx", Type::I64, &[3, 1], Fill::Distinct(9));
            c.g.set_rows(dst, src, idx)?;
            Ok(dst)
        },
    ));
}

fn mul_mat_cases(v: &mut Vec<Case>) {
    for &ty in MATMUL_TYPES {
        let k = if ty.block_size() > 32 { 512 } else { 96 };
        let check = mul_mat_check(ty);
        for n in [1usize, 3, 4, 7, 18] {
            v.push(Case::mul_mat(ty, &[k, 13], Type::F32, &[k, n]));
        }
        v.push(Case::new(
            format!("MUL_MAT {ty} [{k},9,2,1] x F32 [{k},5,6,2] (broadcast 3x, 2x)"),
            check,
            move |c| {
                let a = c.rand("a", ty, &[k, 9, 2, 1]);
                let b = c.rand("b", Type::F32, &[k, 5, 6, 2]);
                c.g.mul_mat(a, b)
            },
        ));
        v.push(Case::new(
            format!("MUL_MAT {ty} [{k},11] x F32 [{k},6,2] permuted (0,2,1,3)"),
            check,
            move |c| {
                let a = c.rand("a", ty, &[k, 11]);
                let b = c.permuted("b", Type::F32, &[k, 6, 2], [0, 2, 1, 3])?;
                c.g.mul_mat(a, b)
            },
        ));
    }
    v.push(Case::mul_mat(Type::F16, &[64, 40], Type::F16, &[64, 3]));
    // Attention shapes: K cache view [head_dim, n_kv, n_head_kv] with the
    // cache's row stride, times permuted Q; then V^T view times KQ.
    v.push(Case::new(
        "MUL_MAT F16 K-cache view [32,19,2] x permuted Q [32,3,4] (GQA)",
        mul_mat_check(Type::F16),
        |c| {
            let cache = c.rand("k_cache", Type::F16, &[64, 24]);
            let k = c.g.view_3d(cache, [32, 19, 2], 64 * 2, 32 * 2, 0)?;
            let q = c.permuted("q", Type::F32, &[32, 3, 4], [0, 2, 1, 3])?;
            c.g.mul_mat(k, q)
        },
    ));
    v.push(Case::new(
        "MUL_MAT F16 transposed V-cache view [19,32,2] x F32 [19,3,4]",
        mul_mat_check(Type::F16),
        |c| {
            let cache = c.rand("v_cache", Type::F16, &[24, 64]);
            let vt = c.g.view_3d(cache, [19, 32, 2], 24 * 2, 24 * 2 * 32, 0)?;
            let kq = c.rand("kq", Type::F32, &[19, 3, 4]);
            c.g.mul_mat(vt, kq)
        },
    ));
    for ty in [Type::F32, Type::F16] {
        v.push(Case::new(
            format!(
                "MUL_MAT {ty} weights with strided rows [16,5,2] (permuted 2,0,1,3) x F32 [16,4,2]"
            ),
            mul_mat_check(ty),
            move |c| {
                let a = c.permuted("a", ty, &[16, 5, 2], [2, 0, 1, 3])?;
                let b = c.rand("b", Type::F32, &[16, 4, 2]);
                c.g.mul_mat(a, b)
            },
        ));
        v.push(Case::new(
            format!("MUL_MAT {ty} weights permuted (0,2,1,3) [48,5,3] x F32 [48,4,3]"),
            mul_mat_check(ty),
            move |c| {
                let a = c.permuted("a", ty, &[48, 5, 3], [0, 2, 1, 3])?;
                let b = c.rand("b", Type::F32, &[48, 4, 3]);
                c.g.mul_mat(a, b)
            },
        ));
    }
}

fn rope_cases(v: &mut Vec<Case>) {
    let base = |n_dims, mode| RopeParams::new(n_dims, mode, 10000.0);
    let mut variants: Vec<(String, RopeParams, bool)> = Vec::new();
    for mode in [RopeMode::Normal, RopeMode::Neox] {
        variants.push((format!("{mode:?} n_dims=head"), base(32, mode), false));
        variants.push((format!("{mode:?} n_dims=16<32"), base(16, mode), false));
        let mut p = base(32, mode);
        p.freq_scale = 0.25;
        variants.push((format!("{mode:?} freq_scale 0.25"), p, false));
        let mut y = base(32, mode);
        y.freq_scale = 0.125;
        y.ext_factor = 1.0;
        y.attn_factor = 1.0;
        y.n_ctx_orig = 4096;
        y.beta_fast = 32.0;
        y.beta_slow = 1.0;
        variants.push((format!("{mode:?} YaRN ext 1 scale 1/8"), y, false));
        let mut f = base(24, mode);
        f.freq_base = 500000.0;
        variants.push((format!("{mode:?} freq_factors n_dims=24"), f, true));
    }
    for (label, p, ff) in variants {
        for ty in [Type::F32, Type::F16] {
            let check = for_type(ROPE, ty);
            v.push(Case::new(
                format!("ROPE {ty} [32,3,5] {label}"),
                check,
                move |c| {
                    let a = c.rand("a", ty, &[32, 3, 5]);
                    let pos = c.input("pos", Type::I32, &[5], Fill::Index(50));
                    let f = if ff {
                        Some(c.input("ff", Type::F32, &[p.n_dims / 2], Fill::Uniform(1.0, 8.0)))
                    } else {
                        None
                    };
                    c.g.rope_ext(a, pos, f, p)
                },
            ));
        }
    }
    v.push(Case::new(
        "ROPE F32 view of a fused QKV row [16,2,3] Neox",
        ROPE,
        |c| {
            let qkv = c.rand("qkv", Type::F32, &[96, 3]);
            let q = c.g.view_3d(qkv, [16, 2, 3], 16 * 4, 96 * 4, 16 * 4)?;
            let pos = c.input("pos", Type::I32, &[3], Fill::Index(30));
            c.g.rope_ext(q, pos, None, RopeParams::new(16, RopeMode::Neox, 10000.0))
        },
    ));
}

fn soft_max_cases(v: &mut Vec<Case>) {
    for (mask, label) in [
        (None, "no mask"),
        (Some(Type::F32), "F32 mask"),
        (Some(Type::F16), "F16 mask"),
    ] {
        for (scale, max_bias) in [(1.0f32, 0.0f32), (0.125, 0.0), (0.3, 8.0)] {
            v.push(Case::new(
                format!("SOFT_MAX F32 [37,4,6] {label} scale {scale} max_bias {max_bias}"),
                ACT,
                move |c| {
                    let a = c.input("a", Type::F32, &[37, 4, 6], Fill::Uniform(-5.0, 5.0));
                    let m = mask.map(|t| c.input("mask", t, &[37, 5], Fill::Mask));
                    c.g.soft_max_ext(a, m, scale, max_bias)
                },
            ));
        }
    }
    v.push(Case::new(
        "SOFT_MAX F32 [19,3,5] permuted (0,2,1,3) with F16 mask",
        ACT,
        |c| {
            let a = c.permuted("a", Type::F32, &[19, 3, 5], [0, 2, 1, 3])?;
            let m = c.input("mask", Type::F16, &[19, 3], Fill::Mask);
            c.g.soft_max_ext(a, Some(m), 0.5, 0.0)
        },
    ));
}

fn flash_attn_cases(v: &mut Vec<Case>) {
    for kv in [Type::F16, Type::F32] {
        for (n_q, n_kv, mask, softcap, max_bias) in [
            (1usize, 23usize, Some(Fill::Mask), 0.0f32, 0.0f32),
            (5, 23, Some(Fill::Mask), 0.0, 0.0),
            (3, 23, None, 0.0, 0.0),
            (4, 23, Some(Fill::Mask), 30.0, 0.0),
            (2, 23, Some(Fill::Mask), 0.0, 4.0),
            // 64 and more rows (ggml tiles them, 64 rows by 64 keys): two
            // key tiles and part of one, some hidden from a whole row tile.
            (70, 150, Some(Fill::Causal), 0.0, 0.0),
            (64, 150, None, 0.0, 0.0),
            (65, 130, Some(Fill::Mask), 30.0, 4.0),
        ] {
            let mask_name = match mask {
                Some(Fill::Causal) => "causal",
                Some(_) => "random",
                None => "none",
            };
            v.push(Case::new(
                format!(
                    "FLASH_ATTN_EXT q F32 [32,{n_q},4] k/v {kv} [32,{n_kv},2] mask {mask_name} softcap {softcap} max_bias {max_bias}"
                ),
                Check::Nmse(5e-4),
                move |c| {
                    let q = c.permuted("q", Type::F32, &[32, n_q, 4], [0, 2, 1, 3])?;
                    let k = c.rand("k", kv, &[32, n_kv, 2]);
                    let vv = c.rand("v", kv, &[32, n_kv, 2]);
                    let m = mask.map(|f| c.input("mask", Type::F16, &[n_kv, n_q], f));
                    c.g.flash_attn_ext(q, k, vv, m, 0.17, max_bias, softcap)
                },
            ));
        }
    }
}

/// Names of the ops the suite covers (for reports).
pub fn covered_ops() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = vec![
        Op::Dup.name(),
        Op::Cont.name(),
        Op::Cpy.name(),
        Op::Add.name(),
        Op::Mul.name(),
        Op::Scale(1.0).name(),
        Op::GetRows.name(),
        Op::RmsNorm { eps: 0.0 }.name(),
        Op::Norm { eps: 0.0 }.name(),
        Op::MulMat.name(),
        Op::SoftMax {
            scale: 1.0,
            max_bias: 0.0,
        }
        .name(),
        Op::SetRows.name(),
        Op::Unary(UnaryOp::Silu).name(),
        Op::Glu {
            op: GluOp::Swiglu,
            swapped: false,
        }
        .name(),
        Op::Argmax.name(),
        Op::FlashAttnExt {
            scale: 1.0,
            max_bias: 0.0,
            softcap: 0.0,
        }
        .name(),
        "ROPE",
        "MUL_MAT_ID",
        "ARGSORT",
        "SUM_ROWS",
        "DIV",
        "CLAMP",
        "VIEW",
        "PERMUTE",
        "TRANSPOSE",
        "RESHAPE",
        "CONCAT",
        "SSM_CONV",
        "SSM_SCAN",
        "L2_NORM",
        "RWKV_WKV6",
        "RWKV_WKV7",
        "GATED_DELTA_NET",
        "ADD_ID",
        "SWIGLU_OAI",
    ];
    names.sort_unstable();
    names
}
