//! Builder and shape rule of GATED_DELTA_NET, the linear attention of
//! gated DeltaNet layers (Qwen3.5, Qwen3-Next), with ggml's shapes.

use super::{Graph, TensorId};
use crate::op::Op;
use crate::tensor::TensorDesc;
use crate::{Result, Type};

impl Graph {
    /// The gated delta rule over `n_t` tokens of `n_s` sequences, one state
    /// matrix per V head (ggml_gated_delta_net keeping the final states
    /// only). For sequence s, V head h (reading Q/K head h mod H_k) and
    /// token t, with the state S [S x S] (key index i, value index j):
    ///
    /// ```text
    /// S[i, j] *= exp(g[0 or i, h, t, s])
    /// d[j]     = beta[h, t, s] * (v[j, h, t, s] - sum_i S[i, j] k[i])
    /// S[i, j] += k[i] d[j]
    /// o[j, h, t, s] = sum_i S[i, j] q[i] / sqrt(S)
    /// ```
    ///
    /// Shapes: `q`, `k` [S, H_k, n_t, n_s]; `v` [S, H_v, n_t, n_s], H_k
    /// dividing H_v; `g` [1, H_v, n_t, n_s] (a decay per head) or [S, H_v,
    /// n_t, n_s] (per key element); `beta` [1, H_v, n_t, n_s]; `state`
    /// [S, S, H_v, n_s] with element (i, j) at `state[i + S j]` (row j holds
    /// column j of S). The result is F32 [S * H_v, n_t * n_s + S * n_s]:
    /// o [S, H_v, n_t, n_s] first, then the final states laid out as
    /// `state`, for the graph to view.
    #[allow(clippy::too_many_arguments)]
    pub fn gated_delta_net(
        &mut self,
        q: TensorId,
        k: TensorId,
        v: TensorId,
        g: TensorId,
        beta: TensorId,
        state: TensorId,
    ) -> Result<TensorId> {
        let sv = self.desc(v);
        let [s, h_v, n_t, n_s] = sv.ne;
        let desc = TensorDesc::new(
            self.derived_name(v, "gdn"),
            Type::F32,
            &[s * h_v, n_t * n_s + s * n_s],
        );
        self.add_checked(desc, Op::GatedDeltaNet, &[q, k, v, g, beta, state])
    }
}

/// `Ok` when `ok`, else the error `why` describes.
fn ensure(ok: bool, why: impl FnOnce() -> String) -> std::result::Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(why())
    }
}

