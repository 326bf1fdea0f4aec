//! Matrix x vector (one activation column: token generation) through the
//! CPU backend on one thread, at the shapes of real models, reported as
//! GB/s of weight bytes read. The shared, loaded machines this runs on
//! scatter a mean by tens of percent, so each case reports the fastest of
//! its runs (and the median): the fastest run is the one least disturbed.
//! Compare two builds by running their bench binaries alternately.
//!
//! The real shapes read their weights from memory: copies of the matrix
//! that together exceed the last-level cache (256 MiB) take turns, as the
//! layers of a model do in generation.
//!
//! Each case runs twice where the weight type can be stored repacked
//! (`CPU_REPACK`, the default for model weights): `rows` reads ggml's row
//! layout through the row kernel, `panels` the stored panels through the
//! panel kernel. Each case also runs with as many of its rows as fit in
//! 256 KiB, which stay in L2 from one run to the next: the kernel's own
//! speed. A first line times a plain sum over as many bytes as the
//! largest matrix: what one core reads from memory at best.
//!
//! Environment:
//! * `GGML_BENCH_SECS=s`: seconds per case (default 1).
//! * `GGML_BENCH_FILTER=text`: only the cases whose name contains `text`.
//! * `GGML_BENCH_THREADS=n`: threads of the backend (default 1); the read
//!   ceiling stays one thread's.

mod common;
#[path = "common/timing.rs"]
mod timing;

use std::sync::Arc;

use common::{activation_bytes, weight_rows};
use ggml_core::backend::{Backend, Buffer, BufferType, Placement};
use ggml_core::graph::{Graph, TensorId};
use ggml_core::{quants, Type};
use ggml_cpu::{cpu_buffer_type, repack_buffer_type, CpuBackend};
use timing::{env_secs_and_filter, time, Runs};

/// (weight type, k, m, what it is): a matrix of m rows of k weights.
const CASES: &[(Type, usize, usize, &str)] = &[
    (
        Type::Q8_0,
        640,
        262_144,
        "gemma3-270m output (tied embedding)",
    ),
    (Type::Q5_0, 640, 2048, "gemma3-270m ffn_gate / ffn_up"),
    (
        Type::Q4_K,
        2048,
        768,
        "qwen3-30b-a3b expert ffn_gate / ffn_up",
    ),
    (Type::Q4_K, 2048, 640, "gemma3-270m ffn_down"),
    (Type::Q6_K, 2048, 32_000, "output of a 2048-wide model"),
    (Type::Q6_K, 2048, 640, "gemma3-270m ffn_down"),
    (Type::Q4_0, 2048, 8192, "a Q4_0 ffn_up"),
    (Type::Q8_0, 1024, 4608, "lfm2-350m ffn_gate / ffn_up"),
    (Type::Q8_0, 1024, 4384, "mamba2-370m in_proj"),
    (Type::F16, 2048, 5632, "tinyllama-1.1b ffn_gate / ffn_up"),
    (Type::F16, 5632, 2048, "tinyllama-1.1b ffn_down"),
    (Type::Q4_K, 2048, 5632, "tinyllama-1.1b ffn_gate / ffn_up"),
    (Type::Q8_0, 2048, 5632, "tinyllama-1.1b ffn_gate / ffn_up"),
];

/// Weight bytes the copies of a real-shape case take together: past the
/// last-level cache of the CPUs this runs on.
const COLD_BYTES: usize = 256 << 20;

/// Weight bytes of the in-cache variant of each case.
const HOT_BYTES: usize = 256 * 1024;

struct Setup {
    graph: Graph,
    out: TensorId,
    bytes: usize,
    _buffers: Vec<Arc<dyn Buffer>>,
}

