//! The scheduler against two test backends: a "GPU" with its own
//! (non-host) memory that runs a subset of ops and wants matrix products of
//! 32 tokens or more, and a "CPU" that runs everything over host memory.
//! Both refuse to read memory they cannot address, so a missing copy fails.

use std::any::Any;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use ggml_core::alloc::LinearAlloc;
use ggml_core::host::{HostBufferType, HOST_ALIGNMENT};
use ggml_core::sched::{Scheduler, SCHED_MAX_COPIES, SCHED_MAX_SPLIT_INPUTS};
use ggml_core::{
    Backend, Buffer, BufferCommon, BufferType, BufferUsage, Device, DeviceCaps, DeviceKind,
    DeviceProps, Error, EvalObserver, Event, Flags, Graph, Op, Placement, Result, TensorDesc,
    TensorId, Type, UnaryOp,
};

// ------------------------------------------------------------ device memory

/// Memory of the fake GPU: not addressable by the host.
struct DevBuft {
    name: String,
    allocs: AtomicUsize,
    me: Weak<DevBuft>,
}

impl DevBuft {
    fn new(name: &str) -> Arc<DevBuft> {
        Arc::new_cyclic(|me| DevBuft {
            name: name.into(),
            allocs: AtomicUsize::new(0),
            me: me.clone(),
        })
    }
    fn n_allocs(&self) -> usize {
        self.allocs.load(Ordering::Relaxed)
    }
}

impl BufferType for DevBuft {
    fn name(&self) -> &str {
        &self.name
    }
    fn alignment(&self) -> usize {
        128
    }
    fn is_host(&self) -> bool {
        false
    }
    fn alloc_buffer(&self, size: usize) -> Result<Arc<dyn Buffer>> {
        self.allocs.fetch_add(1, Ordering::Relaxed);
        let buft = self.me.upgrade().ok_or(Error::Backend("gone".into()))?;
        Ok(Arc::new(DevBuffer {
            common: BufferCommon::new(buft, size, BufferUsage::Any),
            data: Mutex::new(vec![0; size]),
        }))
    }
    fn device_name(&self) -> Option<String> {
        Some(self.name.clone())
    }
}

struct DevBuffer {
    common: BufferCommon,
    data: Mutex<Vec<u8>>,
}

impl DevBuffer {
    fn range(&self, offset: usize, len: usize) -> Result<std::ops::Range<usize>> {
        self.common.check_range("device buffer", offset, len)?;
        Ok(offset..offset + len)
    }
}

