//! A context: KV cache, backends, the scheduler with its worst-case
//! reservation, and decoding of batches into logits.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ggml_core::sched::Scheduler;
use ggml_core::{Backend, BufferType, Device, DeviceKind, Graph, TensorId, Type};

use crate::batch::{Batch, Token};
use crate::error::{LlamaError, Result};
use crate::graph::inputs::{build_mask, MaskTokens};
use crate::graph::{build_decoder, build_k_shift, BuiltGraph, RopeCfg, UbatchShape, KQ_MASK_PAD};
use crate::hparams::RopeScaling;
use crate::kv_cache::{KvCache, Pos, SeqId, MAX_SEQ};
use crate::model::Model;

/// How token embeddings are pooled when embeddings are requested.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum PoolingType {
    /// One embedding per token.
    #[default]
    None,
    /// Mean over the sequence's tokens.
    Mean,
    /// The first token's.
    Cls,
    /// The last token's.
    Last,
}

/// Whether attention runs as one fused FLASH_ATTN_EXT op (llama.cpp's
/// `-fa on|off|auto`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FlashAttnType {
    /// On when every backend of the context supports it for the model's
    /// head shapes and the KV cache types.
    #[default]
    Auto,
    /// Always on.
    Enabled,
    /// Always off.
    Disabled,
}

impl std::str::FromStr for FlashAttnType {
    type Err = LlamaError;
    fn from_str(s: &str) -> Result<FlashAttnType> {
        match s {
            "auto" => Ok(FlashAttnType::Auto),
            "on" | "1" | "enabled" => Ok(FlashAttnType::Enabled),
            "off" | "0" | "disabled" => Ok(FlashAttnType::Disabled),
            other => Err(LlamaError::InvalidParam(format!(
                "flash attention '{other}': expected on, off or auto"
            ))),
        }
    }
}

/// Called between graph computations; returning true aborts the decode.
pub type AbortCallback = Arc<dyn Fn() -> bool + Send + Sync>;

/// Parameters of [`Context::new`] (llama_context_params), llama.cpp's defaults.
#[derive(Clone)]
pub struct ContextParams {
    /// Context size in tokens; 0 = the model's trained context.
    pub n_ctx: usize,
    /// Most tokens per decode call.
    pub n_batch: usize,
    /// Most tokens per graph computation.
    pub n_ubatch: usize,
    /// Most distinct sequences.
    pub n_seq_max: usize,
    /// Threads for single-token decoding.
    pub n_threads: usize,
    /// Threads for batches.
    pub n_threads_batch: usize,
    /// Keep each layer's KV cache on its device.
    pub offload_kqv: bool,
    /// Let a GPU run large-batch ops on weights stored on the CPU.
    pub op_offload: bool,
    /// K cache type.
    pub type_k: Type,
    /// V cache type.
    pub type_v: Type,
    /// Rope base frequency; 0 = the model's.
    pub rope_freq_base: f32,
    /// Rope position scale; 0 = the model's.
    pub rope_freq_scale: f32,
    /// YaRN extrapolation mix; negative = from the model.
    pub yarn_ext_factor: f32,
    /// YaRN magnitude scale.
    pub yarn_attn_factor: f32,
    /// YaRN low correction dim.
    pub yarn_beta_fast: f32,
    /// YaRN high correction dim.
    pub yarn_beta_slow: f32,
    /// YaRN original context; 0 = the model's.
    pub yarn_orig_ctx: usize,
    /// Fused attention: on, off, or on where every backend supports it.
    pub flash_attn_type: FlashAttnType,
    /// Extract embeddings instead of (besides) logits.
    pub embeddings: bool,
    /// Pooling of embeddings.
    pub pooling: PoolingType,
    /// Abort callback.
    pub abort_callback: Option<AbortCallback>,
}

/// Default number of threads: the available cores (at most 4, as llama.cpp's default).
pub fn default_n_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(4)
        .min(4)
}

