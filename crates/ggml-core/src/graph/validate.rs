//! What makes a node well formed: the number of sources its op takes and
//! the shapes of those sources and of its result. This is the one place
//! that says so; the graph builders produce only nodes that pass, and a
//! backend calls [`Graph::validate`] before looking at a node, so that its
//! `supports_op` checks types and device limits only and never indexes a
//! source that is not there.

use crate::op::Op;
use crate::tensor::TensorDesc;
use crate::{Error, Result, Type};

use super::{Graph, TensorId};

/// Sources an op takes: the fewest and the most.
fn arity(op: &Op) -> (usize, usize) {
    match op {
        Op::None => (0, 0),
        Op::View | Op::Reshape | Op::Permute(_) | Op::Transpose => (1, 1),
        Op::Dup | Op::Cont => (1, 1),
        Op::Cpy => (2, 2),
        Op::Add | Op::Mul | Op::GetRows | Op::MulMat => (2, 2),
        Op::Scale(_) | Op::Unary(_) | Op::RmsNorm { .. } | Op::Norm { .. } | Op::Argmax => (1, 1),
        Op::Glu { .. } => (1, 2),
        Op::Rope(_) => (2, 3),
        Op::SoftMax { .. } => (1, 3),
        Op::SetRows => (3, 3),
        Op::FlashAttnExt { .. } => (3, 5),
        Op::MulMatId => (3, 3),
        Op::Argsort(_) | Op::SumRows | Op::Clamp { .. } => (1, 1),
        Op::Div => (2, 2),
        Op::Concat { .. } | Op::SsmConv => (2, 2),
        Op::SsmScan => (7, 7),
        Op::L2Norm { .. } => (1, 1),
        Op::RwkvWkv6 => (6, 6),
        Op::RwkvWkv7 => (7, 7),
        Op::GatedDeltaNet => (6, 6),
        Op::AddId => (3, 3),
        Op::SwigluOai { .. } => (2, 2),
    }
}

