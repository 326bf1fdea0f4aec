//! The backend scheduler on the real backends: small graphs built by hand,
//! with weights imported in CPU buffers and in Vulkan buffers, run over
//! [Vulkan, CPU] and over [CPU] alone.
//!
//! Checks: the same numbers either way; the splits and the copies between
//! them are those the placement implies (hand-checked below); op_offload
//! moves a matrix product with a CPU weight to the GPU for a large batch
//! only; decode-shaped graphs after one reservation allocate nothing; the
//! eval callback sees every node in order with the right values.
//!
//! The Vulkan tests need a Vulkan device; Mesa's lavapipe is only exposed
//! with `GGML_VK_ALLOW_CPU_DEVICES=1`. Without one they print
//! "skipped: no Vulkan device" (or fail with `REQUIRE_VULKAN=1`).

use std::sync::{Arc, Mutex};

use ggml_core::sched::Scheduler;
use ggml_core::{quants, BufferUsage, Device, Graph, Placement, TensorDesc, TensorId, Type};
use tests::{cpu_device, max_abs_diff, vulkan_device};

/// Width of the hidden state of the test graphs.
const N_EMBD: usize = 64;
/// Largest graph (in nodes) the test schedulers take.
const GRAPH_SIZE: usize = 256;
/// Backend indices of a [Vulkan, CPU] scheduler.
const GPU: usize = 0;
const CPU: usize = 1;