impl Buffer for DevBuffer {
    fn common(&self) -> &BufferCommon {
        &self.common
    }
    fn set_tensor(&self, offset: usize, data: &[u8]) -> Result<()> {
        let r = self.range(offset, data.len())?;
        self.data.lock().unwrap()[r].copy_from_slice(data);
        Ok(())
    }
    fn get_tensor(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        let r = self.range(offset, out.len())?;
        out.copy_from_slice(&self.data.lock().unwrap()[r]);
        Ok(())
    }
    fn memset_tensor(&self, offset: usize, value: u8, size: usize) -> Result<()> {
        let r = self.range(offset, size)?;
        self.data.lock().unwrap()[r].fill(value);
        Ok(())
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

// ------------------------------------------------------------ devices

type Log = Arc<Mutex<Vec<(String, String)>>>;

struct FakeDevice {
    name: String,
    kind: DeviceKind,
    buft: Arc<dyn BufferType>,
    events: bool,
    log: Log,
    me: Weak<FakeDevice>,
}

struct FakeEvent;

impl Event for FakeEvent {
    fn synchronize(&self) -> Result<()> {
        Ok(())
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl FakeDevice {
    fn new(
        name: &str,
        kind: DeviceKind,
        buft: Arc<dyn BufferType>,
        events: bool,
        log: &Log,
    ) -> Arc<FakeDevice> {
        Arc::new_cyclic(|me| FakeDevice {
            name: name.into(),
            kind,
            buft,
            events,
            log: log.clone(),
            me: me.clone(),
        })
    }

    fn backend(&self) -> Box<dyn Backend> {
        self.init_backend().unwrap()
    }
}

impl Device for FakeDevice {
    fn name(&self) -> &str {
        &self.name
    }
    fn description(&self) -> String {
        format!("test device {}", self.name)
    }
    fn props(&self) -> DeviceProps {
        DeviceProps {
            name: self.name.clone(),
            description: self.description(),
            kind: self.kind,
            memory_free: 1 << 30,
            memory_total: 1 << 30,
            caps: DeviceCaps {
                async_: self.events,
                host_buffer: false,
                buffer_from_host_ptr: false,
                events: self.events,
            },
        }
    }
    fn buffer_type(&self) -> Arc<dyn BufferType> {
        self.buft.clone()
    }
    fn supports_op(&self, graph: &Graph, node: TensorId) -> bool {
        let n = graph.node(node);
        let f32s = n.desc.ty == Type::F32 && n.src.iter().all(|&s| graph.desc(s).ty == Type::F32);
        let op_ok = match n.op {
            Op::None | Op::View | Op::Reshape | Op::Permute(_) | Op::Transpose => return true,
            Op::MulMat => true,
            Op::Add | Op::Mul | Op::Scale(_) | Op::RmsNorm { .. } | Op::Cont | Op::Dup => {
                self.kind != DeviceKind::Accel
            }
            Op::Unary(UnaryOp::Silu) => self.kind == DeviceKind::Cpu,
            Op::MulMatId => {
                return self.kind == DeviceKind::Cpu
                    && n.desc.ty == Type::F32
                    && graph.desc(n.src[2]).ty == Type::I32
            }
            _ => false,
        };
        op_ok && f32s
    }
    fn supports_buft(&self, buft: &dyn BufferType) -> bool {
        match self.kind {
            DeviceKind::Gpu => buft.name() == self.buft.name(),
            _ => buft.is_host(),
        }
    }
    fn offload_op(&self, graph: &Graph, node: TensorId) -> bool {
        self.kind == DeviceKind::Gpu
            && graph.node(node).op == Op::MulMat
            && graph.desc(node).ne[1] >= 32
    }
    fn init_backend(&self) -> Result<Box<dyn Backend>> {
        let dev = self.me.upgrade().ok_or(Error::Backend("gone".into()))?;
        Ok(Box::new(FakeBackend { dev }))
    }
    fn event_new(&self) -> Option<Arc<dyn Event>> {
        self.events.then(|| Arc::new(FakeEvent) as Arc<dyn Event>)
    }
}

struct FakeBackend {
    dev: Arc<FakeDevice>,
}

impl Backend for FakeBackend {
    fn name(&self) -> &str {
        &self.dev.name
    }
    fn device(&self) -> Arc<dyn Device> {
        self.dev.clone()
    }
    fn graph_compute(&mut self, graph: &Graph, nodes: &[TensorId]) -> Result<()> {
        for &id in nodes {
            let node = graph.node(id);
            for &t in node.src.iter().chain(std::iter::once(&id)) {
                let p = graph.placement_or_err(t)?;
                if !self.dev.supports_buft(&*p.buffer.buffer_type()) {
                    return Err(Error::Backend(format!(
                        "{}: '{}' reads '{}' in {} memory",
                        self.dev.name,
                        node.desc.name,
                        graph.desc(t).name,
                        p.buffer.buffer_type().name()
                    )));
                }
            }
            if !self.dev.supports_op(graph, id) {
                return Err(Error::Unsupported {
                    backend: self.dev.name.clone(),
                    op: node.op.name().into(),
                    tensor: node.desc.name.clone(),
                });
            }
            run(graph, id)?;
            let mut log = self.dev.log.lock().unwrap();
            log.push((self.dev.name.clone(), node.desc.name.clone()));
        }
        Ok(())
    }
}

// ------------------------------------------------------------ kernels (f32)

fn read(graph: &Graph, id: TensorId) -> Result<Vec<f32>> {
    let d = graph.desc(id);
    let p = graph.placement_or_err(id)?;
    let mut bytes = vec![0u8; d.nbytes()];
    p.buffer.get_tensor(p.offset, &mut bytes)?;
    let mut out = Vec::with_capacity(d.n_elements());
    for i3 in 0..d.ne[3] {
        for i2 in 0..d.ne[2] {
            for i1 in 0..d.ne[1] {
                for i0 in 0..d.ne[0] {
                    let o = i0 * d.nb[0] + i1 * d.nb[1] + i2 * d.nb[2] + i3 * d.nb[3];
                    let b: [u8; 4] = bytes[o..o + 4].try_into().unwrap();
                    out.push(f32::from_le_bytes(b));
                }
            }
        }
    }
    Ok(out)
}

fn to_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn run(graph: &Graph, id: TensorId) -> Result<()> {
    let node = graph.node(id);
    let ne = node.desc.ne;
    let src = |i: usize| read(graph, node.src[i]);
    if node.op == Op::MulMatId {
        return ggml_core::reference::compute_node(graph, id);
    }
    let out: Vec<f32> = match node.op {
        Op::Add | Op::Mul => {
            let (a, b) = (src(0)?, src(1)?);
            let bne = graph.desc(node.src[1]).ne;
            let mut out = Vec::with_capacity(a.len());
            for i3 in 0..ne[3] {
                for i2 in 0..ne[2] {
                    for i1 in 0..ne[1] {
                        for i0 in 0..ne[0] {
                            let ia = i0 + ne[0] * (i1 + ne[1] * (i2 + ne[2] * i3));
                            let ib = i0 % bne[0]
                                + bne[0]
                                    * (i1 % bne[1]
                                        + bne[1] * (i2 % bne[2] + bne[2] * (i3 % bne[3])));
                            out.push(if node.op == Op::Add {
                                a[ia] + b[ib]
                            } else {
                                a[ia] * b[ib]
                            });
                        }
                    }
                }
            }
            out
        }
        Op::Scale(s) => src(0)?.iter().map(|x| x * s).collect(),
        Op::Unary(UnaryOp::Silu) => src(0)?.iter().map(|x| x / (1.0 + (-x).exp())).collect(),
        Op::RmsNorm { eps } => {
            let a = src(0)?;
            a.chunks(ne[0])
                .flat_map(|row| {
                    let ms = row.iter().map(|x| x * x).sum::<f32>() / row.len() as f32;
                    let r = 1.0 / (ms + eps).sqrt();
                    row.iter().map(move |x| x * r).collect::<Vec<_>>()
                })
                .collect()
        }
        Op::MulMat => {
            let (a, b) = (src(0)?, src(1)?);
            let (an, bn) = (graph.desc(node.src[0]).ne, graph.desc(node.src[1]).ne);
            let k = an[0];
            let (r2, r3) = (bn[2] / an[2], bn[3] / an[3]);
            let mut out = vec![0.0; ne.iter().product()];
            for i3 in 0..ne[3] {
                for i2 in 0..ne[2] {
                    for j in 0..ne[1] {
                        for i in 0..ne[0] {
                            let ao = k * (i + an[1] * (i2 / r2 + an[2] * (i3 / r3)));
                            let bo = k * (j + bn[1] * (i2 + bn[2] * i3));
                            let dot: f32 = (0..k).map(|kk| a[ao + kk] * b[bo + kk]).sum();
                            out[i + ne[0] * (j + ne[1] * (i2 + ne[2] * i3))] = dot;
                        }
                    }
                }
            }
            out
        }
        Op::Cont | Op::Dup => src(0)?,
        _ => {
            return Err(Error::Unsupported {
                backend: "test kernels".into(),
                op: node.op.name().into(),
                tensor: node.desc.name.clone(),
            })
        }
    };
    let p = graph.placement_or_err(id)?;
    p.buffer.set_tensor(p.offset, &to_bytes(&out))
}

// ------------------------------------------------------------ set-up

struct Env {
    log: Log,
    host: Arc<HostBufferType>,
    gpu_mem: Arc<DevBuft>,
    gpu: Arc<FakeDevice>,
    cpu: Arc<FakeDevice>,
}

impl Env {
    fn new(events: bool) -> Env {
        let log: Log = Arc::default();
        let host = HostBufferType::new("CPU", HOST_ALIGNMENT, usize::MAX);
        let gpu_mem = DevBuft::new("GPU");
        let gpu = FakeDevice::new("GPU", DeviceKind::Gpu, gpu_mem.clone(), events, &log);
        let cpu = FakeDevice::new("CPU", DeviceKind::Cpu, host.clone(), false, &log);
        Env {
            log,
            host,
            gpu_mem,
            gpu,
            cpu,
        }
    }

    fn sched(&self, parallel: bool, op_offload: bool) -> Scheduler {
        Scheduler::new(
            vec![self.gpu.backend(), self.cpu.backend()],
            None,
            4096,
            parallel,
            op_offload,
        )
        .unwrap()
    }

    fn cpu_only(&self) -> Scheduler {
        Scheduler::new(vec![self.cpu.backend()], None, 4096, false, false).unwrap()
    }

    fn host_buft(&self) -> Arc<dyn BufferType> {
        self.host.clone()
    }

    fn gpu_buft(&self) -> Arc<dyn BufferType> {
        self.gpu_mem.clone()
    }

    fn allocs(&self) -> (usize, usize) {
        (self.host.n_allocs(), self.gpu_mem.n_allocs())
    }

    fn take_log(&self) -> Vec<(String, String)> {
        std::mem::take(&mut *self.log.lock().unwrap())
    }
}

/// Deterministic data for a tensor.
fn data(name: &str, n: usize) -> Vec<f32> {
    let mut h = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    });
    (0..n)
        .map(|_| {
            h ^= h << 13;
            h ^= h >> 7;
            h ^= h << 17;
            ((h % 2001) as f32 / 1000.0 - 1.0) * 0.5
        })
        .collect()
}

/// Weights in one buffer set of `buft`, filled with [`data`].
struct Weights {
    items: Vec<(TensorDesc, Placement)>,
}

impl Weights {
    fn new(buft: &Arc<dyn BufferType>, specs: &[(String, Vec<usize>)]) -> Weights {
        let descs: Vec<TensorDesc> = specs
            .iter()
            .map(|(n, ne)| TensorDesc::new(n.clone(), Type::F32, ne))
            .collect();
        let a = LinearAlloc::alloc_tensors(buft, &descs, BufferUsage::Weights).unwrap();
        for (d, p) in descs.iter().zip(&a.placements) {
            let v = data(&d.name, d.n_elements());
            p.buffer.set_tensor(p.offset, &to_bytes(&v)).unwrap();
        }
        Weights {
            items: descs.into_iter().zip(a.placements).collect(),
        }
    }

    fn import(&self, g: &mut Graph, name: &str) -> TensorId {
        let (d, p) = self
            .items
            .iter()
            .find(|(d, _)| d.name == name)
            .unwrap_or_else(|| panic!("no weight {name}"));
        g.import(d.clone(), p.clone(), Flags::WEIGHT)
    }
}

fn set_input(g: &Graph, id: TensorId) {
    let v = data(&g.desc(id).name, g.desc(id).n_elements());
    Scheduler::set_input(g, id, &to_bytes(&v)).unwrap();
}

fn assert_close(a: &[f32], b: &[f32]) {
    assert_eq!(a.len(), b.len());
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= 1e-4 * (1.0 + y.abs()),
            "element {i}: {x} vs {y}"
        );
    }
}

