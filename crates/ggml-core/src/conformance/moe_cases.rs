//! Cases of the ops a mixture-of-experts layer needs: MUL_MAT_ID for every
//! weight type MUL_MAT takes, ARGSORT and top-k (ties included), SUM_ROWS,
//! DIV, CLAMP, SIGMOID, and llama.cpp's whole routing composition.

use super::cases::{mul_mat_check, ACT};
use super::{Case, CaseGraph, Check, Fill};
use crate::graph::TensorId;
use crate::op::{SortOrder, UnaryOp};
use crate::MATMUL_TYPES;
use crate::{Result, Type};

/// Sums and quotients whose rounding may differ between backends.
const SUM: Check = Check::Close {
    atol: 1e-6,
    rtol: 1e-5,
};

/// Every case of this family.
pub(super) fn moe_cases(v: &mut Vec<Case>) {
    mul_mat_id_cases(v);
    argsort_cases(v);
    elementwise_cases(v);
    routing_cases(v);
}

/// One MUL_MAT_ID case: `n_expert` experts of [k, m], `n_tok` tokens,
/// `n_used` slots, activations shared by the slots when `shared`, expert
/// ids drawn from the first `pick` experts (so some repeat across tokens
/// and the others stay unused).
#[allow(clippy::too_many_arguments)]
fn mul_mat_id_case(
    ty: Type,
    k: usize,
    m: usize,
    n_expert: usize,
    n_used: usize,
    n_tok: usize,
    shared: bool,
    pick: usize,
) -> Case {
    let nb1 = if shared { 1 } else { n_used };
    Case::new(
        format!(
            "MUL_MAT_ID {ty} experts [{k},{m},{n_expert}] x F32 [{k},{nb1},{n_tok}], {n_used} used of the first {pick}"
        ),
        mul_mat_check(ty),
        move |c| {
            let w = c.rand("exps", ty, &[k, m, n_expert]);
            let x = c.rand("x", Type::F32, &[k, nb1, n_tok]);
            let ids = c.input("ids", Type::I32, &[n_used, n_tok], Fill::Index(pick));
            c.g.mul_mat_id(w, x, ids)
        },
    )
}

fn mul_mat_id_cases(v: &mut Vec<Case>) {
    for &ty in MATMUL_TYPES {
        let k = if ty.block_size() == 256 { 256 } else { 96 };
        v.push(mul_mat_id_case(ty, k, 19, 6, 2, 3, true, 4));
        v.push(mul_mat_id_case(ty, k, 35, 8, 4, 37, false, 5));
    }
    for ty in [Type::F32, Type::Q8_0, Type::Q4_K] {
        let k = if ty.block_size() == 256 { 256 } else { 64 };
        for n_used in 1..=4 {
            v.push(mul_mat_id_case(ty, k, 17, 7, n_used, 5, n_used % 2 == 1, 7));
        }
        v.push(mul_mat_id_case(ty, k, 48, 16, 3, 70, true, 3));
    }
    v.push(Case::new(
        "MUL_MAT_ID F16 experts [64,13,5] x F32 [64,2,6] permuted (0,2,1,3)",
        mul_mat_check(Type::F16),
        |c| {
            let w = c.rand("exps", Type::F16, &[64, 13, 5]);
            let x = c.permuted("x", Type::F32, &[64, 2, 6], [0, 2, 1, 3])?;
            let ids = c.input("ids", Type::I32, &[2, 6], Fill::Distinct(5));
            c.g.mul_mat_id(w, x, ids)
        },
    ));
}

fn argsort_cases(v: &mut Vec<Case>) {
    for order in [SortOrder::Desc, SortOrder::Asc] {
        for (ne, fill) in [
            ([37usize, 5, 1], Fill::Uniform(-1.0, 1.0)),
            ([128, 3, 2], Fill::Levels(7)),
            ([300, 4, 1], Fill::Levels(50)),
            ([1, 3, 1], Fill::Uniform(-1.0, 1.0)),
        ] {
            v.push(Case::new(
                format!("ARGSORT {order:?} F32 {ne:?} {fill:?}"),
                Check::Exact,
                move |c| {
                    let a = c.input("a", Type::F32, &ne, fill);
                    c.g.argsort(a, order)
                },
            ));
        }
    }
    for (n, k) in [(8usize, 2usize), (60, 4), (128, 8), (7, 7)] {
        v.push(Case::new(
            format!("ARGSORT top {k} of F32 [{n},9] with ties"),
            Check::Exact,
            move |c| {
                let a = c.input("a", Type::F32, &[n, 9], Fill::Levels(n / 2 + 1));
                c.g.argsort_top_k(a, k)
            },
        ));
    }
}

