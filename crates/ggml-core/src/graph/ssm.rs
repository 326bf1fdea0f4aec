//! Builders of the ops of state-space models (Mamba, Mamba-2 and the
//! hybrids built on them): SSM_CONV, SSM_SCAN and CONCAT, with ggml's
//! shapes. The shape rules themselves live in `validate.rs`.

use super::{Graph, TensorId};
use crate::op::Op;
use crate::tensor::TensorDesc;
use crate::{Result, Type};

impl Graph {
    /// `a` and `b` joined along axis `dim` (ggml_concat): every other axis
    /// equal, same type; the result is a new contiguous tensor of that
    /// type. Either source may be a strided view (a transposed input).
    pub fn concat(&mut self, a: TensorId, b: TensorId, dim: usize) -> Result<TensorId> {
        let (sa, sb) = (self.desc(a), self.desc(b));
        let mut ne = sa.ne;
        if dim < 4 {
            ne[dim] += sb.ne[dim];
        }
        let desc = TensorDesc::new(self.derived_name(a, "concat"), sa.ty, &ne);
        self.add_checked(desc, Op::Concat { dim }, &[a, b])
    }

    /// Depthwise causal convolution of Mamba's input (ggml_ssm_conv):
    /// `sx` [d_conv - 1 + n_t, d_inner, n_s] holds, per channel and
    /// sequence, the last d_conv - 1 inputs of the previous ubatch followed
    /// by this ubatch's n_t inputs (a CONCAT of the conv state and the
    /// transposed input); `c` [d_conv, d_inner] is the kernel. The result
    /// is [d_inner, n_t, n_s] F32:
    /// `r[ch, t, s] = sum_k sx[t + k, ch, s] * c[k, ch]`.
    pub fn ssm_conv(&mut self, sx: TensorId, c: TensorId) -> Result<TensorId> {
        let (ss, sc) = (self.desc(sx), self.desc(c));
        // The shape is checked (with a clear error) by validate; this only
        // avoids an underflow when sx is shorter than the kernel.
        let n_t = (ss.ne[0] + 1).saturating_sub(sc.ne[0]);
        let ne = [sc.ne[1], n_t, ss.ne[2]];
        let desc = TensorDesc::new(self.derived_name(sx, "ssm_conv"), Type::F32, &ne);
        self.add_checked(desc, Op::SsmConv, &[sx, c])
    }

