//! SSM_CONV, SSM_SCAN and CONCAT on the CPU beyond the conformance suite:
//! the same bits whatever the number of threads, a state slot outside the
//! cache is a clear error, and the types the kernels do not take are
//! refused by `supports_op`.

use ggml_core::backend::Backend;
use ggml_core::graph::{Graph, TensorId};
use ggml_core::Type;

mod common;
use common::{place, Rng};

fn set_f32(g: &Graph, id: TensorId, v: &[f32]) {
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    let at = g.placement_or_err(id).unwrap();
    at.buffer.set_tensor(at.offset, &bytes).unwrap();
}

fn set_i32(g: &Graph, id: TensorId, v: &[i32]) {
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    let at = g.placement_or_err(id).unwrap();
    at.buffer.set_tensor(at.offset, &bytes).unwrap();
}

fn bytes(g: &Graph, id: TensorId) -> Vec<u8> {
    let at = g.placement_or_err(id).unwrap();
    let mut out = vec![0u8; g.desc(id).nbytes()];
    at.buffer.get_tensor(at.offset, &mut out).unwrap();
    out
}

/// Shapes of one Mamba mixer: d_state, head_dim, n_head, n_group,
/// tokens per sequence, sequences; A per state element when `mamba1`.
struct Mixer {
    dims: [usize; 6],
    mamba1: bool,
}

/// Builds a mixer's CONCAT, SSM_CONV and SSM_SCAN with random inputs in
/// CPU buffers, runs it on `threads` threads and returns the bytes of the
/// three results.
fn run_mixer(m: &Mixer, threads: usize) -> [Vec<u8>; 3] {
    let [d_state, head_dim, n_head, n_group, n_t, n_s] = m.dims;
    let d_conv = 4;
    let slots = n_s + 2;
    let mut g = Graph::new();
    let conv_state = g.input(
        "conv_state",
        Type::F32,
        &[d_conv - 1, head_dim * n_head, n_s],
    );
    let xin = g.input("x_in", Type::F32, &[head_dim * n_head, n_t, n_s]);
    let w = g.input("conv1d", Type::F32, &[d_conv, head_dim * n_head]);
    let s = g.input("states", Type::F32, &[d_state, head_dim, n_head, slots]);
    let dt = g.input("dt", Type::F32, &[n_head, n_t, n_s]);
    let a = g.input(
        "A",
        Type::F32,
        &[if m.mamba1 { d_state } else { 1 }, n_head],
    );
    let b = g.input("B", Type::F32, &[d_state, n_group, n_t, n_s]);
    let c = g.input("C", Type::F32, &[d_state, n_group, n_t, n_s]);
    let ids = g.input("ids", Type::I32, &[n_s]);
    let xt = g.transpose(xin).unwrap();
    let sx = g.concat(conv_state, xt, 0).unwrap();
    let conv = g.ssm_conv(sx, w).unwrap();
    let x = g.reshape(conv, &[head_dim, n_head, n_t, n_s]).unwrap();
    let y = g.ssm_scan(s, x, dt, a, b, c, ids).unwrap();
    let leaves = [conv_state, xin, w, s, dt, a, b, c, ids, sx, conv, y];
    let _bufs = place(&mut g, &leaves);
    let mut rng = Rng(7);
    for &t in &[conv_state, xin, w, s, dt, b, c] {
        let v = rng.vec(g.desc(t).n_elements());
        set_f32(&g, t, &v);
    }
    let av: Vec<f32> = (0..g.desc(a).n_elements())
        .map(|_| rng.uniform(-2.0, -0.05))
        .collect();
    set_f32(&g, a, &av);
    // Slots out of order, the last first.
    let slot_ids: Vec<i32> = (0..n_s as i32).rev().map(|i| i + 2).collect();
    set_i32(&g, ids, &slot_ids);
    let mut be = ggml_cpu::CpuBackend::new(threads).unwrap();
    let nodes: Vec<TensorId> = g.compute_ids().collect();
    be.graph_compute(&g, &nodes).unwrap();
    [bytes(&g, sx), bytes(&g, conv), bytes(&g, y)]
}

