//! Reference RWKV_WKV6 and RWKV_WKV7: states updated in f32 as ggml
//! does, each output an f64 sum.

use super::{load, store};
use crate::graph::{Graph, TensorId};
use crate::Result;

/// Sizes of a WKV node: head size, heads, tokens, sequences.
fn dims(k: [usize; 4], state: [usize; 4]) -> (usize, usize, usize, usize) {
    (k[0], k[1], k[2], state[1])
}

/// The recurrence of [`Graph::rwkv_wkv6`] (sources k, v, r, u, w, state).
pub(super) fn wkv6(graph: &Graph, id: TensorId, src: &[TensorId]) -> Result<()> {
    let [k, v, r, u, w, s0] = [0, 1, 2, 3, 4, 5].map(|i| load(graph, src[i]));
    let (k, v, r, u, w, s0) = (k?, v?, r?, u?, w?, s0?);
    let mut d = load(graph, id)?;
    let (hs, nh, nt, n_s) = dims(k.ne(), s0.ne());
    let per_seq = nt / n_s;
    let c = hs * nh;
    let mut st = vec![0f32; hs * hs];
    for seq in 0..n_s {
        for h in 0..nh {
            for (x, val) in st.iter_mut().enumerate() {
                *val = s0.get([x + hs * hs * h, seq, 0, 0]);
            }
            for t in seq * per_seq..(seq + 1) * per_seq {
                let mut out = vec![0f64; hs];
                for i in 0..hs {
                    let (kv_k, rv, uv, wv) = (
                        k.get([i, h, t, 0]),
                        r.get([i, h, t, 0]),
                        u.get([i, h, 0, 0]),
                        w.get([i, h, t, 0]),
                    );
                    for (j, o) in out.iter_mut().enumerate() {
                        let kv = kv_k * v.get([j, h, t, 0]);
                        let prev = st[i * hs + j];
                        *o += f64::from(rv) * (f64::from(uv) * f64::from(kv) + f64::from(prev));
                        st[i * hs + j] = prev * wv + kv;
                    }
                }
                for (j, o) in out.iter().enumerate() {
                    d.set([j + hs * h, t, 0, 0], *o as f32);
                }
            }
            for (x, &val) in st.iter().enumerate() {
                let at = x + hs * hs * h;
                d.set([at % c, nt + at / c + hs * seq, 0, 0], val);
            }
        }
    }
    store(graph, id, &d)
}

/// The recurrence of [`Graph::rwkv_wkv7`] (sources r, w, k, v, a, b,
/// state).
pub(super) fn wkv7(graph: &Graph, id: TensorId, src: &[TensorId]) -> Result<()> {
    let [r, w, k, v, a, b, s0] = [0, 1, 2, 3, 4, 5, 6].map(|i| load(graph, src[i]));
    let (r, w, k, v, a, b, s0) = (r?, w?, k?, v?, a?, b?, s0?);
    let mut d = load(graph, id)?;
    let (hs, nh, nt, n_s) = dims(k.ne(), s0.ne());
    let per_seq = nt / n_s;
    let c = hs * nh;
    let mut st = vec![0f32; hs * hs];
    for seq in 0..n_s {
        for h in 0..nh {
            for (x, val) in st.iter_mut().enumerate() {
                *val = s0.get([x + hs * hs * h, seq, 0, 0]);
            }
            for t in seq * per_seq..(seq + 1) * per_seq {
                let at = |x: &super::Data, j: usize| x.get([j, h, t, 0]);
                for i in 0..hs {
                    let row = &mut st[i * hs..(i + 1) * hs];
                    let sa: f64 = (0..hs)
                        .map(|j| f64::from(at(&a, j)) * f64::from(row[j]))
                        .sum();
                    let sa = sa as f32;
                    let vi = at(&v, i);
                    let mut out = 0f64;
                    for (j, s) in row.iter_mut().enumerate() {
                        *s = *s * at(&w, j) + vi * at(&k, j) + sa * at(&b, j);
                        out += f64::from(*s) * f64::from(at(&r, j));
                    }
                    d.set([i + hs * h, t, 0, 0], out as f32);
                }
            }
            for (x, &val) in st.iter().enumerate() {
                let at = x + hs * hs * h;
                d.set([at % c, nt + at / c + hs * seq, 0, 0], val);
            }
        }
    }
    store(graph, id, &d)
}

#[cfg(test)]
mod tests {
    use crate::graph::{Graph, TensorId};
    use crate::reference::test_run::run;
    use crate::Type;

    #[test]
    fn wkv6_worked_by_hand() {
        // Head size 1, one head, two tokens of one sequence: the state is a
        // scalar. out_t = r (u k v + S); S' = S w + k v.
        let mut g = Graph::new();
        let x: Vec<TensorId> = ["k", "v", "r", "w"]
            .iter()
            .map(|n| g.input(*n, Type::F32, &[1, 1, 2]))
            .collect();
        let u = g.input("u", Type::F32, &[1, 1]);
        let s = g.input("s", Type::F32, &[1, 1]);
        let y = g.rwkv_wkv6(x[0], x[1], x[2], u, x[3], s).unwrap();
        let data = [
            (x[0], vec![2.0, 1.0]),
            (x[1], vec![3.0, -1.0]),
            (x[2], vec![0.5, 2.0]),
            (x[3], vec![0.25, 0.5]),
            (u, vec![10.0]),
            (s, vec![4.0]),
        ];
        let got = run(&mut g, &data, y);
        // t0: out = 0.5 (10 * 6 + 4) = 32; S = 4 * 0.25 + 6 = 7.
        // t1: out = 2 (10 * -1 + 7) = -6; S = 7 * 0.5 - 1 = 2.5.
        assert_eq!(got, [32.0, -6.0, 2.5]);
    }

    #[test]
    fn wkv7_worked_by_hand() {
        // Head size 2, one head, one token. S = [[1, 2], [3, 4]] (row i =
        // value index), a = [1, 0] so sa_i = S[i][0] = [1, 3].
        let mut g = Graph::new();
        let x: Vec<TensorId> = ["r", "w", "k", "v", "a", "b"]
            .iter()
            .map(|n| g.input(*n, Type::F32, &[2, 1, 1]))
            .collect();
        let s = g.input("s", Type::F32, &[4, 1]);
        let y = g.rwkv_wkv7(x[0], x[1], x[2], x[3], x[4], x[5], s).unwrap();
        let data = [
            (x[0], vec![1.0, 1.0]),
            (x[1], vec![0.5, 1.0]),
            (x[2], vec![1.0, 2.0]),
            (x[3], vec![1.0, -1.0]),
            (x[4], vec![1.0, 0.0]),
            (x[5], vec![0.0, 1.0]),
            (s, vec![1.0, 2.0, 3.0, 4.0]),
        ];
        let got = run(&mut g, &data, y);
        // Row 0: [1 * 0.5 + 1 * 1 + 0, 2 * 1 + 1 * 2 + 1 * 1] = [1.5, 5].
        // Row 1: [3 * 0.5 - 1 + 0, 4 - 2 + 3] = [0.5, 5].
        // out = row sums (r = 1): [6.5, 5.5]; then the state rows.
        assert_eq!(got, [6.5, 5.5, 1.5, 5.0, 0.5, 5.0]);
    }
}