fn names(g: &Graph, ids: &[TensorId]) -> Vec<String> {
    ids.iter().map(|&i| g.desc(i).name.clone()).collect()
}

// ------------------------------------------------------------ the graphs

/// x -> a = w1 x -> b = a/2 -> c = silu(b) -> d = w2 c -> e = d + a.
struct Hand {
    g: Graph,
    x: TensorId,
    ids: [TensorId; 5],
}

fn hand_graph(w1: &Weights, w2: &Weights, t: usize) -> Hand {
    let mut g = Graph::new();
    let x = g.input("x", Type::F32, &[8, t]);
    let w1 = w1.import(&mut g, "w1");
    let w2 = w2.import(&mut g, "w2");
    let a = g.mul_mat(w1, x).unwrap();
    g.set_name(a, "a");
    let b = g.scale(a, 0.5).unwrap();
    g.set_name(b, "b");
    let c = g.silu(b).unwrap();
    g.set_name(c, "c");
    let d = g.mul_mat(w2, c).unwrap();
    g.set_name(d, "d");
    let e = g.add_op(d, a).unwrap();
    g.set_name(e, "e");
    g.set_output(e);
    Hand {
        g,
        x,
        ids: [a, b, c, d, e],
    }
}

fn hand_weights(env: &Env) -> (Weights, Weights, Weights) {
    let spec = |n: &str| vec![(n.to_string(), vec![8, 8])];
    let w1_gpu = Weights::new(&env.gpu_buft(), &spec("w1"));
    let w1_cpu = Weights::new(&env.host_buft(), &spec("w1"));
    let w2_cpu = Weights::new(&env.host_buft(), &spec("w2"));
    (w1_gpu, w1_cpu, w2_cpu)
}

/// The result of the hand graph computed on the CPU alone.
fn hand_reference(env: &Env, w1_cpu: &Weights, w2_cpu: &Weights, t: usize) -> Vec<f32> {
    let mut h = hand_graph(w1_cpu, w2_cpu, t);
    let mut s = env.cpu_only();
    s.alloc_graph(&mut h.g).unwrap();
    set_input(&h.g, h.x);
    s.compute(&mut h.g).unwrap();
    read(&h.g, h.ids[4]).unwrap()
}

