//! Cases of the ops of gated DeltaNet layers: UNARY Softplus (across its
//! switch to the identity above 20) and GATED_DELTA_NET with a decay per
//! head and per key element, one and several V heads per Q/K head, one
//! and many tokens, one and several sequences, strided q/k/v views as the
//! graph takes them from the convolution's output, and head sizes up to
//! 128.

use super::cases::ACT;
use super::{Case, CaseGraph, Check, Fill};
use crate::graph::TensorId;
use crate::op::UnaryOp;
use crate::{Result, Type};

/// The states after many tokens carry the rounding of each step.
const GDN: Check = Check::Close {
    atol: 1e-5,
    rtol: 1e-4,
};

/// Every case of this family.
pub(super) fn delta_net_cases(v: &mut Vec<Case>) {
    v.push(Case::new("UNARY Softplus F32 [37,3,2]", ACT, |c| {
        let a = c.input("a", Type::F32, &[37, 3, 2], Fill::Uniform(-30.0, 30.0));
        c.g.unary(a, UnaryOp::Softplus)
    }));
    v.push(Case::new(
        "UNARY Softplus F32 [9,5,4] permuted (1,2,0,3)",
        ACT,
        |c| {
            let a = c.permuted("a", Type::F32, &[9, 5, 4], [1, 2, 0, 3])?;
            c.g.unary(a, UnaryOp::Softplus)
        },
    ));
    for (s, h_k, h_v, n_t, n_s, per_key) in [
        (16, 2, 4, 1, 1, false),
        (16, 2, 4, 7, 3, false),
        (16, 4, 4, 5, 2, true),
        (32, 1, 3, 9, 1, false),
        (64, 2, 2, 3, 2, false),
        (128, 1, 2, 2, 1, false),
        (128, 2, 4, 1, 3, true),
    ] {
        let kind = if per_key { "per key" } else { "per head" };
        v.push(Case::new(
            format!(
                "GATED_DELTA_NET S {s}, {h_k} K heads, {h_v} V heads, {n_t} tokens x {n_s} seqs, decay {kind}"
            ),
            GDN,
            move |c| gdn(c, [s, h_k, h_v, n_t, n_s], per_key),
        ));
    }
    v.push(Case::new(
        "GATED_DELTA_NET S 16, q, k, v strided views of one conv output",
        GDN,
        |c| strided(c, 16, 2, 4, 6, 2),
    ));
    for (n_t, n_s, cells, same) in [
        (1, 1, 2, true),
        (1, 3, 4, true),
        (4, 2, 3, true),
        (1, 1, 3, false),
        (1, 3, 4, false),
        (3, 3, 3, false),
    ] {
        let into = if same { "their own" } else { "drawn" };
        v.push(Case::new(
            format!(
                "GATED_DELTA_NET S 16 states gathered by GET_ROWS from a cache of {cells} cells and stored by SET_ROWS into {into} cells, {n_t} tokens x {n_s} seqs"
            ),
            GDN,
            move |c| cached(c, n_t, n_s, cells, same),
        ));
    }
}

