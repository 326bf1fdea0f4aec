//! Cases of the ops of state-space models: CONCAT (with a transposed
//! source, as Mamba joins its conv state and input), SSM_CONV, SSM_SCAN
//! of Mamba-1 (A per state element) and Mamba-2 (A per head, heads in
//! groups), one and several sequences, one and many tokens each, state
//! slots picked out of order, and a whole Mamba-2 mixer chain.

use super::cases::ACT;
use super::{Case, CaseGraph, Check, Fill};
use crate::graph::TensorId;
use crate::{Result, Type};

/// A scan's states after many tokens carry the rounding of each step.
const SCAN: Check = Check::Close {
    atol: 1e-5,
    rtol: 1e-4,
};

/// Every case of this family.
pub(super) fn ssm_cases(v: &mut Vec<Case>) {
    concat_cases(v);
    conv_cases(v);
    scan_cases(v);
    mixer_cases(v);
    store_cases(v);
}

fn concat_cases(v: &mut Vec<Case>) {
    for dim in 0..4 {
        let mut b = [6, 5, 3, 2];
        b[dim] = 4;
        v.push(Case::new(
            format!("CONCAT F32 [6,5,3,2] and {b:?} on axis {dim}"),
            Check::Exact,
            move |c| {
                let x = c.rand("a", Type::F32, &[6, 5, 3, 2]);
                let y = c.rand("b", Type::F32, &b);
                c.g.concat(x, y, dim)
            },
        ));
    }
    for ty in [Type::F32, Type::F16, Type::I32] {
        v.push(Case::new(
            format!("CONCAT {ty} conv state [3,37,2] and transposed input [37,5,2] on axis 0"),
            Check::Exact,
            move |c| {
                let state = c.rand("state", ty, &[3, 37, 2]);
                let x = c.rand("x", ty, &[37, 5, 2]);
                let xt = c.g.transpose(x)?;
                c.g.concat(state, xt, 0)
            },
        ));
    }
    v.push(Case::new(
        "CONCAT F32 permuted a [7,3,4] and b [7,3,2] on axis 2",
        Check::Exact,
        |c| {
            let x = c.permuted("a", Type::F32, &[7, 3, 4], [0, 2, 1, 3])?;
            let y = c.rand("b", Type::F32, &[7, 3, 2]);
            c.g.concat(x, y, 2)
        },
    ));
}

fn conv_cases(v: &mut Vec<Case>) {
    for (d_conv, d_inner, n_t, n_s) in [(4, 13, 1, 1), (4, 40, 7, 3), (3, 70, 5, 2), (4, 9, 1, 4)] {
        v.push(Case::new(
            format!("SSM_CONV d_conv {d_conv}, d_inner {d_inner}, {n_t} tokens x {n_s} seqs"),
            ACT,
            move |c| {
                let sx = c.rand("sx", Type::F32, &[d_conv - 1 + n_t, d_inner, n_s]);
                let w = c.rand("conv1d", Type::F32, &[d_conv, d_inner]);
                c.g.ssm_conv(sx, w)
            },
        ));
    }
}

/// Shapes of one scan.
#[derive(Clone, Copy, Debug)]
struct Scan {
    d_state: usize,
    head_dim: usize,
    n_head: usize,
    n_group: usize,
    n_t: usize,
    n_s: usize,
    slots: usize,
    /// A per state element (Mamba-1) instead of per head.
    mamba1: bool,
    /// Range of dt (softplus is linear above 20).
    dt: (f32, f32),
}

impl Scan {
    fn name(&self) -> String {
        let kind = if self.mamba1 { "Mamba-1" } else { "Mamba-2" };
        format!(
            "SSM_SCAN {kind} d_state {}, head_dim {}, {} heads in {} groups, {} tokens x {} seqs from {} slots, dt in [{}, {})",
            self.d_state,
            self.head_dim,
            self.n_head,
            self.n_group,
            self.n_t,
            self.n_s,
            self.slots,
            self.dt.0,
            self.dt.1
        )
    }

    /// The states, A and ids leaves (shared by the plain and the chained
    /// cases).
    fn leaves(&self, c: &mut CaseGraph<'_>) -> (TensorId, TensorId, TensorId) {
        let s = c.rand(
            "states",
            Type::F32,
            &[self.d_state, self.head_dim, self.n_head, self.slots],
        );
        let a_rows = if self.mamba1 { self.d_state } else { 1 };
        // A = -exp(A_log): negative decays.
        let a = c.input(
            "A",
            Type::F32,
            &[a_rows, self.n_head],
            Fill::Uniform(-2.0, -0.05),
        );
        // Distinct slots in random order: each sequence starts from its own.
        let ids = c.input("ids", Type::I32, &[self.n_s], Fill::Distinct(self.slots));
        (s, a, ids)
    }