#[test]
fn splits_and_copies_match_hand_checked_placements() {
    let env = Env::new(false);
    let (w1_gpu, w1_cpu, w2_cpu) = hand_weights(&env);
    for op_offload in [false, true] {
        let mut s = env.sched(false, op_offload);
        let mut h = hand_graph(&w1_gpu, &w2_cpu, 4);
        s.alloc_graph(&mut h.g).unwrap();
        let [a, b, c, d, e] = h.ids;
        let be: Vec<usize> = h
            .ids
            .iter()
            .map(|&i| s.tensor_backend(i).unwrap())
            .collect();
        // a reads a GPU weight; b follows it; the GPU cannot run silu; d reads
        // a CPU weight (4 tokens: not offloaded); e follows d
        assert_eq!(be, vec![0, 0, 1, 1, 1]);
        assert_eq!(s.tensor_backend(h.x), Some(1), "inputs live on the CPU");
        assert_eq!(s.n_splits(), 2);
        let sp = s.splits();
        assert_eq!((sp[0].backend(), sp[1].backend()), (0, 1));
        assert_eq!(sp[0].nodes(), &[a, b]);
        assert_eq!(sp[1].nodes(), &[c, d, e]);
        let inputs = |i: usize| -> Vec<TensorId> { sp[i].inputs().iter().map(|x| x.src).collect() };
        assert_eq!(inputs(0), vec![h.x]);
        assert_eq!(inputs(1), vec![b, a]);
        // the nodes read the copies
        let copy_of = |i: usize, k: usize| sp[i].inputs()[k].copies[0];
        assert_eq!(h.g.node(a).src[1], copy_of(0, 0));
        assert_eq!(h.g.node(c).src[0], copy_of(1, 0));
        assert_eq!(h.g.node(e).src[1], copy_of(1, 1));
        assert_eq!(h.g.desc(copy_of(0, 0)).name, "GPU#x#0");
        assert!(s.buffer_size(0) > 0 && s.buffer_size(1) > 0);

        set_input(&h.g, h.x);
        env.take_log();
        s.compute(&mut h.g).unwrap();
        let log = env.take_log();
        let expect: Vec<(String, String)> = [
            ("GPU", "a"),
            ("GPU", "b"),
            ("CPU", "c"),
            ("CPU", "d"),
            ("CPU", "e"),
        ]
        .iter()
        .map(|(x, y)| (x.to_string(), y.to_string()))
        .collect();
        assert_eq!(log, expect);
        assert_close(
            &read(&h.g, e).unwrap(),
            &hand_reference(&env, &w1_cpu, &w2_cpu, 4),
        );
    }
}

#[test]
fn op_offload_on_a_large_batch_adds_a_split() {
    let env = Env::new(false);
    let (w1_gpu, w1_cpu, w2_cpu) = hand_weights(&env);
    let mut s = env.sched(false, true);
    let mut h = hand_graph(&w1_gpu, &w2_cpu, 512);
    s.alloc_graph(&mut h.g).unwrap();
    let [a, b, c, d, e] = h.ids;
    let be: Vec<usize> = h
        .ids
        .iter()
        .map(|&i| s.tensor_backend(i).unwrap())
        .collect();
    assert_eq!(be, vec![0, 0, 1, 0, 0], "d is offloaded, e follows it");
    assert_eq!(s.n_splits(), 3);
    let sp = s.splits();
    assert_eq!(sp[0].nodes(), &[a, b]);
    assert_eq!(sp[1].nodes(), &[c]);
    assert_eq!(sp[2].nodes(), &[d, e]);
    let src_names = |i: usize| {
        names(
            &h.g,
            &sp[i].inputs().iter().map(|x| x.src).collect::<Vec<_>>(),
        )
    };
    assert_eq!(src_names(0), vec!["x"]);
    assert_eq!(src_names(1), vec!["b"]);
    // the host weight is copied to the GPU, with silu's result; a is there already
    assert_eq!(src_names(2), vec!["w2", "c"]);
    set_input(&h.g, h.x);
    s.compute(&mut h.g).unwrap();
    assert_close(
        &read(&h.g, e).unwrap(),
        &hand_reference(&env, &w1_cpu, &w2_cpu, 512),
    );
}

#[test]
fn op_offload_decides_by_batch_size() {
    let env = Env::new(false);
    let w = Weights::new(&env.host_buft(), &[("w".into(), vec![16, 16])]);
    for (op_offload, t, want) in [(true, 512, 0), (true, 1, 1), (false, 512, 1), (false, 1, 1)] {
        let mut s = env.sched(false, op_offload);
        let mut g = Graph::new();
        let x = g.input("x", Type::F32, &[16, t]);
        let wt = w.import(&mut g, "w");
        let y = g.mul_mat(wt, x).unwrap();
        g.set_output(y);
        s.alloc_graph(&mut g).unwrap();
        assert_eq!(
            s.tensor_backend(y),
            Some(want),
            "op_offload {op_offload}, {t} tokens"
        );
        set_input(&g, x);
        s.compute(&mut g).unwrap();
        // compare with the CPU alone
        let mut g2 = Graph::new();
        let x2 = g2.input("x", Type::F32, &[16, t]);
        let w2 = w.import(&mut g2, "w");
        let y2 = g2.mul_mat(w2, x2).unwrap();
        g2.set_output(y2);
        let mut c = env.cpu_only();
        c.alloc_graph(&mut g2).unwrap();
        set_input(&g2, x2);
        c.compute(&mut g2).unwrap();
        assert_close(&read(&g, y).unwrap(), &read(&g2, y2).unwrap());
    }
}

// ------------------------------------------------------------ a small model

struct Model {
    gpu: Weights,
    cpu: Weights,
    n_layer: usize,
    gpu_from: usize,
}

const D: usize = 32;
const FF: usize = 64;
const VOCAB: usize = 48;

fn model_specs(layers: std::ops::Range<usize>, output: bool) -> Vec<(String, Vec<usize>)> {
    let mut v = Vec::new();
    for l in layers {
        v.push((format!("blk.{l}.norm"), vec![D]));
        v.push((format!("blk.{l}.up"), vec![D, FF]));
        v.push((format!("blk.{l}.down"), vec![FF, D]));
    }
    if output {
        v.push(("output".into(), vec![D, VOCAB]));
    }
    v
}

/// Layers `gpu_from..` (and the output) on the GPU, the rest on the CPU.
fn model(env: &Env, n_layer: usize, gpu_from: usize) -> Model {
    Model {
        cpu: Weights::new(&env.host_buft(), &model_specs(0..gpu_from, false)),
        gpu: Weights::new(&env.gpu_buft(), &model_specs(gpu_from..n_layer, true)),
        n_layer,
        gpu_from,
    }
}

