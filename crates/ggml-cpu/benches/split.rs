//! When a node pays to split across two threads: each case is one node
//! computed by a two-thread backend, once with every node forced onto the
//! calling thread and once with every node split, at sizes around the
//! thresholds of `compute.rs` (`SERIAL_WORK`, in the node's work units:
//! elements for row ops, multiply-adds for MUL_MAT, query rows x keys x
//! (dk + dv) for attention) and `matmul.rs`. The lines give the fastest
//! (and median) microseconds of each, and which wins. On a shared, loaded
//! machine the fastest run is the least disturbed; compare runs made when
//! the machine is quiet.
//!
//! Environment:
//! * `GGML_BENCH_SECS=s`: seconds per case and mode (default 0.3).
//! * `GGML_BENCH_FILTER=text`: only the cases whose name contains `text`.

#[path = "common/timing.rs"]
mod timing;

use std::sync::Arc;

use ggml_core::backend::{Backend, Buffer, Placement};
use ggml_core::graph::{Graph, TensorId};
use ggml_core::{quants, Type};
use ggml_cpu::bench_support::force_split;
use ggml_cpu::{cpu_buffer_type, CpuBackend};
use timing::{env_secs_and_filter, time, Runs};

struct Case {
    name: String,
    work: usize,
    graph: Graph,
    out: TensorId,
    _buffers: Vec<Arc<dyn Buffer>>,
}

impl Case {
    /// The case computing `out` of `graph`, with its tensors `ids` placed
    /// (see [`place`]); `work` in the node's units.
    fn placed(
        name: String,
        work: usize,
        mut graph: Graph,
        ids: &[TensorId],
        out: TensorId,
    ) -> Case {
        let buffers = place(&mut graph, ids);
        Case {
            name,
            work,
            graph,
            out,
            _buffers: buffers,
        }
    }
}

/// Places every tensor of `ids` in its own CPU buffer, filled with small
/// random values (an F16 mask: zeros, every key visible; a causal mask:
/// query row i sees keys 0..=i).
fn place(g: &mut Graph, ids: &[TensorId]) -> Vec<Arc<dyn Buffer>> {
    let bt = cpu_buffer_type();
    let mut rng = test_support::Rng(5);
    let mut bufs = Vec::new();
    for &id in ids {
        let desc = g.desc(id).clone();
        let buf = bt.alloc_buffer(bt.alloc_size(&desc)).expect("alloc");
        buf.init_tensor(&desc, 0).expect("init tensor");
        let n: usize = desc.ne.iter().product();
        let vals: Vec<f32> = (0..n).map(|_| rng.f() * 0.5).collect();
        let bytes: Vec<u8> = match desc.ty {
            // An F16 mask of zeros: every key visible.
            _ if desc.name == "mask" => vec![0u8; 2 * n],
            _ if desc.name == "causal mask" => (0..n)
                .flat_map(|e| {
                    let (key, row) = (e % desc.ne[0], e / desc.ne[0]);
                    let m = if key <= row { 0.0 } else { f32::NEG_INFINITY };
                    half::f16::from_f32(m).to_bits().to_le_bytes()
                })
                .collect(),
            Type::F32 => vals.iter().flat_map(|v| v.to_le_bytes()).collect(),
            Type::F16 => vals
                .iter()
                .flat_map(|&v| half::f16::from_f32(v).to_bits().to_le_bytes())
                .collect(),
            ty => {
                let row = quants::row_size(ty, desc.ne[0]).expect("row size");
                let mut out = vec![0u8; row * (n / desc.ne[0])];
                quants::quantize_row(ty, &vals, &mut out).expect("quantize");
                out
            }
        };
        buf.set_tensor(0, &bytes).expect("set");
        g.node_mut(id).at = Some(Placement {
            buffer: buf.clone(),
            offset: 0,
        });
        bufs.push(buf);
    }
    bufs
}

fn mul_mat(ty: Type, k: usize, m: usize, n: usize) -> Case {
    let mut g = Graph::new();
    let w = g.new_tensor("w", ty, &[k, m]);
    let x = g.input("x", Type::F32, &[k, n]);
    let y = g.mul_mat(w, x).expect("mul_mat");
    Case::placed(
        format!("mul_mat {ty} {k}x{m}, {n} col"),
        k * m * n,
        g,
        &[w, x, y],
        y,
    )
}

fn attention(dk: usize, heads: usize, kv_heads: usize, n_kv: usize) -> Case {
    let mut g = Graph::new();
    let q = g.input("q", Type::F32, &[dk, 1, heads]);
    let k = g.new_tensor("k", Type::F16, &[dk, n_kv, kv_heads]);
    let v = g.new_tensor("v", Type::F16, &[dk, n_kv, kv_heads]);
    let m = g.input("mask", Type::F16, &[n_kv, 1]);
    let y = g
        .flash_attn_ext(q, k, v, Some(m), 1.0 / (dk as f32).sqrt(), 0.0, 0.0)
        .expect("flash_attn_ext");
    Case::placed(
        format!("flash_attn decode dk {dk}, {heads}/{kv_heads} heads, {n_kv} keys"),
        heads * n_kv * 2 * dk,
        g,
        &[q, k, v, m, y],
        y,
    )
}

