//! Where each layer and each weight goes: per-layer devices from n_gpu_layers
//! and the split between GPUs, then a buffer type per tensor from the layer's
//! list of buffer types with fallbacks and the user's overrides.

use std::sync::Arc;

use ggml_core::{registry, BufferType, Device, DeviceKind, Graph, TensorDesc, TensorId, Type};

use crate::arch::{TensorKind, TensorOp};
use crate::error::{LlamaError, Result};
use crate::hparams::HParams;
use crate::params::{ModelParams, SplitMode};

/// A buffer type and the device that computes with weights stored in it.
#[derive(Clone)]
pub struct BuftEntry {
    /// The buffer type.
    pub buft: Arc<dyn BufferType>,
    /// The device that runs the ops using those weights.
    pub dev: Arc<dyn Device>,
}

/// Buffer types in order of preference.
pub type BuftList = Vec<BuftEntry>;

/// The device of a layer and its buffer types.
#[derive(Clone)]
pub struct LayerDev {
    /// The device that owns the layer.
    pub dev: Arc<dyn Device>,
    /// Buffer types to try, best first; the CPU is always last.
    pub bufts: BuftList,
}

/// The placement of every layer of a model.
#[derive(Clone)]
pub struct LayerPlan {
    /// The input layer (token embeddings): always on the CPU.
    pub input: LayerDev,
    /// Repeating layers.
    pub layers: Vec<LayerDev>,
    /// Output norm and projection.
    pub output: LayerDev,
    /// Number of repeating layers on GPUs.
    pub n_offloaded: usize,
    /// Whether the output layer is on a GPU.
    pub output_offloaded: bool,
}

/// CPU buffer types: accelerator types, the CPU's extra (repacked) types
/// when `use_extra` (llama.cpp's `use_extra_bufts`), then the CPU.
pub fn cpu_buft_list(cpu: &Arc<dyn Device>, use_extra: bool) -> BuftList {
    let mut list = Vec::new();
    for dev in registry::devices()
        .into_iter()
        .filter(|d| d.kind() == DeviceKind::Accel)
    {
        list.push(BuftEntry {
            buft: dev.buffer_type(),
            dev: cpu.clone(),
        });
    }
    for buft in cpu.extra_buffer_types().into_iter().filter(|_| use_extra) {
        list.push(BuftEntry {
            buft,
            dev: cpu.clone(),
        });
    }
    list.push(BuftEntry {
        buft: cpu.buffer_type(),
        dev: cpu.clone(),
    });
    list
}

/// A GPU's buffer types: its own, then the CPU list as fallback.
pub fn gpu_buft_list(dev: &Arc<dyn Device>, cpu: &Arc<dyn Device>, use_extra: bool) -> BuftList {
    let mut list = vec![BuftEntry {
        buft: dev.buffer_type(),
        dev: dev.clone(),
    }];
    list.extend(cpu_buft_list(cpu, use_extra));
    list
}

/// Cumulative split points of the layers between GPUs: from `tensor_split`
/// when given, else in proportion to free memory.
pub fn split_points(params: &ModelParams, gpus: &[Arc<dyn Device>]) -> Result<Vec<f32>> {
    let n = gpus.len();
    if let Some(bad) = params
        .tensor_split
        .iter()
        .find(|&&x| x.is_nan() || x < 0.0 || !x.is_finite())
    {
        return Err(LlamaError::InvalidParam(format!(
            "tensor_split has an invalid entry {bad}"
        )));
    }
    let mut w: Vec<f32> = params.tensor_split.iter().take(n).copied().collect();
    w.resize(n, 0.0);
    if w.iter().all(|&x| x == 0.0) {
        w = gpus.iter().map(|d| d.memory().0 as f32).collect();
        if w.iter().all(|&x| x == 0.0) {
            w = vec![1.0; n];
        }
    }
    let total: f32 = w.iter().sum();
    let mut acc = 0.0;
    Ok(w.iter()
        .map(|x| {
            let start = acc / total;
            acc += x;
            start
        })
        .collect())
}

