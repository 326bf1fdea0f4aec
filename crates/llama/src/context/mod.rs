//! A context: KV cache, backends, the scheduler with its worst-case
//! reservation, and decoding of batches into logits.

mod params;
mod prepare;
mod reuse;
mod split;
mod state;

use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use ggml_core::sched::Scheduler;
use ggml_core::{Backend, BufferType, Device, DeviceKind, EvalObserver, Graph, TensorId, Type};

use crate::adapter::AdapterSet;
use crate::batch::{Batch, Token};
use crate::error::{LlamaError, Result};
use crate::graph::inputs::{build_mask, k_idx_bytes, v_idx_bytes, KvInputs, MaskTokens};
use crate::graph::{build_decoder, build_k_shift, BuiltGraph, RopeCfg, UbatchShape, KQ_MASK_PAD};
use crate::hparams::{HParams, RopeScaling};
use crate::kv_cache::{KvCache, Pos, SeqId, MAX_SEQ};
use crate::kv_memory::{KvMemory, KvMemoryParams, Slots};
use crate::memory::{Memory, RsSlot, SeqMemory};
use crate::model::Model;

pub use params::{
    default_n_threads, AbortCallback, ContextParams, FlashAttnType, Perf, PoolingType,
};
pub use reuse::GRAPH_REUSE_DISABLE_ENV;
pub use state::{model_fingerprint, STATE_SEQ_MAGIC, STATE_SEQ_VERSION};

