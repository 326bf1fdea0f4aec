//! A loaded model: hyperparameters, vocabulary, and weights resident on the
//! devices the placement chose.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ggml_core::{Buffer, Device, DeviceKind, TensorDesc};
use gguf::{GgufModel, Metadata};

use crate::arch::{Arch, Need, Scope, TensorKind, N_TENSOR_KINDS};
use crate::devices::{backend_init, cpu_device, select_devices};
use crate::error::{LlamaError, Result};
use crate::hparams::{HParams, MetaView};
use crate::loader::{load_weights, plan_weights, LoadStats, MemLock, WeightRequest};
use crate::params::LoadMode;
use crate::params::ModelParams;
use crate::placement::{
    buft_by_name, buft_holds, plan_layers, select_buft, BuftEntry, BuftList, LayerPlan,
};
use crate::vocab::Vocab;

pub use ggml_core::Placement;

const MIB: f64 = 1024.0 * 1024.0;

/// A weight: its descriptor and where its bytes live.
#[derive(Clone, Debug)]
pub struct Weight {
    /// Name, type, shape.
    pub desc: TensorDesc,
    /// Buffer and offset.
    pub at: Placement,
}

/// The weights of one repeating layer.
#[derive(Clone, Debug)]
pub struct Layer {
    w: [Option<Weight>; N_TENSOR_KINDS],
}

impl Default for Layer {
    fn default() -> Layer {
        Layer {
            w: std::array::from_fn(|_| None),
        }
    }
}

impl Layer {
    /// A weight of the layer, if the model has it.
    pub fn get(&self, kind: TensorKind) -> Option<&Weight> {
        self.w[kind.index()].as_ref()
    }

    /// Every weight of the layer.
    pub fn iter(&self) -> impl Iterator<Item = &Weight> {
        self.w.iter().flatten()
    }

    /// A weight the architecture requires (present after a successful load).
    pub fn req(&self, kind: TensorKind) -> Result<&Weight> {
        self.get(kind)
            .ok_or_else(|| LlamaError::Tensor(format!("missing tensor {}", kind.name(None))))
    }
}

/// All weights of a model.
#[derive(Clone, Debug)]
pub struct Weights {
    /// Token embeddings.
    pub tok_embd: Weight,
    /// Final norm.
    pub output_norm: Weight,
    /// Bias of the final norm (LayerNorm models).
    pub output_norm_b: Option<Weight>,
    /// LayerNorm of the token embeddings, weight and bias (RWKV).
    pub tok_norm: Option<(Weight, Weight)>,
    /// Output projection (a copy of, or the same as, the embeddings when tied).
    pub output: Weight,
    /// Rope frequency factors.
    pub rope_freqs: Option<Weight>,
    /// Rope factors for contexts longer than the original (phi3).
    pub rope_factors_long: Option<Weight>,
    /// Rope factors for contexts within the original (phi3).
    pub rope_factors_short: Option<Weight>,
    /// Repeating layers.
    pub layers: Vec<Layer>,
}

impl Weights {
    /// The rope frequency factors for a context of `n_ctx` positions per
    /// sequence: `rope_freqs`, or the long/short factors chosen by whether
    /// the context exceeds the original one.
    pub fn rope_factors(&self, n_ctx: usize, n_ctx_orig: usize) -> Option<&Weight> {
        if let Some(r) = &self.rope_freqs {
            return Some(r);
        }
        if n_ctx > n_ctx_orig {
            self.rope_factors_long.as_ref()
        } else {
            self.rope_factors_short.as_ref()
        }
    }
}

