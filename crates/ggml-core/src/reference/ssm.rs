//! Reference CONCAT, SSM_CONV and SSM_SCAN.

use super::{indices, load, store, unsupported};
use crate::graph::{Graph, TensorId};
use crate::Result;

/// Element by element: from `a` below its size on `dim`, else from `b`
/// shifted back by it; the bytes are copied unchanged.
pub(super) fn concat(graph: &Graph, id: TensorId, src: &[TensorId], dim: usize) -> Result<()> {
    let (a, b) = (load(graph, src[0])?, load(graph, src[1])?);
    let mut d = load(graph, id)?;
    if d.ty().block_size() != 1 {
        return unsupported(graph, id, format!("block type {}", d.ty()));
    }
    let es = d.ty().type_size();
    for i in indices(d.ne()) {
        let v = if i[dim] < a.ne()[dim] {
            a.raw(i).to_vec()
        } else {
            let mut j = i;
            j[dim] -= a.ne()[dim];
            b.raw(j).to_vec()
        };
        let o = d.at(i);
        d.bytes[o..o + es].copy_from_slice(&v);
    }
    store(graph, id, &d)
}

/// `r[ch, t, s] = sum_k sx[t + k, ch, s] * c[k, ch]`, the sum in f64.
pub(super) fn ssm_conv(graph: &Graph, id: TensorId, src: &[TensorId]) -> Result<()> {
    let (sx, c) = (load(graph, src[0])?, load(graph, src[1])?);
    let mut d = load(graph, id)?;
    let d_conv = c.ne()[0];
    for [ch, t, s, _] in indices(d.ne()) {
        let sum: f64 = (0..d_conv)
            .map(|k| f64::from(sx.get([t + k, ch, s, 0])) * f64::from(c.get([k, ch, 0, 0])))
            .sum();
        d.set([ch, t, s, 0], sum as f32);
    }
    store(graph, id, &d)
}

/// ggml's softplus: `x` above 20, else `ln(1 + e^x)`.
fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        (1.0 + x.exp()).ln()
    }
}

/// The scan of [`Graph::ssm_scan`], states updated in f32 as ggml does,
/// each output an f64 sum.
pub(super) fn ssm_scan(graph: &Graph, id: TensorId, src: &[TensorId]) -> Result<()> {
    let [s0, x, dt, a, b, c, ids] = [0, 1, 2, 3, 4, 5, 6].map(|i| load(graph, src[i]));
    let (s0, x, dt, a, b, c, ids) = (s0?, x?, dt?, a?, b?, c?, ids?);
    let mut d = load(graph, id)?;
    let [d_state, head_dim, n_head, n_slots] = s0.ne();
    let [_, _, n_t, n_s] = x.ne();
    let n_group = b.ne()[1];
    let per_group = n_head / n_group;
    let mamba1 = a.ne()[0] != 1;
    let y_len = x.desc.n_elements();
    let mut state = vec![0f32; d_state];
    for seq in 0..n_s {
        let slot = ids.get_int([seq, 0, 0, 0]);
        if slot < 0 || slot as usize >= n_slots {
            return unsupported(
                graph,
                id,
                format!("state slot {slot} of sequence {seq} is out of range 0..{n_slots}"),
            );
        }
        for h in 0..n_head {
            let g = h / per_group;
            for i in 0..head_dim {
                for (k, v) in state.iter_mut().enumerate() {
                    *v = s0.get([k, i, h, slot as usize]);
                }
                for t in 0..n_t {
                    let dt_sp = softplus(dt.get([h, t, seq, 0]));
                    let x_dt = x.get([i, h, t, seq]) * dt_sp;
                    let mut y = 0f64;
                    for (k, v) in state.iter_mut().enumerate() {
                        let decay = if mamba1 {
                            a.get([k, h, 0, 0])
                        } else {
                            a.get([0, h, 0, 0])
                        };
                        let da = (dt_sp * decay).exp();
                        *v = *v * da + b.get([k, g, t, seq]) * x_dt;
                        y += f64::from(*v) * f64::from(c.get([k, g, t, seq]));
                    }
                    let at = i + head_dim * (h + n_head * (t + n_t * seq));
                    d.set([at, 0, 0, 0], y as f32);
                }
                let base = y_len + d_state * (i + head_dim * (h + n_head * seq));
                for (k, &v) in state.iter().enumerate() {
                    d.set([base + k, 0, 0, 0], v);
                }
            }
        }
    }
    store(graph, id, &d)
}

#[cfg(test)]
mod tests {
    use crate::graph::Graph;
    use crate::reference::test_run::{f32_bytes as f, run_bytes as run};
    use crate::{reference, Type};

    #[test]
    fn a_scan_worked_by_hand() {
        // One head of one row, d_state 2, two tokens, A = -1, dt = 0 (so
        // softplus(dt) = ln 2 and dA = 1/2), starting from slot 1.
        let mut g = Graph::new();
        let s = g.input("s", Type::F32, &[2, 1, 1, 2]);
        let x = g.input("x", Type::F32, &[1, 1, 2, 1]);
        let dt = g.input("dt", Type::F32, &[1, 2, 1]);
        let a = g.input("A", Type::F32, &[1, 1]);
        let b = g.input("B", Type::F32, &[2, 1, 2, 1]);
        let c = g.input("C", Type::F32, &[2, 1, 2, 1]);
        let ids = g.input("ids", Type::I32, &[1]);
        let y = g.ssm_scan(s, x, dt, a, b, c, ids).unwrap();
        let data = [
            (s, f(&[9.0, 9.0, 1.0, 2.0])),
            (x, f(&[1.0, 2.0])),
            (dt, f(&[0.0, 0.0])),
            (a, f(&[-1.0])),
            (b, f(&[1.0, 0.0, 0.0, 1.0])),
            (c, f(&[1.0, 1.0, 1.0, -1.0])),
            (ids, 1i32.to_le_bytes().to_vec()),
        ];
        let got = run(&mut g, &data, y);
        let l = std::f32::consts::LN_2;
        // Token 1: S = [1/2 + ln 2, 1], y = S . [1, 1].
        // Token 2: S = [S0/2, 1/2 + 2 ln 2], y = S . [1, -1].
        let s2 = [0.25 + l / 2.0, 0.5 + 2.0 * l];
        let want = [1.5 + l, s2[0] - s2[1], s2[0], s2[1]];
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < 1e-6, "{got:?} vs {want:?}");
        }
    }

    #[test]
    fn a_conv_and_concat_worked_by_hand() {
        let mut g = Graph::new();
        let state = g.input("state", Type::F32, &[2, 1, 1]);
        let x = g.input("x", Type::F32, &[1, 2, 1]);
        let w = g.input("w", Type::F32, &[3, 1]);
        let xt = g.transpose(x).unwrap();
        let sx = g.concat(state, xt, 0).unwrap();
        let r = g.ssm_conv(sx, w).unwrap();
        let data = [
            (state, f(&[1.0, 2.0])),
            (x, f(&[3.0, 4.0])),
            (w, f(&[1.0, 10.0, 100.0])),
        ];
        // Windows [1, 2, 3] and [2, 3, 4].
        assert_eq!(run(&mut g, &data, r), [321.0, 432.0]);
        assert_eq!(reference::read_f32(&g, sx).unwrap(), [1.0, 2.0, 3.0, 4.0]);
    }
}
