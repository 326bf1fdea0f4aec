//! Builders of the ops of RWKV-6 and RWKV-7: RWKV_WKV6, RWKV_WKV7 and
//! L2_NORM, with ggml's shapes, and their shape rules (called from
//! `validate.rs`).

use super::{Graph, TensorId};
use crate::op::Op;
use crate::tensor::TensorDesc;
use crate::{Result, Type};

impl Graph {
    /// Each row of `a` divided by its L2 norm, the norm at least `eps`
    /// (ggml_l2_norm): `x / max(sqrt(sum(x^2)), eps)`.
    pub fn l2_norm(&mut self, a: TensorId, eps: f32) -> Result<TensorId> {
        let sa = self.desc(a);
        let desc = TensorDesc::new(self.derived_name(a, "l2_norm"), sa.ty, &sa.ne);
        self.add_checked(desc, Op::L2Norm { eps }, &[a])
    }

    /// RWKV-6 linear attention over `n_s` sequences of `T / n_s` tokens
    /// each (ggml_rwkv_wkv6). Per head h of size S, sequence s and token t
    /// with key index i and value index j, starting from the state
    /// `state[j + S i + S^2 h, s]`:
    ///
    /// ```text
    /// kv[i, j]  = k[i, h, t] * v[j, h, t]
    /// out[j, h, t] = sum_i r[i, h, t] * (u[i, h] * kv[i, j] + S[i, j])
    /// S[i, j]   = S[i, j] * w[i, h, t] + kv[i, j]
    /// ```
    ///
    /// Shapes: `k`, `v`, `r` and the decay `w` [S, H, T]; the bonus `u`
    /// [S, H]; `state` [S * S * H, n_s] with n_s dividing T. The result
    /// is 2-d F32 [S * H, T + S * n_s]: the T output rows, then each
    /// sequence's final state (S rows of S * H).
    pub fn rwkv_wkv6(
        &mut self,
        k: TensorId,
        v: TensorId,
        r: TensorId,
        u: TensorId,
        w: TensorId,
        state: TensorId,
    ) -> Result<TensorId> {
        let desc = self.wkv_result(k, state, "wkv6");
        self.add_checked(desc, Op::RwkvWkv6, &[k, v, r, u, w, state])
    }

    /// RWKV-7's generalized delta rule (ggml_rwkv_wkv7). Per head h of size
    /// S, sequence s and token t, with value index i and key index j,
    /// starting from the state `state[j + S i + S^2 h, s]`:
    ///
    /// ```text
    /// sa = sum_j a[j, h, t] * S[i, j]
    /// S[i, j] = S[i, j] * w[j, h, t] + v[i, h, t] * k[j, h, t] + sa * b[j, h, t]
    /// out[i, h, t] = sum_j S[i, j] * r[j, h, t]
    /// ```
    ///
    /// Shapes: `r`, `w`, `k`, `v`, `a`, `b` [S, H, T]; `state`
    /// [S * S * H, n_s] with n_s dividing T. The result is as
    /// [`Graph::rwkv_wkv6`]'s.
    #[allow(clippy::too_many_arguments)]
    pub fn rwkv_wkv7(
        &mut self,
        r: TensorId,
        w: TensorId,
        k: TensorId,
        v: TensorId,
        a: TensorId,
        b: TensorId,
        state: TensorId,
    ) -> Result<TensorId> {
        let desc = self.wkv_result(k, state, "wkv7");
        self.add_checked(desc, Op::RwkvWkv7, &[r, w, k, v, a, b, state])
    }

    /// The F32 [S * H, T + S * n_s] result of a WKV op over `k` [S, H, T]
    /// and `state` [.., n_s].
    fn wkv_result(&self, k: TensorId, state: TensorId, what: &str) -> TensorDesc {
        let (sk, ss) = (self.desc(k), self.desc(state));
        let [s, h, t, _] = sk.ne;
        let ne = [s * h, t + s * ss.ne[1]];
        TensorDesc::new(self.derived_name(k, what), Type::F32, &ne)
    }
}