#[test]
fn results_do_not_depend_on_the_thread_count() {
    for m in [
        // Mamba-2: 370M's d_state and head_dim, heads in two groups.
        Mixer {
            dims: [128, 64, 12, 2, 7, 3],
            mamba1: false,
        },
        // Mamba-1: one head per channel, d_state 16.
        Mixer {
            dims: [16, 1, 700, 1, 9, 2],
            mamba1: true,
        },
        // One token of one sequence (generation).
        Mixer {
            dims: [128, 64, 24, 1, 1, 1],
            mamba1: false,
        },
    ] {
        let one = run_mixer(&m, 1);
        assert!(one[2].iter().any(|&b| b != 0), "the scan wrote nothing");
        for threads in [2, 3, 5, 8] {
            let many = run_mixer(&m, threads);
            for (k, what) in ["CONCAT", "SSM_CONV", "SSM_SCAN"].iter().enumerate() {
                assert!(
                    one[k] == many[k],
                    "{what} of {:?} differs between 1 and {threads} threads",
                    m.dims
                );
            }
        }
    }
}

#[test]
fn a_state_slot_outside_the_cache_is_an_error() {
    for bad in [3, -1, i32::MAX] {
        let mut g = Graph::new();
        let s = g.input("states", Type::F32, &[16, 4, 2, 3]);
        let x = g.input("x", Type::F32, &[4, 2, 1, 2]);
        let dt = g.input("dt", Type::F32, &[2, 1, 2]);
        let a = g.input("A", Type::F32, &[1, 2]);
        let b = g.input("B", Type::F32, &[16, 1, 1, 2]);
        let c = g.input("C", Type::F32, &[16, 1, 1, 2]);
        let ids = g.input("ids", Type::I32, &[2]);
        let y = g.ssm_scan(s, x, dt, a, b, c, ids).unwrap();
        let _bufs = place(&mut g, &[s, x, dt, a, b, c, ids, y]);
        for t in [s, x, dt, a, b, c] {
            set_f32(&g, t, &vec![0.5; g.desc(t).n_elements()]);
        }
        set_i32(&g, ids, &[0, bad]);
        let mut be = ggml_cpu::CpuBackend::new(2).unwrap();
        let err = be.graph_compute(&g, &[y]).unwrap_err().to_string();
        assert!(
            err.contains("SSM_SCAN") && err.contains(&format!("state slot {bad} of sequence 1")),
            "{err}"
        );
    }
}

#[test]
fn types_the_kernels_do_not_take_are_refused() {
    let dev = ggml_cpu::cpu_device();
    let mut g = Graph::new();
    let sx = g.input("sx", Type::F16, &[8, 6, 1]);
    let w = g.input("w", Type::F32, &[4, 6]);
    let conv = g.ssm_conv(sx, w).unwrap();
    assert!(!dev.supports_op(&g, conv));
    let s = g.input("states", Type::F32, &[8, 2, 3, 1]);
    let x = g.input("x", Type::F16, &[2, 3, 1, 1]);
    let dt = g.input("dt", Type::F32, &[3, 1, 1]);
    let a = g.input("A", Type::F32, &[1, 3]);
    let b = g.input("B", Type::F32, &[8, 1, 1, 1]);
    let ids = g.input("ids", Type::I32, &[1]);
    let y = g.ssm_scan(s, x, dt, a, b, b, ids).unwrap();
    assert!(!dev.supports_op(&g, y));
    let q = g.input("q", Type::Q8_0, &[32, 2]);
    let q2 = g.input("q2", Type::Q8_0, &[32, 2]);
    let cat = g.concat(q, q2, 1).unwrap();
    assert!(!dev.supports_op(&g, cat));
}
