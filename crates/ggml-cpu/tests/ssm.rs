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

/// One Mamba-2 mixer step as llama.cpp builds it over a recurrent cache:
/// the conv and SSM states of the ubatch's slots gathered with GET_ROWS,
/// CONCAT with the transposed input, the last d_conv - 1 columns copied
/// back into the conv cache, SSM_CONV, SiLU, x, B and C viewed from the
/// result, SSM_SCAN from the cache, its final states copied back, and y
/// viewed from the scan's result. Returns y, computed on the CPU through
/// the scheduler (`sched`) or by the reference executor over buffers
/// placed by hand.
struct Cache {
    conv: ggml_core::backend::Placement,
    ssm: ggml_core::backend::Placement,
    _bufs: Vec<std::sync::Arc<dyn ggml_core::Buffer>>,
}

const D_CONV: usize = 4;
const D_STATE: usize = 16;
const HEAD_DIM: usize = 8;
const N_HEAD: usize = 4;
const N_GROUP: usize = 2;
const SLOTS: usize = 5;
const CH: usize = HEAD_DIM * N_HEAD + 2 * N_GROUP * D_STATE;

fn cache() -> Cache {
    let buft = ggml_cpu::cpu_buffer_type();
    let conv = buft.alloc_buffer((D_CONV - 1) * CH * SLOTS * 4).unwrap();
    let ssm = buft
        .alloc_buffer(D_STATE * HEAD_DIM * N_HEAD * SLOTS * 4)
        .unwrap();
    let mut rng = Rng(11);
    for b in [&conv, &ssm] {
        let v: Vec<u8> = rng
            .vec(b.size() / 4)
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        b.set_tensor(0, &v).unwrap();
    }
    let at = |b: &std::sync::Arc<dyn ggml_core::Buffer>| ggml_core::backend::Placement {
        buffer: b.clone(),
        offset: 0,
    };
    Cache {
        conv: at(&conv),
        ssm: at(&ssm),
        _bufs: vec![conv, ssm],
    }
}