/// The same weights, all in host memory.
fn model_on_cpu(env: &Env, n_layer: usize) -> Model {
    Model {
        cpu: Weights::new(&env.host_buft(), &model_specs(0..n_layer, true)),
        gpu: Weights { items: Vec::new() },
        n_layer,
        gpu_from: n_layer + 1,
    }
}

fn build(m: &Model, t: usize) -> (Graph, TensorId, TensorId) {
    let mut g = Graph::new();
    let x0 = g.input("inp", Type::F32, &[D, t]);
    let mut x = x0;
    for l in 0..m.n_layer {
        let w = if l >= m.gpu_from { &m.gpu } else { &m.cpu };
        let norm = w.import(&mut g, &format!("blk.{l}.norm"));
        let up = w.import(&mut g, &format!("blk.{l}.up"));
        let down = w.import(&mut g, &format!("blk.{l}.down"));
        let n = g.rms_norm(x, 1e-5).unwrap();
        let n = g.mul(n, norm).unwrap();
        let h = g.mul_mat(up, n).unwrap();
        let h = g.silu(h).unwrap();
        let o = g.mul_mat(down, h).unwrap();
        x = g.add_op(x, o).unwrap();
    }
    let w = if m.gpu.items.is_empty() {
        &m.cpu
    } else {
        &m.gpu
    };
    let out = w.import(&mut g, "output");
    let r = g.reshape(x, &[D * t]).unwrap();
    let x = g.reshape(r, &[D, t]).unwrap();
    let logits = g.mul_mat(out, x).unwrap();
    g.set_output(logits);
    (g, x0, logits)
}

fn reference(env: &Env, n_layer: usize, t: usize) -> Vec<f32> {
    let m = model_on_cpu(env, n_layer);
    let (mut g, x, out) = build(&m, t);
    let mut s = env.cpu_only();
    s.alloc_graph(&mut g).unwrap();
    set_input(&g, x);
    s.compute(&mut g).unwrap();
    read(&g, out).unwrap()
}

#[test]
fn decode_graphs_after_reserve_allocate_nothing() {
    let env = Env::new(false);
    let m = model(&env, 6, 2);
    let (ref1, ref200) = (reference(&env, 6, 1), reference(&env, 6, 200));
    let mut s = env.sched(false, true);
    let (worst, _, _) = build(&m, 512);
    s.reserve(&worst).unwrap();
    assert!(s.buffer_size(0) > 0 && s.buffer_size(1) > 0);
    let before = env.allocs();
    let sizes = (s.buffer_size(0), s.buffer_size(1));
    for step in 0..100 {
        let (mut g, x, out) = build(&m, 1);
        assert!(!s.alloc_graph(&mut g).unwrap(), "step {step} reallocated");
        set_input(&g, x);
        s.compute(&mut g).unwrap();
        if step == 0 {
            assert_close(&read(&g, out).unwrap(), &ref1);
        }
    }
    assert_eq!(env.allocs(), before, "no buffer allocated after reserve");
    assert_eq!((s.buffer_size(0), s.buffer_size(1)), sizes);
    // a prompt no larger than the reserve allocates nothing either
    let (mut g, x, out) = build(&m, 200);
    assert!(!s.alloc_graph(&mut g).unwrap());
    set_input(&g, x);
    s.compute(&mut g).unwrap();
    assert_eq!(env.allocs(), before);
    assert_close(&read(&g, out).unwrap(), &ref200);
    // and a larger one grows, and says so
    let (mut g, _, _) = build(&m, 700);
    assert!(s.alloc_graph(&mut g).unwrap());
    assert!(env.allocs() != before);
}

#[test]
fn eval_callback_sees_every_node_in_order_and_can_stop() {
    let env = Env::new(false);
    let m = model(&env, 3, 1);
    let (mut g, x, out) = build(&m, 4);
    let expected: Vec<TensorId> = g.ids().filter(|&id| g.node(id).op != Op::None).collect();
    let mut s = env.sched(false, true);
    let seen: Arc<Mutex<Vec<TensorId>>> = Arc::default();
    let seen2 = seen.clone();
    s.set_eval_callback(Some(Box::new(
        move |g: &Graph, id: TensorId, p: &Placement| {
            // the data is there to be read
            let mut b = vec![0u8; g.desc(id).nbytes().min(4)];
            p.buffer.get_tensor(p.offset, &mut b).unwrap();
            seen2.lock().unwrap().push(id);
            true
        },
    )));
    s.alloc_graph(&mut g).unwrap();
    set_input(&g, x);
    s.compute(&mut g).unwrap();
    assert_eq!(
        *seen.lock().unwrap(),
        expected,
        "every node, views included, in order"
    );
    assert!(s.n_splits() > 1);
    assert_close(&read(&g, out).unwrap(), &reference(&env, 3, 4));

    // stopping after the third node: nothing after it is computed
    let (mut g, x, _) = build(&m, 4);
    let count = Arc::new(AtomicUsize::new(0));
    let c2 = count.clone();
    s.set_eval_callback(Some(Box::new(
        move |_: &Graph, _: TensorId, _: &Placement| c2.fetch_add(1, Ordering::Relaxed) + 1 < 3,
    )));
    s.alloc_graph(&mut g).unwrap();
    set_input(&g, x);
    env.take_log();
    let r = s.compute(&mut g);
    assert!(matches!(r, Err(Error::Aborted)), "{r:?}");
    assert_eq!(count.load(Ordering::Relaxed), 3);
    assert_eq!(
        env.take_log().len(),
        3,
        "computed nodes: exactly the ones seen"
    );
}

/// The weight name and activations of each matrix product seen.
type Seen = Arc<Mutex<Vec<(String, Vec<f32>)>>>;

/// Sees the matrix products only, and checks that each one's
/// activations are already there and intact when it is shown.
struct MatMulWatcher {
    asked: Arc<AtomicUsize>,
    seen: Seen,
}