/// Assigns every layer a device: the last `n_gpu_layers` repeating layers go
/// to the GPUs (split by [`split_points`]), the output layer too when
/// `n_gpu_layers > n_layer`, the input layer stays on the CPU.
pub fn plan_layers(
    hp: &HParams,
    params: &ModelParams,
    gpus: &[Arc<dyn Device>],
    cpu: &Arc<dyn Device>,
) -> Result<LayerPlan> {
    if params.split_mode == SplitMode::Row && !gpus.is_empty() {
        return Err(LlamaError::NotSupported("split_mode row".into()));
    }
    let n_layer = hp.n_layer;
    let n_gpu_layers = if params.n_gpu_layers < 0 {
        n_layer + 1
    } else {
        params.n_gpu_layers as usize
    };
    let i_gpu_start = n_layer.saturating_sub(n_gpu_layers);
    let act_gpu_layers = if gpus.is_empty() {
        0
    } else {
        n_gpu_layers.min(n_layer + 1)
    };
    let splits = split_points(params, gpus)?;
    // With GPUs, weights kept on the CPU stay in ggml's layout, so that
    // large batches can still run on a GPU (op offload copies them there);
    // llama.cpp likewise puts a GPU's host buffer type before the extra
    // types.
    let use_extra = params.use_extra_bufts && gpus.is_empty();
    let cpu_dev = LayerDev {
        dev: cpu.clone(),
        bufts: cpu_buft_list(cpu, use_extra),
    };
    let dev_for = |il: usize| -> LayerDev {
        if il < i_gpu_start || il - i_gpu_start >= act_gpu_layers {
            return cpu_dev.clone();
        }
        let frac = (il - i_gpu_start) as f32 / act_gpu_layers as f32;
        // The last split point not above `frac` (upper_bound - 1).
        let idx = splits.iter().rposition(|&s| s <= frac).unwrap_or(0);
        let dev = &gpus[idx];
        LayerDev {
            dev: dev.clone(),
            bufts: gpu_buft_list(dev, cpu, use_extra),
        }
    };
    let layers: Vec<LayerDev> = (0..n_layer).map(dev_for).collect();
    let output = dev_for(n_layer);
    let n_offloaded = layers
        .iter()
        .filter(|l| l.dev.kind() != DeviceKind::Cpu)
        .count();
    let output_offloaded = output.dev.kind() != DeviceKind::Cpu;
    Ok(LayerPlan {
        input: cpu_dev,
        layers,
        output,
        n_offloaded,
        output_offloaded,
    })
}

/// The op that consumes a weight, in a small graph: the graph, the op's
/// node and the weight's leaf.
pub struct Probe {
    /// The graph.
    pub graph: Graph,
    /// The op.
    pub node: TensorId,
    /// The weight.
    pub weight: TensorId,
}

/// Builds the op that consumes a weight, in a small graph, so a device can be
/// asked whether it supports it with a realistic batch of 512 tokens.
/// The op comes from the tensor-info table; `None` when the op cannot be
/// built for this shape (the caller then refuses the tensor).
pub fn probe_graph(kind: TensorKind, desc: &TensorDesc, hp: &HParams) -> Option<Probe> {
    const N: usize = 512;
    let mut g = Graph::new();
    let w = g.new_tensor(desc.name.clone(), desc.ty, &desc.ne);
    let node = match kind.info().op {
        TensorOp::GetRows => {
            let idx = g.input("ids", Type::I32, &[N]);
            g.get_rows(w, idx).ok()?
        }
        TensorOp::Mul => {
            // A vector scales rows; a matrix (Mamba-2's per-head D, its
            // grouped norm) scales rows of its own shape, N times over.
            let ne = if desc.ne[1] > 1 {
                vec![desc.ne[0], desc.ne[1], N]
            } else {
                vec![desc.ne[0], N]
            };
            let x = g.input("x", Type::F32, &ne);
            g.mul(x, w).ok()?
        }
        TensorOp::SsmConv | TensorOp::SsmScan => ssm_probe(&mut g, kind, desc, w, hp)?,
        TensorOp::Add => {
            // Over N rows, and over the weight's own outer axes (RWKV's
            // fused lerps [n_embd, 1, 1, 5]).
            let x = g.input("x", Type::F32, &[desc.ne[0], N, desc.ne[2], desc.ne[3]]);
            g.add_op(x, w).ok()?
        }
        TensorOp::RwkvWkv6 => {
            // The bonus u [head_size, n_head] of one sequence's ubatch.
            let [hs, nh, ..] = desc.ne;
            let tok: Vec<TensorId> = ["k", "v", "r", "w"]
                .iter()
                .map(|n| g.input(*n, Type::F32, &[hs, nh, N]))
                .collect();
            let s = g.input("s", Type::F32, &[hs * hs * nh, 1]);
            g.rwkv_wkv6(tok[0], tok[1], tok[2], w, tok[3], s).ok()?
        }
        TensorOp::Scale => g.scale(w, 1.0).ok()?,
        TensorOp::AddId => {
            let n_used = (0..hp.n_layer)
                .map(|il| hp.n_expert_used(il))
                .max()
                .unwrap_or(1)
                .max(1);
            let x = g.input("x", Type::F32, &[desc.ne[0], n_used, N]);
            let ids = g.input("ids", Type::I32, &[n_used, N]);
            g.add_id(x, w, ids).ok()?
        }
        TensorOp::Rope => {
            let x = g.input("x", Type::F32, &[hp.n_embd_head_k, hp.n_head(0), N]);
            let pos = g.input("pos", Type::I32, &[N]);
            let p =
                ggml_core::RopeParams::new(hp.n_rot, hp.arch.rope_mode(), hp.rope_freq_base_train);
            g.rope_ext(x, pos, Some(w), p).ok()?
        }
        TensorOp::MulMat => {
            // A 3-d weight is a stack of matrices (RWKV-6's lerp
            // projections [k, m, 5], MLA's per-head attn_k_b and attn_v_b):
            // it multiplies a stack of as many activations.
            let x = g.input("x", Type::F32, &[desc.ne[0], N, desc.ne[2], desc.ne[3]]);
            g.mul_mat(w, x).ok()?
        }
        TensorOp::MulMatId => {
            // As the expert FFN calls it: every token's slots, each slot
            // naming one expert.
            let n_used = (0..hp.n_layer)
                .map(|il| hp.n_expert_used(il))
                .max()
                .unwrap_or(1)
                .max(1);
            let x = g.input("x", Type::F32, &[desc.ne[0], n_used, N]);
            let ids = g.input("ids", Type::I32, &[n_used, N]);
            g.mul_mat_id(w, x, ids).ok()?
        }
    };
    Some(Probe {
        graph: g,
        node,
        weight: w,
    })
}

