//! Builders of the ops a mixture-of-experts layer needs: MUL_MAT_ID,
//! ARGSORT and top-k, SUM_ROWS, DIV, CLAMP and SIGMOID, with ggml's shapes.

use super::{shape_err, Graph, TensorId};
use crate::op::{Op, SortOrder, UnaryOp};
use crate::tensor::TensorDesc;
use crate::{Result, Type};

impl Graph {
    /// One matrix per (slot, token), chosen by `ids`: `as_` [k, m, n_expert]
    /// (the experts), `b` [k, n_used or 1, n_tokens], `ids` I32
    /// [n_used, n_tokens] -> [m, n_used, n_tokens] F32, where
    /// `result[:, e, t] = as_[:, :, ids[e, t]]^T b[:, e % b.ne1, t]`.
    pub fn mul_mat_id(&mut self, as_: TensorId, b: TensorId, ids: TensorId) -> Result<TensorId> {
        let (sa, sb, si) = (self.desc(as_), self.desc(b), self.desc(ids));
        let ok = !sa.is_transposed()
            && si.ty == Type::I32
            && sa.ne[3] == 1
            && sb.ne[3] == 1
            && si.ne[2] == 1
            && si.ne[3] == 1
            && si.ne[1] == sb.ne[2]
            && sa.ne[0] == sb.ne[0]
            && sa.ne[2] > 0
            && sb.ne[1] > 0
            && si.ne[0] % sb.ne[1] == 0;
        if !ok {
            return shape_err(
                "MUL_MAT_ID",
                format!(
                    "experts '{}' {} {:?}, activations '{}' {} {:?}, ids '{}' {} {:?} do not fit \
                     (need [k, m, n_expert], [k, n_used or 1, n_tokens], I32 [n_used, n_tokens])",
                    sa.name, sa.ty, sa.ne, sb.name, sb.ty, sb.ne, si.name, si.ty, si.ne
                ),
            );
        }
        let desc = TensorDesc::new(
            self.derived_name(as_, "mul_mat_id"),
            Type::F32,
            &[sa.ne[1], si.ne[0], sb.ne[2]],
        );
        Ok(self.add(desc, Op::MulMatId, &[as_, b, ids]))
    }

    /// Indices (I32, same shape) that sort each row of the F32 tensor `a`.
    pub fn argsort(&mut self, a: TensorId, order: SortOrder) -> Result<TensorId> {
        let sa = self.desc(a);
        if sa.ty != Type::F32 || sa.ne[0] > i32::MAX as usize {
            return shape_err(
                "ARGSORT",
                format!("'{}' {} {:?} (need F32 rows)", sa.name, sa.ty, sa.ne),
            );
        }
        let desc = TensorDesc::new(self.derived_name(a, "argsort"), Type::I32, &sa.ne);
        Ok(self.add(desc, Op::Argsort(order), &[a]))
    }

    /// Indices of the `k` largest values of each row, largest first (ggml's
    /// `argsort_top_k`: a view of the first `k` columns of a descending
    /// ARGSORT): [k, ne1, ne2, ne3] I32.
    pub fn argsort_top_k(&mut self, a: TensorId, k: usize) -> Result<TensorId> {
        let sa = self.desc(a);
        if k == 0 || k > sa.ne[0] {
            return shape_err(
                "ARGSORT",
                format!("top {k} of rows of {} in '{}'", sa.ne[0], sa.name),
            );
        }
        let s = self.argsort(a, SortOrder::Desc)?;
        let d = self.desc(s).clone();
        self.view(s, &[k, d.ne[1], d.ne[2], d.ne[3]], &d.nb[1..], 0)
    }

    /// Sum of each row: [1, ne1, ne2, ne3], same type.
    pub fn sum_rows(&mut self, a: TensorId) -> Result<TensorId> {
        let sa = self.desc(a);
        if sa.ty != Type::F32 {
            return shape_err(
                "SUM_ROWS",
                format!("'{}' has type {} (need F32)", sa.name, sa.ty),
            );
        }
        let ne = [1, sa.ne[1], sa.ne[2], sa.ne[3]];
        let desc = TensorDesc::new(self.derived_name(a, "sum_rows"), sa.ty, &ne);
        Ok(self.add(desc, Op::SumRows, &[a]))
    }

    /// a / b, b broadcast over a.
    pub fn div(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.binary(Op::Div, a, b)
    }

    /// a limited to [min, max] element-wise.
    pub fn clamp(&mut self, a: TensorId, min: f32, max: f32) -> Result<TensorId> {
        if min.is_nan() || max.is_nan() || min > max {
            return shape_err(
                "CLAMP",
                format!("bounds [{min}, {max}] of '{}'", self.desc(a).name),
            );
        }
        self.unary_like(Op::Clamp { min, max }, a)
    }

    /// sigmoid(a).
    pub fn sigmoid(&mut self, a: TensorId) -> Result<TensorId> {
        self.unary(a, UnaryOp::Sigmoid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mul_mat_id_shapes() {
        let mut g = Graph::new();
        let w = g.new_tensor("exps", Type::Q4_K, &[256, 24, 8]);
        let x = g.input("x", Type::F32, &[256, 1, 5]);
        let ids = g.input("ids", Type::I32, &[3, 5]);
        let y = g.mul_mat_id(w, x, ids).unwrap();
        assert_eq!(g.desc(y).ne, [24, 3, 5, 1]);
        let x2 = g.input("x2", Type::F32, &[256, 3, 5]);
        let y2 = g.mul_mat_id(w, x2, ids).unwrap();
        assert_eq!(g.desc(y2).ne, [24, 3, 5, 1]);
        // Token count differs from the ids', k differs, ids not I32, b.ne1
        // not dividing n_used.
        let bad_t = g.input("bt", Type::F32, &[256, 1, 4]);
        let err = g.mul_mat_id(w, bad_t, ids).unwrap_err().to_string();
        assert!(err.contains("MUL_MAT_ID") && err.contains("bt"), "{err}");
        let bad_k = g.input("bk", Type::F32, &[128, 1, 5]);
        assert!(g.mul_mat_id(w, bad_k, ids).is_err());
        let fids = g.input("fids", Type::F32, &[3, 5]);
        assert!(g.mul_mat_id(w, x, fids).is_err());
        let x4 = g.input("x4", Type::F32, &[256, 2, 5]);
        assert!(g.mul_mat_id(w, x4, ids).is_err());
    }

    #[test]
    fn routing_shapes() {
        let mut g = Graph::new();
        let l = g.input("logits", Type::F32, &[8, 5]);
        let s = g.argsort(l, SortOrder::Asc).unwrap();
        assert_eq!((g.desc(s).ty, g.desc(s).ne), (Type::I32, [8, 5, 1, 1]));
        let t = g.argsort_top_k(l, 3).unwrap();
        assert_eq!(g.desc(t).ne, [3, 5, 1, 1]);
        assert_eq!(g.desc(t).nb[1], 8 * 4);
        assert!(g.argsort_top_k(l, 9).is_err());
        assert!(g.argsort_top_k(l, 0).is_err());
        let r = g.sum_rows(l).unwrap();
        assert_eq!(g.desc(r).ne, [1, 5, 1, 1]);
        assert!(g.div(l, r).is_ok());
        assert!(g.div(r, l).is_err());
        assert!(g.clamp(r, 1.0, 0.0).is_err());
        assert!(g.clamp(r, 6e-5, f32::INFINITY).is_ok());
        let i = g.input("i", Type::I32, &[8]);
        assert!(g.argsort(i, SortOrder::Desc).is_err());
        assert!(g.sum_rows(i).is_err());
    }
}
