//! The ops gpt-oss brought to ggml: attention sinks (an extra source of
//! SOFT_MAX and FLASH_ATTN_EXT), ADD_ID (per-expert biases) and the
//! clamped SwiGLU `SWIGLU_OAI`, with ggml's shapes.

use super::{shape_err, Graph, TensorId};
use crate::op::Op;
use crate::tensor::TensorDesc;
use crate::{Result, Type};

/// Sinks fit an attention of `n_head` heads: F32, one logit per head.
pub(super) fn sinks_fit(sinks: &TensorDesc, n_head: usize) -> bool {
    sinks.ty == Type::F32 && sinks.ne == [n_head, 1, 1, 1]
}

/// ADD_ID: `a` [n, n_used, n_tokens], `b` [n, n_expert], `ids` I32
/// [n_used, n_tokens] -> the shape of `a`.
pub(super) fn add_id_fits(
    d: &TensorDesc,
    a: &TensorDesc,
    b: &TensorDesc,
    ids: &TensorDesc,
) -> std::result::Result<(), String> {
    let ok = d.ne == a.ne
        && a.ne[3] == 1
        && b.ne[0] == a.ne[0]
        && b.ne[1] > 0
        && b.ne[2] == 1
        && b.ne[3] == 1
        && ids.ty == Type::I32
        && ids.ne == [a.ne[1], a.ne[2], 1, 1];
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{:?} + rows of {:?} by ids {} {:?} -> {:?} (need [n, n_used, n_tokens], \
             [n, n_expert], I32 [n_used, n_tokens])",
            a.ne, b.ne, ids.ty, ids.ne, d.ne
        ))
    }
}

/// SWIGLU_OAI: gate and up of one shape, the result too.
pub(super) fn swiglu_oai_fits(
    d: &TensorDesc,
    gate: &TensorDesc,
    up: &TensorDesc,
) -> std::result::Result<(), String> {
    if gate.ne == up.ne && d.ne == gate.ne {
        Ok(())
    } else {
        Err(format!(
            "gate {:?} and up {:?} -> {:?} differ",
            gate.ne, up.ne, d.ne
        ))
    }
}

impl Graph {
    /// `a[:, e, t] + b[:, ids[e, t]]` (ggml_add_id): `a` F32 [n, n_used,
    /// n_tokens], `b` F32 [n, n_expert], `ids` I32 [n_used, n_tokens].
    pub fn add_id(&mut self, a: TensorId, b: TensorId, ids: TensorId) -> Result<TensorId> {
        let (sa, sb) = (self.desc(a), self.desc(b));
        if sa.ty != Type::F32 || sb.ty != Type::F32 {
            return shape_err(
                "ADD_ID",
                format!(
                    "'{}' is {} and '{}' is {} (need F32)",
                    sa.name, sa.ty, sb.name, sb.ty
                ),
            );
        }
        let desc = TensorDesc::new(self.derived_name(a, "add_id"), Type::F32, &sa.ne);
        self.add_checked(desc, Op::AddId, &[a, b, ids])
    }

    /// gpt-oss's clamped SwiGLU of separate `gate` and `up` (ggml_swiglu_oai):
    /// `min(gate, limit)`, then `g * sigmoid(alpha g) * (clamp(up, -limit,
    /// limit) + 1)`.
    pub fn swiglu_oai(
        &mut self,
        gate: TensorId,
        up: TensorId,
        alpha: f32,
        limit: f32,
    ) -> Result<TensorId> {
        let (sg, su) = (self.desc(gate), self.desc(up));
        if sg.ty != Type::F32 || su.ty != Type::F32 {
            return shape_err(
                "SWIGLU_OAI",
                format!(
                    "gate '{}' is {} and up '{}' is {} (need F32)",
                    sg.name, sg.ty, su.name, su.ty
                ),
            );
        }
        if !alpha.is_finite() || limit.is_nan() || limit < 0.0 {
            return shape_err(
                "SWIGLU_OAI",
                format!("alpha {alpha} and limit {limit} of '{}'", sg.name),
            );
        }
        let desc = TensorDesc::new(self.derived_name(gate, "swiglu_oai"), Type::F32, &sg.ne);
        self.add_checked(desc, Op::SwigluOai { alpha, limit }, &[gate, up])
    }

