//! MUL_MAT throughput of the Vulkan backend per weight type: matrix x
//! vector (1 column, reported as bytes of weights read per second) and
//! tiled matrix x matrix (reported as elements/s where one element is one
//! floating-point operation, i.e. FLOP/s). Each iteration is one
//! `graph_compute`: record, submit and wait.
//!
//! Environment:
//! * `GGML_BENCH_FULL=1`: every type the backend multiplies; by default the
//!   most used ones.
//! * `GGML_BENCH_TYPES=q4_0,q8_0,...`: the types to run.
//! * `GGML_BENCH_K`, `GGML_BENCH_M`: weight shape (default 4096 x 4096).
//! * `GGML_BENCH_COLS=n`: columns of the matrix x matrix case (default 64).
//!
//! Software devices count only with `GGML_VK_ALLOW_CPU_DEVICES=1`; without
//! a device the bench prints why and measures nothing.

use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ggml_core::backend::{Backend, Buffer, Placement};
use ggml_core::graph::{Flags, Graph, TensorId};
use ggml_core::{quants, Device, TensorDesc, Type, MATMUL_TYPES};

const DEFAULT_TYPES: &[Type] = &[Type::F16, Type::Q4_0, Type::Q8_0, Type::Q4_K, Type::Q6_K];

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

fn types() -> Vec<Type> {
    if let Ok(list) = std::env::var("GGML_BENCH_TYPES") {
        return MATMUL_TYPES
            .iter()
            .copied()
            .filter(|t| {
                list.split(',')
                    .any(|s| s.trim().eq_ignore_ascii_case(t.name()))
            })
            .collect();
    }
    if std::env::var("GGML_BENCH_FULL").is_ok_and(|v| v == "1") {
        MATMUL_TYPES.to_vec()
    } else {
        DEFAULT_TYPES.to_vec()
    }
}

/// Deterministic pseudo-random values in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f32> {
    test_support::Rng(seed).vec(n)
}

/// A graph `w x b` with `w` [k, m] of `ty` and `b` [k, n] f32 in buffers of
/// `dev`; returns the graph, the product node and the buffers.
fn setup(
    dev: &Arc<dyn Device>,
    ty: Type,
    k: usize,
    m: usize,
    n: usize,
) -> (Graph, TensorId, Vec<Arc<dyn Buffer>>) {
    let buft = dev.buffer_type();
    let align = buft.alignment();
    let wd = TensorDesc::new("w", ty, &[k, m]);
    let bd = TensorDesc::new("b", Type::F32, &[k, n]);
    let mut wbytes = vec![0u8; wd.nbytes()];
    quants::quantize_row(ty, &values(k * m, 1), &mut wbytes).expect("quantize");
    let wbuf = buft.alloc_buffer(wd.nbytes()).expect("weight buffer");
    wbuf.set_tensor(0, &wbytes).expect("upload weights");
    let b_off = 0;
    let d_off = bd.nbytes().div_ceil(align) * align;
    let dbytes = m * n * 4;
    let abuf = buft
        .alloc_buffer(d_off + dbytes)
        .expect("activation buffer");
    let bbytes: Vec<u8> = values(k * n, 2)
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    abuf.set_tensor(b_off, &bbytes).expect("upload activations");
    let mut g = Graph::new();
    let w = g.import(
        wd,
        Placement {
            buffer: wbuf.clone(),
            offset: 0,
        },
        Flags::WEIGHT,
    );
    let b = g.import(
        bd,
        Placement {
            buffer: abuf.clone(),
            offset: b_off,
        },
        Flags::INPUT,
    );
    let y = g.mul_mat(w, b).expect("mul_mat");
    g.node_mut(y).at = Some(Placement {
        buffer: abuf.clone(),
        offset: d_off,
    });
    (g, y, vec![wbuf, abuf])
}

fn bench(c: &mut Criterion) {
    ggml_vulkan::register();
    let Some(dev) = ggml_core::registry::device_by_name("Vulkan0") else {
        eprintln!(
            "skipped: no Vulkan device ({})",
            ggml_vulkan::backend()
                .unavailable_reason()
                .unwrap_or("unknown")
        );
        return;
    };
    let k = env_usize("GGML_BENCH_K", 4096);
    let m = env_usize("GGML_BENCH_M", 4096);
    let cols = env_usize("GGML_BENCH_COLS", 64);
    let mut backend: Box<dyn Backend> = dev.init_backend().expect("backend");

    let mut group = c.benchmark_group(format!("vulkan_mul_mat_vec/{}", dev.description()));
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(3));
    for ty in types() {
        let (g, y, _bufs) = setup(&dev, ty, k, m, 1);
        backend.graph_compute(&g, &[y]).expect("warm-up");
        group.throughput(Throughput::Bytes(
            (k / ty.block_size() * ty.type_size() * m) as u64,
        ));
        group.bench_function(BenchmarkId::new(ty.name(), format!("{k}x{m}")), |bch| {
            bch.iter(|| backend.graph_compute(&g, &[y]).expect("compute"))
        });
    }
    group.finish();

    let mut group = c.benchmark_group(format!("vulkan_mul_mat/{}", dev.description()));
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(5));
    for ty in types() {
        let (g, y, _bufs) = setup(&dev, ty, k, m, cols);
        backend.graph_compute(&g, &[y]).expect("warm-up");
        group.throughput(Throughput::Elements((2 * k * m * cols) as u64));
        group.bench_function(
            BenchmarkId::new(ty.name(), format!("{k}x{m}x{cols}")),
            |bch| bch.iter(|| backend.graph_compute(&g, &[y]).expect("compute")),
        );
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
