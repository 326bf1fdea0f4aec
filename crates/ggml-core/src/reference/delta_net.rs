//! Reference GATED_DELTA_NET.

use super::{load, store};
use crate::graph::{Graph, TensorId};
use crate::Result;

/// The delta rule of [`Graph::gated_delta_net`], the states updated in
/// f32 as ggml does, each dot product an f64 sum.
pub(super) fn gated_delta_net(graph: &Graph, id: TensorId, src: &[TensorId]) -> Result<()> {
    let [q, k, v, g, beta, s0] = [0, 1, 2, 3, 4, 5].map(|i| load(graph, src[i]));
    let (q, k, v, g, beta, s0) = (q?, k?, v?, g?, beta?, s0?);
    let mut d = load(graph, id)?;
    let [s, h_v, n_t, n_s] = v.ne();
    let h_k = q.ne()[1];
    let per_key = g.ne()[0] == s;
    let scale = 1.0 / (s as f32).sqrt();
    let out_len = s * h_v * n_t * n_s;
    for seq in 0..n_s {
        for h in 0..h_v {
            let hk = h % h_k;
            // st[j * s + i] = S[i][j].
            let mut st: Vec<f32> = (0..s * s).map(|e| s0.get([e % s, e / s, h, seq])).collect();
            for t in 0..n_t {
                let kv: Vec<f32> = (0..s).map(|i| k.get([i, hk, t, seq])).collect();
                let qv: Vec<f32> = (0..s).map(|i| q.get([i, hk, t, seq])).collect();
                let b = beta.get([0, h, t, seq]);
                for j in 0..s {
                    for i in 0..s {
                        let gi = if per_key { i } else { 0 };
                        st[j * s + i] *= g.get([gi, h, t, seq]).exp();
                    }
                }
                for j in 0..s {
                    let row = &mut st[j * s..(j + 1) * s];
                    let sk: f64 = (0..s).map(|i| f64::from(row[i]) * f64::from(kv[i])).sum();
                    let delta = (v.get([j, h, t, seq]) - sk as f32) * b;
                    for i in 0..s {
                        row[i] += kv[i] * delta;
                    }
                    let o: f64 = (0..s).map(|i| f64::from(row[i]) * f64::from(qv[i])).sum();
                    let e = j + s * (h + h_v * (t + n_t * seq));
                    d.set([e % (s * h_v), e / (s * h_v), 0, 0], o as f32 * scale);
                }
            }
            for (e, &x) in st.iter().enumerate() {
                let e = out_len + e + s * s * (h + h_v * seq);
                d.set([e % (s * h_v), e / (s * h_v), 0, 0], x);
            }
        }
    }
    store(graph, id, &d)
}