impl Graph {
    /// Checks that node `id` is well formed: its op has the number of
    /// sources it takes, and their shapes fit together and give the node's
    /// shape. Types and layouts a kernel needs are the backend's to check.
    pub fn validate(&self, id: TensorId) -> Result<()> {
        let node = self.node(id);
        let (lo, hi) = arity(&node.op);
        let n = node.src.len();
        if n < lo || n > hi {
            let want = if lo == hi {
                format!("{lo}")
            } else {
                format!("{lo} to {hi}")
            };
            return Err(Error::Shape {
                op: node.op.name(),
                msg: format!("'{}' has {n} sources, the op takes {want}", node.desc.name),
            });
        }
        let src: Vec<&TensorDesc> = node.src.iter().map(|&s| self.desc(s)).collect();
        shapes_fit(&node.op, &node.desc, &src).map_err(|why| Error::Shape {
            op: node.op.name(),
            msg: format!("'{}': {why}", node.desc.name),
        })
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

/// The shape rules of each op; `s` holds as many sources as [`arity`]
/// allows (checked before).
fn shapes_fit(op: &Op, d: &TensorDesc, s: &[&TensorDesc]) -> std::result::Result<(), String> {
    match op {
        // Views are checked by the builders that make them, against the
        // bytes of the tensor they view.
        Op::None | Op::View | Op::Reshape | Op::Permute(_) | Op::Transpose => Ok(()),
        Op::Dup | Op::Cont | Op::Cpy => {
            let a = s[0];
            ensure(a.n_elements() == d.n_elements(), || {
                format!("{:?} -> {:?} differ in size", a.ne, d.ne)
            })
        }
        Op::Add | Op::Mul | Op::Div => {
            let (a, b) = (s[0], s[1]);
            ensure(b.can_repeat_into(a) && a.ne == d.ne, || {
                format!("shapes {:?} {:?} -> {:?}", a.ne, b.ne, d.ne)
            })
        }
        Op::Scale(_)
        | Op::Unary(_)
        | Op::RmsNorm { .. }
        | Op::Norm { .. }
        | Op::L2Norm { .. }
        | Op::Clamp { .. }
        | Op::Argsort(_) => {
            let a = s[0];
            ensure(a.ne == d.ne, || format!("{:?} -> {:?}", a.ne, d.ne))
        }
        Op::Glu { .. } => {
            let a = s[0];
            let ok = match s.get(1) {
                Some(b) => a.ne == d.ne && b.ne == d.ne,
                None => a.ne[0] == 2 * d.ne[0] && a.ne[1..] == d.ne[1..],
            };
            ensure(ok, || format!("{:?} -> {:?}", a.ne, d.ne))
        }
        Op::GetRows => {
            let (a, i) = (s[0], s[1]);
            let ok = d.ne == [a.ne[0], i.ne[0], i.ne[1], i.ne[2]]
                && a.ne[2] == i.ne[1]
                && a.ne[3] == i.ne[2]
                && i.ne[3] == 1;
            ensure(ok, || format!("{:?} by {:?} -> {:?}", a.ne, i.ne, d.ne))
        }
        Op::SetRows => {
            let (dst, src, idx) = (s[0], s[1], s[2]);
            let ok = dst.ne[0] == src.ne[0]
                && idx.ne[0] == src.ne[1]
                && idx.ne[1] > 0
                && idx.ne[2] > 0
                && src.ne[2] % idx.ne[1] == 0
                && src.ne[3] % idx.ne[2] == 0
                && dst.ne[2] == src.ne[2]
                && dst.ne[3] == src.ne[3];
            ensure(ok, || {
                format!("dst {:?}, src {:?}, idx {:?}", dst.ne, src.ne, idx.ne)
            })
        }
        Op::SumRows => {
            let a = s[0];
            ensure(d.ne == [1, a.ne[1], a.ne[2], a.ne[3]], || {
                format!("{:?} -> {:?}", a.ne, d.ne)
            })
        }
        Op::MulMatId => {
            let (a, b, ids) = (s[0], s[1], s[2]);
            let ok = a.ne[0] == b.ne[0]
                && a.ne[2] > 0
                && a.ne[3] == 1
                && b.ne[1] > 0
                && b.ne[3] == 1
                && ids.ne[1] == b.ne[2]
                && ids.ne[2] == 1
                && ids.ne[3] == 1
                && ids.ne[0] % b.ne[1] == 0
                && d.ne == [a.ne[1], ids.ne[0], b.ne[2], 1];
            ensure(ok, || {
                format!("{:?} by {:?} x {:?} -> {:?}", a.ne, ids.ne, b.ne, d.ne)
            })
        }
        Op::MulMat => {
            let (a, b) = (s[0], s[1]);
            let ok = a.ne[0] == b.ne[0]
                && a.ne[2] > 0
                && a.ne[3] > 0
                && b.ne[2] % a.ne[2] == 0
                && b.ne[3] % a.ne[3] == 0
                && d.ne == [a.ne[1], b.ne[1], b.ne[2], b.ne[3]];
            ensure(ok, || format!("{:?} x {:?} -> {:?}", a.ne, b.ne, d.ne))
        }
        Op::Rope(p) => {
            let (a, pos) = (s[0], s[1]);
            let mut ok =
                a.ne == d.ne && pos.ne[0] >= a.ne[2] && p.n_dims <= a.ne[0] && p.n_dims % 2 == 0;
            if let Some(f) = s.get(2) {
                ok &= f.ne[0] >= p.n_dims / 2;
            }
            ensure(ok, || {
                format!("{:?} at {:?}, n_dims {}", a.ne, pos.ne, p.n_dims)
            })
        }
        Op::SoftMax { .. } => {
            let a = s[0];
            let mut ok = a.ne == d.ne;
            if let Some(m) = s.get(1) {
                ok &= m.ne[0] == a.ne[0] && m.ne[1] >= a.ne[1] && m.ne[2] > 0 && m.ne[3] > 0;
            }
            if let Some(k) = s.get(2) {
                ok &= super::oai::sinks_fit(k, a.ne[2]);
            }
            ensure(ok, || format!("{:?} -> {:?}", a.ne, d.ne))
        }
        Op::Argmax => {
            let a = s[0];
            let ok = d.ne[0] == a.ne[1] * a.ne[2] * a.ne[3] && a.ne[0] > 0;
            ensure(ok, || format!("{:?} -> {:?}", a.ne, d.ne))
        }
        Op::Concat { dim } => concat_fits(*dim, d, s[0], s[1]),
        Op::SsmConv => ssm_conv_fits(d, s[0], s[1]),
        Op::SsmScan => ssm_scan_fits(d, s),
        Op::RwkvWkv6 | Op::RwkvWkv7 => super::rwkv::wkv_fits(op, d, s),
        Op::GatedDeltaNet => super::delta_net::gated_delta_net_fits(d, s),
        Op::AddId => super::oai::add_id_fits(d, s[0], s[1], s[2]),
        Op::SwigluOai { .. } => super::oai::swiglu_oai_fits(d, s[0], s[1]),
        Op::FlashAttnExt { .. } => {
            let (q, k, v) = (s[0], s[1], s[2]);
            let mut ok = q.ne[0] == k.ne[0]
                && k.ne[1] == v.ne[1]
                && k.ne[2] == v.ne[2]
                && k.ne[3] == v.ne[3]
                && k.ne[2] > 0
                && k.ne[3] > 0
                && q.ne[2] % k.ne[2] == 0
                && q.ne[3] % k.ne[3] == 0
                && d.ne == [v.ne[0], q.ne[2], q.ne[1], q.ne[3]];
            if let Some(m) = s.get(3) {
                ok &= m.ne[0] == k.ne[1] && m.ne[1] >= q.ne[1] && m.ne[2] > 0 && m.ne[3] > 0;
            }
            if let Some(sk) = s.get(4) {
                ok &= super::oai::sinks_fit(sk, q.ne[2]);
            }
            ensure(ok, || {
                format!("q {:?}, k {:?}, v {:?} -> {:?}", q.ne, k.ne, v.ne, d.ne)
            })
        }
    }
}

/// CONCAT: `b` follows `a` along `dim`, every other axis equal, one type.
fn concat_fits(
    dim: usize,
    d: &TensorDesc,
    a: &TensorDesc,
    b: &TensorDesc,
) -> std::result::Result<(), String> {
    ensure(dim < 4, || format!("axis {dim} (there are 4)"))?;
    ensure(a.ty == b.ty && d.ty == a.ty, || {
        format!("types {} and {} -> {} differ", a.ty, b.ty, d.ty)
    })?;
    for i in (0..4).filter(|&i| i != dim) {
        ensure(a.ne[i] == b.ne[i], || {
            format!(
                "{:?} and {:?} differ on axis {i} (joined along axis {dim})",
                a.ne, b.ne
            )
        })?;
    }
    let mut want = a.ne;
    want[dim] += b.ne[dim];
    ensure(d.ne == want, || {
        format!("{:?} and {:?} -> {:?}", a.ne, b.ne, d.ne)
    })
}

/// SSM_CONV: sx [d_conv - 1 + n_t, d_inner, n_s], c [d_conv, d_inner] ->
/// [d_inner, n_t, n_s].
fn ssm_conv_fits(
    d: &TensorDesc,
    sx: &TensorDesc,
    c: &TensorDesc,
) -> std::result::Result<(), String> {
    ensure(c.ne[2] == 1 && c.ne[3] == 1 && c.ne[0] > 0, || {
        format!("kernel {:?} is not a matrix [d_conv, d_inner]", c.ne)
    })?;
    ensure(sx.ne[3] == 1, || {
        format!(
            "input {:?} is not 3-d [d_conv - 1 + n_t, d_inner, n_s]",
            sx.ne
        )
    })?;
    ensure(sx.ne[1] == c.ne[1], || {
        format!(
            "input {:?} has d_inner {}, kernel {:?} has {}",
            sx.ne, sx.ne[1], c.ne, c.ne[1]
        )
    })?;
    ensure(sx.ne[0] + 1 >= c.ne[0], || {
        format!(
            "input rows of {} are shorter than d_conv - 1 = {}",
            sx.ne[0],
            c.ne[0] - 1
        )
    })?;
    let want = [c.ne[1], sx.ne[0] + 1 - c.ne[0], sx.ne[2], 1];
    ensure(d.ne == want, || {
        format!("{:?} * {:?} -> {:?}, expected {want:?}", sx.ne, c.ne, d.ne)
    })
}

/// SSM_SCAN: see [`Graph::ssm_scan`] for the shapes.
fn ssm_scan_fits(d: &TensorDesc, src: &[&TensorDesc]) -> std::result::Result<(), String> {
    let (s, x, dt, a, b, c, ids) = (src[0], src[1], src[2], src[3], src[4], src[5], src[6]);
    let [d_state, head_dim, n_head, _] = s.ne;
    let [_, _, n_t, n_s] = x.ne;
    ensure(d_state > 0 && s.ne[3] > 0, || {
        format!(
            "states {:?} are empty (need [d_state, head_dim, n_head, n_slots])",
            s.ne
        )
    })?;
    ensure(x.ne[0] == head_dim && x.ne[1] == n_head, || {
        format!(
            "x {:?} is not [head_dim {head_dim}, n_head {n_head}, n_t, n_s] of states {:?}",
            x.ne, s.ne
        )
    })?;
    ensure(dt.ne == [n_head, n_t, n_s, 1], || {
        format!(
            "dt {:?} is not [n_head {n_head}, n_t {n_t}, n_s {n_s}]",
            dt.ne
        )
    })?;
    ensure(
        a.ne[1] == n_head && a.ne[2] == 1 && a.ne[3] == 1 && (a.ne[0] == 1 || a.ne[0] == d_state),
        || {
            format!(
                "A {:?} is neither [d_state {d_state}, n_head {n_head}] (Mamba-1) nor [1, n_head] (Mamba-2)",
                a.ne
            )
        },
    )?;
    ensure(b.ne == c.ne, || {
        format!("B {:?} and C {:?} differ", b.ne, c.ne)
    })?;
    let n_group = b.ne[1];
    ensure(
        b.ne[0] == d_state && b.ne[2] == n_t && b.ne[3] == n_s,
        || {
            format!(
                "B {:?} is not [d_state {d_state}, n_group, n_t {n_t}, n_s {n_s}]",
                b.ne
            )
        },
    )?;
    ensure(n_group > 0 && n_head % n_group == 0, || {
        format!("n_group {n_group} does not divide n_head {n_head}")
    })?;
    ensure(ids.ty == Type::I32, || {
        format!("ids are {}, need I32", ids.ty)
    })?;
    ensure(ids.ne == [n_s, 1, 1, 1], || {
        format!("ids {:?} is not a vector of n_s = {n_s} slots", ids.ne)
    })?;
    let want = x.n_elements() + d_state * head_dim * n_head * n_s;
    ensure(d.ne == [want, 1, 1, 1], || {
        format!(
            "result {:?}, expected [{want}] (y, then the final states)",
            d.ne
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{Flags, Node};
    use crate::Type;

    fn raw(g: &mut Graph, op: Op, ne: &[usize], src: &[TensorId]) -> TensorId {
        g.push(Node {
            desc: TensorDesc::new("raw", Type::F32, ne),
            op,
            src: src.iter().copied().collect(),
            view: None,
            flags: Flags::default(),
            at: None,
        })
    }

    #[test]
    fn a_missing_source_is_an_error_naming_the_op() {
        let mut g = Graph::new();
        let a = g.input("a", Type::F32, &[8, 2]);
        for op in [Op::MulMat, Op::Add, Op::GetRows, Op::SetRows] {
            let id = raw(&mut g, op.clone(), &[8, 2], &[a]);
            let e = g.validate(id).unwrap_err().to_string();
            assert!(e.contains(op.name()) && e.contains("1 sources"), "{e}");
        }
        let id = raw(&mut g, Op::Scale(2.0), &[8, 2], &[]);
        assert!(g.validate(id).is_err());
    }

    #[test]
    fn shapes_that_do_not_fit_are_errors() {
        let mut g = Graph::new();
        let w = g.input("w", Type::F32, &[8, 4]);
        let x = g.input("x", Type::F32, &[8, 3]);
        // The product of [8, 4] and [8, 3] is [4, 3], not [3, 4].
        let bad = raw(&mut g, Op::MulMat, &[3, 4], &[w, x]);
        let e = g.validate(bad).unwrap_err().to_string();
        assert!(e.contains("MUL_MAT") && e.contains("[3, 4, 1, 1]"), "{e}");
        let good = raw(&mut g, Op::MulMat, &[4, 3], &[w, x]);
        g.validate(good).unwrap();
        let y = g.input("y", Type::F32, &[7, 3]);
        let add = raw(&mut g, Op::Add, &[8, 3], &[x, y]);
        assert!(g.validate(add).is_err());
    }
}