/// Deterministic values in [-1, 1), so runs are reproducible.
fn values(seed: u64, n: usize) -> Vec<f32> {
    test_support::Rng(seed).vec(n)
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn to_f32(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// `values` encoded as `ty` (row by row for quantized types).
fn encode(ty: Type, ne0: usize, v: &[f32]) -> Vec<u8> {
    match ty {
        Type::F32 => f32_bytes(v),
        _ => {
            let row = quants::row_size(ty, ne0).expect("row size");
            let mut out = vec![0u8; v.len() / ne0 * row];
            for (src, dst) in v.chunks_exact(ne0).zip(out.chunks_exact_mut(row)) {
                quants::quantize_row(ty, src, dst).expect("quantize");
            }
            out
        }
    }
}

/// A tensor with data in a buffer of its own on `dev` (a weight when
/// `usage` says so, as the model loader marks them).
fn upload(dev: &Arc<dyn Device>, desc: &TensorDesc, data: &[u8], usage: BufferUsage) -> Placement {
    let buft = dev.buffer_type();
    let buffer = buft.alloc_buffer(buft.alloc_size(desc)).expect("alloc");
    buffer.set_usage(usage);
    buffer.init_tensor(desc, 0).expect("init tensor");
    buffer.set_tensor(0, data).expect("upload");
    Placement { buffer, offset: 0 }
}

/// A weight: its descriptor and its values, uploaded where a test wants it.
struct W {
    desc: TensorDesc,
    bytes: Vec<u8>,
}

impl W {
    fn new(name: &str, ty: Type, ne: &[usize], seed: u64) -> W {
        let desc = TensorDesc::new(name, ty, ne);
        let bytes = encode(ty, ne[0], &values(seed, desc.n_elements()));
        W { desc, bytes }
    }

    fn import(&self, g: &mut Graph, dev: &Arc<dyn Device>) -> TensorId {
        let at = upload(dev, &self.desc, &self.bytes, BufferUsage::Weights);
        g.import(self.desc.clone(), at, ggml_core::Flags::WEIGHT)
    }
}

fn scheduler(devs: &[&Arc<dyn Device>], op_offload: bool) -> Scheduler {
    let backends = devs
        .iter()
        .map(|d| {
            let mut b = d.init_backend().expect("backend");
            b.set_n_threads(2);
            b
        })
        .collect();
    Scheduler::new(backends, None, GRAPH_SIZE, false, op_offload).expect("scheduler")
}

/// Reads a computed F32 tensor.
fn read(g: &Graph, id: TensorId) -> Vec<f32> {
    let at = g.placement_or_err(id).expect("placed");
    let mut bytes = vec![0u8; g.desc(id).nbytes()];
    at.buffer.get_tensor(at.offset, &mut bytes).expect("read");
    to_f32(&bytes)
}

/// Where the weights of the two layers of [`two_layers`] live.
#[derive(Clone, Copy)]
enum On {
    Cpu,
    Gpu,
}

/// Two small layers over `n` tokens: matrix product, RMS norm times a norm
/// weight, SiLU, a second product (F16 weight), norm, and a residual that
/// reads the first layer's product.
struct TwoLayers {
    graph: Graph,
    x: TensorId,
    /// Node ids by name (h1, r1, m1, a1, h2, r2, m2, out).
    nodes: Vec<(&'static str, TensorId)>,
    out: TensorId,
}

impl TwoLayers {
    fn id(&self, name: &str) -> TensorId {
        self.nodes
            .iter()
            .find(|(n, _)| *n == name)
            .map(|&(_, id)| id)
            .unwrap_or_else(|| panic!("no node {name}"))
    }

    fn name_of(&self, id: TensorId) -> &str {
        self.graph.desc(id).name.as_str()
    }
}

fn two_layers(n: usize, l1: On, l2: On, gpu: Option<&Arc<dyn Device>>) -> TwoLayers {
    let cpu = cpu_device();
    let dev = |on: On| -> Arc<dyn Device> {
        match on {
            On::Cpu => cpu.clone(),
            On::Gpu => gpu.expect("a GPU placement needs a GPU").clone(),
        }
    };
    let mut g = Graph::new();
    let x = g.input("x", Type::F32, &[N_EMBD, n]);
    let w1 = W::new("w1", Type::F32, &[N_EMBD, N_EMBD], 1).import(&mut g, &dev(l1));
    let n1 = W::new("n1", Type::F32, &[N_EMBD], 2).import(&mut g, &dev(l1));
    let w2 = W::new("w2", Type::F16, &[N_EMBD, N_EMBD], 3).import(&mut g, &dev(l2));
    let n2 = W::new("n2", Type::F32, &[N_EMBD], 4).import(&mut g, &dev(l2));
    let mut nodes = Vec::new();
    let mut named = |g: &mut Graph, name: &'static str, id: TensorId| {
        g.set_name(id, name);
        nodes.push((name, id));
        id
    };
    let h1 = g.mul_mat(w1, x).unwrap();
    let h1 = named(&mut g, "h1", h1);
    let r1 = g.rms_norm(h1, 1e-5).unwrap();
    let r1 = named(&mut g, "r1", r1);
    let m1 = g.mul(r1, n1).unwrap();
    let m1 = named(&mut g, "m1", m1);
    let a1 = g.silu(m1).unwrap();
    let a1 = named(&mut g, "a1", a1);
    let h2 = g.mul_mat(w2, a1).unwrap();
    let h2 = named(&mut g, "h2", h2);
    let r2 = g.rms_norm(h2, 1e-5).unwrap();
    let r2 = named(&mut g, "r2", r2);
    let m2 = g.mul(r2, n2).unwrap();
    let m2 = named(&mut g, "m2", m2);
    let out = g.add_op(m2, h1).unwrap();
    let out = named(&mut g, "out", out);
    g.set_output(out);
    TwoLayers {
        graph: g,
        x,
        nodes,
        out,
    }
}

fn input_x(n: usize) -> Vec<u8> {
    f32_bytes(&values(100 + n as u64, N_EMBD * n))
}

/// Allocates and computes `t` on `s`, returning the output.
fn run(s: &mut Scheduler, t: &mut TwoLayers, n: usize) -> Vec<f32> {
    s.alloc_graph(&mut t.graph).expect("alloc graph");
    Scheduler::set_input(&t.graph, t.x, &input_x(n)).expect("input");
    s.compute(&mut t.graph).expect("compute");
    read(&t.graph, t.out)
}

/// The output of [`two_layers`] computed on the CPU alone.
fn cpu_reference(n: usize) -> Vec<f32> {
    let cpu = cpu_device();
    let mut s = scheduler(&[&cpu], false);
    let mut t = two_layers(n, On::Cpu, On::Cpu, None);
    let out = run(&mut s, &mut t, n);
    assert_eq!(s.n_splits(), 1);
    assert!(s.splits()[0].inputs().is_empty());
    out
}

/// Outputs are O(1) (normalised rows plus a product of unit-scale values);
/// the GPU multiplies the F16 weight by F32 activations where the CPU
/// rounds the activations to F16 first, which moves results by ~1e-3.
const TOL: f32 = 1e-2;

/// The splits as (backend, [compute node names], [input source names]).
fn splits_of(s: &Scheduler, t: &TwoLayers) -> Vec<(usize, Vec<String>, Vec<String>)> {
    s.splits()
        .iter()
        .map(|sp| {
            (
                sp.backend(),
                sp.compute_nodes()
                    .iter()
                    .map(|&id| t.name_of(id).to_string())
                    .collect(),
                sp.inputs()
                    .iter()
                    .map(|i| t.name_of(i.src).to_string())
                    .collect(),
            )
        })
        .collect()
}

fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn same_results_and_hand_checked_splits() {
    let Some(gpu) = vulkan_device() else { return };
    let cpu = cpu_device();
    let n = 4;
    let want = cpu_reference(n);
    let all = ["h1", "r1", "m1", "a1", "h2", "r2", "m2", "out"];

    // Both layers on the GPU: one split; only the graph input x is copied.
    let mut s = scheduler(&[&gpu, &cpu], true);
    let mut t = two_layers(n, On::Gpu, On::Gpu, Some(&gpu));
    let got = run(&mut s, &mut t, n);
    assert_eq!(splits_of(&s, &t), vec![(GPU, names(&all), names(&["x"]))]);
    let d = max_abs_diff(&got, &want);
    assert!(d <= TOL, "gpu/gpu: max diff {d}");

    // First layer on the CPU, second on the GPU: the CPU runs the first
    // layer up to its norm weight; the GPU takes the SiLU (spread upwards
    // from the GPU layer) and needs m1 and, for the residual, h1.
    let mut t = two_layers(n, On::Cpu, On::Gpu, Some(&gpu));
    let got = run(&mut s, &mut t, n);
    assert_eq!(
        splits_of(&s, &t),
        vec![
            (CPU, names(&["h1", "r1", "m1"]), vec![]),
            (
                GPU,
                names(&["a1", "h2", "r2", "m2", "out"]),
                names(&["m1", "h1"])
            ),
        ]
    );
    let d = max_abs_diff(&got, &want);
    assert!(d <= TOL, "cpu/gpu: max diff {d}");

    // First layer on the GPU, second on the CPU: the GPU keeps the SiLU
    // (spread downwards); the CPU copies a1 and h1 back.
    let mut t = two_layers(n, On::Gpu, On::Cpu, Some(&gpu));
    let got = run(&mut s, &mut t, n);
    assert_eq!(
        splits_of(&s, &t),
        vec![
            (GPU, names(&["h1", "r1", "m1", "a1"]), names(&["x"])),
            (CPU, names(&["h2", "r2", "m2", "out"]), names(&["a1", "h1"])),
        ]
    );
    assert_eq!(s.tensor_backend(t.id("h1")), Some(GPU));
    assert_eq!(s.tensor_backend(t.id("h2")), Some(CPU));
    let d = max_abs_diff(&got, &want);
    assert!(d <= TOL, "gpu/cpu: max diff {d}");

    // Every weight on the CPU and one token: everything stays on the CPU,
    // even with op_offload, and nothing is copied.
    let mut t = two_layers(1, On::Cpu, On::Cpu, Some(&gpu));
    let got = run(&mut s, &mut t, 1);
    assert_eq!(splits_of(&s, &t), vec![(CPU, names(&all), vec![])]);
    let d = max_abs_diff(&got, &cpu_reference(1));
    assert!(d <= TOL, "cpu/cpu: max diff {d}");
}

#[test]
fn op_offload_moves_large_batches_to_the_gpu() {
    let Some(gpu) = vulkan_device() else { return };
    let cpu = cpu_device();
    let n = 512;
    let want = cpu_reference(n);

    // op_offload on, 512 tokens, every weight on the CPU: each op reading a
    // weight moves to the GPU, which copies the weight in. A node reading a
    // weight the GPU cannot read starts a new split once the current one has
    // inputs, so the four weight readers give four GPU splits.
    let mut s = scheduler(&[&gpu, &cpu], true);
    let mut t = two_layers(n, On::Cpu, On::Cpu, Some(&gpu));
    let got = run(&mut s, &mut t, n);
    assert_eq!(
        splits_of(&s, &t),
        vec![
            (GPU, names(&["h1", "r1"]), names(&["w1", "x"])),
            (GPU, names(&["m1", "a1"]), names(&["n1"])),
            (GPU, names(&["h2", "r2"]), names(&["w2"])),
            (GPU, names(&["m2", "out"]), names(&["n2"])),
        ]
    );
    assert_eq!(s.tensor_backend(t.id("h1")), Some(GPU));
    let d = max_abs_diff(&got, &want);
    assert!(d <= TOL, "offloaded: max diff {d}");

    // The same with one token: the GPU does not want it.
    let mut t = two_layers(1, On::Cpu, On::Cpu, Some(&gpu));
    run(&mut s, &mut t, 1);
    assert_eq!(s.tensor_backend(t.id("h1")), Some(CPU));
    assert_eq!(s.n_splits(), 1);

    // op_offload off: the CPU whatever the batch.
    let mut s = scheduler(&[&gpu, &cpu], false);
    for n in [1, 512] {
        let mut t = two_layers(n, On::Cpu, On::Cpu, Some(&gpu));
        let got = run(&mut s, &mut t, n);
        assert_eq!(s.tensor_backend(t.id("h1")), Some(CPU), "n = {n}");
        assert_eq!(s.n_splits(), 1, "n = {n}");
        assert!(s.splits()[0].inputs().is_empty(), "n = {n}");
        if n == 512 {
            let d = max_abs_diff(&got, &want);
            assert!(d <= TOL, "not offloaded: max diff {d}");
        }
    }
}

/// A single matrix product with its weight on the CPU: where it runs.
#[test]
fn op_offload_single_mul_mat() {
    let Some(gpu) = vulkan_device() else { return };
    let cpu = cpu_device();
    let w = W::new("w", Type::Q8_0, &[N_EMBD, 96], 7);
    for (op_offload, n, want_backend) in [
        (true, 512, GPU),
        (true, 1, CPU),
        (false, 512, CPU),
        (false, 1, CPU),
    ] {
        let mut s = scheduler(&[&gpu, &cpu], op_offload);
        let mut g = Graph::new();
        let wi = w.import(&mut g, &cpu);
        let x = g.input("x", Type::F32, &[N_EMBD, n]);
        let y = g.mul_mat(wi, x).unwrap();
        g.set_output(y);
        s.alloc_graph(&mut g).unwrap();
        Scheduler::set_input(&g, x, &input_x(n)).unwrap();
        s.compute(&mut g).unwrap();
        assert_eq!(
            s.tensor_backend(y),
            Some(want_backend),
            "op_offload {op_offload}, {n} tokens"
        );
        let inputs: Vec<&str> = s
            .splits()
            .iter()
            .flat_map(|sp| sp.inputs())
            .map(|i| g.desc(i.src).name.as_str())
            .collect();
        let want_inputs: &[&str] = if want_backend == GPU {
            &["w", "x"]
        } else {
            &[]
        };
        assert_eq!(inputs, want_inputs, "op_offload {op_offload}, {n} tokens");
        // Same numbers as the CPU alone (Q8_0 weight: the CPU rounds the
        // activations to Q8_0 too, the GPU does not; ~1% of the row sums).
        let got = read(&g, y);
        let mut cs = scheduler(&[&cpu], false);
        let mut cg = Graph::new();
        let wc = w.import(&mut cg, &cpu);
        let cx = cg.input("x", Type::F32, &[N_EMBD, n]);
        let cy = cg.mul_mat(wc, cx).unwrap();
        cg.set_output(cy);
        cs.alloc_graph(&mut cg).unwrap();
        Scheduler::set_input(&cg, cx, &input_x(n)).unwrap();
        cs.compute(&mut cg).unwrap();
        let d = max_abs_diff(&got, &read(&cg, cy));
        assert!(
            d <= 0.1,
            "op_offload {op_offload}, {n} tokens: max diff {d}"
        );
    }
}

/// An attention-like decode step over a cache of `N_CACHE` cells, of which
/// the first `n_kv` are attended: q = Wq x, softmax(K^T q), V p, Wo o.
/// Wq and the cache live on the GPU, Wo on the CPU.
const N_CACHE: usize = 128;

struct Decode {
    graph: Graph,
    x: TensorId,
    out: TensorId,
}

struct DecodeState {
    wq: Placement,
    wo: Placement,
    k: Placement,
    v: Placement,
}

fn decode_state(gpu: &Arc<dyn Device>, cpu: &Arc<dyn Device>) -> DecodeState {
    let wq = W::new("wq", Type::F32, &[N_EMBD, N_EMBD], 11);
    let wo = W::new("wo", Type::F32, &[N_EMBD, N_EMBD], 12);
    let k = TensorDesc::new("cache_k", Type::F32, &[N_EMBD, N_CACHE]);
    let v = TensorDesc::new("cache_v", Type::F32, &[N_CACHE, N_EMBD]);
    DecodeState {
        wq: upload(gpu, &wq.desc, &wq.bytes, BufferUsage::Weights),
        wo: upload(cpu, &wo.desc, &wo.bytes, BufferUsage::Weights),
        k: upload(
            gpu,
            &k,
            &f32_bytes(&values(13, N_EMBD * N_CACHE)),
            BufferUsage::Any,
        ),
        v: upload(
            gpu,
            &v,
            &f32_bytes(&values(14, N_EMBD * N_CACHE)),
            BufferUsage::Any,
        ),
    }
}

fn decode_graph(st: &DecodeState, n_tokens: usize, n_kv: usize) -> Decode {
    let mut g = Graph::new();
    let w = ggml_core::Flags::WEIGHT;
    let none = ggml_core::Flags::default();
    let wq = g.import(
        TensorDesc::new("wq", Type::F32, &[N_EMBD, N_EMBD]),
        st.wq.clone(),
        w,
    );
    let wo = g.import(
        TensorDesc::new("wo", Type::F32, &[N_EMBD, N_EMBD]),
        st.wo.clone(),
        w,
    );
    let k = g.import(
        TensorDesc::new("cache_k", Type::F32, &[N_EMBD, N_CACHE]),
        st.k.clone(),
        none,
    );
    let v = g.import(
        TensorDesc::new("cache_v", Type::F32, &[N_CACHE, N_EMBD]),
        st.v.clone(),
        none,
    );
    let x = g.input("x", Type::F32, &[N_EMBD, n_tokens]);
    let q = g.mul_mat(wq, x).unwrap();
    let kv = g.view_2d(k, N_EMBD, n_kv, N_EMBD * 4, 0).unwrap();
    let kq = g.mul_mat(kv, q).unwrap();
    let p = g.soft_max_ext(kq, None, 0.125, 0.0).unwrap();
    let vv = g.view_2d(v, n_kv, N_EMBD, N_CACHE * 4, 0).unwrap();
    let o = g.mul_mat(vv, p).unwrap();
    let out = g.mul_mat(wo, o).unwrap();
    g.set_output(out);
    Decode { graph: g, x, out }
}

fn run_decode(s: &mut Scheduler, st: &DecodeState, n_kv: usize) -> (bool, Vec<f32>) {
    let mut d = decode_graph(st, 1, n_kv);
    let grew = s.alloc_graph(&mut d.graph).expect("alloc");
    Scheduler::set_input(&d.graph, d.x, &input_x(n_kv)[..N_EMBD * 4]).expect("input");
    s.compute(&mut d.graph).expect("compute");
    (grew, read(&d.graph, d.out))
}

#[test]
fn decode_graphs_allocate_nothing_after_reserve() {
    let Some(gpu) = vulkan_device() else { return };
    let cpu = cpu_device();
    let st = decode_state(&gpu, &cpu);
    let mut s = scheduler(&[&gpu, &cpu], true);
    s.reserve(&decode_graph(&st, 1, N_CACHE).graph)
        .expect("reserve");
    let before = s.n_buffer_allocs();
    assert!(before > 0, "the reservation allocates the compute buffers");
    let mut last = Vec::new();
    for i in 0..100 {
        let n_kv = 1 + i;
        let (grew, out) = run_decode(&mut s, &st, n_kv);
        assert!(!grew, "graph {i} (n_kv {n_kv}) grew the compute buffers");
        // Wq and the cache on the GPU, Wo on the CPU: two splits, the GPU's
        // reading x, the CPU's reading the attention output.
        assert_eq!(s.n_splits(), 2, "graph {i}");
        last = out;
    }
    assert_eq!(
        s.n_buffer_allocs(),
        before,
        "100 decode graphs after the reservation allocated buffers"
    );
    // The last one computed the right thing: the same graph on the CPU alone,
    // with the cache copied to CPU memory.
    let cpu_st = DecodeState {
        wq: upload(
            &cpu,
            &TensorDesc::new("wq", Type::F32, &[N_EMBD, N_EMBD]),
            &W::new("wq", Type::F32, &[N_EMBD, N_EMBD], 11).bytes,
            BufferUsage::Weights,
        ),
        wo: st.wo.clone(),
        k: upload(
            &cpu,
            &TensorDesc::new("cache_k", Type::F32, &[N_EMBD, N_CACHE]),
            &f32_bytes(&values(13, N_EMBD * N_CACHE)),
            BufferUsage::Any,
        ),
        v: upload(
            &cpu,
            &TensorDesc::new("cache_v", Type::F32, &[N_CACHE, N_EMBD]),
            &f32_bytes(&values(14, N_EMBD * N_CACHE)),
            BufferUsage::Any,
        ),
    };
    let mut cs = scheduler(&[&cpu], false);
    let (_, want) = run_decode(&mut cs, &cpu_st, 100);
    let d = max_abs_diff(&last, &want);
    assert!(d <= 1e-3, "decode step: max diff {d}");
}

/// What an eval callback saw: each node's name, the buffer type it lives
/// in, and its values (F32 contiguous nodes only).
type Seen = Arc<Mutex<Vec<(String, String, Option<Vec<f32>>)>>>;

fn watch(s: &mut Scheduler) -> Seen {
    let seen: Seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    s.set_eval_callback(Some(Box::new(
        move |g: &Graph, id: TensorId, at: &Placement| {
            let d = g.desc(id);
            let vals = (d.ty == Type::F32 && d.is_contiguous()).then(|| {
                let mut b = vec![0u8; d.nbytes()];
                at.buffer.get_tensor(at.offset, &mut b).expect("read");
                to_f32(&b)
            });
            sink.lock().unwrap().push((
                d.name.clone(),
                at.buffer.buffer_type().name().to_string(),
                vals,
            ));
            true
        },
    )));
    seen
}

#[test]
fn eval_callback_sees_every_node_in_order() {
    let Some(gpu) = vulkan_device() else { return };
    let cpu = cpu_device();
    let n = 3;
    let order = ["h1", "r1", "m1", "a1", "h2", "r2", "m2", "out"];

    let mut cs = scheduler(&[&cpu], false);
    let cpu_seen = watch(&mut cs);
    let mut t = two_layers(n, On::Cpu, On::Cpu, None);
    let cpu_out = run(&mut cs, &mut t, n);

    let mut s = scheduler(&[&gpu, &cpu], true);
    let gpu_seen = watch(&mut s);
    let mut t = two_layers(n, On::Cpu, On::Gpu, Some(&gpu));
    let out = run(&mut s, &mut t, n);
    assert_eq!(s.n_splits(), 2, "the mixed placement runs on both devices");

    let cpu_seen = cpu_seen.lock().unwrap();
    let gpu_seen = gpu_seen.lock().unwrap();
    for seen in [&cpu_seen, &gpu_seen] {
        let got: Vec<&str> = seen.iter().map(|(n, _, _)| n.as_str()).collect();
        assert_eq!(got, order, "nodes seen, in order");
    }
    // Where each node lived: the CPU's nodes in host memory, the GPU's in
    // Vulkan memory.
    let where_: Vec<&str> = gpu_seen.iter().map(|(_, b, _)| b.as_str()).collect();
    let gpu_buft = gpu.buffer_type().name().to_string();
    let cpu_buft = cpu.buffer_type().name().to_string();
    assert_eq!(
        where_,
        [&cpu_buft, &cpu_buft, &cpu_buft, &gpu_buft, &gpu_buft, &gpu_buft, &gpu_buft, &gpu_buft]
            .map(|s| s.as_str())
    );
    for ((name, _, a), (_, _, b)) in cpu_seen.iter().zip(gpu_seen.iter()) {
        let (a, b) = (a.as_ref().expect("F32"), b.as_ref().expect("F32"));
        let d = max_abs_diff(a, b);
        assert!(d <= TOL, "{name}: max diff {d} between CPU and Vulkan runs");
    }
    // The callback saw the values the graph produced.
    assert_eq!(gpu_seen.last().unwrap().2.as_deref(), Some(&out[..]));
    assert_eq!(cpu_seen.last().unwrap().2.as_deref(), Some(&cpu_out[..]));
}
