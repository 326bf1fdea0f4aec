//! Cases of the ops of RWKV-6 and RWKV-7: EXP (the decays), L2_NORM,
//! RWKV_WKV6 and RWKV_WKV7 with one and several sequences, one and many
//! tokens each, the head sizes of real models and odd ones, and RWKV-7's
//! chain from normalized keys to the delta rule.

use super::cases::ACT;
use super::{Case, CaseGraph, Check, Fill};
use crate::graph::TensorId;
use crate::op::UnaryOp;
use crate::{Result, Type};

/// A state carried over many tokens holds the rounding of every step.
const WKV: Check = Check::Close {
    atol: 1e-5,
    rtol: 1e-4,
};

/// Every case of this family.
pub(super) fn rwkv_cases(v: &mut Vec<Case>) {
    for ty in [Type::F32, Type::F16] {
        let check = match ty {
            Type::F16 => Check::Close {
                atol: 1e-6,
                rtol: 2e-3,
            },
            _ => ACT,
        };
        v.push(Case::new(
            format!("UNARY Exp {ty} [37,3,2]"),
            check,
            move |c| {
                let a = c.input("a", ty, &[37, 3, 2], Fill::Uniform(-6.0, 3.0));
                c.g.unary(a, UnaryOp::Exp)
            },
        ));
    }
    v.push(Case::new(
        "UNARY Exp F32 [9,5,4] permuted (1,2,0,3)",
        ACT,
        |c| {
            let a = c.permuted("a", Type::F32, &[9, 5, 4], [1, 2, 0, 3])?;
            c.g.unary(a, UnaryOp::Exp)
        },
    ));
    for ne in [[64, 3, 5, 1], [17, 4, 1, 2], [1000, 2, 1, 1]] {
        v.push(Case::new(format!("L2_NORM F32 {ne:?}"), ACT, move |c| {
            let a = c.rand("a", Type::F32, &ne);
            c.g.l2_norm(a, 1e-12)
        }));
    }
    v.push(Case::new(
        "L2_NORM F32 zero rows, eps 1e-6",
        Check::Exact,
        |c| {
            let a = c.input("a", Type::F32, &[16, 3], Fill::Uniform(0.0, 0.0));
            c.g.l2_norm(a, 1e-6)
        },
    ));
    v.push(Case::new(
        "L2_NORM F32 [12,7,3] permuted (0,2,1,3)",
        ACT,
        |c| {
            let a = c.permuted("a", Type::F32, &[12, 7, 3], [0, 2, 1, 3])?;
            c.g.l2_norm(a, 1e-12)
        },
    ));
    // (head size, heads, tokens per sequence, sequences)
    let shapes = [
        (64, 2, 1, 1),
        (64, 3, 7, 2),
        (16, 4, 5, 3),
        (8, 5, 1, 4),
        (13, 3, 4, 2),
    ];
    for (hs, nh, per, n_s) in shapes {
        v.push(Case::new(
            format!("RWKV_WKV6 head size {hs}, {nh} heads, {per} tokens x {n_s} seqs"),
            WKV,
            move |c| wkv6(c, hs, nh, per * n_s, n_s),
        ));
        v.push(Case::new(
            format!("RWKV_WKV7 head size {hs}, {nh} heads, {per} tokens x {n_s} seqs"),
            WKV,
            move |c| wkv7(c, hs, nh, per * n_s, n_s),
        ));
    }
    for (per, n_s) in [(1, 2), (6, 2)] {
        v.push(Case::new(
            format!("RWKV_WKV7 chain (L2_NORM, NEG, MUL), head size 32, {per} tokens x {n_s} seqs"),
            WKV,
            move |c| wkv7_chain(c, 32, 2, per * n_s, n_s),
        ));
    }
}

/// RWKV-6's sources: decays in (0, 1) as exp(-exp(x)) gives them.
fn wkv6(c: &mut CaseGraph<'_>, hs: usize, nh: usize, nt: usize, n_s: usize) -> Result<TensorId> {
    let tok = [hs, nh, nt];
    let k = c.input("k", Type::F32, &tok, Fill::Uniform(-0.5, 0.5));
    let v = c.rand("v", Type::F32, &tok);
    let r = c.rand("r", Type::F32, &tok);
    let u = c.rand("u", Type::F32, &[hs, nh]);
    let w = c.input("w", Type::F32, &tok, Fill::Uniform(0.05, 0.999));
    let s = c.rand("state", Type::F32, &[hs * hs * nh, n_s]);
    c.g.rwkv_wkv6(k, v, r, u, w, s)
}

/// RWKV-7's sources: decays in (0.5, 1) as exp(-0.607 sigmoid(x)) gives
/// them; small a and b so that the states stay bounded.
fn wkv7(c: &mut CaseGraph<'_>, hs: usize, nh: usize, nt: usize, n_s: usize) -> Result<TensorId> {
    let tok = [hs, nh, nt];
    let r = c.rand("r", Type::F32, &tok);
    let w = c.input("w", Type::F32, &tok, Fill::Uniform(0.5, 1.0));
    let k = c.input("k", Type::F32, &tok, Fill::Uniform(-0.5, 0.5));
    let v = c.rand("v", Type::F32, &tok);
    let a = c.input("a", Type::F32, &tok, Fill::Uniform(-0.2, 0.2));
    let b = c.input("b", Type::F32, &tok, Fill::Uniform(-0.2, 0.2));
    let s = c.rand("state", Type::F32, &[hs * hs * nh, n_s]);
    c.g.rwkv_wkv7(r, w, k, v, a, b, s)
}

/// RWKV-7 as llama.cpp feeds it: kk = l2_norm(k * k_k) per head, a = -kk,
/// b = kk * iclr.
fn wkv7_chain(
    c: &mut CaseGraph<'_>,
    hs: usize,
    nh: usize,
    nt: usize,
    n_s: usize,
) -> Result<TensorId> {
    let tok = [hs, nh, nt];
    let r = c.rand("r", Type::F32, &tok);
    let w = c.input("w", Type::F32, &tok, Fill::Uniform(0.5, 1.0));
    let k = c.input("k", Type::F32, &tok, Fill::Uniform(-0.5, 0.5));
    let v = c.rand("v", Type::F32, &tok);
    let kk = c.rand("k_k", Type::F32, &[hs, nh]);
    let iclr = c.input("iclr", Type::F32, &tok, Fill::Uniform(0.0, 1.0));
    let s = c.rand("state", Type::F32, &[hs * hs * nh, n_s]);
    let kk = c.g.mul(k, kk)?;
    let kk = c.g.l2_norm(kk, 1e-12)?;
    let a = c.g.unary(kk, UnaryOp::Neg)?;
    let b = c.g.mul(kk, iclr)?;
    c.g.rwkv_wkv7(r, w, k, v, a, b, s)
}
