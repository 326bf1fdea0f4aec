//! Shared blocks of the forward graphs: a [`Builder`] holding the graph, the
//! ubatch's inputs and masks, and methods for the pieces every architecture
//! assembles differently (norms, projections, rope with per-layer settings,
//! attention over the KV cache, FFN variants, the output head). Each
//! architecture's builder in [`crate::models`] strings them together.

mod attention;
mod delta_net;
mod ffn;
mod gated_attention;
pub mod inputs;
mod mla;
mod moe_oai;
mod moe_routing;
mod rwkv;
mod sandwich;
mod shortconv;
mod ssm;

use ggml_core::{Flags, Graph, RopeParams, TensorDesc, TensorId, Type};

pub use attention::Qkv;
pub use ffn::Ffn;
pub use inputs::{GraphInputs, KvInputs, RsInputs, KQ_MASK_PAD};

use crate::adapter::AdapterSet;
use crate::arch::TensorKind;
use crate::error::{LlamaError, Result};
use crate::hparams::HParams;
use crate::kv_cache::KvCache;
use crate::kv_memory::KvMemory;
use crate::memory::Memory;
use crate::model::{Model, Weight, Weights};

/// Rope settings of a context (trained values unless overridden).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RopeCfg {
    /// Base frequency.
    pub freq_base: f32,
    /// Position scale.
    pub freq_scale: f32,
    /// YaRN extrapolation mix (0 = off).
    pub ext_factor: f32,
    /// YaRN magnitude scale.
    pub attn_factor: f32,
    /// YaRN low correction dim.
    pub beta_fast: f32,
    /// YaRN high correction dim.
    pub beta_slow: f32,
    /// Original training context (YaRN).
    pub n_ctx_orig: usize,
}

/// The shape of one ubatch's graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UbatchShape {
    /// Tokens in the ubatch.
    pub n_tokens: usize,
    /// Rows of logits to produce.
    pub n_outputs: usize,
    /// Cells attended in the full-attention cache (a padded prefix).
    pub n_kv: usize,
    /// Cells attended in the sliding-window cache (unused without one).
    pub n_kv_swa: usize,
    /// Input is embeddings instead of token ids.
    pub embd_input: bool,
    /// Sequence sets of the ubatch (equal blocks of `n_tokens / n_seqs`
    /// tokens each for recurrent layers; 1 otherwise).
    pub n_seqs: usize,
}

/// A built forward graph.
pub struct BuiltGraph {
    /// The graph.
    pub graph: Graph,
    /// Its inputs.
    pub inputs: GraphInputs,
    /// Logits, F32 [n_vocab, n_outputs].
    pub logits: TensorId,
    /// Final hidden state after the output norm, F32 [n_embd, n_outputs].
    pub embd: TensorId,
    /// Nodes that should run on the device of a layer (layer index).
    pub layer_pins: Vec<(TensorId, usize)>,
}

pub(crate) fn import(g: &mut Graph, w: &Weight) -> TensorId {
    g.import(w.desc.clone(), w.at.clone(), Flags::WEIGHT)
}

pub(crate) fn import_cache(g: &mut Graph, w: &Weight) -> TensorId {
    g.import(w.desc.clone(), w.at.clone(), Flags::default())
}

pub(crate) fn row_size(ty: Type, n: usize) -> usize {
    n / ty.block_size() * ty.type_size()
}

/// A forward graph under construction for one ubatch.
pub struct Builder<'a> {
    /// The graph.
    pub g: Graph,
    /// Hyperparameters.
    pub hp: &'a HParams,
    /// Weights.
    pub w: &'a Weights,
    mem: &'a Memory,
    rope: &'a RopeCfg,
    /// LoRA adapters and control vector of the context.
    adapters: &'a AdapterSet,
    /// The ubatch.
    pub shape: UbatchShape,
    /// Inputs and masks, created once and shared by the layers.
    pub inputs: GraphInputs,
    pins: Vec<(TensorId, usize)>,
    rope_factors: Option<TensorId>,
}