/// The states of `n_s` sequences gathered from a cache of `cells` rows,
/// run through the delta rule and stored back into the cache (into the
/// cells they came from, or into drawn ones), as the recurrent memory does
/// (backends may fuse the three): compared on the outputs and the whole
/// cache after the store.
fn cached(c: &mut CaseGraph, n_t: usize, n_s: usize, cells: usize, same: bool) -> Result<TensorId> {
    let (s, h_k, h_v) = (16, 2, 4);
    let state = s * s * h_v;
    let q = unit_rows(c, "q", &[s, h_k, n_t, n_s])?;
    let k = unit_rows(c, "k", &[s, h_k, n_t, n_s])?;
    let v = c.rand("v", Type::F32, &[s, h_v, n_t, n_s]);
    let (g, b) = gates(c, &[1, h_v, n_t, n_s], &[1, h_v, n_t, n_s]);
    let cache = c.input(
        "cache",
        Type::F32,
        &[state, cells],
        Fill::Uniform(-0.5, 0.5),
    );
    let src = c.input("src", Type::I32, &[n_s], Fill::Distinct(cells));
    let dst = if same {
        src
    } else {
        c.input("dst", Type::I32, &[n_s], Fill::Distinct(cells))
    };
    let st = c.g.get_rows(cache, src)?;
    let st = c.g.reshape(st, &[s, s, h_v, n_s])?;
    let r = c.g.gated_delta_net(q, k, v, g, b, st)?;
    let n_out = s * h_v * n_t * n_s;
    let states = c.g.view_2d(r, state, n_s, state * 4, n_out * 4)?;
    let stored = c.g.set_rows(cache, states, dst)?;
    let o = c.g.view_1d(r, n_out, 0)?;
    let o = c.g.cont(o)?;
    let all = c.g.reshape(stored, &[state * cells])?;
    c.g.concat(o, all, 0)
}

/// Unit-norm rows as the graph feeds q and k (L2-normalised), so the
/// state stays bounded over the tokens.
fn unit_rows(c: &mut CaseGraph, name: &str, ne: &[usize]) -> Result<TensorId> {
    let x = c.rand(name, Type::F32, ne);
    let s = ne[0] as f32;
    let n = c.g.rms_norm(x, 1e-6)?;
    c.g.scale(n, 1.0 / s.sqrt())
}

/// Log decays in [-1, -0.01), betas in (0, 1).
fn gates(c: &mut CaseGraph, g_ne: &[usize], b_ne: &[usize]) -> (TensorId, TensorId) {
    let g = c.input("g", Type::F32, g_ne, Fill::Uniform(-1.0, -0.01));
    let b = c.input("beta", Type::F32, b_ne, Fill::Uniform(0.01, 1.0));
    (g, b)
}

fn gdn(c: &mut CaseGraph, [s, h_k, h_v, n_t, n_s]: [usize; 5], per_key: bool) -> Result<TensorId> {
    let q = unit_rows(c, "q", &[s, h_k, n_t, n_s])?;
    let k = unit_rows(c, "k", &[s, h_k, n_t, n_s])?;
    let v = c.rand("v", Type::F32, &[s, h_v, n_t, n_s]);
    let g0 = if per_key { s } else { 1 };
    let (g, b) = gates(c, &[g0, h_v, n_t, n_s], &[1, h_v, n_t, n_s]);
    let st = c.input(
        "state",
        Type::F32,
        &[s, s, h_v, n_s],
        Fill::Uniform(-0.5, 0.5),
    );
    c.g.gated_delta_net(q, k, v, g, b, st)
}

/// q, k and v as views of one [2 S H_k + S H_v, n_t, n_s] tensor, rows
/// dense, heads and tokens strided.
fn strided(
    c: &mut CaseGraph,
    s: usize,
    h_k: usize,
    h_v: usize,
    n_t: usize,
    n_s: usize,
) -> Result<TensorId> {
    let w = 2 * s * h_k + s * h_v;
    let all = c.rand("qkv", Type::F32, &[w, n_t, n_s]);
    let nb = c.g.desc(all).nb;
    let f = 4;
    let q =
        c.g.view_4d(all, [s, h_k, n_t, n_s], [s * f, nb[1], nb[2]], 0)?;
    let k =
        c.g.view_4d(all, [s, h_k, n_t, n_s], [s * f, nb[1], nb[2]], s * h_k * f)?;
    let v = c.g.view_4d(
        all,
        [s, h_v, n_t, n_s],
        [s * f, nb[1], nb[2]],
        2 * s * h_k * f,
    )?;
    let (g, b) = gates(c, &[1, h_v, n_t, n_s], &[1, h_v, n_t, n_s]);
    let st = c.input(
        "state",
        Type::F32,
        &[s, s, h_v, n_s],
        Fill::Uniform(-0.5, 0.5),
    );
    c.g.gated_delta_net(q, k, v, g, b, st)
}