/// A model loaded from a GGUF file.
pub struct Model {
    /// Architecture.
    pub arch: Arch,
    /// Hyperparameters.
    pub hparams: HParams,
    /// Vocabulary.
    pub vocab: Vocab,
    /// `general.name`, if any.
    pub name: String,
    /// Metadata of the (first) file, for tools.
    pub metadata: Metadata,
    /// GPUs the model uses.
    pub devices: Vec<Arc<dyn Device>>,
    /// The CPU device.
    pub cpu: Arc<dyn Device>,
    /// Device per layer.
    pub plan: LayerPlan,
    /// Memory locked for `use_mlock`; declared before the weights and
    /// buffers so that it is unlocked before they are freed.
    pub mem_locks: Vec<MemLock>,
    /// Weights; `None` for vocab-only loads and dry runs.
    pub weights: Option<Weights>,
    /// Buffers holding the weights.
    pub buffers: Vec<Arc<dyn Buffer>>,
    /// Bytes per buffer type (what a dry run reports, and what was allocated).
    pub memory_plan: BTreeMap<String, usize>,
    /// Number of parameters.
    pub n_elements: u64,
    /// Number of tensors in the file(s).
    pub n_tensors: usize,
    /// Bytes of tensor data.
    pub size_bytes: u64,
    /// Time spent loading.
    pub load_time: Duration,
    /// Loader statistics.
    pub stats: LoadStats,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model")
            .field("arch", &self.arch)
            .field("name", &self.name)
            .field("hparams", &self.hparams)
            .field("memory_plan", &self.memory_plan)
            .finish()
    }
}

impl Model {
    /// The weights; an error for vocab-only models.
    pub fn weights(&self) -> Result<&Weights> {
        self.weights.as_ref().ok_or_else(|| {
            LlamaError::InvalidParam(
                "the model was loaded without weights (vocab_only or dry_run)".into(),
            )
        })
    }

    /// The device of repeating layer `il`.
    pub fn layer_device(&self, il: usize) -> &Arc<dyn Device> {
        &self.plan.layers[il].dev
    }

    /// A short type description like llama.cpp's (`llama 260K F32`).
    pub fn desc(&self) -> String {
        format!(
            "{} {} {}",
            self.arch.name(),
            size_label(self.n_elements),
            self.file_type_name()
        )
    }

    /// The name of `general.file_type`, or the most common weight type.
    pub fn file_type_name(&self) -> String {
        let ft = self.metadata.get_uint("general.file_type").ok();
        match ft {
            Some(0) => "all F32".into(),
            Some(1) => "F16".into(),
            Some(2) => "Q4_0".into(),
            Some(3) => "Q4_1".into(),
            Some(7) => "Q8_0".into(),
            Some(8) => "Q5_0".into(),
            Some(9) => "Q5_1".into(),
            Some(10) => "Q2_K - Medium".into(),
            Some(11) => "Q3_K - Small".into(),
            Some(12) => "Q3_K - Medium".into(),
            Some(13) => "Q3_K - Large".into(),
            Some(14) => "Q4_K - Small".into(),
            Some(15) => "Q4_K - Medium".into(),
            Some(16) => "Q5_K - Small".into(),
            Some(17) => "Q5_K - Medium".into(),
            Some(18) => "Q6_K".into(),
            Some(25) => "IQ4_NL - 4.5 bpw".into(),
            Some(30) => "IQ4_XS - 4.25 bpw".into(),
            Some(32) => "BF16".into(),
            Some(n) => format!("file type {n}"),
            None => "unknown".into(),
        }
    }

    /// Loads a model: devices, metadata, hparams, vocab, placement, weights.
    /// A cancel from the progress callback gives [`LlamaError::Cancelled`]
    /// (distinct from failures) and frees everything.
    pub fn load(path: impl AsRef<Path>, params: &ModelParams) -> Result<Model> {
        Model::load_impl(path.as_ref(), params, false)
    }

    /// A model whose weights are laid out over planned buffers that hold
    /// no memory, exactly as [`Model::load`] would place them: nothing is
    /// read, mapped or allocated. It plans contexts; it cannot compute.
    pub fn load_planned(path: impl AsRef<Path>, params: &ModelParams) -> Result<Model> {
        Model::load_impl(path.as_ref(), params, true)
    }