/// Attention of a prompt of `n_q` tokens, the first of the cache's `n_kv`
/// keys, under a causal mask (the rest of the cache hidden).
fn prompt_attention(dk: usize, heads: usize, kv_heads: usize, n_q: usize, n_kv: usize) -> Case {
    let mut g = Graph::new();
    let q = g.input("q", Type::F32, &[dk, n_q, heads]);
    let k = g.new_tensor("k", Type::F16, &[dk, n_kv, kv_heads]);
    let v = g.new_tensor("v", Type::F16, &[dk, n_kv, kv_heads]);
    let m = g.input("causal mask", Type::F16, &[n_kv, n_q]);
    let y = g
        .flash_attn_ext(q, k, v, Some(m), 1.0 / (dk as f32).sqrt(), 0.0, 0.0)
        .expect("flash_attn_ext");
    Case::placed(
        format!("flash_attn prompt dk {dk}, {heads}/{kv_heads} heads, {n_q} of {n_kv} keys"),
        heads * n_q * n_kv * 2 * dk,
        g,
        &[q, k, v, m, y],
        y,
    )
}

fn rms_norm(n: usize, rows: usize) -> Case {
    let mut g = Graph::new();
    let x = g.input("x", Type::F32, &[n, rows]);
    let y = g.rms_norm(x, 1e-5).expect("rms_norm");
    Case::placed(
        format!("rms_norm {n} x {rows} rows"),
        2 * n * rows,
        g,
        &[x, y],
        y,
    )
}

fn add(n: usize, rows: usize) -> Case {
    let mut g = Graph::new();
    let a = g.input("a", Type::F32, &[n, rows]);
    let b = g.input("b", Type::F32, &[n, rows]);
    let y = g.add_op(a, b).expect("add");
    Case::placed(format!("add {n} x {rows} rows"), n * rows, g, &[a, b, y], y)
}

/// Ten warm-up runs, then 20 runs at least.
const RUNS: Runs = Runs {
    warm_up: 10,
    min: 20,
    max: 200_000,
};

fn main() {
    let (secs, filter) = env_secs_and_filter(0.3);
    let mut cases = Vec::new();
    for (k, m) in [
        (64, 64),
        (64, 172),
        (172, 64),
        (64, 512),
        (288, 288),
        (288, 768),
        (640, 640),
        (640, 2048),
    ] {
        cases.push(mul_mat(Type::F32, k, m, 1));
    }
    // A 64-token prompt through stories260K's matrices.
    for (k, m) in [(64, 32), (64, 64), (64, 172), (172, 64)] {
        cases.push(mul_mat(Type::F32, k, m, 64));
    }
    for (k, m) in [(640, 256), (640, 640), (640, 1024), (2048, 640)] {
        cases.push(mul_mat(Type::Q8_0, k, m, 1));
    }
    for n_kv in [16, 64, 128, 256, 1024] {
        cases.push(attention(8, 8, 8, n_kv));
        cases.push(attention(256, 4, 1, n_kv));
    }
    cases.push(prompt_attention(8, 8, 4, 64, 256));
    cases.push(prompt_attention(256, 4, 1, 512, 512));
    // TinyLlama-1.1B's shape.
    cases.push(prompt_attention(64, 32, 4, 512, 512));
    for (n, rows) in [
        (64, 8),
        (64, 64),
        (288, 64),
        (640, 16),
        (640, 64),
        (640, 512),
        (2048, 512),
    ] {
        cases.push(rms_norm(n, rows));
        cases.push(add(n, rows));
    }
    let mut backend = CpuBackend::new(2).expect("backend");
    println!(
        "{:<48} {:>9} {:>17} {:>17}  faster",
        "case", "work", "serial us", "split us"
    );
    for c in cases.iter().filter(|c| c.name.contains(&filter)) {
        let mut run = |split: bool| {
            force_split(Some(split));
            let (best, med, _) = time(secs, RUNS, || {
                backend.graph_compute(&c.graph, &[c.out]).expect("compute")
            });
            force_split(None);
            (best, med)
        };
        let (s_best, s_med) = run(false);
        let (p_best, p_med) = run(true);
        let us = |t: f64| t * 1e6;
        println!(
            "{:<48} {:>9} {:>8.2} ({:>6.2}) {:>8.2} ({:>6.2})  {}",
            c.name,
            c.work,
            us(s_best),
            us(s_med),
            us(p_best),
            us(p_med),
            if p_best < s_best { "split" } else { "serial" }
        );
    }
}