fn elementwise_cases(v: &mut Vec<Case>) {
    v.push(Case::new("SUM_ROWS F32 [37,5,3]", SUM, |c| {
        let a = c.rand("a", Type::F32, &[37, 5, 3]);
        c.g.sum_rows(a)
    }));
    v.push(Case::new(
        "SUM_ROWS F32 [9,4,3] permuted (1,0,2,3)",
        SUM,
        |c| {
            let a = c.permuted("a", Type::F32, &[9, 4, 3], [1, 0, 2, 3])?;
            c.g.sum_rows(a)
        },
    ));
    for bne in [[17usize, 3, 2], [1, 3, 2], [17, 1, 1]] {
        v.push(Case::new(
            format!("DIV F32 [17,3,2] by {bne:?}"),
            SUM,
            move |c| {
                let a = c.rand("a", Type::F32, &[17, 3, 2]);
                let b = c.input("b", Type::F32, &bne, Fill::Uniform(0.25, 2.0));
                c.g.div(a, b)
            },
        ));
    }
    v.push(Case::new("DIV F32 [9,5] permuted by [9,1]", SUM, |c| {
        let a = c.permuted("a", Type::F32, &[9, 5], [1, 0, 2, 3])?;
        let b = c.input("b", Type::F32, &[9, 1], Fill::Uniform(0.25, 2.0));
        c.g.div(a, b)
    }));
    for (lo, hi) in [(-0.5f32, 0.25f32), (6.103_515_6e-5, f32::INFINITY)] {
        v.push(Case::new(
            format!("CLAMP F32 [33,4] to [{lo}, {hi}]"),
            Check::Exact,
            move |c| {
                let a = c.rand("a", Type::F32, &[33, 4]);
                c.g.clamp(a, lo, hi)
            },
        ));
    }
    v.push(Case::new("UNARY Sigmoid F32 [37,3,2]", ACT, |c| {
        let a = c.input("a", Type::F32, &[37, 3, 2], Fill::Uniform(-12.0, 12.0));
        c.g.unary(a, UnaryOp::Sigmoid)
    }));
    v.push(Case::new(
        "UNARY Sigmoid F32 [9,5,4] permuted (1,2,0,3)",
        ACT,
        |c| {
            let a = c.permuted("a", Type::F32, &[9, 5, 4], [1, 2, 0, 3])?;
            c.g.sigmoid(a)
        },
    ));
}

/// llama.cpp's `build_moe_ffn` for softmax or sigmoid gating with
/// normalised weights: router, top-k, weights, the three expert matrices,
/// weighting and the sum over slots.
fn moe_ffn(c: &mut CaseGraph<'_>, ty: Type, dims: [usize; 5], sigmoid: bool) -> Result<TensorId> {
    let [n_embd, n_ff, n_expert, n_used, n_tok] = dims;
    let cur = c.rand("cur", Type::F32, &[n_embd, n_tok]);
    let gate_inp = c.rand("gate_inp", Type::F32, &[n_embd, n_expert]);
    let up = c.rand("up_exps", ty, &[n_embd, n_ff, n_expert]);
    let gate = c.rand("gate_exps", ty, &[n_embd, n_ff, n_expert]);
    let down = c.rand("down_exps", ty, &[n_ff, n_embd, n_expert]);
    let g = &mut *c.g;
    let logits = g.mul_mat(gate_inp, cur)?;
    let probs = if sigmoid {
        g.sigmoid(logits)?
    } else {
        g.soft_max_ext(logits, None, 1.0, 0.0)?
    };
    let sel = g.argsort_top_k(probs, n_used)?;
    let p3 = g.reshape(probs, &[1, n_expert, n_tok])?;
    let w = g.get_rows(p3, sel)?;
    let w2 = g.reshape(w, &[n_used, n_tok])?;
    let sum = g.sum_rows(w2)?;
    let sum = g.clamp(sum, 6.103_515_6e-5, f32::INFINITY)?;
    let w2 = g.div(w2, sum)?;
    let weights = g.reshape(w2, &[1, n_used, n_tok])?;
    let x = g.reshape(cur, &[n_embd, 1, n_tok])?;
    let u = g.mul_mat_id(up, x, sel)?;
    let gt = g.mul_mat_id(gate, x, sel)?;
    let h = g.swiglu_split(gt, u)?;
    let experts = g.mul_mat_id(down, h, sel)?;
    let experts = g.mul(experts, weights)?;
    let nb = g.desc(experts).nb;
    let mut out = g.view(experts, &[n_embd, n_tok], &[nb[2]], 0)?;
    for i in 1..n_used {
        let e = g.view(experts, &[n_embd, n_tok], &[nb[2]], i * nb[1])?;
        out = g.add_op(out, e)?;
    }
    if n_used == 1 {
        out = g.cont(out)?;
    }
    Ok(out)
}

fn routing_cases(v: &mut Vec<Case>) {
    for (ty, dims, sigmoid) in [
        (Type::F32, [64usize, 24, 8, 2, 5], false),
        (Type::Q8_0, [64, 32, 8, 1, 3], false),
        (Type::Q4_K, [256, 256, 16, 4, 19], false),
        (Type::F16, [64, 24, 6, 3, 4], true),
    ] {
        let check = match ty {
            Type::F32 => Check::Nmse(1e-9),
            _ => Check::Nmse(2e-3),
        };
        v.push(Case::new(
            format!(
                "MoE FFN {ty} n_embd {} ff {} experts {} used {} tokens {} ({} gating)",
                dims[0],
                dims[1],
                dims[2],
                dims[3],
                dims[4],
                if sigmoid { "sigmoid" } else { "softmax" }
            ),
            check,
            move |c| moe_ffn(c, ty, dims, sigmoid),
        ));
    }
}