/// Builds the forward pass of `model`'s architecture for one ubatch.
pub fn build_decoder(
    model: &Model,
    mem: &Memory,
    rope: &RopeCfg,
    adapters: &AdapterSet,
    shape: UbatchShape,
) -> Result<BuiltGraph> {
    let mut b = Builder::new(model, mem, rope, adapters, shape)?;
    let (logits, embd) = (model.arch.def().build)(&mut b)?;
    b.g.set_output(logits);
    b.g.set_output(embd);
    Ok(BuiltGraph {
        graph: b.g,
        inputs: b.inputs,
        logits,
        embd,
        layer_pins: b.pins,
    })
}

impl<'a> Builder<'a> {
    fn new(
        model: &'a Model,
        mem: &'a Memory,
        rope: &'a RopeCfg,
        adapters: &'a AdapterSet,
        shape: UbatchShape,
    ) -> Result<Builder<'a>> {
        let hp = &model.hparams;
        let w = model.weights()?;
        let mut g = Graph::new();
        let inputs = GraphInputs::new(&mut g, hp, mem, shape);
        // Long or short factors follow the context size, not a cache's.
        let n_ctx = mem.kv().map_or(0, KvMemory::size);
        let rope_factors = w
            .rope_factors(n_ctx, rope.n_ctx_orig)
            .map(|r| import(&mut g, r));
        Ok(Builder {
            g,
            hp,
            w,
            mem,
            rope,
            adapters,
            shape,
            inputs,
            pins: Vec::new(),
            rope_factors,
        })
    }

    /// Tokens in the ubatch.
    pub fn n_tokens(&self) -> usize {
        self.shape.n_tokens
    }

    /// A required weight of layer `il`.
    pub fn weight(&mut self, kind: TensorKind, il: usize) -> Result<TensorId> {
        let w = self.w.layers[il].req(kind)?;
        Ok(import(&mut self.g, w))
    }

    /// An optional weight of layer `il`.
    pub fn weight_opt(&mut self, kind: TensorKind, il: usize) -> Option<TensorId> {
        let w = self.w.layers[il].get(kind)?;
        Some(import(&mut self.g, w))
    }

    /// The input embeddings [n_embd, n_tokens]: rows of the token
    /// embeddings, or the caller's embeddings. The flag says whether they
    /// came from tokens (some architectures scale only those).
    pub fn inp_embd(&mut self) -> Result<(TensorId, bool)> {
        if let Some(e) = self.inputs.embd {
            return Ok((e, false));
        }
        let t = self
            .inputs
            .tokens
            .ok_or_else(|| LlamaError::Decode("graph has neither tokens nor embeddings".into()))?;
        let tok = import(&mut self.g, &self.w.tok_embd);
        let mut x = self.g.get_rows(tok, t)?;
        // LoRA of the embeddings: the pair is stored the other way round,
        // A [rank, n_vocab] read by rows like the embeddings.
        for (p, s) in self.adapters.pairs_for(&self.w.tok_embd) {
            let a = import(&mut self.g, &p.a);
            let b = import(&mut self.g, &p.b);
            let ax = self.g.get_rows(a, t)?;
            let bax = self.g.mul_mat(b, ax)?;
            let d = self.g.scale(bax, s)?;
            x = self.g.add_op(x, d)?;
        }
        self.g.set_name(x, "inp_embd");
        Ok((x, true))
    }

    /// RMS norm times the layer's weight `kind`; pinned to the layer's device
    /// so the residual stream does not move between devices.
    pub fn rms_norm(&mut self, x: TensorId, kind: TensorKind, il: usize) -> Result<TensorId> {
        let n = self.g.rms_norm(x, self.hp.f_norm_rms_eps)?;
        self.pins.push((n, il));
        let w = self.weight(kind, il)?;
        let out = self.g.mul(n, w)?;
        self.g.set_name(out, format!("{}-{il}", kind.info().name));
        Ok(out)
    }

    /// `w x (+ b)` with the layer's weight and optional bias.
    pub fn linear(
        &mut self,
        x: TensorId,
        w: TensorKind,
        b: Option<TensorKind>,
        il: usize,
    ) -> Result<TensorId> {
        let weights = self.w;
        let wt = weights.layers[il].req(w)?;
        let mut y = self.mm(wt, x)?;
        if let Some(bt) = b.and_then(|b| self.weight_opt(b, il)) {
            y = self.g.add_op(y, bt)?;
        }
        Ok(y)
    }

    /// `w x` plus, for every LoRA adapter with a pair for `w`,
    /// `s * B (A x)`: every matrix product of a weight goes through here.
    pub fn mm(&mut self, w: &Weight, x: TensorId) -> Result<TensorId> {
        let wt = import(&mut self.g, w);
        let mut y = self.g.mul_mat(wt, x)?;
        for (p, s) in self.adapters.pairs_for(w) {
            let a = import(&mut self.g, &p.a);
            let b = import(&mut self.g, &p.b);
            let ax = self.g.mul_mat(a, x)?;
            let bax = self.g.mul_mat(b, ax)?;
            let d = self.g.scale(bax, s)?;
            y = self.g.add_op(y, d)?;
        }
        Ok(y)
    }

    /// The expert product `w[ids] x` (MUL_MAT_ID) of layer `il`'s weight
    /// `kind`, plus `s * B[ids] (A[ids] x)` for every LoRA pair of it.
    pub fn mm_id(
        &mut self,
        kind: TensorKind,
        il: usize,
        x: TensorId,
        ids: TensorId,
    ) -> Result<TensorId> {
        let weights = self.w;
        let w = weights.layers[il].req(kind)?;
        self.mm_id_of(w, x, ids)
    }

    /// [`Self::mm_id`] for a weight at hand.
    pub fn mm_id_of(&mut self, w: &Weight, x: TensorId, ids: TensorId) -> Result<TensorId> {
        let wt = import(&mut self.g, w);
        let mut y = self.g.mul_mat_id(wt, x, ids)?;
        for (p, s) in self.adapters.pairs_for(w) {
            let a = import(&mut self.g, &p.a);
            let b = import(&mut self.g, &p.b);
            let ax = self.g.mul_mat_id(a, x, ids)?;
            let bax = self.g.mul_mat_id(b, ax, ids)?;
            let d = self.g.scale(bax, s)?;
            y = self.g.add_op(y, d)?;
        }
        Ok(y)
    }

    /// The end of layer `il`: adds the control vector's direction for the
    /// layer, if any, to `x` and names the result `l_out-<il>`.
    pub fn layer_out(&mut self, x: TensorId, il: usize) -> Result<TensorId> {
        let mut out = x;
        if let Some(d) = self.adapters.direction(il) {
            let dt = import(&mut self.g, d);
            out = self.g.add_op(out, dt)?;
        }
        self.g.set_name(out, format!("l_out-{il}"));
        Ok(out)
    }

    /// Rope parameters of layer `il`: sliding-window layers use their own
    /// trained base and scale, the others the context's.
    pub fn rope_params(&self, il: usize) -> RopeParams {
        rope_params_for(self.hp, self.rope, il)
    }

    /// Rotates `x` [head, n_heads, n_tokens] by the token positions.
    pub fn rope(&mut self, x: TensorId, il: usize) -> Result<TensorId> {
        let rp = self.rope_params(il);
        Ok(self.g.rope_ext(x, self.inputs.pos, self.rope_factors, rp)?)
    }

    /// Keeps only the output rows of `x` (before the last layer's residual
    /// add, so the rest of the graph runs on n_outputs rows).
    pub fn out_rows(&mut self, x: TensorId) -> Result<TensorId> {
        match self.inputs.out_ids {
            Some(ids) => Ok(self.g.get_rows(x, ids)?),
            None => Ok(x),
        }
    }

    /// On the last layer, [`Self::out_rows`] of a block's output `cur` and
    /// of the residual stream it is added to; on the others both as they are.
    pub fn last_layer_rows(
        &mut self,
        il: usize,
        cur: TensorId,
        residual: TensorId,
    ) -> Result<(TensorId, TensorId)> {
        if il + 1 == self.hp.n_layer {
            Ok((self.out_rows(cur)?, self.out_rows(residual)?))
        } else {
            Ok((cur, residual))
        }
    }

    /// The output projection of the normed hidden state `embd`, with the
    /// LoRA pairs of `output` unless it is tied to the embeddings (whose
    /// pairs are shaped for the rows).
    pub fn output_proj(&mut self, embd: TensorId) -> Result<TensorId> {
        let weights = self.w;
        if weights.output.desc.name == weights.tok_embd.desc.name {
            let out_w = import(&mut self.g, &weights.output);
            Ok(self.g.mul_mat(out_w, embd)?)
        } else {
            self.mm(&weights.output, embd)
        }
    }

    /// Output norm and projection, with optional final soft-capping
    /// (`tanh(x / c) * c`). Returns (logits, normed hidden state).
    pub fn output_head(&mut self, x: TensorId, softcap: f32) -> Result<(TensorId, TensorId)> {
        let n = self.g.rms_norm(x, self.hp.f_norm_rms_eps)?;
        let onorm = import(&mut self.g, &self.w.output_norm);
        let embd = self.g.mul(n, onorm)?;
        self.g.set_name(embd, "result_norm");
        let mut logits = self.output_proj(embd)?;
        if softcap != 0.0 {
            logits = self.g.scale(logits, 1.0 / softcap)?;
            logits = self.g.unary(logits, ggml_core::UnaryOp::Tanh)?;
            logits = self.g.scale(logits, softcap)?;
        }
        self.g.set_name(logits, "result_output");
        Ok((logits, embd))
    }
}