fn setup(ty: Type, k: usize, m: usize, repack: bool) -> Option<Setup> {
    let mut g = Graph::new();
    let w = g.new_tensor("w", ty, &[k, m]);
    let x = g.input("x", Type::F32, &[k, 1]);
    let y = g.mul_mat(w, x).expect("mul_mat");
    let plain = cpu_buffer_type();
    let packed = repack_buffer_type();
    if repack && !packed.supports_weight(&g, y, w) {
        return None;
    }
    let mut buffers = Vec::new();
    for id in [w, x, y] {
        let bt: &Arc<dyn BufferType> = if id == w && repack { &packed } else { &plain };
        let desc = g.desc(id).clone();
        let buf = bt.alloc_buffer(bt.alloc_size(&desc)).expect("alloc");
        buf.init_tensor(&desc, 0).expect("init tensor");
        g.node_mut(id).at = Some(Placement::new(buf.clone(), 0));
        buffers.push(buf);
    }
    let data = weight_rows(ty, k, m, 64);
    buffers[0].set_tensor(0, &data).expect("set weights");
    buffers[1]
        .set_tensor(0, &activation_bytes(k))
        .expect("set activations");
    Some(Setup {
        graph: g,
        out: y,
        bytes: data.len(),
        _buffers: buffers,
    })
}

/// One warm-up run, then 5 runs at least.
const RUNS: Runs = Runs {
    warm_up: 1,
    min: 5,
    max: 10_000,
};

/// The ceiling from memory: a plain sum over as many bytes as the largest
/// case's weights (larger than the last-level cache).
fn read_ceiling(secs: f64) {
    let words = 640 * 262_144 / 32 * 34 / 8;
    let data: Vec<u64> = (0..words as u64).collect();
    let (best, med, runs) = time(secs, RUNS, || {
        let s = data.iter().fold(0u64, |a, &b| a.wrapping_add(b));
        std::hint::black_box(s);
    });
    let gbs = |t: f64| (8 * words) as f64 / t / 1e9;
    println!(
        "{:<8} {:>13} {:<7} {:>9.2} {:>9.2} {:>6}  sum of u64, the read ceiling",
        "read",
        format!("{} MB", 8 * words / 1_000_000),
        "-",
        gbs(best),
        gbs(med),
        runs
    );
}

fn main() {
    let (secs, filter) = env_secs_and_filter(1.0);
    let threads = std::env::var("GGML_BENCH_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let mut backend = CpuBackend::new(threads).expect("backend");
    println!(
        "{:<8} {:>13} {:<7} {:>9} {:>9} {:>6}  model tensor",
        "type", "k x m", "layout", "best GB/s", "med GB/s", "runs"
    );
    if "read".contains(&filter) {
        read_ceiling(secs);
    }
    for &(ty, k, m_full, what) in CASES {
        // The real shape, then as many of its rows as fit in a share of
        // L2 (the kernel's own speed, without memory or L3 around it).
        let row = quants::row_size(ty, k).expect("row size");
        let m_hot = (HOT_BYTES / row / 16 * 16).clamp(16, m_full);
        for (m, layout, repack) in [
            (m_full, "rows", false),
            (m_full, "panels", true),
            (m_hot, "rows", false),
            (m_hot, "panels", true),
        ] {
            let name = format!("{} {k}x{m} {layout}", ty.name());
            if !name.contains(&filter) {
                continue;
            }
            // The real shape reads from memory, as in generation, where
            // the whole model goes by between two uses of a matrix: copies
            // of it, together past the last-level cache, take turns.
            let copies = if m == m_full {
                COLD_BYTES.div_ceil(row * m).max(1)
            } else {
                1
            };
            let Some(set) = (0..copies)
                .map(|_| setup(ty, k, m, repack))
                .collect::<Option<Vec<_>>>()
            else {
                continue;
            };
            let mut turn = 0;
            let (best, med, runs) = time(secs, RUNS, || {
                let s = &set[turn % set.len()];
                turn += 1;
                backend.graph_compute(&s.graph, &[s.out]).expect("compute")
            });
            let gbs = |t: f64| set[0].bytes as f64 / t / 1e9;
            println!(
                "{:<8} {:>13} {:<7} {:>9.2} {:>9.2} {:>6}  {what}",
                ty.name(),
                format!("{k}x{m}"),
                layout,
                gbs(best),
                gbs(med),
                runs
            );
        }
    }
}
