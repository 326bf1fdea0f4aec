//! A llama-shaped graph with placed weights, for the allocator's tests and
//! bench: blocks of attention and feed-forward over a number of tokens.

use std::sync::Arc;

use ggml_core::{
    Buffer, Flags, Graph, Placement, RopeMode, RopeParams, TensorDesc, TensorId, Type,
};

/// Widths of the graph: model, heads, feed-forward, vocabulary.
pub struct Dims {
    /// Model width.
    pub d: usize,
    /// Attention heads.
    pub n_head: usize,
    /// Feed-forward width.
    pub ff: usize,
    /// Vocabulary size (rows of the output projection).
    pub vocab: usize,
}

/// An F32 weight of shape `ne` placed at the start of `buf`.
pub fn weight(g: &mut Graph, buf: &Arc<dyn Buffer>, name: &str, ne: &[usize]) -> TensorId {
    let at = Placement {
        buffer: buf.clone(),
        offset: 0,
    };
    g.import(TensorDesc::new(name, Type::F32, ne), at, Flags::WEIGHT)
}

/// Blocks over `n_tokens` tokens while `more(graph, blocks so far)` says
/// so, then the output head.
pub fn transformer(
    dims: &Dims,
    n_tokens: usize,
    buf: &Arc<dyn Buffer>,
    more: impl Fn(&Graph, usize) -> bool,
) -> Graph {
    let Dims {
        d,
        n_head,
        ff,
        vocab,
    } = *dims;
    let hd = d / n_head;
    let t = n_tokens;
    let mut g = Graph::new();
    let mut x = g.input("inp_embd", Type::F32, &[d, t]);
    let pos = g.input("inp_pos", Type::I32, &[t]);
    let mask = g.input("kq_mask", Type::F32, &[t, t]);
    let rope = RopeParams::new(hd, RopeMode::Normal, 10000.0);
    let mut l = 0;
    while more(&g, l) {
        let w = |g: &mut Graph, n: &str, ne: &[usize]| weight(g, buf, &format!("blk.{l}.{n}"), ne);
        let (wn, wq, wk, wv, wo) = (
            w(&mut g, "attn_norm", &[d]),
            w(&mut g, "attn_q", &[d, d]),
            w(&mut g, "attn_k", &[d, d]),
            w(&mut g, "attn_v", &[d, d]),
            w(&mut g, "attn_output", &[d, d]),
        );
        let (fnorm, wg, wu, wd) = (
            w(&mut g, "ffn_norm", &[d]),
            w(&mut g, "ffn_gate", &[d, ff]),
            w(&mut g, "ffn_up", &[d, ff]),
            w(&mut g, "ffn_down", &[ff, d]),
        );
        let n = g.rms_norm(x, 1e-5).unwrap();
        let n = g.mul(n, wn).unwrap();
        let q = g.mul_mat(wq, n).unwrap();
        let q = g.reshape(q, &[hd, n_head, t]).unwrap();
        let q = g.rope_ext(q, pos, None, rope).unwrap();
        let k = g.mul_mat(wk, n).unwrap();
        let k = g.reshape(k, &[hd, n_head, t]).unwrap();
        let k = g.rope_ext(k, pos, None, rope).unwrap();
        let v = g.mul_mat(wv, n).unwrap();
        let v = g.reshape(v, &[hd, n_head, t]).unwrap();
        let qp = g.permute(q, [0, 2, 1, 3]).unwrap();
        let kp = g.permute(k, [0, 2, 1, 3]).unwrap();
        let kq = g.mul_mat(kp, qp).unwrap();
        let kq = g.soft_max_ext(kq, Some(mask), 0.125, 0.0).unwrap();
        let vt = g.permute(v, [1, 2, 0, 3]).unwrap();
        let vt = g.cont(vt).unwrap();
        let kqv = g.mul_mat(vt, kq).unwrap();
        let o = g.permute(kqv, [0, 2, 1, 3]).unwrap();
        let o = g.cont_shape(o, &[d, t]).unwrap();
        let o = g.mul_mat(wo, o).unwrap();
        let h = g.add_op(x, o).unwrap();
        let n = g.rms_norm(h, 1e-5).unwrap();
        let n = g.mul(n, fnorm).unwrap();
        let gate = g.mul_mat(wg, n).unwrap();
        let up = g.mul_mat(wu, n).unwrap();
        let a = g.swiglu_split(gate, up).unwrap();
        let down = g.mul_mat(wd, a).unwrap();
        x = g.add_op(h, down).unwrap();
        l += 1;
    }
    let on = weight(&mut g, buf, "output_norm", &[d]);
    let wout = weight(&mut g, buf, "output", &[d, vocab]);
    let n = g.rms_norm(x, 1e-5).unwrap();
    let n = g.mul(n, on).unwrap();
    let logits = g.mul_mat(wout, n).unwrap();
    g.set_output(logits);
    g
}