    /// Adds attention sinks to a SOFT_MAX or FLASH_ATTN_EXT node that has a
    /// mask (ggml_soft_max_add_sinks, ggml_flash_attn_ext_add_sinks):
    /// `sinks` F32 [n_head], one logit per head that joins the softmax
    /// denominator as if it were one more key with no value.
    pub fn add_sinks(&mut self, node: TensorId, sinks: TensorId) -> Result<TensorId> {
        let n = self.node(node);
        let full = match n.op {
            Op::SoftMax { .. } => 2,
            Op::FlashAttnExt { .. } => 4,
            _ => {
                return shape_err(
                    "SINKS",
                    format!(
                        "'{}' is {}, not SOFT_MAX or FLASH_ATTN_EXT",
                        n.desc.name,
                        n.op.name()
                    ),
                )
            }
        };
        if n.src.len() != full {
            return shape_err(
                n.op.name(),
                format!(
                    "attention sinks '{}' on '{}', which has no mask (or sinks already): \
                     sinks without a mask are not supported",
                    self.desc(sinks).name,
                    n.desc.name
                ),
            );
        }
        let op = n.op.name();
        self.node_mut(node).src.push(sinks);
        if let Err(e) = self.validate(node) {
            self.node_mut(node).src.pop();
            let s = self.desc(sinks);
            return shape_err(
                op,
                format!("attention sinks '{}' {} {:?}: {e}", s.name, s.ty, s.ne),
            );
        }
        Ok(node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_id_shapes() {
        let mut g = Graph::new();
        let a = g.input("a", Type::F32, &[6, 2, 3]);
        let b = g.input("bias", Type::F32, &[6, 8]);
        let ids = g.input("ids", Type::I32, &[2, 3]);
        let r = g.add_id(a, b, ids).unwrap();
        assert_eq!(g.desc(r).ne, [6, 2, 3, 1]);
        let short = g.input("short", Type::F32, &[5, 8]);
        let err = g.add_id(a, short, ids).unwrap_err().to_string();
        assert!(err.contains("ADD_ID"), "{err}");
        let fids = g.input("fids", Type::F32, &[2, 3]);
        assert!(g.add_id(a, b, fids).is_err());
        let ids2 = g.input("ids2", Type::I32, &[3, 3]);
        assert!(g.add_id(a, b, ids2).is_err());
        let h = g.input("h", Type::F16, &[6, 8]);
        assert!(g.add_id(a, h, ids).is_err());
    }

    #[test]
    fn swiglu_oai_shapes() {
        let mut g = Graph::new();
        let x = g.input("gate", Type::F32, &[4, 2, 3]);
        let y = g.input("up", Type::F32, &[4, 2, 3]);
        let r = g.swiglu_oai(x, y, 1.702, 7.0).unwrap();
        assert_eq!(g.desc(r).ne, [4, 2, 3, 1]);
        let z = g.input("z", Type::F32, &[4, 3, 2]);
        assert!(g.swiglu_oai(x, z, 1.702, 7.0).is_err());
        assert!(g.swiglu_oai(x, y, f32::NAN, 7.0).is_err());
        assert!(g.swiglu_oai(x, y, 1.0, -1.0).is_err());
    }

    #[test]
    fn sinks_need_a_mask_and_one_logit_per_head() {
        let mut g = Graph::new();
        let kq = g.input("kq", Type::F32, &[8, 3, 4]);
        let mask = g.input("mask", Type::F16, &[8, 3]);
        let sinks = g.input("sinks", Type::F32, &[4]);
        let bad = g.input("bad_sinks", Type::F32, &[3]);
        let plain = g.soft_max_ext(kq, None, 1.0, 0.0).unwrap();
        let err = g.add_sinks(plain, sinks).unwrap_err().to_string();
        assert!(err.contains("no mask"), "{err}");
        let sm = g.soft_max_ext(kq, Some(mask), 1.0, 0.0).unwrap();
        let err = g.add_sinks(sm, bad).unwrap_err().to_string();
        assert!(err.contains("bad_sinks"), "{err}");
        assert_eq!(g.node(sm).src.len(), 2);
        g.add_sinks(sm, sinks).unwrap();
        assert_eq!(g.node(sm).src.len(), 3);
        assert!(g.add_sinks(sm, sinks).is_err());

        let q = g.input("q", Type::F32, &[16, 3, 4]);
        let k = g.input("k", Type::F16, &[16, 8, 2]);
        let v = g.input("v", Type::F16, &[16, 8, 2]);
        let fa = g
            .flash_attn_ext(q, k, v, Some(mask), 0.25, 0.0, 0.0)
            .unwrap();
        g.add_sinks(fa, sinks).unwrap();
        assert_eq!(g.node(fa).src.len(), 5);
        let a = g.input("a", Type::F32, &[4]);
        assert!(g.add_sinks(a, sinks).is_err());
    }
}