impl EvalObserver for MatMulWatcher {
    fn wants(&mut self, g: &Graph, id: TensorId) -> bool {
        self.asked.fetch_add(1, Ordering::Relaxed);
        g.node(id).op == Op::MulMat
    }
    fn observe(&mut self, g: &Graph, id: TensorId, _at: &Placement) -> bool {
        let node = g.node(id);
        let x = read(g, node.src[1]).unwrap();
        let name = g.desc(node.src[0]).name.clone();
        self.seen.lock().unwrap().push((name, x));
        true
    }
}

#[test]
fn an_observer_sees_only_the_nodes_it_wants_and_runs_the_rest_in_one_go() {
    let env = Env::new(false);
    let m = model(&env, 3, 1);
    let (mut g, x, out) = build(&m, 4);
    let mut s = env.sched(false, true);
    let asked = Arc::new(AtomicUsize::new(0));
    let seen: Seen = Arc::default();
    s.set_eval_callback(Some(Box::new(MatMulWatcher {
        asked: asked.clone(),
        seen: seen.clone(),
    })));
    s.alloc_graph(&mut g).unwrap();
    set_input(&g, x);
    env.take_log();
    s.compute(&mut g).unwrap();
    let computed = env.take_log().len();
    assert_close(&read(&g, out).unwrap(), &reference(&env, 3, 4));
    let expected: Vec<String> = g
        .ids()
        .filter(|&id| g.node(id).op == Op::MulMat)
        .map(|id| g.desc(g.node(id).src[0]).name.clone())
        .collect();
    let seen = seen.lock().unwrap();
    let names: Vec<String> = seen.iter().map(|(n, _)| n.clone()).collect();
    assert_eq!(names, expected, "every matrix product, in order");
    // The first product's activations are the normed input: not all zero.
    assert!(seen[0].1.iter().any(|&v| v != 0.0));
    // Every node of every split was asked about, and every node ran once.
    let n_nodes: usize = s.splits().iter().map(|sp| sp.nodes().len()).sum();
    assert_eq!(asked.load(Ordering::Relaxed), n_nodes);
    let n_compute: usize = s.splits().iter().map(|sp| sp.compute_nodes().len()).sum();
    assert_eq!(computed, n_compute);
}

#[test]
fn abort_callback_stops_between_splits() {
    let env = Env::new(false);
    let m = model(&env, 3, 1);
    let (mut g, x, _) = build(&m, 4);
    let mut s = env.sched(false, false);
    let polls = Arc::new(AtomicUsize::new(0));
    let p2 = polls.clone();
    s.set_abort_callback(Some(Box::new(move || {
        p2.fetch_add(1, Ordering::Relaxed) >= 1
    })));
    s.alloc_graph(&mut g).unwrap();
    set_input(&g, x);
    env.take_log();
    assert!(matches!(s.compute(&mut g), Err(Error::Aborted)));
    let first = s.splits()[0].compute_nodes().len();
    assert_eq!(env.take_log().len(), first, "only the first split ran");
}

#[test]
fn split_inputs_are_bounded() {
    let env = Env::new(false);
    let n = 45;
    let specs: Vec<(String, Vec<usize>)> = (0..n).map(|i| (format!("w{i}"), vec![8, 8])).collect();
    let w = Weights::new(&env.gpu_buft(), &specs);
    let mut g = Graph::new();
    let x = g.input("x", Type::F32, &[8, 2]);
    let parts: Vec<TensorId> = (0..n)
        .map(|i| {
            let wi = w.import(&mut g, &format!("w{i}"));
            g.mul_mat(wi, x).unwrap()
        })
        .collect();
    // a CPU chain reading every GPU result
    let mut acc = g.silu(parts[0]).unwrap();
    let mut adds = Vec::new();
    for &p in &parts[1..] {
        acc = g.add_op(acc, p).unwrap();
        adds.push(acc);
    }
    g.set_output(acc);
    let mut s = env.sched(false, false);
    for &a in &adds {
        s.set_tensor_backend(a, 1).unwrap();
    }
    s.alloc_graph(&mut g).unwrap();
    let cpu_splits: Vec<_> = s.splits().iter().filter(|sp| sp.backend() == 1).collect();
    assert!(cpu_splits.len() >= 2, "the CPU chain is cut");
    assert!(s
        .splits()
        .iter()
        .all(|sp| sp.inputs().len() <= SCHED_MAX_SPLIT_INPUTS));
    let copied: usize = cpu_splits.iter().map(|sp| sp.inputs().len()).sum();
    assert_eq!(copied, n);
    set_input(&g, x);
    s.compute(&mut g).unwrap();
}

#[test]
fn pipeline_parallel_rotates_copy_sets() {
    let env = Env::new(true);
    let m = model(&env, 3, 1);
    let expect = reference(&env, 3, 2);
    let mut s = env.sched(true, true);
    assert_eq!(s.n_copies(), SCHED_MAX_COPIES);
    let (worst, _, _) = build(&m, 64);
    s.reserve(&worst).unwrap();
    let before = env.allocs();
    let mut offsets = Vec::new();
    for k in 0..6 {
        let (mut g, x, out) = build(&m, 2);
        assert!(!s.alloc_graph(&mut g).unwrap());
        assert_eq!(s.cur_copy(), k % SCHED_MAX_COPIES);
        // every split input has one copy per set; the graph input too
        for sp in s.splits() {
            for i in sp.inputs() {
                assert_eq!(i.copies.len(), SCHED_MAX_COPIES);
                assert!(g.node(i.copies[0]).flags.contains(Flags::OUTPUT));
            }
        }
        let gi = &s.graph_inputs()[0];
        assert_eq!((gi.src, gi.copies[s.cur_copy()]), (x, x));
        offsets.push(g.placement(x).unwrap().offset);
        set_input(&g, x);
        s.compute_async(&mut g).unwrap();
        assert_close(&read(&g, out).unwrap(), &expect);
    }
    // the input moves between the copy sets, and comes back
    assert_ne!(offsets[0], offsets[1]);
    assert_eq!(offsets[0], offsets[4]);
    assert_eq!(env.allocs(), before);
    // after a synchronization, the next graph starts at copy set 0 again
    s.synchronize().unwrap();
    let (mut g, _, _) = build(&m, 2);
    s.alloc_graph(&mut g).unwrap();
    assert_eq!(s.cur_copy(), 0);
}