    fn load_impl(path: &Path, params: &ModelParams, planning: bool) -> Result<Model> {
        let t0 = Instant::now();
        backend_init();
        let files = GgufModel::open(path)?;
        let first = &files.files()[0];
        let meta = MetaView::new(files.metadata(), &params.kv_overrides);
        let arch_name = meta
            .get_str_opt("general.architecture")?
            .ok_or_else(|| LlamaError::Metadata("key 'general.architecture' not found".into()))?;
        let arch = Arch::from_name(&arch_name)?;
        let mut hparams = HParams::load(arch, &meta)?;
        let vocab = Vocab::from_gguf(first)?;
        if hparams.n_vocab == 0 {
            hparams.n_vocab = vocab.n_tokens();
        }
        let name = meta.get_str_opt("general.name")?.unwrap_or_default();
        let cpu = cpu_device()?;
        let devices = select_devices(params)?;
        let plan = plan_layers(&hparams, params, &devices, &cpu)?;

        let mut n_elements = 0u64;
        let mut size_bytes = 0u64;
        let mut n_tensors = 0usize;
        for (_, info) in files.tensors() {
            n_tensors += 1;
            n_elements += info.n_elements();
            size_bytes += info.size;
        }
        print_info(&files, arch, &hparams, &name, n_elements, size_bytes);

        let mut model = Model {
            arch,
            hparams,
            vocab,
            name,
            metadata: files.metadata().clone(),
            devices,
            cpu,
            plan,
            mem_locks: Vec::new(),
            weights: None,
            buffers: Vec::new(),
            memory_plan: BTreeMap::new(),
            n_elements,
            n_tensors,
            size_bytes,
            load_time: Duration::ZERO,
            stats: LoadStats::default(),
        };
        if params.vocab_only {
            model.load_time = t0.elapsed();
            return Ok(model);
        }
        let requests = model.plan_weights(&files, params)?;
        for r in &requests {
            *model
                .memory_plan
                .entry(r.entry.buft.name().to_string())
                .or_default() += r.entry.buft.alloc_size(&r.desc);
        }
        if params.dry_run {
            for (buft, bytes) in &model.memory_plan {
                crate::info!(
                    "llama_model_load: dry run: {buft} model buffer size = {:.2} MiB",
                    *bytes as f64 / MIB
                );
            }
            model.load_time = t0.elapsed();
            return Ok(model);
        }
        let loaded = if planning {
            plan_weights(&files, &requests, params)?
        } else {
            let mode = match params.load_mode {
                LoadMode::Auto => LoadMode::Mmap,
                m => m,
            };
            crate::info!(
                "load_tensors: loading model tensors, this can take a while... (load_mode = {mode})"
            );
            load_weights(&files, &requests, params)?
        };
        model.mem_locks = loaded.locks;
        model.buffers = loaded.buffers;
        model.stats = loaded.stats;
        model.memory_plan = loaded.sizes;
        model.weights = Some(
            model.assemble(
                requests
                    .iter()
                    .map(|r| (r.kind, r.layer))
                    .zip(loaded.placements),
            )?,
        );
        let n_layer = model.hparams.n_layer;
        crate::info!(
            "load_tensors: offloaded {}/{} layers to GPU",
            model.plan.n_offloaded + usize::from(model.plan.output_offloaded),
            n_layer + 1
        );
        for (buft, bytes) in &model.memory_plan {
            crate::info!(
                "load_tensors: {buft:>12} model buffer size = {:8.2} MiB",
                *bytes as f64 / MIB
            );
        }
        model.load_time = t0.elapsed();
        crate::info!(
            "llama_model_load: loaded in {:.2} ms",
            model.load_time.as_secs_f64() * 1e3
        );
        Ok(model)
    }

