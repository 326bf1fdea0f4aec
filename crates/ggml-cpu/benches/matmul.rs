//! MUL_MAT throughput of the CPU backend at LLM shapes, per weight type:
//! matrix x vector (1 column, reported as GB/s of weights read) and matrix
//! x matrix (many columns, reported as elements/s where one element is one
//! floating-point operation, i.e. FLOP/s).
//!
//! Environment:
//! * `GGML_BENCH_FULL=1`: shapes 4096x4096, 4096x11008 and 11008x4096 (k x
//!   m) with 1 and 512 columns and every type; by default a subset that runs
//!   in a few minutes (4096x4096 and 4096x11008 matvec, 4096x4096 with 64
//!   columns, the most used types).
//! * `GGML_BENCH_TYPES=q4_0,q8_0,...`: the types to run.
//! * `GGML_BENCH_THREADS=n`: worker threads (default: physical cores).
//! * `GGML_BENCH_COLS=n`: columns of the matrix x matrix cases.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{activation_bytes, weight_rows};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ggml_core::backend::{Backend, Buffer, Placement};
use ggml_core::graph::{Graph, TensorId};
use ggml_core::{Type, MATMUL_TYPES};
use ggml_cpu::{cpu_buffer_type, CpuBackend};

const DEFAULT_TYPES: &[Type] = &[
    Type::F16,
    Type::Q4_0,
    Type::Q8_0,
    Type::Q4_K,
    Type::Q6_K,
    Type::Q5_0,
];

fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| v != "0" && !v.is_empty())
}

fn types() -> Vec<Type> {
    if let Ok(list) = std::env::var("GGML_BENCH_TYPES") {
        return list
            .split(',')
            .filter_map(|s| {
                Type::from_name(&s.trim().to_uppercase()).or_else(|| Type::from_name(s.trim()))
            })
            .collect();
    }
    if env_flag("GGML_BENCH_FULL") {
        MATMUL_TYPES.to_vec()
    } else {
        DEFAULT_TYPES.to_vec()
    }
}

fn threads() -> usize {
    std::env::var("GGML_BENCH_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(ggml_cpu::default_n_threads)
}

struct Setup {
    graph: Graph,
    ids: Vec<TensorId>,
    _buffers: Vec<Arc<dyn Buffer>>,
}

fn setup(ty: Type, k: usize, m: usize, n: usize) -> Setup {
    let mut g = Graph::new();
    let w = g.new_tensor("w", ty, &[k, m]);
    let x = g.input("x", Type::F32, &[k, n]);
    let y = g.mul_mat(w, x).expect("mul_mat");
    let buft = cpu_buffer_type();
    let mut buffers = Vec::new();
    for id in [w, x, y] {
        let size = g.desc(id).nbytes();
        let buf = buft.alloc_buffer(size).expect("alloc");
        g.node_mut(id).at = Some(Placement::new(buf.clone(), 0));
        buffers.push(buf);
    }
    buffers[0]
        .set_tensor(0, &weight_rows(ty, k, m, 16))
        .expect("set weights");
    buffers[1]
        .set_tensor(0, &activation_bytes(k * n))
        .expect("set activations");
    Setup {
        graph: g,
        ids: vec![y],
        _buffers: buffers,
    }
}

fn bench(c: &mut Criterion) {
    let full = env_flag("GGML_BENCH_FULL");
    let n_threads = threads();
    let mut backend = CpuBackend::new(n_threads).expect("backend");
    let shapes: &[(usize, usize)] = if full {
        &[(4096, 4096), (4096, 11008), (11008, 4096)]
    } else {
        &[(4096, 4096), (4096, 11008)]
    };
    let cols: usize = std::env::var("GGML_BENCH_COLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if full { 512 } else { 64 });

    let mut group = c.benchmark_group(format!("matvec_{n_threads}t"));
    group.sample_size(10);
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(2));
    for &ty in &types() {
        for &(k, m) in shapes {
            let s = setup(ty, k, m, 1);
            let bytes = s.graph.desc(TensorId(0)).nbytes() as u64;
            group.throughput(Throughput::Bytes(bytes));
            group.bench_with_input(
                BenchmarkId::new(ty.name(), format!("{k}x{m}")),
                &s,
                |b, s| b.iter(|| backend.graph_compute(&s.graph, &s.ids).expect("compute")),
            );
        }
    }
    group.finish();

    let mut group = c.benchmark_group(format!("matmul_{n_threads}t_{cols}cols"));
    group.sample_size(10);
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(3));
    let mm_shapes: &[(usize, usize)] = if full { shapes } else { &[(4096, 4096)] };
    for &ty in &types() {
        for &(k, m) in mm_shapes {
            let s = setup(ty, k, m, cols);
            group.throughput(Throughput::Elements((2 * k * m * cols) as u64));
            group.bench_with_input(
                BenchmarkId::new(ty.name(), format!("{k}x{m}")),
                &s,
                |b, s| b.iter(|| backend.graph_compute(&s.graph, &s.ids).expect("compute")),
            );
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