/// The CPU-only result of the layered graph on input values from `seed`.
fn reference_seeded(env: &Env, n_layer: usize, t: usize, seed: &str) -> Vec<f32> {
    let m = model_on_cpu(env, n_layer);
    let (mut g, x, out) = build(&m, t);
    let mut s = env.cpu_only();
    s.alloc_graph(&mut g).unwrap();
    set_input_seeded(&g, x, seed);
    s.compute(&mut g).unwrap();
    read(&g, out).unwrap()
}

fn set_input_seeded(g: &Graph, id: TensorId, seed: &str) {
    let v = data(seed, g.desc(id).n_elements());
    Scheduler::set_input(g, id, &to_bytes(&v)).unwrap();
}

#[test]
fn an_allocated_graph_is_reused_until_the_scheduler_moves_on() {
    for parallel in [false, true] {
        let env = Env::new(parallel);
        let m = model(&env, 3, 1);
        let mut s = env.sched(parallel, true);
        let (worst, _, _) = build(&m, 64);
        s.reserve(&worst).unwrap();
        assert_eq!(s.last_allocation(), None, "a reservation is no allocation");
        let (mut g, x, out) = build(&m, 2);
        s.alloc_graph(&mut g).unwrap();
        let id = s.last_allocation().expect("the allocation");
        let (n_splits, copy) = (s.n_splits(), s.cur_copy());
        assert!(n_splits >= 2, "the graph spans both backends");
        let want: Vec<Vec<f32>> = (0..5)
            .map(|k| reference_seeded(&env, 3, 2, &format!("inp{k}")))
            .collect();
        let before = env.allocs();
        // New inputs each run: the results follow them, nothing of the
        // previous run stays behind.
        for (k, want) in want.iter().enumerate() {
            if k > 0 {
                assert!(
                    s.reuse_graph(&g, id).unwrap(),
                    "parallel {parallel}, run {k}"
                );
                assert_eq!(s.cur_copy(), copy, "the graph keeps its copy set");
            }
            let seed = format!("inp{k}");
            set_input_seeded(&g, x, &seed);
            s.compute(&mut g).unwrap();
            assert_close(&read(&g, out).unwrap(), want);
            assert_eq!(s.n_splits(), n_splits);
        }
        assert_eq!(env.allocs(), before, "reuse allocates nothing");
        // Another graph split: the first allocation is gone for good.
        let (mut g2, x2, _) = build(&m, 2);
        s.alloc_graph(&mut g2).unwrap();
        assert!(!s.reuse_graph(&g, id).unwrap());
        set_input(&g2, x2);
        s.compute(&mut g2).unwrap();
        let id2 = s.last_allocation().expect("the second allocation");
        assert_ne!(id, id2);
        // A graph other than the one allocated (here: never split).
        assert!(!s.reuse_graph(&worst, id2).unwrap());
        // A pending user assignment asks for a new split.
        s.set_tensor_backend(x2, 1).unwrap();
        assert!(!s.reuse_graph(&g2, id2).unwrap());
        s.reset();
        assert!(!s.reuse_graph(&g2, id2).unwrap(), "after a reset");
        assert_eq!(s.last_allocation(), None);
        // A reservation may replace the compute buffers.
        let (mut g3, x3, _) = build(&m, 2);
        s.alloc_graph(&mut g3).unwrap();
        set_input(&g3, x3);
        s.compute(&mut g3).unwrap();
        let id3 = s.last_allocation().expect("the third allocation");
        s.reserve(&worst).unwrap();
        assert!(!s.reuse_graph(&g3, id3).unwrap(), "after a reservation");
    }
}

#[test]
fn user_assignments_apply_to_the_next_graph() {
    let env = Env::new(false);
    let (w1_gpu, _, w2_cpu) = hand_weights(&env);
    let mut s = env.sched(false, false);
    let mut h = hand_graph(&w1_gpu, &w2_cpu, 4);
    let b = h.ids[1];
    s.set_tensor_backend(b, 1).unwrap();
    assert_eq!(s.tensor_backend(b), Some(1));
    s.alloc_graph(&mut h.g).unwrap();
    assert_eq!(s.tensor_backend(b), Some(1));
    assert_eq!(s.n_splits(), 2, "a on the GPU, b onwards on the CPU");
    assert_eq!(s.splits()[0].nodes(), &[h.ids[0]]);
    set_input(&h.g, h.x);
    s.compute(&mut h.g).unwrap();
    // the next graph does not inherit it
    let mut h2 = hand_graph(&w1_gpu, &w2_cpu, 4);
    s.alloc_graph(&mut h2.g).unwrap();
    assert_eq!(s.tensor_backend(h2.ids[1]), Some(0));
    s.reset();
    assert_eq!(s.tensor_backend(b), None);
    s.set_tensor_backend(b, 1).unwrap();
    s.reset();
    assert_eq!(s.tensor_backend(b), None);
    assert!(s.set_tensor_backend(b, 7).is_err());
}

#[test]
fn backends_sharing_a_buffer_type_need_no_copies() {
    let env = Env::new(false);
    // an accelerator over host memory that only multiplies matrices
    let blas = FakeDevice::new("BLAS", DeviceKind::Accel, env.host.clone(), false, &env.log);
    let mut s = Scheduler::new(
        vec![blas.backend(), env.cpu.backend()],
        None,
        64,
        false,
        false,
    )
    .unwrap();
    let w = Weights::new(&env.host_buft(), &[("w".into(), vec![8, 8])]);
    let mut g = Graph::new();
    let x = g.input("x", Type::F32, &[8, 3]);
    let wt = w.import(&mut g, "w");
    let y = g.mul_mat(wt, x).unwrap();
    let z = g.silu(y).unwrap();
    g.set_output(z);
    s.reserve(&g).unwrap();
    s.alloc_graph(&mut g).unwrap();
    assert_eq!(s.tensor_backend(y), Some(0));
    assert_eq!(s.tensor_backend(z), Some(1));
    assert_eq!(s.n_splits(), 2);
    assert!(s.splits().iter().all(|sp| sp.inputs().is_empty()));
    assert!(s.buffer_size(0) > 0);
    assert_eq!(
        s.buffer_size(1),
        0,
        "one compute buffer for the shared type"
    );
    set_input(&g, x);
    s.compute(&mut g).unwrap();
}