    /// Finds every tensor of the architecture's table, checks its shape and
    /// picks its buffer type.
    fn plan_weights(&self, files: &GgufModel, params: &ModelParams) -> Result<Vec<WeightRequest>> {
        let hp = &self.hparams;
        let mut reqs = Vec::new();
        let mut used = std::collections::HashSet::new();
        let mut moved: BTreeMap<(String, String), usize> = BTreeMap::new();
        if hp.n_expert > 0 {
            refuse_split_experts(files)?;
        }
        for spec in self.arch.tensors().filter(|s| s.need.applies(hp.n_expert)) {
            let layers: Vec<Option<usize>> = if spec.per_layer() {
                (0..hp.n_layer).map(Some).collect()
            } else {
                vec![None]
            };
            for il in layers {
                if !spec.need.applies_to(hp, il) {
                    continue;
                }
                let name = spec.kind.name(il);
                let layer_dev = match (spec.kind.info().scope, il) {
                    (_, Some(i)) => &self.plan.layers[i],
                    (Scope::Input, None) => &self.plan.input,
                    (Scope::Rope, None) => &self.plan.layers[0],
                    _ => &self.plan.output,
                };
                let found = files.tensor(&name);
                let (file_idx, info) = match found {
                    Some(x) => x,
                    None => match spec.need {
                        Need::Optional | Need::MoeOptional | Need::RecurrentOptional => continue,
                        Need::TiedToEmbd => {
                            // The output shares the embeddings: load them a
                            // second time where the output layer lives.
                            let embd = TensorKind::TokenEmbd.name(None);
                            match files.tensor(&embd) {
                                Some(x) => x,
                                None => {
                                    return Err(LlamaError::Tensor(format!(
                                        "missing tensor '{embd}'"
                                    )))
                                }
                            }
                        }
                        Need::Required
                        | Need::Dense
                        | Need::Moe
                        | Need::Recurrent
                        | Need::Attention
                        | Need::SharedExpert
                        | Need::If(_) => {
                            return Err(LlamaError::Tensor(format!("missing tensor '{name}'")));
                        }
                    },
                };
                used.insert(info.name.clone());
                let expected = spec.expected_shape(hp, il.unwrap_or(0));
                check_shape(&name, &info.dims, &expected).map_err(|e| {
                    if spec.kind.is_expert() || spec.kind == TensorKind::FfnGateInp {
                        expert_shape_context(e, hp, il.unwrap_or(0))
                    } else {
                        e
                    }
                })?;
                let ne: Vec<usize> = info.dims.iter().map(|&d| d as usize).collect();
                let desc = TensorDesc::new(name.clone(), info.ty, &ne);
                let entry =
                    self.choose_buft(&desc, spec.kind, &layer_dev.bufts, params, &mut moved)?;
                reqs.push(WeightRequest {
                    kind: spec.kind,
                    layer: il,
                    desc,
                    file: file_idx,
                    file_offset: files.files()[file_idx].tensor_file_offset(info),
                    size: info.size as usize,
                    entry,
                });
            }
        }
        for ((from, to), n) in moved {
            crate::warn!(
                "load_tensors: {n} tensors cannot use buffer type {from}, using {to} instead"
            );
        }
        check_every_tensor_used(files, &used)?;
        self.check_embd_rows(&reqs)?;
        // Read in file order.
        reqs.sort_by_key(|r| (r.file, r.file_offset));
        Ok(reqs)
    }

    /// The buffer type of weight `desc`: the user's override for its name,
    /// checked to hold it, or the first of its layer's `bufts` that holds it
    /// for the op that reads it. A move to another device is counted in
    /// `moved` (by the first type's name and the chosen one's).
    fn choose_buft(
        &self,
        desc: &TensorDesc,
        kind: TensorKind,
        bufts: &BuftList,
        params: &ModelParams,
        moved: &mut BTreeMap<(String, String), usize>,
    ) -> Result<BuftEntry> {
        let hp = &self.hparams;
        let name = &desc.name;
        if let Some(o) = params
            .tensor_buft_overrides
            .iter()
            .find(|o| o.pattern.is_match(name))
        {
            let e = buft_by_name(&o.buft, &self.cpu).ok_or_else(|| {
                LlamaError::InvalidParam(format!(
                    "tensor override for '{name}': unknown buffer type '{}'",
                    o.buft
                ))
            })?;
            if !buft_holds(e.buft.as_ref(), kind, desc, hp) {
                return Err(LlamaError::InvalidParam(format!(
                    "tensor override for '{name}': buffer type '{}' cannot hold \
                     this tensor for the op that reads it",
                    e.buft.name()
                )));
            }
            crate::debug!(
                "tensor {name} ({}) buffer type overridden to {}",
                desc.ty,
                e.buft.name()
            );
            return Ok(e);
        }
        let e = select_buft(bufts, kind, desc, hp).ok_or_else(|| {
            LlamaError::Tensor(format!(
                "no buffer type supports tensor '{name}' of type {}",
                desc.ty
            ))
        })?;
        // Falling back to another type of the same device (a weight that
        // cannot be repacked) is routine.
        if e.dev.name() != bufts[0].dev.name() {
            *moved
                .entry((bufts[0].buft.name().to_string(), e.buft.name().to_string()))
                .or_default() += 1;
        }
        Ok(e)
    }