/// GATED_DELTA_NET: see [`Graph::gated_delta_net`] for the shapes.
pub(super) fn gated_delta_net_fits(
    d: &TensorDesc,
    src: &[&TensorDesc],
) -> std::result::Result<(), String> {
    let (q, k, v, g, beta, st) = (src[0], src[1], src[2], src[3], src[4], src[5]);
    let [s, h_v, n_t, n_s] = v.ne;
    ensure(s > 0 && h_v > 0, || format!("v {:?} is empty", v.ne))?;
    ensure(q.ne == k.ne, || {
        format!("q {:?} and k {:?} differ", q.ne, k.ne)
    })?;
    let h_k = q.ne[1];
    ensure(q.ne[0] == s && q.ne[2] == n_t && q.ne[3] == n_s, || {
        format!(
            "q {:?} is not [S {s}, H_k, n_t {n_t}, n_s {n_s}] of v {:?}",
            q.ne, v.ne
        )
    })?;
    ensure(h_k > 0 && h_v % h_k == 0, || {
        format!("{h_k} Q/K heads do not divide {h_v} V heads")
    })?;
    ensure(
        (g.ne[0] == 1 || g.ne[0] == s) && g.ne[1..] == [h_v, n_t, n_s],
        || {
            format!(
                "g {:?} is neither [1, H_v {h_v}, n_t {n_t}, n_s {n_s}] nor [S {s}, ...]",
                g.ne
            )
        },
    )?;
    ensure(beta.ne == [1, h_v, n_t, n_s], || {
        format!(
            "beta {:?} is not [1, H_v {h_v}, n_t {n_t}, n_s {n_s}]",
            beta.ne
        )
    })?;
    ensure(st.ne == [s, s, h_v, n_s], || {
        format!(
            "state {:?} is not [S {s}, S {s}, H_v {h_v}, n_s {n_s}]",
            st.ne
        )
    })?;
    let want = [s * h_v, n_t * n_s + s * n_s, 1, 1];
    ensure(d.ne == want, || {
        format!(
            "result {:?}, expected {want:?} (o, then the final states)",
            d.ne
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    struct In {
        q: TensorId,
        k: TensorId,
        v: TensorId,
        g: TensorId,
        b: TensorId,
        s: TensorId,
    }

    /// S, H_k, H_v, n_t, n_s.
    fn inputs(g: &mut Graph, [s, hk, hv, nt, ns]: [usize; 5]) -> In {
        In {
            q: g.input("q", Type::F32, &[s, hk, nt, ns]),
            k: g.input("k", Type::F32, &[s, hk, nt, ns]),
            v: g.input("v", Type::F32, &[s, hv, nt, ns]),
            g: g.input("g", Type::F32, &[1, hv, nt, ns]),
            b: g.input("beta", Type::F32, &[1, hv, nt, ns]),
            s: g.input("state", Type::F32, &[s, s, hv, ns]),
        }
    }

    fn gdn(g: &mut Graph, i: &In) -> Result<TensorId> {
        g.gated_delta_net(i.q, i.k, i.v, i.g, i.b, i.s)
    }

    #[test]
    fn result_holds_outputs_then_states() {
        let mut g = Graph::new();
        let i = inputs(&mut g, [16, 2, 4, 5, 3]);
        let r = gdn(&mut g, &i).unwrap();
        assert_eq!(g.desc(r).ne, [64, 5 * 3 + 16 * 3, 1, 1]);
        // A decay per key element.
        let kda = g.input("gk", Type::F32, &[16, 4, 5, 3]);
        assert!(g.gated_delta_net(i.q, i.k, i.v, kda, i.b, i.s).is_ok());
    }

    fn err(dims: [usize; 5], edit: impl Fn(&mut Graph, &mut In)) -> String {
        let mut g = Graph::new();
        let mut i = inputs(&mut g, dims);
        edit(&mut g, &mut i);
        let n = g.len();
        let e = gdn(&mut g, &i).unwrap_err().to_string();
        assert_eq!(g.len(), n, "a refused node stays out of the graph");
        assert!(e.contains("GATED_DELTA_NET"), "{e}");
        e
    }

    #[test]
    fn shapes_that_do_not_fit_are_errors_naming_the_problem() {
        let dims = [16, 2, 4, 5, 3];
        let e = err([16, 3, 4, 5, 3], |_, _| {});
        assert!(e.contains("3 Q/K heads do not divide 4 V heads"), "{e}");
        let e = err(dims, |g, i| i.k = g.input("k", Type::F32, &[16, 1, 5, 3]));
        assert!(e.contains("q") && e.contains("k"), "{e}");
        let e = err(dims, |g, i| {
            i.q = g.input("q", Type::F32, &[8, 2, 5, 3]);
            i.k = g.input("k", Type::F32, &[8, 2, 5, 3]);
        });
        assert!(e.contains("S 16"), "{e}");
        let e = err(dims, |g, i| i.g = g.input("g", Type::F32, &[2, 4, 5, 3]));
        assert!(e.contains("g ["), "{e}");
        let e = err(dims, |g, i| i.b = g.input("b", Type::F32, &[1, 4, 4, 3]));
        assert!(e.contains("beta"), "{e}");
        let e = err(dims, |g, i| i.s = g.input("s", Type::F32, &[16, 16, 4, 2]));
        assert!(e.contains("state"), "{e}");
    }
}