#[test]
fn misuse_is_an_error() {
    let env = Env::new(false);
    assert!(Scheduler::new(Vec::new(), None, 8, false, false).is_err());
    // the CPU must come last
    assert!(Scheduler::new(
        vec![env.cpu.backend(), env.gpu.backend()],
        None,
        8,
        false,
        false
    )
    .is_err());
    // one buffer type per backend, usable by it
    let bad = Some(vec![env.host_buft(), env.host_buft()]);
    assert!(Scheduler::new(
        vec![env.gpu.backend(), env.cpu.backend()],
        bad,
        8,
        false,
        false
    )
    .is_err());
    let short = Some(vec![env.host_buft()]);
    assert!(Scheduler::new(
        vec![env.gpu.backend(), env.cpu.backend()],
        short,
        8,
        false,
        false
    )
    .is_err());
    let many: Vec<Box<dyn Backend>> = (0..17).map(|_| env.cpu.backend()).collect();
    assert!(Scheduler::new(many, None, 8, false, false).is_err());

    // a graph larger than the scheduler was made for
    let m = model(&env, 2, 1);
    let (mut g, _, _) = build(&m, 2);
    let mut small = Scheduler::new(
        vec![env.gpu.backend(), env.cpu.backend()],
        None,
        8,
        false,
        false,
    )
    .unwrap();
    assert!(small.alloc_graph(&mut g).is_err());

    // computing a graph other than the one allocated
    let mut s = env.sched(false, false);
    let (mut g1, _, _) = build(&m, 2);
    let (mut g2, _, _) = build(&model(&env, 3, 1), 2);
    s.alloc_graph(&mut g1).unwrap();
    assert!(s.compute(&mut g2).is_err());

    // a weight in memory no backend of the scheduler can use
    let (mut g, _, _) = build(&m, 2);
    assert!(env.cpu_only().alloc_graph(&mut g).is_err());

    // a graph is split once
    let (mut g, _, _) = build(&m, 2);
    s.alloc_graph(&mut g).unwrap();
    assert!(s.alloc_graph(&mut g).is_err());

    // writing an input with the wrong size
    let (mut g, x, _) = build(&m, 2);
    s.alloc_graph(&mut g).unwrap();
    assert!(Scheduler::set_input(&g, x, &[0u8; 3]).is_err());
}

#[test]
fn scheduler_is_send() {
    fn send<T: Send>() {}
    send::<Scheduler>();
}

/// The `--cpu-moe` layout: the router and the dense weights on the GPU,
/// the expert tensor in host memory. x -> h = w_gpu x (GPU) -> y =
/// mul_mat_id(exps, h, ids) (CPU, where the experts are) -> o = w_out y (GPU).
#[test]
fn mul_mat_id_runs_where_its_experts_live_and_copies_activations() {
    let env = Env::new(false);
    let gpu_w = Weights::new(
        &env.gpu_buft(),
        &[("w_in".into(), vec![8, 8]), ("w_out".into(), vec![6, 4])],
    );
    let host_w = Weights::new(
        &env.host_buft(),
        &[
            ("w_in".into(), vec![8, 8]),
            ("w_out".into(), vec![6, 4]),
            ("exps".into(), vec![8, 6, 5]),
        ],
    );
    let n_tok = 4;
    let ids_data: Vec<u8> = [0i32, 3, 3, 1, 0, 3, 1, 0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let build = |dense: &Weights| {
        let mut g = Graph::new();
        let x = g.input("x", Type::F32, &[8, n_tok]);
        let ids = g.input("ids", Type::I32, &[2, n_tok]);
        let w_in = dense.import(&mut g, "w_in");
        let w_out = dense.import(&mut g, "w_out");
        let exps = host_w.import(&mut g, "exps");
        let h = g.mul_mat(w_in, x).unwrap();
        g.set_name(h, "h");
        let h3 = g.reshape(h, &[8, 1, n_tok]).unwrap();
        let y = g.mul_mat_id(exps, h3, ids).unwrap();
        g.set_name(y, "y");
        let y2 = g.reshape(y, &[6, 2 * n_tok]).unwrap();
        let o = g.mul_mat(w_out, y2).unwrap();
        g.set_name(o, "o");
        g.set_output(o);
        (g, x, ids, [h, y, o])
    };
    let want = {
        let (mut g, x, ids, [.., o]) = build(&host_w);
        let mut s = env.cpu_only();
        s.alloc_graph(&mut g).unwrap();
        set_input(&g, x);
        Scheduler::set_input(&g, ids, &ids_data).unwrap();
        s.compute(&mut g).unwrap();
        read(&g, o).unwrap()
    };
    for op_offload in [false, true] {
        let (mut g, x, ids, [h, y, o]) = build(&gpu_w);
        let mut s = env.sched(false, op_offload);
        s.alloc_graph(&mut g).unwrap();
        let be: Vec<Option<usize>> = [h, y, o].iter().map(|&i| s.tensor_backend(i)).collect();
        assert_eq!(
            be,
            vec![Some(0), Some(1), Some(0)],
            "op_offload {op_offload}"
        );
        let copied: Vec<String> = s
            .splits()
            .iter()
            .flat_map(|sp| sp.inputs().iter().map(|i| g.desc(i.src).name.clone()))
            .collect();
        assert!(
            !copied.iter().any(|n| n == "exps"),
            "expert weights must not be copied: {copied:?}"
        );
        // The activations cross, as the views the next op reads.
        assert!(copied.iter().any(|n| n.starts_with("h")), "{copied:?}");
        assert!(copied.iter().any(|n| n.starts_with("y")), "{copied:?}");
        set_input(&g, x);
        Scheduler::set_input(&g, ids, &ids_data).unwrap();
        env.take_log();
        s.compute(&mut g).unwrap();
        let log = env.take_log();
        assert!(
            log.contains(&("CPU".to_string(), "y".to_string())),
            "{log:?}"
        );
        assert_close(&read(&g, o).unwrap(), &want);
    }
}