    /// The token embeddings have one row per token of the vocabulary.
    fn check_embd_rows(&self, reqs: &[WeightRequest]) -> Result<()> {
        let embd_rows = reqs
            .iter()
            .find(|r| r.kind == TensorKind::TokenEmbd)
            .map(|r| r.desc.ne[1])
            .unwrap_or(0);
        if embd_rows != self.vocab.n_tokens() {
            return Err(LlamaError::Tensor(format!(
                "token_embd.weight has {embd_rows} rows but the vocabulary has {} tokens",
                self.vocab.n_tokens()
            )));
        }
        Ok(())
    }

    fn assemble(
        &self,
        items: impl Iterator<Item = ((TensorKind, Option<usize>), Weight)>,
    ) -> Result<Weights> {
        let mut layers = vec![Layer::default(); self.hparams.n_layer];
        let mut globals: [Option<Weight>; N_TENSOR_KINDS] = std::array::from_fn(|_| None);
        for ((kind, il), w) in items {
            match (kind.info().scope, il) {
                (Scope::Layer, Some(i)) if i < layers.len() => layers[i].w[kind.index()] = Some(w),
                (Scope::Input | Scope::Output | Scope::Rope, None) => {
                    globals[kind.index()] = Some(w)
                }
                _ => {
                    return Err(LlamaError::Tensor(format!(
                        "tensor {} does not fit the tensor-info table",
                        kind.name(il)
                    )))
                }
            }
        }
        let mut take = |k: TensorKind| globals[k.index()].take();
        let (tok, onorm, out, rope) = (
            take(TensorKind::TokenEmbd),
            // LFM2 names its final norm `token_embd_norm`.
            take(TensorKind::OutputNorm).or_else(|| take(TensorKind::OutputNormLfm2)),
            take(TensorKind::Output),
            take(TensorKind::RopeFreqs),
        );
        let (rope_long, rope_short) = (
            take(TensorKind::RopeFactorsLong),
            take(TensorKind::RopeFactorsShort),
        );
        let output_norm_b = take(TensorKind::OutputNormBias);
        let tok_norm = match (
            take(TensorKind::TokenEmbdNorm),
            take(TensorKind::TokenEmbdNormBias),
        ) {
            (Some(w), Some(b)) => Some((w, b)),
            (None, None) => None,
            (w, _) => {
                let absent = if w.is_none() { "weight" } else { "bias" };
                return Err(LlamaError::Tensor(format!(
                    "token_embd_norm.{absent} is missing while the other half is present"
                )));
            }
        };
        let missing = |n: &str| LlamaError::Tensor(format!("missing tensor '{n}'"));
        let tok_embd = tok.ok_or_else(|| missing("token_embd.weight"))?;
        let output = out.unwrap_or_else(|| tok_embd.clone());
        Ok(Weights {
            output_norm: onorm.ok_or_else(|| missing("output_norm.weight"))?,
            output_norm_b,
            tok_norm,
            tok_embd,
            output,
            rope_freqs: rope,
            rope_factors_long: rope_long,
            rope_factors_short: rope_short,
            layers,
        })
    }

    /// True when every layer and the output are on the CPU.
    pub fn is_cpu_only(&self) -> bool {
        self.plan
            .layers
            .iter()
            .all(|l| l.dev.kind() == DeviceKind::Cpu)
            && !self.plan.output_offloaded
    }
}

fn check_shape(name: &str, dims: &[u64], expected: &[usize]) -> Result<()> {
    let pad = |v: Vec<u64>| {
        let mut v = v;
        while v.len() > 1 && v.last() == Some(&1) {
            v.pop();
        }
        v
    };
    let got = pad(dims.to_vec());
    let want = pad(expected.iter().map(|&x| x as u64).collect());
    if got != want {
        return Err(LlamaError::Tensor(format!(
            "tensor '{name}' has wrong shape; expected {want:?}, got {got:?}"
        )));
    }
    Ok(())
}