impl Default for ContextParams {
    fn default() -> ContextParams {
        ContextParams {
            n_ctx: 512,
            n_batch: 2048,
            n_ubatch: 512,
            n_seq_max: 1,
            n_threads: default_n_threads(),
            n_threads_batch: default_n_threads(),
            offload_kqv: true,
            op_offload: true,
            type_k: Type::F16,
            type_v: Type::F16,
            rope_freq_base: 0.0,
            rope_freq_scale: 0.0,
            yarn_ext_factor: -1.0,
            yarn_attn_factor: 1.0,
            yarn_beta_fast: 32.0,
            yarn_beta_slow: 1.0,
            yarn_orig_ctx: 0,
            flash_attn_type: FlashAttnType::Auto,
            embeddings: false,
            pooling: PoolingType::None,
            abort_callback: None,
        }
    }
}

/// Timings of a context (llama_perf_context).
#[derive(Clone, Copy, Debug, Default)]
pub struct Perf {
    /// Time in prompt (multi-token) decodes.
    pub t_prompt: Duration,
    /// Tokens in prompt decodes.
    pub n_prompt: usize,
    /// Time in single-token decodes.
    pub t_eval: Duration,
    /// Single-token decodes.
    pub n_eval: usize,
}

/// Positions, sequences and output flags of a checked batch.
type Prepared = (Vec<Pos>, Vec<Vec<SeqId>>, Vec<bool>);

/// A context over a model.
pub struct Context<'m> {
    model: &'m Model,
    /// The resolved parameters (n_ctx, n_batch, n_ubatch after clamping).
    pub params: ContextParams,
    rope: RopeCfg,
    /// The KV cache.
    pub kv: KvCache,
    sched: Scheduler,
    cpu_backend: usize,
    logits: Vec<f32>,
    embd: Vec<f32>,
    /// For each token of the last batch, its output row or -1.
    output_ids: Vec<i32>,
    n_outputs: usize,
    /// Timings.
    pub perf: Perf,
}

/// Nodes of a forward graph outside the layers (inputs, output head) and
/// per layer (a llama block without flash attention takes 43, with the
/// attention biases of qwen2 46): bounds of the scheduler's graph size.
const GRAPH_NODES_BASE: usize = 64;
const GRAPH_NODES_PER_LAYER: usize = 64;

/// Cells are attended in multiples of this (llama.cpp's KV padding: 256
/// with flash attention, 32 without).
fn kv_padding(flash_attn: bool) -> usize {
    if flash_attn {
        256
    } else {
        KQ_MASK_PAD
    }
}

/// Resolves [`FlashAttnType::Auto`]: on when the CPU and every device of
/// the model support FLASH_ATTN_EXT for each layer's head shapes and the
/// cache types (F16 when quantized types rule it out).
fn resolve_flash_attn(model: &Model, p: &ContextParams) -> bool {
    match p.flash_attn_type {
        FlashAttnType::Enabled => return true,
        FlashAttnType::Disabled => return false,
        FlashAttnType::Auto => {}
    }
    if p.type_k.is_quantized() || p.type_v.is_quantized() {
        return false;
    }
    let hp = &model.hparams;
    let mut devs: Vec<&Arc<dyn Device>> = model.devices.iter().collect();
    devs.push(&model.cpu);
    (0..hp.n_layer).all(|il| {
        let mut g = Graph::new();
        let (hk, hv) = (hp.n_embd_head_k, hp.n_embd_head_v);
        let q = g.input("q", Type::F32, &[hk, 8, hp.n_head(il)]);
        let k = g.input("k", p.type_k, &[hk, 256, hp.n_head_kv(il)]);
        let v = g.input("v", p.type_v, &[hv, 256, hp.n_head_kv(il)]);
        let m = g.input("m", Type::F32, &[256, KQ_MASK_PAD]);
        let Ok(fa) = g.flash_attn_ext(q, k, v, Some(m), 1.0, 0.0, hp.f_attn_logit_softcapping)
        else {
            return false;
        };
        devs.iter().all(|d| d.supports_op(&g, fa))
    })
}

fn pad(x: usize, to: usize) -> usize {
    x.div_ceil(to) * to
}