/// The shape rule of RWKV_WKV6 (sources k, v, r, u, w, state) and
/// RWKV_WKV7 (r, w, k, v, a, b, state): every per-token source [S, H, T],
/// u [S, H], the states [S * S * H, n_s] with n_s dividing T, the result
/// [S * H, T + S * n_s].
pub(super) fn wkv_fits(
    op: &Op,
    d: &TensorDesc,
    s: &[&TensorDesc],
) -> std::result::Result<(), String> {
    let (names, tokens, first): (&[&str], Vec<usize>, usize) = match op {
        Op::RwkvWkv6 => (&["k", "v", "r", "u", "w", "state"], vec![0, 1, 2, 4], 0),
        _ => (
            &["r", "w", "k", "v", "a", "b", "state"],
            vec![0, 1, 2, 3, 4, 5],
            2,
        ),
    };
    let [hs, nh, nt, one] = s[first].ne;
    if hs == 0 || nh == 0 {
        return Err(format!(
            "{} {:?} has an empty head",
            names[first], s[first].ne
        ));
    }
    for &i in &tokens {
        if s[i].ne != [hs, nh, nt, one] || one != 1 {
            return Err(format!(
                "{} {:?} is not [head_size {hs}, n_head {nh}, n_tokens {nt}] as {} is",
                names[i], s[i].ne, names[first]
            ));
        }
    }
    if matches!(op, Op::RwkvWkv6) && s[3].ne != [hs, nh, 1, 1] {
        return Err(format!(
            "u {:?} is not [head_size {hs}, n_head {nh}]",
            s[3].ne
        ));
    }
    let st = s[names.len() - 1];
    let n_s = st.ne[1];
    if st.ne != [hs * hs * nh, n_s, 1, 1] || n_s == 0 {
        return Err(format!(
            "state {:?} is not [head_size^2 * n_head = {}, n_s]",
            st.ne,
            hs * hs * nh
        ));
    }
    if nt % n_s != 0 {
        return Err(format!(
            "{nt} tokens do not split into n_s = {n_s} equal sequences"
        ));
    }
    if d.ne != [hs * nh, nt + hs * n_s, 1, 1] {
        return Err(format!(
            "result {:?} is not [{}, {}]",
            d.ne,
            hs * nh,
            nt + hs * n_s
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sources of a WKV op: head size, heads, tokens, sequences.
    fn sources(g: &mut Graph, dims: [usize; 4], n: usize) -> Vec<TensorId> {
        let [s, h, t, n_s] = dims;
        let mut v: Vec<TensorId> = (0..n)
            .map(|i| g.input(format!("x{i}"), Type::F32, &[s, h, t]))
            .collect();
        v.push(g.input("state", Type::F32, &[s * s * h, n_s]));
        v
    }

    fn wkv7(g: &mut Graph, x: &[TensorId]) -> Result<TensorId> {
        g.rwkv_wkv7(x[0], x[1], x[2], x[3], x[4], x[5], x[6])
    }

    fn wkv6(g: &mut Graph, x: &[TensorId]) -> Result<TensorId> {
        g.rwkv_wkv6(x[0], x[1], x[2], x[3], x[4], x[5])
    }

    #[test]
    fn wkv_results_hold_outputs_then_states() {
        let mut g = Graph::new();
        let x = sources(&mut g, [16, 3, 6, 2], 6);
        let y = wkv7(&mut g, &x).unwrap();
        assert_eq!(g.desc(y).ne, [48, 6 + 16 * 2, 1, 1]);
        assert_eq!(g.desc(y).ty, Type::F32);
        let mut x = sources(&mut g, [16, 3, 6, 3], 5);
        x[3] = g.input("u", Type::F32, &[16, 3]);
        let y = wkv6(&mut g, &x).unwrap();
        assert_eq!(g.desc(y).ne, [48, 6 + 16 * 3, 1, 1]);
    }

    fn err(
        n: usize,
        dims: [usize; 4],
        edit: impl Fn(&mut Graph, &mut Vec<TensorId>),
        six: bool,
    ) -> String {
        let mut g = Graph::new();
        let mut x = sources(&mut g, dims, n);
        if six {
            x[3] = g.input("u", Type::F32, &[dims[0], dims[1]]);
        }
        edit(&mut g, &mut x);
        let before = g.len();
        let r = if six {
            wkv6(&mut g, &x)
        } else {
            wkv7(&mut g, &x)
        };
        let e = r.unwrap_err().to_string();
        assert_eq!(g.len(), before, "a refused node stays out of the graph");
        e
    }

    #[test]
    fn wkv_shapes_that_do_not_fit_are_errors_naming_the_source() {
        let dims = [8, 2, 4, 2];
        // v with another head size.
        let e = err(
            6,
            dims,
            |g, x| x[3] = g.input("v", Type::F32, &[4, 2, 4]),
            false,
        );
        assert!(
            e.contains("RWKV_WKV7") && e.contains("v [4, 2, 4, 1]"),
            "{e}"
        );
        // b with another token count.
        let e = err(
            6,
            dims,
            |g, x| x[5] = g.input("b", Type::F32, &[8, 2, 3]),
            false,
        );
        assert!(e.contains("b [8, 2, 3, 1]"), "{e}");
        // States of another head size.
        let e = err(
            6,
            dims,
            |g, x| x[6] = g.input("s", Type::F32, &[32, 2]),
            false,
        );
        assert!(e.contains("state") && e.contains("128"), "{e}");
        // 3 sequences do not divide 4 tokens.
        let e = err(6, [8, 2, 4, 3], |_, _| {}, false);
        assert!(e.contains("n_s = 3"), "{e}");
        // RWKV-6: u with per-token rows.
        let e = err(
            5,
            dims,
            |g, x| x[3] = g.input("u", Type::F32, &[8, 2, 4]),
            true,
        );
        assert!(
            e.contains("RWKV_WKV6") && e.contains("u [8, 2, 4, 1]"),
            "{e}"
        );
        let e = err(
            5,
            dims,
            |g, x| x[4] = g.input("w", Type::F32, &[8, 1, 4]),
            true,
        );
        assert!(e.contains("w [8, 1, 4, 1]"), "{e}");
    }

    #[test]
    fn l2_norm_keeps_the_shape() {
        let mut g = Graph::new();
        let a = g.input("a", Type::F32, &[64, 3, 5]);
        let n = g.l2_norm(a, 1e-12).unwrap();
        assert_eq!(g.desc(n).ne, [64, 3, 5, 1]);
    }
}