    fn case(self) -> Case {
        Case::new(self.name(), SCAN, move |c| {
            let (s, a, ids) = self.leaves(c);
            let Scan {
                d_state,
                head_dim,
                n_head,
                n_group,
                n_t,
                n_s,
                ..
            } = self;
            let x = c.rand("x", Type::F32, &[head_dim, n_head, n_t, n_s]);
            let dt = c.input(
                "dt",
                Type::F32,
                &[n_head, n_t, n_s],
                Fill::Uniform(self.dt.0, self.dt.1),
            );
            let b = c.rand("B", Type::F32, &[d_state, n_group, n_t, n_s]);
            let cc = c.rand("C", Type::F32, &[d_state, n_group, n_t, n_s]);
            c.g.ssm_scan(s, x, dt, a, b, cc, ids)
        })
    }
}

fn scan_cases(v: &mut Vec<Case>) {
    let base = Scan {
        d_state: 16,
        head_dim: 1,
        n_head: 37,
        n_group: 1,
        n_t: 1,
        n_s: 1,
        slots: 1,
        mamba1: true,
        dt: (-1.0, 1.0),
    };
    // Mamba-1: head_dim 1, one head per channel, one group.
    for (d_state, n_head, n_t, n_s, slots) in [
        (16, 37, 1, 1, 1),
        (16, 37, 6, 1, 3),
        (16, 64, 1, 3, 5),
        (13, 29, 9, 3, 4),
        (16, 300, 4, 2, 2),
    ] {
        v.push(
            Scan {
                d_state,
                n_head,
                n_t,
                n_s,
                slots,
                ..base
            }
            .case(),
        );
    }
    // Mamba-2: a scalar A per head, heads sharing B and C in groups.
    let m2 = Scan {
        mamba1: false,
        ..base
    };
    for (d_state, head_dim, n_head, n_group, n_t, n_s, slots) in [
        (16, 8, 6, 1, 1, 1, 1),
        (32, 8, 6, 2, 1, 3, 4),
        (32, 8, 6, 3, 9, 1, 2),
        (64, 16, 8, 4, 5, 3, 5),
        (128, 4, 4, 1, 3, 2, 3),
        (20, 5, 9, 3, 7, 2, 2),
    ] {
        v.push(
            Scan {
                d_state,
                head_dim,
                n_head,
                n_group,
                n_t,
                n_s,
                slots,
                ..m2
            }
            .case(),
        );
    }
    // Large dt: softplus passes it through.
    v.push(
        Scan {
            d_state: 32,
            head_dim: 4,
            n_head: 4,
            n_group: 2,
            n_t: 3,
            n_s: 2,
            slots: 2,
            dt: (15.0, 25.0),
            ..m2
        }
        .case(),
    );
    v.push(
        Scan {
            n_t: 3,
            n_s: 2,
            slots: 2,
            dt: (15.0, 25.0),
            ..base
        }
        .case(),
    );
}

/// Mamba-2's mixer as llama.cpp builds it: the conv state joined with the
/// transposed xBC projection, SSM_CONV, SiLU, then x, B and C as strided
/// views of the convolution's result scanned from the state cache.
fn mixer_cases(v: &mut Vec<Case>) {
    for (n_t, n_s) in [(1, 2), (6, 3)] {
        let sc = Scan {
            d_state: 16,
            head_dim: 8,
            n_head: 4,
            n_group: 2,
            n_t,
            n_s,
            slots: 4,
            mamba1: false,
            dt: (-1.0, 1.0),
        };
        v.push(Case::new(
            format!(
                "SSM_SCAN Mamba-2 mixer chain (CONCAT, SSM_CONV, views), {n_t} tokens x {n_s} seqs"
            ),
            SCAN,
            move |c| mixer(c, sc),
        ));
    }
}