impl<'m> Context<'m> {
    /// Creates a context: KV cache per layer device, backends (model devices,
    /// accelerators, CPU last), the scheduler, and the reservation of the
    /// worst-case prompt and token graphs.
    pub fn new(model: &'m Model, params: ContextParams) -> Result<Context<'m>> {
        Context::create(model, params, false)
    }

    /// A context laid out over planned buffers that hold no memory (KV cache
    /// and compute buffers), after the same reservation of the worst-case
    /// graphs as [`Context::new`]: its sizes are exactly those a real
    /// context allocates. It plans memory; it cannot decode.
    pub fn new_planned(model: &'m Model, params: ContextParams) -> Result<Context<'m>> {
        Context::create(model, params, true)
    }

    fn create(model: &'m Model, params: ContextParams, planning: bool) -> Result<Context<'m>> {
        model.weights()?;
        let hp = &model.hparams;
        let mut p = params;
        if p.n_seq_max == 0 || p.n_seq_max > MAX_SEQ {
            return Err(LlamaError::InvalidParam(format!(
                "n_seq_max = {} must be in 1..={MAX_SEQ}",
                p.n_seq_max
            )));
        }
        let flash_attn = resolve_flash_attn(model, &p);
        crate::info!("llama_init_from_model: flash_attn    = {flash_attn}");
        if flash_attn && (p.type_k.is_quantized() || p.type_v.is_quantized()) {
            return Err(LlamaError::NotSupported(format!(
                "flash attention with a quantized KV cache (K {}, V {})",
                p.type_k, p.type_v
            )));
        }
        if p.embeddings && p.pooling != PoolingType::None && p.n_seq_max > 1 {
            return Err(LlamaError::NotSupported(
                "pooled embeddings with several sequences".into(),
            ));
        }
        if p.n_ctx == 0 {
            p.n_ctx = hp.n_ctx_train;
        }
        p.n_ctx = pad(p.n_ctx, kv_padding(flash_attn));
        if p.n_batch == 0 || p.n_ubatch == 0 {
            return Err(LlamaError::InvalidParam(
                "n_batch and n_ubatch must be positive".into(),
            ));
        }
        p.n_batch = p.n_batch.min(p.n_ctx);
        p.n_ubatch = p.n_ubatch.min(p.n_batch);
        p.n_threads = p.n_threads.max(1);
        p.n_threads_batch = p.n_threads_batch.max(1);
        let rope = RopeCfg {
            freq_base: if p.rope_freq_base == 0.0 {
                hp.rope_freq_base_train
            } else {
                p.rope_freq_base
            },
            freq_scale: if p.rope_freq_scale == 0.0 {
                hp.rope_freq_scale_train
            } else {
                p.rope_freq_scale
            },
            ext_factor: if p.yarn_ext_factor < 0.0 {
                if hp.rope_scaling == RopeScaling::Yarn {
                    1.0
                } else {
                    0.0
                }
            } else {
                p.yarn_ext_factor
            },
            attn_factor: p.yarn_attn_factor,
            beta_fast: p.yarn_beta_fast,
            beta_slow: p.yarn_beta_slow,
            n_ctx_orig: if p.yarn_orig_ctx != 0 {
                p.yarn_orig_ctx
            } else {
                hp.n_ctx_orig_yarn
            },
        };
        crate::info!("llama_init_from_model: n_seq_max     = {}", p.n_seq_max);
        crate::info!("llama_init_from_model: n_ctx         = {}", p.n_ctx);
        crate::info!("llama_init_from_model: n_batch       = {}", p.n_batch);
        crate::info!("llama_init_from_model: n_ubatch      = {}", p.n_ubatch);
        crate::info!(
            "llama_init_from_model: freq_base     = {:.1}",
            rope.freq_base
        );
        crate::info!("llama_init_from_model: freq_scale    = {}", rope.freq_scale);
        if p.n_ctx > hp.n_ctx_train {
            crate::warn!(
                "llama_init_from_model: n_ctx ({}) > n_ctx_train ({}) -- possible training context overflow",
                p.n_ctx,
                hp.n_ctx_train
            );
        }

        let kv = KvCache::new(
            model,
            p.n_ctx,
            p.type_k,
            p.type_v,
            !flash_attn,
            p.offload_kqv,
            planning,
        )?;

        // Backends: the model's GPUs, accelerators, then the CPU.
        let mut devs: Vec<Arc<dyn Device>> = model.devices.clone();
        for d in ggml_core::registry::devices() {
            if d.kind() == DeviceKind::Accel {
                devs.push(d);
            }
        }
        devs.push(model.cpu.clone());
        let mut backends: Vec<Box<dyn Backend>> = Vec::new();
        let mut bufts: Vec<Arc<dyn BufferType>> = Vec::new();
        for d in &devs {
            let mut b = d.init_backend()?;
            b.set_n_threads(p.n_threads);
            backends.push(b);
            if d.kind() == DeviceKind::Cpu {
                // The CPU computes in the first GPU's pinned host memory when
                // there is one, which makes copies to and from it faster.
                let host = model.devices.iter().find_map(|g| g.host_buffer_type());
                bufts.push(host.unwrap_or_else(|| d.buffer_type()));
            } else {
                bufts.push(d.buffer_type());
            }
        }
        let cpu_backend = backends.len() - 1;
        let parallel = model.devices.len() > 1
            && model.plan.n_offloaded == hp.n_layer
            && model.plan.output_offloaded
            && p.offload_kqv
            && model.devices.iter().all(|d| {
                let c = d.props().caps;
                c.async_ && c.events
            });
        let graph_size = GRAPH_NODES_BASE + GRAPH_NODES_PER_LAYER * hp.n_layer;
        let mut sched = Scheduler::new(backends, Some(bufts), graph_size, parallel, p.op_offload)?;
        sched.set_planning(planning);

        let mut ctx = Context {
            model,
            params: p,
            rope,
            kv,
            sched,
            cpu_backend,
            logits: Vec::new(),
            embd: Vec::new(),
            output_ids: Vec::new(),
            n_outputs: 0,
            perf: Perf::default(),
        };
        ctx.reserve()?;
        Ok(ctx)
    }

    /// The model.
    pub fn model(&self) -> &'m Model {
        self.model
    }

    /// Context size in tokens.
    pub fn n_ctx(&self) -> usize {
        self.params.n_ctx
    }

    /// Number of graph splits of the last computed graph.
    pub fn n_splits(&self) -> usize {
        self.sched.n_splits()
    }

    /// The scheduler (buffer sizes, splits).
    pub fn scheduler(&self) -> &Scheduler {
        &self.sched
    }

    fn build(&self, shape: UbatchShape) -> Result<BuiltGraph> {
        build_decoder(self.model, &self.kv, &self.rope, shape)
    }

    fn pin_layers(&mut self, built: &BuiltGraph) -> Result<()> {
        // Norms of a layer run where the layer lives, so the residual stream
        // does not ping-pong between devices.
        for &(node, il) in &built.layer_pins {
            let dev = self.model.layer_device(il).name().to_string();
            if let Some(b) = self.sched.backend_index(&dev) {
                self.sched.set_tensor_backend(node, b)?;
            }
        }
        Ok(())
    }

    /// Reserves compute memory for the worst-case prompt graph and the token
    /// graph, so decoding never reallocates.
    fn reserve(&mut self) -> Result<()> {
        let n_ub = self.params.n_ubatch;
        let pp = UbatchShape {
            n_tokens: n_ub,
            n_outputs: n_ub,
            kv_head: 0,
            n_kv: self.kv.size,
            embd_input: false,
        };
        let built = self.build(pp)?;
        self.pin_layers(&built)?;
        self.sched.reserve(&built.graph)?;
        let n_nodes_pp = built.graph.len();
        let n_splits_pp = self.sched.n_splits();
        let tg = UbatchShape {
            n_tokens: 1,
            n_outputs: 1,
            kv_head: 0,
            n_kv: self.kv.size,
            embd_input: false,
        };
        let built_tg = self.build(tg)?;
        self.pin_layers(&built_tg)?;
        self.sched.reserve(&built_tg.graph)?;
        let n_nodes_tg = built_tg.graph.len();
        let n_splits_tg = self.sched.n_splits();
        // Reserve again with the larger graph so its sizes win.
        let built = self.build(pp)?;
        self.pin_layers(&built)?;
        self.sched.reserve(&built.graph)?;
        for i in 0..self.sched.n_backends() {
            crate::info!(
                "llama_init_from_model: {:>12} compute buffer size = {:8.2} MiB",
                self.sched.buffer_type(i).map_or("?", |b| b.name()),
                self.sched.buffer_size(i) as f64 / 1048576.0
            );
        }
        crate::info!(
            "llama_init_from_model: graph nodes  = {n_nodes_pp} (prompt), {n_nodes_tg} (token)"
        );
        crate::info!(
            "llama_init_from_model: graph splits = {n_splits_pp} (prompt), {n_splits_tg} (token)"
        );
        Ok(())
    }

    fn write_input(graph: &Graph, id: TensorId, bytes: &[u8]) -> Result<()> {
        let at = graph.placement_or_err(id)?;
        at.buffer.set_tensor(at.offset, bytes)?;
        Ok(())
    }

    fn compute(&mut self, graph: &mut Graph, n_tokens: usize) -> Result<()> {
        let nt = if n_tokens == 1 {
            self.params.n_threads
        } else {
            self.params.n_threads_batch
        };
        if let Some(b) = self.sched.backend_mut(self.cpu_backend) {
            b.set_n_threads(nt);
        }
        if let Some(cb) = &self.params.abort_callback {
            if cb() {
                return Err(LlamaError::Decode("aborted".into()));
            }
        }
        self.sched.compute(graph).map_err(|e| match e {
            ggml_core::Error::Aborted => LlamaError::Decode("aborted".into()),
            e => LlamaError::Ggml(e),
        })
    }

    fn apply_k_shift(&mut self) -> Result<()> {
        let (mut g, shift) = build_k_shift(self.model, &self.kv, &self.rope)?;
        self.sched.alloc_graph(&mut g)?;
        let deltas: Vec<u8> = self
            .kv
            .cells
            .iter()
            .flat_map(|c| if c.is_empty() { 0 } else { c.delta }.to_le_bytes())
            .collect();
        Self::write_input(&g, shift, &deltas)?;
        self.compute(&mut g, self.kv.size)?;
        for c in self.kv.cells.iter_mut() {
            c.delta = 0;
        }
        self.kv.has_shift = false;
        Ok(())
    }

    /// Checks a batch and fills in defaults (positions, sequences, outputs).
    fn prepare(&self, batch: &Batch) -> Result<Prepared> {
        let hp = &self.model.hparams;
        let n = batch.n_tokens(hp.n_embd);
        if n == 0 {
            return Err(LlamaError::Batch("the batch is empty".into()));
        }
        if let Some(e) = &batch.embd {
            if e.len() % hp.n_embd != 0 {
                return Err(LlamaError::Batch(format!(
                    "embeddings have {} floats, not a multiple of n_embd = {}",
                    e.len(),
                    hp.n_embd
                )));
            }
        } else {
            let n_vocab = self.model.vocab.n_tokens() as i32;
            if let Some((i, t)) = batch
                .tokens
                .iter()
                .enumerate()
                .find(|(_, &t)| t < 0 || t >= n_vocab)
            {
                return Err(LlamaError::Batch(format!(
                    "token {i} has id {t}, outside the vocabulary (0..{n_vocab})"
                )));
            }
        }
        if n > self.params.n_batch {
            return Err(LlamaError::Batch(format!(
                "{n} tokens exceed n_batch = {}; split the input or raise n_batch",
                self.params.n_batch
            )));
        }
        let check_len = |what: &str, len: usize| -> Result<()> {
            if len != 0 && len != n {
                return Err(LlamaError::Batch(format!(
                    "{what} has {len} entries for {n} tokens"
                )));
            }
            Ok(())
        };
        check_len("pos", batch.pos.len())?;
        check_len("seq_ids", batch.seq_ids.len())?;
        check_len("logits", batch.logits.len())?;
        let seqs: Vec<Vec<SeqId>> = if batch.seq_ids.is_empty() {
            vec![vec![0]; n]
        } else {
            batch.seq_ids.clone()
        };
        for (i, ss) in seqs.iter().enumerate() {
            if ss.is_empty() {
                return Err(LlamaError::Batch(format!(
                    "token {i} belongs to no sequence"
                )));
            }
            if let Some(&s) = ss
                .iter()
                .find(|&&s| s < 0 || s as usize >= self.params.n_seq_max)
            {
                return Err(LlamaError::Batch(format!(
                    "token {i} has sequence id {s}, but n_seq_max = {}",
                    self.params.n_seq_max
                )));
            }
        }
        let pos: Vec<Pos> = if batch.pos.is_empty() {
            let mut next: Vec<Pos> = (0..self.params.n_seq_max as SeqId)
                .map(|s| self.kv.seq_pos_max(s) + 1)
                .collect();
            seqs.iter()
                .map(|ss| {
                    let p = next[ss[0] as usize];
                    for &s in ss {
                        next[s as usize] = p + 1;
                    }
                    p
                })
                .collect()
        } else {
            batch.pos.clone()
        };
        // Positions must increase within each sequence and follow what the
        // cache already holds.
        let mut last: Vec<Pos> = (0..self.params.n_seq_max as SeqId)
            .map(|s| self.kv.seq_pos_max(s))
            .collect();
        for (i, (&p, ss)) in pos.iter().zip(&seqs).enumerate() {
            if p < 0 {
                return Err(LlamaError::Batch(format!(
                    "token {i} has negative position {p}"
                )));
            }
            for &s in ss {
                if p <= last[s as usize] {
                    return Err(LlamaError::Batch(format!(
                        "token {i} has position {p} in sequence {s}, which already reaches position {}: positions must increase",
                        last[s as usize]
                    )));
                }
                last[s as usize] = p;
            }
        }
        let mut outs = if batch.logits.is_empty() {
            let mut v = vec![false; n];
            v[n - 1] = true;
            v
        } else {
            batch.logits.clone()
        };
        if self.params.embeddings && self.params.pooling != PoolingType::None {
            outs = vec![true; n];
        }
        if n > self.kv.size {
            return Err(LlamaError::Batch(format!(
                "{n} tokens do not fit the context of {} tokens",
                self.kv.size
            )));
        }
        Ok((pos, seqs, outs))
    }

    /// Decodes a batch: splits it into ubatches, writes K/V to the cache and
    /// computes logits for the tokens that ask for them.
    pub fn decode(&mut self, batch: &Batch) -> Result<()> {
        let t0 = Instant::now();
        let (pos, seqs, outs) = self.prepare(batch)?;
        let hp = &self.model.hparams;
        let n_embd = hp.n_embd;
        let n_vocab = hp.n_vocab;
        let n = pos.len();
        let n_out_total = outs.iter().filter(|&&o| o).count();
        self.logits.clear();
        self.logits.reserve(n_out_total * n_vocab);
        self.embd.clear();
        self.output_ids = vec![-1; n];
        self.n_outputs = 0;
        if self.kv.has_shift {
            self.apply_k_shift()?;
        }
        let mut start = 0;
        while start < n {
            let end = (start + self.params.n_ubatch).min(n);
            let n_tokens = end - start;
            let slot = self.kv.find_slot(n_tokens).ok_or_else(|| {
                LlamaError::Decode(format!(
                    "no room in the KV cache for {n_tokens} tokens ({} of {} cells used)",
                    self.kv.used, self.kv.size
                ))
            })?;
            let seq_refs: Vec<&[SeqId]> = seqs[start..end].iter().map(|s| s.as_slice()).collect();
            let snapshot = self.kv.cells[slot..end - start + slot].to_vec();
            let (head, used) = (self.kv.head, self.kv.used);
            self.kv.occupy(slot, &pos[start..end], &seq_refs);
            let res = self.decode_ubatch(batch, start, end, slot, &pos, &seqs, &outs);
            if let Err(e) = res {
                // Leave the cache as it was before this ubatch.
                self.kv.cells[slot..slot + n_tokens].copy_from_slice(&snapshot);
                self.kv.head = head;
                self.kv.used = used;
                return Err(e);
            }
            start = end;
        }
        let _ = (n_embd, n_vocab);
        let dt = t0.elapsed();
        if n == 1 {
            self.perf.t_eval += dt;
            self.perf.n_eval += 1;
        } else {
            self.perf.t_prompt += dt;
            self.perf.n_prompt += n;
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn decode_ubatch(
        &mut self,
        batch: &Batch,
        start: usize,
        end: usize,
        slot: usize,
        pos: &[Pos],
        seqs: &[Vec<SeqId>],
        outs: &[bool],
    ) -> Result<()> {
        let hp = &self.model.hparams;
        let n_tokens = end - start;
        let out_idx: Vec<usize> = (start..end).filter(|&i| outs[i]).collect();
        // A ubatch without outputs still runs to fill the cache; it computes
        // the last row and throws it away.
        let rows: Vec<usize> = if out_idx.is_empty() {
            vec![end - 1]
        } else {
            out_idx.clone()
        };
        let n_kv = self
            .kv
            .size
            .min(KQ_MASK_PAD.max(pad(self.kv.cell_max(), KQ_MASK_PAD)));
        let shape = UbatchShape {
            n_tokens,
            n_outputs: rows.len(),
            kv_head: slot,
            n_kv,
            embd_input: batch.embd.is_some(),
        };
        let mut built = self.build(shape)?;
        self.pin_layers(&built)?;
        self.sched.alloc_graph(&mut built.graph)?;
        let g = &built.graph;
        let inp = built.inputs;
        if let Some(t) = inp.tokens {
            let bytes: Vec<u8> = batch.tokens[start..end]
                .iter()
                .flat_map(|t| t.to_le_bytes())
                .collect();
            Self::write_input(g, t, &bytes)?;
        }
        if let (Some(e), Some(src)) = (inp.embd, &batch.embd) {
            let bytes: Vec<u8> = src[start * hp.n_embd..end * hp.n_embd]
                .iter()
                .flat_map(|x| x.to_le_bytes())
                .collect();
            Self::write_input(g, e, &bytes)?;
        }
        let pos_bytes: Vec<u8> = pos[start..end]
            .iter()
            .flat_map(|p| p.to_le_bytes())
            .collect();
        Self::write_input(g, inp.pos, &pos_bytes)?;
        // Masks, once per ubatch: a token sees the cells of its sequences at
        // positions <= its own (and, for sliding-window layers, within the
        // window).
        let mask_rows = g.desc(inp.kq_mask).ne[1];
        let toks = MaskTokens {
            pos: &pos[start..end],
            seqs: &seqs[start..end],
        };
        let masks = [(Some(inp.kq_mask), None), (inp.kq_mask_swa, Some(hp.n_swa))];
        for (t, swa) in masks {
            if let Some(t) = t {
                let mask = build_mask(&self.kv.cells, n_kv, mask_rows, &toks, swa);
                let bytes: Vec<u8> = mask.iter().flat_map(|x| x.to_le_bytes()).collect();
                Self::write_input(g, t, &bytes)?;
            }
        }
        if let Some(ids) = inp.out_ids {
            let bytes: Vec<u8> = rows
                .iter()
                .flat_map(|&r| ((r - start) as i32).to_le_bytes())
                .collect();
            Self::write_input(g, ids, &bytes)?;
        }
        self.compute(&mut built.graph, n_tokens)?;
        if out_idx.is_empty() {
            return Ok(());
        }
        let g = &built.graph;
        let n_vocab = hp.n_vocab;
        let at = g.placement_or_err(built.logits)?;
        let mut bytes = vec![0u8; rows.len() * n_vocab * 4];
        at.buffer.get_tensor(at.offset, &mut bytes)?;
        self.logits.extend(
            bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
        );
        if self.params.embeddings {
            let at = g.placement_or_err(built.embd)?;
            let mut bytes = vec![0u8; rows.len() * hp.n_embd * 4];
            at.buffer.get_tensor(at.offset, &mut bytes)?;
            self.embd.extend(
                bytes
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
            );
        }
        for &i in &out_idx {
            self.output_ids[i] = self.n_outputs as i32;
            self.n_outputs += 1;
        }
        Ok(())
    }

    /// Logits of every output row of the last decode, row-major [n_outputs][n_vocab].
    pub fn logits(&self) -> &[f32] {
        &self.logits
    }

    /// Logits of token `i` of the last batch (negative: from the end of the
    /// outputs, -1 = last output).
    pub fn logits_ith(&self, i: i32) -> Result<&[f32]> {
        let n_vocab = self.model.hparams.n_vocab;
        let row = if i < 0 {
            let r = self.n_outputs as i32 + i;
            if r < 0 {
                return Err(LlamaError::InvalidParam(format!(
                    "no output row {i}: {} outputs",
                    self.n_outputs
                )));
            }
            r as usize
        } else {
            match self.output_ids.get(i as usize) {
                Some(&r) if r >= 0 => r as usize,
                _ => {
                    return Err(LlamaError::InvalidParam(format!(
                        "token {i} of the last batch has no logits"
                    )));
                }
            }
        };
        Ok(&self.logits[row * n_vocab..(row + 1) * n_vocab])
    }

    /// Embeddings of token `i` of the last batch (pooling none).
    pub fn embeddings_ith(&self, i: i32) -> Result<&[f32]> {
        if !self.params.embeddings {
            return Err(LlamaError::InvalidParam(
                "embeddings were not requested for this context".into(),
            ));
        }
        let n = self.model.hparams.n_embd;
        let row = match self.output_ids.get(i.max(0) as usize) {
            Some(&r) if r >= 0 && i >= 0 => r as usize,
            _ if i < 0 && (self.n_outputs as i32 + i) >= 0 => (self.n_outputs as i32 + i) as usize,
            _ => {
                return Err(LlamaError::InvalidParam(format!(
                    "token {i} of the last batch has no embedding"
                )))
            }
        };
        Ok(&self.embd[row * n..(row + 1) * n])
    }

    /// Pooled embedding of the last batch (mean, first or last token).
    pub fn embeddings_pooled(&self) -> Result<Vec<f32>> {
        let n = self.model.hparams.n_embd;
        if !self.params.embeddings || self.n_outputs == 0 {
            return Err(LlamaError::InvalidParam(
                "no embeddings in the last batch".into(),
            ));
        }
        let rows = self.embd.chunks_exact(n);
        Ok(match self.params.pooling {
            PoolingType::Mean | PoolingType::None => {
                let mut acc = vec![0f32; n];
                for r in rows {
                    for (a, x) in acc.iter_mut().zip(r) {
                        *a += x;
                    }
                }
                acc.iter().map(|a| a / self.n_outputs as f32).collect()
            }
            PoolingType::Cls => self.embd[..n].to_vec(),
            PoolingType::Last => self.embd[self.embd.len() - n..].to_vec(),
        })
    }

    /// Removes positions `[p0, p1)` of `seq` from the cache (seq < 0: all).
    pub fn seq_rm(&mut self, seq: SeqId, p0: Pos, p1: Pos) {
        self.kv.seq_rm(seq, p0, p1)
    }
    /// Copies positions `[p0, p1)` of `src` to `dst`.
    pub fn seq_cp(&mut self, src: SeqId, dst: SeqId, p0: Pos, p1: Pos) {
        self.kv.seq_cp(src, dst, p0, p1)
    }
    /// Keeps only `seq`.
    pub fn seq_keep(&mut self, seq: SeqId) {
        self.kv.seq_keep(seq)
    }
    /// Shifts positions `[p0, p1)` of `seq` by `delta` (K re-rotated at the next decode).
    pub fn seq_add(&mut self, seq: SeqId, p0: Pos, p1: Pos, delta: Pos) {
        self.kv.seq_add(seq, p0, p1, delta)
    }
    /// Largest position of `seq`, or -1.
    pub fn seq_pos_max(&self, seq: SeqId) -> Pos {
        self.kv.seq_pos_max(seq)
    }
    /// Empties the cache.
    pub fn kv_clear(&mut self) {
        self.kv.clear()
    }

    /// Sets the threads for single-token and batch decoding.
    pub fn set_n_threads(&mut self, n_threads: usize, n_threads_batch: usize) {
        self.params.n_threads = n_threads.max(1);
        self.params.n_threads_batch = n_threads_batch.max(1);
    }

    /// Evaluates `tokens` as one sequence, one decode per `n_batch` tokens,
    /// returning the logits of every token (used by perplexity).
    pub fn eval_all_logits(&mut self, tokens: &[Token], pos0: Pos) -> Result<Vec<f32>> {
        let mut out = Vec::with_capacity(tokens.len() * self.model.hparams.n_vocab);
        let mut p = pos0;
        for chunk in tokens.chunks(self.params.n_batch) {
            let mut b = Batch::new();
            for &t in chunk {
                b.add(t, p, &[0], true);
                p += 1;
            }
            self.decode(&b)?;
            out.extend_from_slice(&self.logits);
        }
        Ok(out)
    }
}
