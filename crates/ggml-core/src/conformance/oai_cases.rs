//! Cases of the ops gpt-oss needs: attention sinks in SOFT_MAX and
//! FLASH_ATTN_EXT (one-row and tiled prompts), ADD_ID, SWIGLU_OAI, and
//! MUL_MAT / MUL_MAT_ID of MXFP4 weights (its experts' type).

use super::cases::{mul_mat_check, ACT};
use super::{Case, Check, Fill};
use crate::Type;

/// Every case of this family.
pub(super) fn oai_cases(v: &mut Vec<Case>) {
    mxfp4_cases(v);
    for mask in [Type::F32, Type::F16] {
        for (scale, max_bias) in [(1.0f32, 0.0f32), (0.25, 0.0), (0.3, 8.0)] {
            v.push(Case::new(
                format!(
                    "SOFT_MAX F32 [37,4,6] {mask} mask, sinks, scale {scale} max_bias {max_bias}"
                ),
                ACT,
                move |c| {
                    let a = c.input("a", Type::F32, &[37, 4, 6], Fill::Uniform(-5.0, 5.0));
                    let m = c.input("mask", mask, &[37, 5], Fill::Mask);
                    // Sinks above and below the scores: some rows' maximum
                    // is the sink's.
                    let k = c.input("sinks", Type::F32, &[6], Fill::Uniform(-8.0, 8.0));
                    let s = c.g.soft_max_ext(a, Some(m), scale, max_bias)?;
                    c.g.add_sinks(s, k)
                },
            ));
        }
    }
    for kv in [Type::F16, Type::F32] {
        for (n_q, n_kv, mask, softcap) in [
            (1usize, 23usize, Fill::Mask, 0.0f32),
            (5, 23, Fill::Mask, 0.0),
            (4, 23, Fill::Mask, 30.0),
            // Tiled (64 rows and more), whole key tiles hidden from rows.
            (70, 150, Fill::Causal, 0.0),
            (65, 130, Fill::Mask, 30.0),
        ] {
            v.push(Case::new(
                format!(
                    "FLASH_ATTN_EXT q F32 [32,{n_q},4] k/v {kv} [32,{n_kv},2] mask {mask:?} softcap {softcap} with sinks"
                ),
                Check::Nmse(5e-4),
                move |c| {
                    let q = c.permuted("q", Type::F32, &[32, n_q, 4], [0, 2, 1, 3])?;
                    let k = c.rand("k", kv, &[32, n_kv, 2]);
                    let vv = c.rand("v", kv, &[32, n_kv, 2]);
                    let m = c.input("mask", Type::F16, &[n_kv, n_q], mask);
                    let s = c.input("sinks", Type::F32, &[4], Fill::Uniform(-3.0, 3.0));
                    let fa = c.g.flash_attn_ext(q, k, vv, Some(m), 0.17, 0.0, softcap)?;
                    c.g.add_sinks(fa, s)
                },
            ));
        }
    }
    for (n, n_used, n_tok, n_expert) in [
        (7usize, 1usize, 3usize, 4usize),
        (64, 4, 9, 32),
        (130, 2, 70, 8),
    ] {
        v.push(Case::new(
            format!("ADD_ID F32 [{n},{n_used},{n_tok}] + rows of F32 [{n},{n_expert}]"),
            Check::Exact,
            move |c| {
                let a = c.rand("a", Type::F32, &[n, n_used, n_tok]);
                let b = c.rand("bias", Type::F32, &[n, n_expert]);
                let ids = c.input("ids", Type::I32, &[n_used, n_tok], Fill::Index(n_expert));
                c.g.add_id(a, b, ids)
            },
        ));
    }
    v.push(Case::new(
        "ADD_ID F32 [16,2,5] as a strided view + rows of F32 [16,6]",
        Check::Exact,
        |c| {
            let big = c.rand("big", Type::F32, &[20, 2, 5]);
            let a = c.g.view(big, &[16, 2, 5], &[20 * 4, 40 * 4], 4 * 4)?;
            let b = c.rand("bias", Type::F32, &[16, 6]);
            let ids = c.input("ids", Type::I32, &[2, 5], Fill::Index(6));
            c.g.add_id(a, b, ids)
        },
    ));
    for (ne, alpha, limit) in [
        ([64usize, 2, 3], 1.702f32, 7.0f32),
        ([37, 5, 1], 1.702, 0.5),
        ([130, 4, 2], 1.0, 3.0),
    ] {
        v.push(Case::new(
            format!("SWIGLU_OAI F32 {ne:?} alpha {alpha} limit {limit}"),
            ACT,
            move |c| {
                // Values past the limit on both sides.
                let g = c.input("gate", Type::F32, &ne, Fill::Uniform(-12.0, 12.0));
                let u = c.input("up", Type::F32, &ne, Fill::Uniform(-12.0, 12.0));
                c.g.swiglu_oai(g, u, alpha, limit)
            },
        ));
    }
}

/// MXFP4 weights against F32 activations (quantized to Q8_0, as ggml's
/// dot product takes them), as a matrix and as stacked experts.
fn mxfp4_cases(v: &mut Vec<Case>) {
    let ty = Type::MXFP4;
    for n in [1usize, 4, 18] {
        v.push(Case::mul_mat(ty, &[96, 13], Type::F32, &[96, n]));
    }
    for (n_used, n_tok) in [(1usize, 3usize), (4, 37)] {
        v.push(Case::new(
            format!("MUL_MAT_ID {ty} experts [64,19,8] x F32 [64,{n_used},{n_tok}], {n_used} used"),
            mul_mat_check(ty),
            move |c| {
                let w = c.rand("exps", ty, &[64, 19, 8]);
                let x = c.rand("x", Type::F32, &[64, n_used, n_tok]);
                let ids = c.input("ids", Type::I32, &[n_used, n_tok], Fill::Index(8));
                c.g.mul_mat_id(w, x, ids)
            },
        ));
    }
}
