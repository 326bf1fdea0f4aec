//! The graph allocator on a 10,000-node transformer-like graph: time per
//! `alloc_graph` after a reserve (planning and placing every tensor; no
//! buffer is allocated), for a prompt-shaped and a decode-shaped graph.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use ggml_core::alloc::GraphAlloc;
use ggml_core::host::{HostBufferType, HOST_ALIGNMENT};
use ggml_core::{
    Buffer, BufferType, Flags, Graph, Placement, RopeMode, RopeParams, TensorDesc, TensorId, Type,
};

fn weight(g: &mut Graph, buf: &Arc<dyn Buffer>, name: String, ne: &[usize]) -> TensorId {
    let at = Placement {
        buffer: buf.clone(),
        offset: 0,
    };
    g.import(TensorDesc::new(name, Type::F32, ne), at, Flags::WEIGHT)
}

/// A llama-shaped graph of at least `min_nodes` nodes over `n_tokens` tokens.
fn transformer(min_nodes: usize, n_tokens: usize, buf: &Arc<dyn Buffer>) -> Graph {
    let (d, n_head, ff, vocab) = (512, 8, 1408, 4096);
    let hd = d / n_head;
    let t = n_tokens;
    let mut g = Graph::new();
    let mut x = g.input("inp_embd", Type::F32, &[d, t]);
    let pos = g.input("inp_pos", Type::I32, &[t]);
    let mask = g.input("kq_mask", Type::F32, &[t, t]);
    let rope = RopeParams::new(hd, RopeMode::Normal, 10000.0);
    let mut l = 0;
    while g.len() + 5 < min_nodes {
        let w = |g: &mut Graph, n: &str, ne: &[usize]| weight(g, buf, format!("blk.{l}.{n}"), ne);
        let wn = w(&mut g, "attn_norm", &[d]);
        let wq = w(&mut g, "attn_q", &[d, d]);
        let wk = w(&mut g, "attn_k", &[d, d]);
        let wv = w(&mut g, "attn_v", &[d, d]);
        let wo = w(&mut g, "attn_output", &[d, d]);
        let fnorm = w(&mut g, "ffn_norm", &[d]);
        let wg = w(&mut g, "ffn_gate", &[d, ff]);
        let wu = w(&mut g, "ffn_up", &[d, ff]);
        let wd = w(&mut g, "ffn_down", &[ff, d]);
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
    let on = weight(&mut g, buf, "output_norm".into(), &[d]);
    let wout = weight(&mut g, buf, "output".into(), &[d, vocab]);
    let n = g.rms_norm(x, 1e-5).unwrap();
    let n = g.mul(n, on).unwrap();
    let logits = g.mul_mat(wout, n).unwrap();
    g.set_output(logits);
    g
}

fn bench_alloc(c: &mut Criterion) {
    let wbt: Arc<dyn BufferType> = HostBufferType::new("weights", HOST_ALIGNMENT, usize::MAX);
    let weights = wbt.alloc_buffer(64).unwrap();
    let host = HostBufferType::new("CPU", HOST_ALIGNMENT, usize::MAX);
    let worst = transformer(10_000, 512, &weights);
    let decode = transformer(10_000, 1, &weights);
    eprintln!("graph: {} nodes", worst.len());
    let mut ga = GraphAlloc::new(host.clone());
    ga.reserve(&worst).unwrap();
    eprintln!("reserved: {} bytes", ga.buffer_size(0));
    let allocs = host.n_allocs();

    let mut group = c.benchmark_group("graph_alloc_10k_nodes");
    for (name, g) in [("prompt_512", &worst), ("decode_1", &decode)] {
        group.bench_function(name, |b| {
            b.iter_batched_ref(
                || g.clone(),
                |g| black_box(ga.alloc_graph(g).unwrap()),
                BatchSize::LargeInput,
            )
        });
    }
    group.finish();
    assert_eq!(host.n_allocs(), allocs, "no buffer allocated after reserve");
}

criterion_group!(benches, bench_alloc);
criterion_main!(benches);