    /// Selective scan of Mamba-1 and Mamba-2 (ggml_ssm_scan with one
    /// state snapshot), per sequence s, token t, head h, row i of the head
    /// and state element k, with g = h / (n_head / n_group):
    ///
    /// ```text
    /// dt' = softplus(dt[h, t, s])                (x if x > 20, else ln(1 + e^x))
    /// dA  = exp(dt' * A[k, h])                   (A[0, h] for Mamba-2)
    /// S[k, i, h] = S[k, i, h] * dA + B[k, g, t, s] * x[i, h, t, s] * dt'
    /// y[i, h, t, s] = sum_k S[k, i, h] * C[k, g, t, s]
    /// ```
    ///
    /// starting from the states `s[:, :, :, ids[s]]`.
    ///
    /// Shapes: `s` [d_state, head_dim, n_head, n_slots] (the state cache,
    /// one slot per cell), `x` [head_dim, n_head, n_t, n_s], `dt`
    /// [n_head, n_t, n_s], `a` [d_state, n_head] (Mamba-1) or [1, n_head]
    /// (Mamba-2), `b` and `c` [d_state, n_group, n_t, n_s] with n_group
    /// dividing n_head, `ids` I32 [n_s]. Mamba-1 is head_dim 1, n_head
    /// d_inner, n_group 1.
    ///
    /// The result is 1-d F32 of `head_dim * n_head * n_t * n_s +
    /// d_state * head_dim * n_head * n_s` elements: y [head_dim, n_head,
    /// n_t, n_s] first, then the final states [d_state, head_dim, n_head,
    /// n_s], contiguous, for the graph to view (y) and copy back into the
    /// cache (states).
    #[allow(clippy::too_many_arguments)]
    pub fn ssm_scan(
        &mut self,
        s: TensorId,
        x: TensorId,
        dt: TensorId,
        a: TensorId,
        b: TensorId,
        c: TensorId,
        ids: TensorId,
    ) -> Result<TensorId> {
        let (ss, sx) = (self.desc(s), self.desc(x));
        let states = ss.ne[0] * ss.ne[1] * ss.ne[2] * sx.ne[3];
        let desc = TensorDesc::new(
            self.derived_name(x, "ssm_scan"),
            Type::F32,
            &[sx.n_elements() + states],
        );
        self.add_checked(desc, Op::SsmScan, &[s, x, dt, a, b, c, ids])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Mamba-2 scan's inputs: d_state, head_dim, n_head, n_group, n_t,
    /// n_s, slots.
    struct Scan {
        s: TensorId,
        x: TensorId,
        dt: TensorId,
        a: TensorId,
        b: TensorId,
        c: TensorId,
        ids: TensorId,
    }

    fn inputs(g: &mut Graph, dims: [usize; 7], a_rows: usize) -> Scan {
        let [d_state, head_dim, n_head, n_group, n_t, n_s, slots] = dims;
        Scan {
            s: g.input("s", Type::F32, &[d_state, head_dim, n_head, slots]),
            x: g.input("x", Type::F32, &[head_dim, n_head, n_t, n_s]),
            dt: g.input("dt", Type::F32, &[n_head, n_t, n_s]),
            a: g.input("A", Type::F32, &[a_rows, n_head]),
            b: g.input("B", Type::F32, &[d_state, n_group, n_t, n_s]),
            c: g.input("C", Type::F32, &[d_state, n_group, n_t, n_s]),
            ids: g.input("ids", Type::I32, &[n_s]),
        }
    }

    fn scan(g: &mut Graph, i: &Scan) -> Result<TensorId> {
        g.ssm_scan(i.s, i.x, i.dt, i.a, i.b, i.c, i.ids)
    }

    #[test]
    fn scan_result_holds_y_then_the_final_states() {
        let mut g = Graph::new();
        // Mamba-2: d_state 16, head_dim 4, 6 heads in 3 groups, 5 tokens
        // of 2 sequences, 4 state slots.
        let i = inputs(&mut g, [16, 4, 6, 3, 5, 2, 4], 1);
        let y = scan(&mut g, &i).unwrap();
        assert_eq!(g.desc(y).ne, [4 * 6 * 5 * 2 + 16 * 4 * 6 * 2, 1, 1, 1]);
        assert_eq!(g.desc(y).ty, Type::F32);
        // Mamba-1: A [d_state, d_inner], head_dim 1.
        let m1 = inputs(&mut g, [16, 1, 24, 1, 3, 1, 2], 16);
        assert!(scan(&mut g, &m1).is_ok());
    }

    fn scan_err(dims: [usize; 7], a_rows: usize, edit: impl Fn(&mut Graph, &mut Scan)) -> String {
        let mut g = Graph::new();
        let mut i = inputs(&mut g, dims, a_rows);
        edit(&mut g, &mut i);
        let n = g.len();
        let e = scan(&mut g, &i).unwrap_err().to_string();
        assert_eq!(g.len(), n, "a refused node stays out of the graph");
        e
    }

    #[test]
    fn scan_shapes_that_do_not_fit_are_errors_naming_the_problem() {
        let dims = [16, 4, 6, 3, 5, 2, 4];
        // B's d_state differs from the states'.
        let e = scan_err(dims, 1, |g, i| {
            i.b = g.input("B", Type::F32, &[8, 3, 5, 2]);
            i.c = g.input("C", Type::F32, &[8, 3, 5, 2]);
        });
        assert!(e.contains("SSM_SCAN") && e.contains("d_state"), "{e}");
        // A of Mamba-1 whose rows are not d_state.
        let e = scan_err(dims, 8, |_, _| {});
        assert!(e.contains("A") && e.contains("d_state"), "{e}");
        // 4 groups do not divide 6 heads.
        let e = scan_err([16, 4, 6, 4, 5, 2, 4], 1, |_, _| {});
        assert!(e.contains("n_group 4") && e.contains("n_head 6"), "{e}");
        // ids of the wrong type, then of the wrong length.
        let e = scan_err(dims, 1, |g, i| i.ids = g.input("ids", Type::F32, &[2]));
        assert!(e.contains("ids") && e.contains("I32"), "{e}");
        let e = scan_err(dims, 1, |g, i| i.ids = g.input("ids", Type::I32, &[3]));
        assert!(e.contains("ids") && e.contains("n_s"), "{e}");
        // dt with another token count, B and C of different shapes.
        let e = scan_err(dims, 1, |g, i| i.dt = g.input("dt", Type::F32, &[6, 4, 2]));
        assert!(e.contains("dt"), "{e}");
        let e = scan_err(dims, 1, |g, i| {
            i.c = g.input("C", Type::F32, &[16, 1, 5, 2])
        });
        assert!(e.contains("B") && e.contains("C"), "{e}");
        // States whose head_dim differs from x's.
        let e = scan_err(dims, 1, |g, i| {
            i.s = g.input("s", Type::F32, &[16, 2, 6, 4])
        });
        assert!(e.contains("head_dim"), "{e}");
    }

    #[test]
    fn conv_shapes() {
        let mut g = Graph::new();
        let sx = g.input("sx", Type::F32, &[3 + 7, 12, 2]);
        let c = g.input("c", Type::F32, &[4, 12]);
        let r = g.ssm_conv(sx, c).unwrap();
        assert_eq!(g.desc(r).ne, [12, 7, 2, 1]);
        let narrow = g.input("narrow", Type::F32, &[2, 12, 2]);
        let e = g.ssm_conv(narrow, c).unwrap_err().to_string();
        assert!(e.contains("SSM_CONV") && e.contains("d_conv"), "{e}");
        let other = g.input("other", Type::F32, &[10, 11, 2]);
        let e = g.ssm_conv(other, c).unwrap_err().to_string();
        assert!(e.contains("d_inner"), "{e}");
        let c3 = g.input("c3", Type::F32, &[4, 12, 2]);
        assert!(g.ssm_conv(sx, c3).is_err());
    }

    #[test]
    fn concat_shapes() {
        let mut g = Graph::new();
        let a = g.input("a", Type::F32, &[3, 5, 2]);
        let b = g.input("b", Type::F32, &[4, 5, 2]);
        let r = g.concat(a, b, 0).unwrap();
        assert_eq!(g.desc(r).ne, [7, 5, 2, 1]);
        let e = g.concat(a, b, 1).unwrap_err().to_string();
        assert!(e.contains("CONCAT") && e.contains("axis 0"), "{e}");
        let h = g.input("h", Type::F16, &[4, 5, 2]);
        assert!(g.concat(a, h, 0).unwrap_err().to_string().contains("F16"));
        assert!(g.concat(a, a, 4).is_err());
        let r2 = g.concat(a, a, 2).unwrap();
        assert_eq!(g.desc(r2).ne, [3, 5, 4, 1]);
    }
}
