//! Graph builders: the forward pass of the decoder architectures for one
//! ubatch, writing K and V into the cache and reading the attended cells.
//!
//! `llama` and `qwen2` share one builder; their differences (rope layout,
//! attention biases) are data in the architecture table and the weights.

use ggml_core::{Flags, Graph, RopeParams, TensorDesc, TensorId, Type};

use crate::arch::TensorKind;
use crate::error::Result;
use crate::kv_cache::KvCache;
use crate::model::{Model, Weight};

/// Padding of the mask's token dim (ggml's GGML_KQ_MASK_PAD).
pub const KQ_MASK_PAD: usize = 32;

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
    /// First KV cell written.
    pub kv_head: usize,
    /// Cells attended (a padded prefix of the cache).
    pub n_kv: usize,
    /// Input is embeddings instead of token ids.
    pub embd_input: bool,
}

/// The graph's inputs, which the context fills after allocation.
#[derive(Clone, Copy, Debug)]
pub struct GraphInputs {
    /// Token ids, I32 [n_tokens] (absent with embedding input).
    pub tokens: Option<TensorId>,
    /// Input embeddings, F32 [n_embd, n_tokens].
    pub embd: Option<TensorId>,
    /// Positions, I32 [n_tokens].
    pub pos: TensorId,
    /// Attention mask, F32 [n_kv, pad(n_tokens)].
    pub kq_mask: TensorId,
    /// Indices of the output rows, I32 [n_outputs] (absent when every token outputs).
    pub out_ids: Option<TensorId>,
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

fn import(g: &mut Graph, w: &Weight) -> TensorId {
    g.import(w.desc.clone(), w.at.clone(), Flags::WEIGHT)
}

fn import_cache(g: &mut Graph, w: &Weight) -> TensorId {
    g.import(w.desc.clone(), w.at.clone(), Flags::default())
}

fn row_size(ty: Type, n: usize) -> usize {
    n / ty.block_size() * ty.type_size()
}

/// Builds the decoder forward pass for one ubatch.
pub fn build_decoder(
    model: &Model,
    kv: &KvCache,
    rope: &RopeCfg,
    shape: UbatchShape,
) -> Result<BuiltGraph> {
    let hp = &model.hparams;
    let w = model.weights()?;
    let n_tokens = shape.n_tokens;
    let n_kv = shape.n_kv;
    let n_embd_head = hp.n_embd_head_k;
    let mut g = Graph::new();
    let mut pins = Vec::new();

    let (tokens, embd_in, mut inp_l) = if shape.embd_input {
        let e = g.input("inp_embd", Type::F32, &[hp.n_embd, n_tokens]);
        (None, Some(e), e)
    } else {
        let t = g.input("inp_tokens", Type::I32, &[n_tokens]);
        let tok = import(&mut g, &w.tok_embd);
        let x = g.get_rows(tok, t)?;
        g.set_name(x, "inp_embd");
        (Some(t), None, x)
    };
    let pos = g.input("inp_pos", Type::I32, &[n_tokens]);
    let kq_mask = g.input(
        "KQ_mask",
        Type::F32,
        &[n_kv, n_tokens.div_ceil(KQ_MASK_PAD) * KQ_MASK_PAD],
    );
    let out_ids = if shape.n_outputs < n_tokens {
        Some(g.input("inp_out_ids", Type::I32, &[shape.n_outputs]))
    } else {
        None
    };
    let kq_scale = 1.0 / (n_embd_head as f32).sqrt();
    let rope_freqs = w.rope_freqs.as_ref().map(|r| import(&mut g, r));

    for il in 0..hp.n_layer {
        let layer = &w.layers[il];
        let n_head = hp.n_head(il);
        let n_head_kv = hp.n_head_kv(il);
        let inp_sa = inp_l;

        // Attention norm.
        let norm = g.rms_norm(inp_l, hp.f_norm_rms_eps)?;
        pins.push((norm, il));
        let attn_norm = import(&mut g, layer.req(TensorKind::AttnNorm)?);
        let mut cur = g.mul(norm, attn_norm)?;
        g.set_name(cur, format!("attn_norm-{il}"));

        // Q, K, V with optional biases.
        let proj = |g: &mut Graph, wk: TensorKind, bk: TensorKind| -> Result<TensorId> {
            let wt = import(g, layer.req(wk)?);
            let mut x = g.mul_mat(wt, cur)?;
            if let Some(b) = layer.get(bk) {
                let bt = import(g, b);
                x = g.add_op(x, bt)?;
            }
            Ok(x)
        };
        let q = proj(&mut g, TensorKind::AttnQ, TensorKind::AttnQBias)?;
        let k = proj(&mut g, TensorKind::AttnK, TensorKind::AttnKBias)?;
        let v = proj(&mut g, TensorKind::AttnV, TensorKind::AttnVBias)?;

        let rp = RopeParams {
            n_dims: hp.n_rot,
            mode: hp.arch.rope_mode(),
            n_ctx_orig: rope.n_ctx_orig,
            freq_base: rope.freq_base,
            freq_scale: rope.freq_scale,
            ext_factor: rope.ext_factor,
            attn_factor: rope.attn_factor,
            beta_fast: rope.beta_fast,
            beta_slow: rope.beta_slow,
        };
        let q3 = g.reshape(q, &[n_embd_head, n_head, n_tokens])?;
        let q_rot = g.rope_ext(q3, pos, rope_freqs, rp)?;
        g.set_name(q_rot, format!("Qcur-{il}"));
        let k3 = g.reshape(k, &[n_embd_head, n_head_kv, n_tokens])?;
        let k_rot = g.rope_ext(k3, pos, rope_freqs, rp)?;
        g.set_name(k_rot, format!("Kcur-{il}"));

        // Store K and V in the cache.
        let kvl = &kv.layers[il];
        let k_cache = import_cache(&mut g, &kvl.k);
        let v_cache = import_cache(&mut g, &kvl.v);
        let n_embd_k_gqa = hp.n_embd_k_gqa(il);
        let n_embd_v_gqa = hp.n_embd_v_gqa(il);
        let k_row = row_size(kv.type_k, n_embd_k_gqa);
        let k_dst = g.view_1d(k_cache, n_tokens * n_embd_k_gqa, k_row * shape.kv_head)?;
        g.cpy(k_rot, k_dst)?;
        let v_esize = kv.type_v.type_size();
        if kv.v_trans {
            let v_dst = g.view_2d(
                v_cache,
                n_tokens,
                n_embd_v_gqa,
                kv.size * v_esize,
                shape.kv_head * v_esize,
            )?;
            let v2 = g.reshape(v, &[n_embd_v_gqa, n_tokens])?;
            let vt = g.transpose(v2)?;
            g.cpy(vt, v_dst)?;
        } else {
            let v_row = row_size(kv.type_v, n_embd_v_gqa);
            let v_dst = g.view_1d(v_cache, n_tokens * n_embd_v_gqa, v_row * shape.kv_head)?;
            g.cpy(v, v_dst)?;
        }

        // Attention over the first n_kv cells.
        let qp = g.permute(q_rot, [0, 2, 1, 3])?;
        let kview = g.view_3d(
            k_cache,
            [n_embd_head, n_kv, n_head_kv],
            k_row,
            row_size(kv.type_k, n_embd_head),
            0,
        )?;
        let n_embd_head_v = hp.n_embd_head_v;
        let attn = if kv.v_trans {
            let kq = g.mul_mat(kview, qp)?;
            g.set_name(kq, format!("kq-{il}"));
            let kq = g.soft_max_ext(kq, Some(kq_mask), kq_scale, 0.0)?;
            let vview = g.view_3d(
                v_cache,
                [n_kv, n_embd_head_v, n_head_kv],
                kv.size * v_esize,
                kv.size * v_esize * n_embd_head_v,
                0,
            )?;
            let kqv = g.mul_mat(vview, kq)?;
            let merged = g.permute(kqv, [0, 2, 1, 3])?;
            g.cont_shape(merged, &[n_embd_head_v * n_head, n_tokens])?
        } else {
            // Flash attention: V rows are stored like K rows.
            let vview = g.view_3d(
                v_cache,
                [n_embd_head_v, n_kv, n_head_kv],
                row_size(kv.type_v, n_embd_v_gqa),
                row_size(kv.type_v, n_embd_head_v),
                0,
            )?;
            let fa = g.flash_attn_ext(qp, kview, vview, Some(kq_mask), kq_scale, 0.0, 0.0)?;
            g.set_name(fa, format!("fattn-{il}"));
            g.reshape(fa, &[n_embd_head_v * n_head, n_tokens])?
        };
        let wo = import(&mut g, layer.req(TensorKind::AttnOut)?);
        cur = g.mul_mat(wo, attn)?;
        if let Some(b) = layer.get(TensorKind::AttnOutBias) {
            let bt = import(&mut g, b);
            cur = g.add_op(cur, bt)?;
        }
        g.set_name(cur, format!("attn_out-{il}"));

        let mut inp_sa = inp_sa;
        if il == hp.n_layer - 1 {
            if let Some(ids) = out_ids {
                cur = g.get_rows(cur, ids)?;
                inp_sa = g.get_rows(inp_sa, ids)?;
            }
        }
        let ffn_inp = g.add_op(cur, inp_sa)?;
        g.set_name(ffn_inp, format!("ffn_inp-{il}"));

        // Feed-forward.
        let norm = g.rms_norm(ffn_inp, hp.f_norm_rms_eps)?;
        pins.push((norm, il));
        let ffn_norm = import(&mut g, layer.req(TensorKind::FfnNorm)?);
        let x = g.mul(norm, ffn_norm)?;
        let up_w = import(&mut g, layer.req(TensorKind::FfnUp)?);
        let up = g.mul_mat(up_w, x)?;
        let gate_w = import(&mut g, layer.req(TensorKind::FfnGate)?);
        let gate = g.mul_mat(gate_w, x)?;
        let act = g.swiglu_split(gate, up)?;
        let down_w = import(&mut g, layer.req(TensorKind::FfnDown)?);
        let down = g.mul_mat(down_w, act)?;
        let out = g.add_op(down, ffn_inp)?;
        g.set_name(out, format!("l_out-{il}"));
        inp_l = out;
    }

    let norm = g.rms_norm(inp_l, hp.f_norm_rms_eps)?;
    let onorm = import(&mut g, &w.output_norm);
    let embd = g.mul(norm, onorm)?;
    g.set_name(embd, "result_norm");
    let out_w = import(&mut g, &w.output);
    let logits = g.mul_mat(out_w, embd)?;
    g.set_name(logits, "result_output");
    g.set_output(logits);
    g.set_output(embd);

    Ok(BuiltGraph {
        graph: g,
        inputs: GraphInputs {
            tokens,
            embd: embd_in,
            pos,
            kq_mask,
            out_ids,
        },
        logits,
        embd,
        layer_pins: pins,
    })
}

/// Builds the graph that re-rotates every layer's K by the cells' pending
/// position deltas (context shift).
pub fn build_k_shift(model: &Model, kv: &KvCache, rope: &RopeCfg) -> Result<(Graph, TensorId)> {
    let hp = &model.hparams;
    let w = model.weights()?;
    let mut g = Graph::new();
    let shift = g.input("inp_K_shift", Type::I32, &[kv.size]);
    let rope_freqs = w.rope_freqs.as_ref().map(|r| import(&mut g, r));
    for il in 0..hp.n_layer {
        let n_head_kv = hp.n_head_kv(il);
        let k_cache = import_cache(&mut g, &kv.layers[il].k);
        let k_row = row_size(kv.type_k, hp.n_embd_k_gqa(il));
        let kview = g.view_3d(
            k_cache,
            [hp.n_embd_head_k, n_head_kv, kv.size],
            row_size(kv.type_k, hp.n_embd_head_k),
            k_row,
            0,
        )?;
        let f32k = g.new_tensor(
            format!("k_shift_f32-{il}"),
            Type::F32,
            &[hp.n_embd_head_k, n_head_kv, kv.size],
        );
        let tmp = g.cpy(kview, f32k)?;
        let rp = RopeParams {
            n_dims: hp.n_rot,
            mode: hp.arch.rope_mode(),
            n_ctx_orig: rope.n_ctx_orig,
            freq_base: rope.freq_base,
            freq_scale: rope.freq_scale,
            ext_factor: rope.ext_factor,
            attn_factor: rope.attn_factor,
            beta_fast: rope.beta_fast,
            beta_slow: rope.beta_slow,
        };
        let rot = g.rope_ext(tmp, shift, rope_freqs, rp)?;
        g.cpy(rot, kview)?;
    }
    Ok((g, shift))
}

/// Descriptor helper for tests and tools.
pub fn logits_desc(n_vocab: usize, n_outputs: usize) -> TensorDesc {
    TensorDesc::new("result_output", Type::F32, &[n_vocab, n_outputs])
}