/// Rope parameters of layer `il` under the context's settings.
pub fn rope_params_for(hp: &HParams, rope: &RopeCfg, il: usize) -> RopeParams {
    let (freq_base, freq_scale) = if hp.is_swa(il) {
        (hp.rope_freq_base_train_swa, hp.rope_freq_scale_train_swa)
    } else {
        (rope.freq_base, rope.freq_scale)
    };
    RopeParams {
        n_dims: hp.n_rot,
        mode: hp.arch.rope_mode(),
        n_ctx_orig: rope.n_ctx_orig,
        freq_base,
        freq_scale,
        ext_factor: rope.ext_factor,
        attn_factor: rope.attn_factor,
        beta_fast: rope.beta_fast,
        beta_slow: rope.beta_slow,
    }
}

/// Builds the graph that re-rotates K of every layer of cache `kv` by its
/// cells' pending position deltas (context shift), each layer with its own
/// rope settings; `n_ctx` picks long or short rope factors.
pub fn build_k_shift(
    model: &Model,
    kv: &KvCache,
    rope: &RopeCfg,
    n_ctx: usize,
) -> Result<(Graph, TensorId)> {
    let hp = &model.hparams;
    let w = model.weights()?;
    let mut g = Graph::new();
    let shift = g.input("inp_K_shift", Type::I32, &[kv.size]);
    let rope_factors = w
        .rope_factors(n_ctx, rope.n_ctx_orig)
        .map(|r| import(&mut g, r));
    for il in 0..hp.n_layer {
        let Some(layer) = kv.layers[il].as_ref() else {
            continue;
        };
        let n_head_kv = hp.n_head_kv(il);
        let k_cache = import_cache(&mut g, &layer.k);
        let k_row = row_size(kv.type_k, hp.n_embd_k_gqa(il));
        // A key head of multi-head latent attention ends with its rotary
        // part; the rest is not rotated.
        let (width, offset) = if hp.mla.is_some() {
            (hp.n_rot, hp.n_embd_head_k - hp.n_rot)
        } else {
            (hp.n_embd_head_k, 0)
        };
        let kview = g.view_3d(
            k_cache,
            [width, n_head_kv, kv.size],
            row_size(kv.type_k, hp.n_embd_head_k),
            k_row,
            row_size(kv.type_k, offset),
        )?;
        let f32k = g.new_tensor(
            format!("k_shift_f32-{il}"),
            Type::F32,
            &[width, n_head_kv, kv.size],
        );
        let tmp = g.cpy(kview, f32k)?;
        let rot = g.rope_ext(tmp, shift, rope_factors, rope_params_for(hp, rope, il))?;
        g.cpy(rot, kview)?;
    }
    Ok((g, shift))
}

/// Descriptor helper for tests and tools.
pub fn logits_desc(n_vocab: usize, n_outputs: usize) -> TensorDesc {
    TensorDesc::new("result_output", Type::F32, &[n_vocab, n_outputs])
}