/// Adds the hyperparameters an expert tensor's shape comes from to a shape
/// error, so that a file whose tensors disagree with its `expert_count`
/// says which number is off.
fn expert_shape_context(e: LlamaError, hp: &HParams, il: usize) -> LlamaError {
    match e {
        LlamaError::Tensor(msg) => LlamaError::Tensor(format!(
            "{msg} (from {} = {}, expert width {} = {})",
            hp.arch.key("expert_count"),
            hp.n_expert,
            if hp.arch.name() == "llama" {
                hp.arch.key("feed_forward_length")
            } else {
                hp.arch.key("expert_feed_forward_length")
            },
            hp.n_ff_exp(il)
        )),
        e => e,
    }
}

/// Files from before the experts of a layer were merged into one 3-d tensor
/// keep one matrix per expert (`blk.N.ffn_gate.E.weight`); llama.cpp no
/// longer reads them either.
fn refuse_split_experts(files: &GgufModel) -> Result<()> {
    let split = files.tensors().map(|(_, t)| &t.name).find(|n| {
        let mut parts = n.split('.');
        parts.next() == Some("blk")
            && parts.next().is_some_and(|l| l.parse::<usize>().is_ok())
            && parts
                .next()
                .is_some_and(|t| matches!(t, "ffn_gate" | "ffn_up" | "ffn_down"))
            && parts.next().is_some_and(|e| e.parse::<usize>().is_ok())
    });
    match split {
        Some(name) => Err(LlamaError::NotSupported(format!(
            "per-expert tensors such as '{name}' (the older split Mixtral layout); \
             convert the model again so that each layer holds ffn_gate_exps, \
             ffn_up_exps and ffn_down_exps"
        ))),
        None => Ok(()),
    }
}

/// `260K`, `1.1B` style parameter counts.
pub fn size_label(n: u64) -> String {
    let n = n as f64;
    if n >= 1e9 {
        format!("{:.1}B", n / 1e9)
    } else if n >= 1e6 {
        format!("{:.0}M", n / 1e6)
    } else {
        format!("{:.0}K", n / 1e3)
    }
}

fn print_info(files: &GgufModel, arch: Arch, hp: &HParams, name: &str, n_elements: u64, size: u64) {
    crate::info!(
        "llama_model_loader: loaded meta data with {} key-value pairs and {} tensors from {} file(s)",
        files.metadata().len(),
        files.tensors().count(),
        files.files().len()
    );
    crate::info!("print_info: arch             = {}", arch.name());
    crate::info!("print_info: general.name     = {name}");
    crate::info!("print_info: n_ctx_train      = {}", hp.n_ctx_train);
    crate::info!("print_info: n_embd           = {}", hp.n_embd);
    crate::info!("print_info: n_layer          = {}", hp.n_layer);
    crate::info!("print_info: n_head           = {}", hp.n_head(0));
    crate::info!("print_info: n_head_kv        = {}", hp.n_head_kv(0));
    crate::info!("print_info: n_rot            = {}", hp.n_rot);
    crate::info!("print_info: n_embd_head_k    = {}", hp.n_embd_head_k);
    crate::info!("print_info: n_ff             = {}", hp.n_ff(0));
    crate::info!("print_info: f_norm_rms_eps   = {:.1e}", hp.f_norm_rms_eps);
    crate::info!(
        "print_info: freq_base_train  = {:.1}",
        hp.rope_freq_base_train
    );
    crate::info!("print_info: n_vocab          = {}", hp.n_vocab);
    crate::info!("print_info: model params     = {}", size_label(n_elements));
    crate::info!(
        "print_info: file size        = {:.2} MiB ({:.2} BPW)",
        size as f64 / MIB,
        size as f64 * 8.0 / n_elements.max(1) as f64
    );
}

/// Every tensor of the files is one the architecture's table asked for.
fn check_every_tensor_used(
    files: &GgufModel,
    used: &std::collections::HashSet<String>,
) -> Result<()> {
    let n_total = files.tensors().count();
    if used.len() != n_total {
        let extra: Vec<String> = files
            .tensors()
            .map(|(_, t)| t.name.clone())
            .filter(|n| !used.contains(n))
            .take(5)
            .collect();
        return Err(LlamaError::Tensor(format!(
            "wrong number of tensors; expected {}, got {n_total} (unexpected: {})",
            used.len(),
            extra.join(", ")
        )));
    }
    Ok(())
}