/// The first buffer type of `list` whose device supports the weight's op
/// and that may hold the weight for it.
pub fn select_buft(
    list: &BuftList,
    kind: TensorKind,
    desc: &TensorDesc,
    hp: &HParams,
) -> Option<BuftEntry> {
    let p = probe_graph(kind, desc, hp)?;
    list.iter()
        .find(|e| {
            e.dev.supports_buft(e.buft.as_ref())
                && e.dev.supports_op(&p.graph, p.node)
                && e.buft.supports_weight(&p.graph, p.node, p.weight)
        })
        .cloned()
}

/// True when `buft` may hold the weight for the op that reads it (a
/// repacked type holds only the weights of the ops it serves).
pub fn buft_holds(
    buft: &dyn BufferType,
    kind: TensorKind,
    desc: &TensorDesc,
    hp: &HParams,
) -> bool {
    probe_graph(kind, desc, hp).is_some_and(|p| buft.supports_weight(&p.graph, p.node, p.weight))
}

/// Finds a buffer type by name among every registered device's types.
pub fn buft_by_name(name: &str, cpu: &Arc<dyn Device>) -> Option<BuftEntry> {
    for dev in registry::devices() {
        let mut cands = vec![dev.buffer_type()];
        cands.extend(dev.host_buffer_type());
        cands.extend(dev.extra_buffer_types());
        for buft in cands {
            if buft.name().eq_ignore_ascii_case(name) {
                let is_cpu_side = buft.is_host();
                let dev = if is_cpu_side {
                    cpu.clone()
                } else {
                    dev.clone()
                };
                return Some(BuftEntry { buft, dev });
            }
        }
    }
    None
}

/// The probe of an SSM weight: SSM_CONV over a ubatch for the convolution
/// kernel, SSM_SCAN of one sequence for the state decay A (Mamba-1's A is
/// [d_state, d_inner], Mamba-2's [1, n_head]).
fn ssm_probe(
    g: &mut Graph,
    kind: TensorKind,
    desc: &TensorDesc,
    w: TensorId,
    hp: &HParams,
) -> Option<TensorId> {
    const N: usize = 512;
    match kind.info().op {
        TensorOp::SsmConv => {
            let sx = g.input("sx", Type::F32, &[desc.ne[0] - 1 + N, desc.ne[1], 1]);
            g.ssm_conv(sx, w).ok()
        }
        _ => {
            let n_head = desc.ne[1];
            let (d_state, head_dim) = if desc.ne[0] == 1 {
                (hp.ssm_d_state, hp.ssm_d_inner / n_head.max(1))
            } else {
                (desc.ne[0], 1)
            };
            let n_group = hp.ssm_n_group.max(1);
            let s = g.input("s", Type::F32, &[d_state, head_dim, n_head, 1]);
            let x = g.input("x", Type::F32, &[head_dim, n_head, N, 1]);
            let dt = g.input("dt", Type::F32, &[n_head, N, 1]);
            let b = g.input("B", Type::F32, &[d_state, n_group, N, 1]);
            let c = g.input("C", Type::F32, &[d_state, n_group, N, 1]);
            let ids = g.input("ids", Type::I32, &[1]);
            g.ssm_scan(s, x, dt, w, b, c, ids).ok()
        }
    }
}