fn mixer_step(cache: &Cache, slots: &[i32], n_t: usize, sched: bool, seed: u64) -> Vec<f32> {
    use ggml_core::graph::Flags;
    use ggml_core::TensorDesc;
    let n_s = slots.len();
    let mut g = Graph::new();
    let conv_all = g.import(
        TensorDesc::new("conv_all", Type::F32, &[(D_CONV - 1) * CH, SLOTS]),
        cache.conv.clone(),
        Flags::default(),
    );
    let ssm_all = g.import(
        TensorDesc::new("ssm_all", Type::F32, &[D_STATE * HEAD_DIM * N_HEAD, SLOTS]),
        cache.ssm.clone(),
        Flags::default(),
    );
    let xbc = g.input("xBC", Type::F32, &[CH, n_t, n_s]);
    let dt = g.input("dt", Type::F32, &[N_HEAD, n_t, n_s]);
    let w = g.input("conv1d", Type::F32, &[D_CONV, CH]);
    let a = g.input("A", Type::F32, &[1, N_HEAD]);
    let ids = g.input("ids", Type::I32, &[n_s]);
    let conv = g.get_rows(conv_all, ids).unwrap();
    let conv = g.reshape(conv, &[D_CONV - 1, CH, n_s]).unwrap();
    let xt = g.transpose(xbc).unwrap();
    let sx = g.concat(conv, xt, 0).unwrap();
    let nb = g.desc(sx).nb;
    let last = g
        .view_3d(sx, [D_CONV - 1, CH, n_s], nb[1], nb[2], n_t * 4)
        .unwrap();
    // The ubatch's cells are the first n_s slots of the cache.
    let conv_dst = g.view_1d(conv_all, (D_CONV - 1) * CH * n_s, 0).unwrap();
    let conv_store = g.cpy(last, conv_dst).unwrap();
    let c = g.ssm_conv(sx, w).unwrap();
    let c = g.silu(c).unwrap();
    let nb = g.desc(c).nb;
    let d_inner = HEAD_DIM * N_HEAD;
    let x = g
        .view_4d(
            c,
            [HEAD_DIM, N_HEAD, n_t, n_s],
            [HEAD_DIM * 4, nb[1], nb[2]],
            0,
        )
        .unwrap();
    let b = g
        .view_4d(
            c,
            [D_STATE, N_GROUP, n_t, n_s],
            [D_STATE * 4, nb[1], nb[2]],
            d_inner * 4,
        )
        .unwrap();
    let cc = g
        .view_4d(
            c,
            [D_STATE, N_GROUP, n_t, n_s],
            [D_STATE * 4, nb[1], nb[2]],
            (d_inner + N_GROUP * D_STATE) * 4,
        )
        .unwrap();
    let states = g
        .reshape(ssm_all, &[D_STATE, HEAD_DIM, N_HEAD, SLOTS])
        .unwrap();
    let scan = g.ssm_scan(states, x, dt, a, b, cc, ids).unwrap();
    let n_y = HEAD_DIM * N_HEAD * n_t * n_s;
    let n_st = D_STATE * HEAD_DIM * N_HEAD * n_s;
    let st = g.view_1d(scan, n_st, n_y * 4).unwrap();
    let st_dst = g.view_1d(ssm_all, n_st, 0).unwrap();
    let ssm_store = g.cpy(st, st_dst).unwrap();
    let y = g.view_1d(scan, n_y, 0).unwrap();
    let y = g.scale(y, 1.0).unwrap();
    for t in [conv_store, ssm_store, y] {
        g.set_output(t);
    }
    let mut rng = Rng(seed);
    let fill = |g: &Graph, rng: &mut Rng| {
        for t in [xbc, dt, w] {
            set_f32(g, t, &rng.vec(g.desc(t).n_elements()));
        }
        set_f32(g, a, &[-0.5, -1.0, -1.5, -0.25]);
        set_i32(g, ids, slots);
    };
    if sched {
        let backends: Vec<Box<dyn Backend>> = vec![Box::new(ggml_cpu::CpuBackend::new(2).unwrap())];
        let mut s = ggml_core::Scheduler::new(backends, None, 4096, false, false).unwrap();
        assert!(s.alloc_graph(&mut g).unwrap());
        fill(&g, &mut rng);
        s.compute(&mut g).unwrap();
        ggml_core::reference::read_f32(&g, y).unwrap()
    } else {
        let mut placed: Vec<TensorId> = g
            .ids()
            .filter(|&t| g.node(t).view.is_none() && g.node(t).at.is_none())
            .collect();
        placed.retain(|&t| !g.node(t).op.is_view());
        let _bufs = place(&mut g, &placed);
        fill(&g, &mut rng);
        ggml_core::reference::compute_graph(&g).unwrap();
        ggml_core::reference::read_f32(&g, y).unwrap()
    }
}

#[test]
fn a_mixer_over_a_recurrent_cache_runs_through_the_scheduler() {
    // Two ubatches (a prompt of 5 tokens, then one token) of two
    // sequences whose states start in slots 3 and 1 and are written back
    // into slots 0 and 1: through the scheduler and placed by hand, each
    // over its own copy of the same cache.
    let (by_sched, by_hand) = (cache(), cache());
    for (n_t, seed, slots) in [(5, 21, [3, 1]), (1, 22, [0, 1])] {
        let s = mixer_step(&by_sched, &slots, n_t, true, seed);
        let h = mixer_step(&by_hand, &slots, n_t, false, seed);
        assert_eq!(s.len(), HEAD_DIM * N_HEAD * n_t * 2);
        assert_close(&s, &h, &format!("y of {n_t} tokens"));
    }
    // Both caches now hold the same states, written back into slots 0 and 1.
    for (a, b) in [
        (&by_sched.conv, &by_hand.conv),
        (&by_sched.ssm, &by_hand.ssm),
    ] {
        let read = |p: &ggml_core::backend::Placement| {
            let mut x = vec![0u8; p.buffer.size()];
            p.buffer.get_tensor(0, &mut x).unwrap();
            x.chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect::<Vec<f32>>()
        };
        assert_close(&read(a), &read(b), "cache");
    }
}

fn assert_close(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-5 + 1e-4 * w.abs(),
            "{what}[{i}]: {g} against the reference's {w}"
        );
    }
}