/// A context over a model.
pub struct Context<'m> {
    model: &'m Model,
    /// The resolved parameters (n_ctx, n_batch, n_ubatch after clamping).
    pub params: ContextParams,
    rope: RopeCfg,
    /// The memory: KV caches, recurrent states or both.
    pub mem: Memory,
    sched: Scheduler,
    cpu_backend: usize,
    logits: Vec<f32>,
    embd: Vec<f32>,
    /// For each token of the last batch, its output row or -1.
    output_ids: Vec<i32>,
    n_outputs: usize,
    /// Whether ubatches of equal shape run the previous graph again.
    graph_reuse: bool,
    /// The last computed graph, for the next ubatch.
    kept: Option<reuse::KeptGraph>,
    /// LoRA adapters and control vector applied by the graphs.
    adapters: AdapterSet,
    /// The scheduler's graph size without adapters.
    base_graph_size: usize,
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
    (0..hp.n_layer)
        .filter(|&il| !hp.is_recurrent(il))
        .all(|il| {
            let mut g = Graph::new();
            let (hk, hv) = (hp.n_embd_head_k, hp.n_embd_head_v);
            let q = g.input("q", Type::F32, &[hk, 8, hp.n_head(il)]);
            let k = g.input("k", p.type_k, &[hk, 256, hp.n_head_kv(il)]);
            let v = g.input("v", p.type_v, &[hv, 256, hp.n_head_kv(il)]);
            let m = g.input("m", Type::F16, &[256, KQ_MASK_PAD]);
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
        let (p, flash_attn) = resolve_params(model, params)?;
        let rope = rope_config(hp, &p);
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

        if p.swa_full && !hp.has_swa() {
            crate::warn!("llama_init_from_model: swa_full: the model has no sliding-window layers");
        }
        let mem = Memory::new(
            model,
            KvMemoryParams {
                n_ctx: p.n_ctx,
                n_seq_max: p.n_seq_max,
                n_ubatch: p.n_ubatch,
                swa_full: p.swa_full,
                type_k: p.type_k,
                type_v: p.type_v,
                v_trans: !flash_attn,
                offload: p.offload_kqv,
                planning,
            },
        )?;

        let (sched, cpu_backend) = scheduler(model, &p, planning)?;
        let base_graph_size = sched.graph_size();

        let graph_reuse = reuse::resolve_graph_reuse(p.graph_reuse);
        let mut ctx = Context {
            model,
            params: p,
            rope,
            mem,
            sched,
            cpu_backend,
            logits: Vec::new(),
            embd: Vec::new(),
            output_ids: Vec::new(),
            n_outputs: 0,
            graph_reuse,
            kept: None,
            adapters: AdapterSet::new(),
            base_graph_size,
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
        build_decoder(self.model, &self.mem, &self.rope, &self.adapters, shape)
    }

    /// Sets (or clears with `None`) the observer that sees the nodes it
    /// wants of every graph the context computes, just after each is
    /// computed (llama.cpp's `cb_eval`; see [`EvalObserver`]). Without
    /// one, graphs run whole.
    pub fn set_eval_observer(&mut self, observer: Option<Box<dyn EvalObserver>>) {
        self.sched.set_eval_callback(observer);
    }

    /// The LoRA adapters and control vector the graphs apply.
    pub fn adapters(&self) -> &AdapterSet {
        &self.adapters
    }

    /// Applies `set` from the next decode on (llama_set_adapters_lora and
    /// llama_set_adapter_cvec). A set equal to the current one changes
    /// nothing; another drops the kept graph, so that no graph built for
    /// other adapters or scales runs again. Every adapter must have been
    /// loaded for this context's model.
    pub fn set_adapters(&mut self, set: AdapterSet) -> Result<()> {
        if set == self.adapters {
            return Ok(());
        }
        set.check_model(self.model)?;
        self.forget_graph();
        let extra = set.extra_nodes(self.model.hparams.n_layer);
        self.sched.set_graph_size(self.base_graph_size + extra);
        self.adapters = set;
        Ok(())
    }

    /// The attention KV caches (none for a model without attention layers).
    pub fn kv(&self) -> Option<&KvMemory> {
        self.mem.kv()
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
        let (n_nodes_pp, n_splits_pp) = self.reserve_for(n_ub)?;
        let (n_nodes_tg, n_splits_tg) = self.reserve_for(1)?;
        // Reserve again with the larger graph so its sizes win.
        self.reserve_for(n_ub)?;
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

    /// Reserves the scheduler for the graph of `n_tokens` tokens, every one
    /// an output, over the whole cache; the graph's node and split counts.
    fn reserve_for(&mut self, n_tokens: usize) -> Result<(usize, usize)> {
        let kv = self.mem.kv();
        let shape = UbatchShape {
            n_tokens,
            n_outputs: n_tokens,
            n_kv: kv.map_or(0, KvMemory::size),
            n_kv_swa: kv.and_then(|k| k.swa.as_ref()).map_or(0, |c| c.size),
            embd_input: false,
            n_seqs: 1,
        };
        let built = self.build(shape)?;
        self.pin_layers(&built)?;
        self.sched.reserve(&built.graph)?;
        Ok((built.graph.len(), self.sched.n_splits()))
    }

    /// Writes the mask and the K/V cell indices of one cache.
    fn write_kv_inputs(
        g: &Graph,
        kv: &KvCache,
        ki: &KvInputs,
        cells: &[usize],
        toks: &MaskTokens<'_>,
    ) -> Result<()> {
        let (n_kv, rows) = (g.desc(ki.mask).ne[0], g.desc(ki.mask).ne[1]);
        let n_swa = kv.cells.n_swa();
        let mask = build_mask(
            kv.cells.cells(),
            n_kv,
            rows,
            toks,
            (n_swa > 0).then_some(n_swa),
        );
        let bytes: Vec<u8> = if g.desc(ki.mask).ty == Type::F16 {
            mask.iter()
                .flat_map(|&x| half::f16::from_f32(x).to_le_bytes())
                .collect()
        } else {
            mask.iter().flat_map(|x| x.to_le_bytes()).collect()
        };
        Self::write_input(g, ki.mask, &bytes)?;
        Self::write_input(g, ki.k_idxs, &k_idx_bytes(cells))?;
        for &(w, t) in &ki.v_idxs {
            Self::write_input(g, t, &v_idx_bytes(cells, w, kv.size))?;
        }
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

    /// Re-rotates K of every cache with pending position shifts.
    fn apply_k_shift(&mut self) -> Result<()> {
        // The shift graph takes the scheduler (which refuses the kept graph
        // afterwards anyway); drop it now rather than hold it.
        self.forget_graph();
        let Some(n_ctx) = self.mem.kv().map(KvMemory::size) else {
            return Ok(());
        };
        for swa in [false, true] {
            let Some(mem) = self.mem.kv() else {
                return Ok(());
            };
            let Some(kv) = (if swa {
                mem.swa.as_ref()
            } else {
                Some(&mem.base)
            }) else {
                continue;
            };
            if !kv.cells.has_shift {
                continue;
            }
            if kv.has_layers() {
                let (mut g, shift) = build_k_shift(self.model, kv, &self.rope, n_ctx)?;
                let deltas: Vec<u8> = kv
                    .cells
                    .cells()
                    .iter()
                    .flat_map(|c| if c.is_empty() { 0 } else { c.delta }.to_le_bytes())
                    .collect();
                let size = kv.size;
                self.sched.alloc_graph(&mut g)?;
                Self::write_input(&g, shift, &deltas)?;
                self.compute(&mut g, size)?;
            }
            let Some(mem) = self.mem.kv_mut() else {
                return Ok(());
            };
            let kv = if swa {
                mem.swa.as_mut()
            } else {
                Some(&mut mem.base)
            };
            if let Some(kv) = kv {
                kv.cells.reset_shift();
            }
        }
        Ok(())
    }

    /// Decodes a batch: splits it into ubatches, writes K/V to the cache and
    /// computes logits for the tokens that ask for them.
    pub fn decode(&mut self, batch: &Batch) -> Result<()> {
        let t0 = Instant::now();
        let (pos, seqs, outs) = self.prepare(batch)?;
        let hp = &self.model.hparams;
        let n_vocab = hp.n_vocab;
        let n = pos.len();
        let n_out_total = outs.iter().filter(|&&o| o).count();
        self.logits.clear();
        self.logits.reserve(n_out_total * n_vocab);
        self.embd.clear();
        self.output_ids = vec![-1; n];
        self.n_outputs = 0;
        if self
            .mem
            .kv()
            .is_some_and(|kv| kv.caches().any(|c| c.cells.has_shift))
        {
            self.apply_k_shift()?;
        }
        let split = if self.mem.needs_equal_split() {
            split::split_equal(&seqs, self.params.n_ubatch, self.params.n_seq_max)
        } else {
            split::split_simple(n, self.params.n_ubatch)
        };
        // Positions, sequences and output flags in ubatch order.
        let order = &split.order;
        let pos: Vec<Pos> = order.iter().map(|&i| pos[i]).collect();
        let seqs: Vec<Vec<SeqId>> = order.iter().map(|&i| seqs[i].clone()).collect();
        let outs: Vec<bool> = order.iter().map(|&i| outs[i]).collect();
        let ranges: Vec<Range<usize>> = split.ubatches.iter().map(|u| u.0.clone()).collect();
        // Every ubatch gets its cells before any runs, so a batch that does
        // not fit changes nothing.
        let plan = match self.mem.kv() {
            Some(kv) => kv.plan(&ranges, &pos, &seqs).ok_or_else(|| {
                LlamaError::Decode(format!(
                    "no room in the KV cache for {n} tokens ({} of {} cells used)",
                    kv.used(),
                    kv.size()
                ))
            })?,
            None => vec![Slots::default(); ranges.len()],
        };
        let sets: Vec<(Vec<Vec<SeqId>>, Vec<Pos>)> = split
            .ubatches
            .iter()
            .map(|(r, n_seqs)| seq_sets(&pos[r.clone()], &seqs[r.clone()], *n_seqs))
            .collect();
        if let Some(rs) = self.mem.rs() {
            if rs.plan(&sets).is_none() {
                return Err(LlamaError::Decode(format!(
                    "no free state cell for the batch's sequences ({} of {} used)",
                    rs.cells.used(),
                    rs.size()
                )));
            }
        }
        let snapshot = (
            self.mem.kv().map(KvMemory::snapshot),
            self.mem.rs().map(|r| r.cells.clone()),
        );
        for (((r, n_seqs), slots), (set, last)) in
            split.ubatches.iter().cloned().zip(plan).zip(&sets)
        {
            if let Some(kv) = self.mem.kv_mut() {
                kv.apply(&slots, &pos[r.clone()], &seqs[r.clone()]);
            }
            let res = match self.mem.rs_mut() {
                Some(rs) => rs.apply(set, last),
                None => Ok(Vec::new()),
            }
            .and_then(|rs_slots| {
                let ub = Ubatch {
                    range: r,
                    n_seqs,
                    order,
                    slots: &slots,
                    rs: &rs_slots,
                };
                self.decode_ubatch(batch, &ub, &pos, &seqs, &outs)
            });
            if let Err(e) = res {
                // Leave the cells as they were before this batch (states
                // already updated in place by earlier ubatches stay).
                if let (Some(kv), Some(snap)) = (self.mem.kv_mut(), snapshot.0) {
                    kv.restore(snap);
                }
                if let (Some(rs), Some(cells)) = (self.mem.rs_mut(), snapshot.1) {
                    rs.cells = cells;
                }
                return Err(e);
            }
        }
        if !split.in_order() {
            self.outputs_in_batch_order();
        }
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

    fn decode_ubatch(
        &mut self,
        batch: &Batch,
        ub: &Ubatch<'_>,
        pos: &[Pos],
        seqs: &[Vec<SeqId>],
        outs: &[bool],
    ) -> Result<()> {
        let hp = &self.model.hparams;
        let (start, end) = (ub.range.start, ub.range.end);
        let order = ub.order;
        let n_tokens = end - start;
        let out_idx: Vec<usize> = (start..end).filter(|&i| outs[i]).collect();
        // A ubatch without outputs still runs to fill the cache; it computes
        // the last row and throws it away.
        let rows: Vec<usize> = if out_idx.is_empty() {
            vec![end - 1]
        } else {
            out_idx.clone()
        };
        let kv = self.mem.kv();
        let shape = UbatchShape {
            n_tokens,
            n_outputs: rows.len(),
            n_kv: kv.map_or(0, |k| k.base.n_kv(KQ_MASK_PAD)),
            n_kv_swa: kv
                .and_then(|k| k.swa.as_ref())
                .map_or(0, |c| c.n_kv(KQ_MASK_PAD)),
            embd_input: batch.embd.is_some(),
            n_seqs: ub.n_seqs,
        };
        let (mut built, alloc) = self.ubatch_graph(shape)?;
        let g = &built.graph;
        let inp = &built.inputs;
        if let Some(t) = inp.tokens {
            let bytes: Vec<u8> = order[start..end]
                .iter()
                .flat_map(|&i| batch.tokens[i].to_le_bytes())
                .collect();
            Self::write_input(g, t, &bytes)?;
        }
        if let (Some(e), Some(src)) = (inp.embd, &batch.embd) {
            let bytes: Vec<u8> = order[start..end]
                .iter()
                .flat_map(|&i| &src[i * hp.n_embd..(i + 1) * hp.n_embd])
                .flat_map(|x| x.to_le_bytes())
                .collect();
            Self::write_input(g, e, &bytes)?;
        }
        let pos_bytes: Vec<u8> = pos[start..end]
            .iter()
            .flat_map(|p| p.to_le_bytes())
            .collect();
        Self::write_input(g, inp.pos, &pos_bytes)?;
        // Per cache, once per ubatch: the cells the tokens go to, and the
        // mask (a token sees the cells of its sequences at positions <= its
        // own and, in the sliding-window cache, within the window).
        let toks = MaskTokens {
            pos: &pos[start..end],
            seqs: &seqs[start..end],
        };
        if let Some(mem) = self.mem.kv() {
            let caches = [
                (&mem.base, inp.kv.as_ref(), &ub.slots.base),
                (
                    mem.swa.as_ref().unwrap_or(&mem.base),
                    inp.kv_swa.as_ref(),
                    &ub.slots.swa,
                ),
            ];
            for (kv, ki, cells) in caches {
                if let Some(ki) = ki {
                    Self::write_kv_inputs(g, kv, ki, cells, &toks)?;
                }
            }
        }
        if let Some(ri) = &inp.rs {
            // Each sequence set reads its state from one cell and writes it
            // back to another (or the same).
            let src: Vec<u8> = ub
                .rs
                .iter()
                .flat_map(|s| (s.src as i32).to_le_bytes())
                .collect();
            let dst: Vec<u8> = ub
                .rs
                .iter()
                .flat_map(|s| (s.dst as i64).to_le_bytes())
                .collect();
            Self::write_input(g, ri.src, &src)?;
            Self::write_input(g, ri.dst, &dst)?;
        }
        if let Some(ids) = inp.out_ids {
            let bytes: Vec<u8> = rows
                .iter()
                .flat_map(|&r| ((r - start) as i32).to_le_bytes())
                .collect();
            Self::write_input(g, ids, &bytes)?;
        }
        let t0 = Instant::now();
        self.compute(&mut built.graph, n_tokens)?;
        self.perf.t_compute += t0.elapsed();
        if !out_idx.is_empty() {
            let tokens: Vec<usize> = out_idx.iter().map(|&i| order[i]).collect();
            self.read_outputs(&built, &tokens)?;
        }
        self.keep_graph(shape, built, alloc);
        Ok(())
    }

    /// Puts the output rows in the order of their tokens in the batch
    /// (ubatches of an equal split take the tokens out of order).
    fn outputs_in_batch_order(&mut self) {
        let n_vocab = self.model.hparams.n_vocab;
        let n_embd = self.model.hparams.n_embd;
        let mut rows: Vec<(usize, usize)> = self
            .output_ids
            .iter()
            .enumerate()
            .filter_map(|(i, &r)| usize::try_from(r).ok().map(|r| (i, r)))
            .collect();
        rows.sort_unstable();
        let reorder = |v: &[f32], w: usize| -> Vec<f32> {
            rows.iter()
                .flat_map(|&(_, r)| &v[r * w..(r + 1) * w])
                .copied()
                .collect()
        };
        self.logits = reorder(&self.logits, n_vocab);
        if !self.embd.is_empty() {
            self.embd = reorder(&self.embd, n_embd);
        }
        for (new, &(i, _)) in rows.iter().enumerate() {
            self.output_ids[i] = new as i32;
        }
    }

    /// Appends the logits (and embeddings) of the output rows `out_idx` of
    /// a computed ubatch graph.
    fn read_outputs(&mut self, built: &BuiltGraph, out_idx: &[usize]) -> Result<()> {
        let hp = &self.model.hparams;
        let rows = out_idx.len();
        let g = &built.graph;
        let n_vocab = hp.n_vocab;
        let at = g.placement_or_err(built.logits)?;
        let mut bytes = vec![0u8; rows * n_vocab * 4];
        at.buffer.get_tensor(at.offset, &mut bytes)?;
        self.logits.extend(
            bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
        );
        if self.params.embeddings {
            let at = g.placement_or_err(built.embd)?;
            let mut bytes = vec![0u8; rows * hp.n_embd * 4];
            at.buffer.get_tensor(at.offset, &mut bytes)?;
            self.embd.extend(
                bytes
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
            );
        }
        for &i in out_idx {
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

    /// Removes positions `[p0, p1)` of `seq` from the caches (seq < 0:
    /// all). False, with nothing changed, when a sliding-window cache no
    /// longer holds positions the window of what is kept would need (see
    /// [`KvMemory::seq_rm`]).
    #[must_use]
    pub fn seq_rm(&mut self, seq: SeqId, p0: Pos, p1: Pos) -> bool {
        self.mem.seq_rm(seq, p0, p1)
    }
    /// Copies positions `[p0, p1)` of `src` to `dst`.
    pub fn seq_cp(&mut self, src: SeqId, dst: SeqId, p0: Pos, p1: Pos) {
        self.mem.seq_cp(src, dst, p0, p1)
    }
    /// Keeps only `seq`.
    pub fn seq_keep(&mut self, seq: SeqId) {
        self.mem.seq_keep(seq)
    }
    /// Shifts positions `[p0, p1)` of `seq` by `delta` (K re-rotated at the next decode).
    pub fn seq_add(&mut self, seq: SeqId, p0: Pos, p1: Pos, delta: Pos) {
        self.mem.seq_add(seq, p0, p1, delta)
    }
    /// Largest position of `seq`, or -1.
    pub fn seq_pos_max(&self, seq: SeqId) -> Pos {
        self.mem.seq_pos_max(seq)
    }
    /// Smallest position of `seq` that every layer still holds, or -1
    /// (llama_memory_seq_pos_min).
    pub fn seq_pos_min(&self, seq: SeqId) -> Pos {
        self.mem.seq_pos_min(seq)
    }
    /// Whether a context shift (`seq_rm` then `seq_add` of what follows) is
    /// possible: not with a sliding-window cache smaller than the context.
    pub fn can_shift(&self) -> bool {
        self.mem.can_shift()
    }
    /// Empties the cache. The graph kept for reuse stays (as llama.cpp's
    /// does): it depends on the next ubatch's shape, not on the cells'
    /// contents, so the same prompt decoded again runs it again.
    pub fn kv_clear(&mut self) {
        self.mem.clear();
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

/// One ubatch of a decode: its range of the split's order, its number of
/// sequence sets, and the cells it goes to.
struct Ubatch<'a> {
    range: Range<usize>,
    n_seqs: usize,
    order: &'a [usize],
    slots: &'a Slots,
    rs: &'a [RsSlot],
}

/// The sequence sets of a ubatch of `n_seqs` equal blocks (their ids, and
/// the last position each reaches).
fn seq_sets(pos: &[Pos], seqs: &[Vec<SeqId>], n_seqs: usize) -> (Vec<Vec<SeqId>>, Vec<Pos>) {
    let per = pos.len() / n_seqs.max(1);
    (0..n_seqs)
        .map(|s| (seqs[s * per].clone(), pos[(s + 1) * per - 1]))
        .unzip()
}

/// `params` checked and completed for `model`: the context size from the
/// model's when 0, padded to the KV cache's padding, batch sizes within it,
/// at least one thread. Also says whether flash attention is on.
fn resolve_params(model: &Model, params: ContextParams) -> Result<(ContextParams, bool)> {
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
    Ok((p, flash_attn))
}

/// Rope settings: the context's where given, else the model's. With YaRN
/// the magnitude factor is llama.cpp's: 1 after the correction rope applies
/// itself, or with `mscale_all_dim` (`rope.scaling.yarn_log_multiplier`)
/// the ratio of the two mscales with that correction cancelled, the
/// architecture's attention scale carrying it.
fn rope_config(hp: &HParams, p: &ContextParams) -> RopeCfg {
    let mut cfg = rope_config_base(hp, p);
    if cfg.ext_factor != 0.0 {
        let factor = 1.0 / cfg.freq_scale;
        let mscale_of = |m: f32| {
            if factor <= 1.0 {
                1.0
            } else {
                0.1 * m * factor.ln() + 1.0
            }
        };
        let mut attn = if hp.rope_yarn_log_mul != 0.0 {
            mscale_of(hp.rope_yarn_mscale) / mscale_of(hp.rope_yarn_log_mul)
        } else {
            mscale_of(1.0)
        };
        attn *= 1.0 / (1.0 + 0.1 * factor.ln());
        cfg.attn_factor = attn;
    }
    cfg
}

fn rope_config_base(hp: &HParams, p: &ContextParams) -> RopeCfg {
    RopeCfg {
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
    }
}

/// The scheduler over the backends of the model's GPUs, the accelerators,
/// then the CPU; returns it with the index of the CPU backend.
fn scheduler(model: &Model, p: &ContextParams, planning: bool) -> Result<(Scheduler, usize)> {
    let hp = &model.hparams;
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
    // A hybrid layer (Mamba-2 mixer or attention, then experts and a
    // shared expert) takes about 90, a latent-attention layer with grouped
    // expert routing and a shared expert about 100.
    let per_layer = if hp.has_recurrent() || hp.mla.is_some() {
        2 * GRAPH_NODES_PER_LAYER
    } else {
        GRAPH_NODES_PER_LAYER
    };
    // Never below llama.cpp's bound of eight nodes per weight tensor: some
    // layers (RWKV-7's time mix over a batch) take more than the estimate.
    let graph_size = (GRAPH_NODES_BASE + per_layer * hp.n_layer).max(8 * model.n_tensors);
    let mut sched = Scheduler::new(backends, Some(bufts), graph_size, parallel, p.op_offload)?;
    sched.set_planning(planning);
    Ok((sched, cpu_backend))
}