fn mixer(c: &mut CaseGraph<'_>, sc: Scan) -> Result<TensorId> {
    let d_conv = 4;
    let (d_inner, gs) = (sc.head_dim * sc.n_head, sc.n_group * sc.d_state);
    let ch = d_inner + 2 * gs;
    let (s, a, ids) = sc.leaves(c);
    let conv_state = c.rand("conv_state", Type::F32, &[d_conv - 1, ch, sc.n_s]);
    let xbc = c.rand("xBC", Type::F32, &[ch, sc.n_t, sc.n_s]);
    let w = c.rand("conv1d", Type::F32, &[d_conv, ch]);
    let dt = c.rand("dt", Type::F32, &[sc.n_head, sc.n_t, sc.n_s]);
    let xt = c.g.transpose(xbc)?;
    let sx = c.g.concat(conv_state, xt, 0)?;
    let conv = c.g.ssm_conv(sx, w)?;
    let conv = c.g.silu(conv)?;
    let nb = c.g.desc(conv).nb;
    let x = c.g.view_4d(
        conv,
        [sc.head_dim, sc.n_head, sc.n_t, sc.n_s],
        [sc.head_dim * 4, nb[1], nb[2]],
        0,
    )?;
    let b = c.g.view_4d(
        conv,
        [sc.d_state, sc.n_group, sc.n_t, sc.n_s],
        [sc.d_state * 4, nb[1], nb[2]],
        d_inner * 4,
    )?;
    let cc = c.g.view_4d(
        conv,
        [sc.d_state, sc.n_group, sc.n_t, sc.n_s],
        [sc.d_state * 4, nb[1], nb[2]],
        (d_inner + gs) * 4,
    )?;
    c.g.ssm_scan(s, x, dt, a, b, cc, ids)
}

/// Where the stored states go, for [`store_cases`].
#[derive(Clone, Copy, Debug)]
enum Cells {
    /// Each sequence's own source cell (the usual step).
    Same,
    /// Cells drawn apart from the sources: other cells, or another
    /// sequence's source.
    Drawn,
}

/// The scan's final states stored into the cache it reads by a SET_ROWS
/// (as the recurrent memory stores them; backends may fuse the two),
/// compared on y and the whole cache after the store.
fn store_cases(v: &mut Vec<Case>) {
    for (n_t, n_s, slots, cells) in [
        (1, 1, 2, Cells::Same),
        (1, 3, 4, Cells::Same),
        (5, 2, 3, Cells::Same),
        (1, 1, 3, Cells::Drawn),
        (1, 3, 4, Cells::Drawn),
        (4, 3, 3, Cells::Drawn),
    ] {
        let sc = Scan {
            d_state: 16,
            head_dim: 8,
            n_head: 4,
            n_group: 2,
            n_t,
            n_s,
            slots,
            mamba1: false,
            dt: (-1.0, 1.0),
        };
        v.push(Case::new(
            format!(
                "SSM_SCAN Mamba-2 states stored by SET_ROWS into {cells:?} cells, {n_t} tokens x {n_s} seqs from {slots} slots"
            ),
            SCAN,
            move |c| store(c, sc, cells),
        ));
    }
}

fn store(c: &mut CaseGraph<'_>, sc: Scan, cells: Cells) -> Result<TensorId> {
    let state = sc.d_state * sc.head_dim * sc.n_head;
    let cache = c.rand("cache", Type::F32, &[state, sc.slots]);
    let ids = c.input("ids", Type::I32, &[sc.n_s], Fill::Distinct(sc.slots));
    let dst = match cells {
        Cells::Same => ids,
        Cells::Drawn => c.input("dst", Type::I32, &[sc.n_s], Fill::Distinct(sc.slots)),
    };
    let a = c.input("A", Type::F32, &[1, sc.n_head], Fill::Uniform(-2.0, -0.05));
    let x = c.rand("x", Type::F32, &[sc.head_dim, sc.n_head, sc.n_t, sc.n_s]);
    let dt = c.rand("dt", Type::F32, &[sc.n_head, sc.n_t, sc.n_s]);
    let b = c.rand("B", Type::F32, &[sc.d_state, sc.n_group, sc.n_t, sc.n_s]);
    let cc = c.rand("C", Type::F32, &[sc.d_state, sc.n_group, sc.n_t, sc.n_s]);
    let s4 =
        c.g.reshape(cache, &[sc.d_state, sc.head_dim, sc.n_head, sc.slots])?;
    let out = c.g.ssm_scan(s4, x, dt, a, b, cc, ids)?;
    let y_len = sc.head_dim * sc.n_head * sc.n_t * sc.n_s;
    let states = c.g.view_2d(out, state, sc.n_s, state * 4, y_len * 4)?;
    let stored = c.g.set_rows(cache, states, dst)?;
    let y = c.g.view_1d(out, y_len, 0)?;
    let y = c.g.cont(y)?;
    let all = c.g.reshape(stored, &[state * sc.slots])?;
    c.g.concat(y, all, 0)
}
