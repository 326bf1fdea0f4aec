//! Self-attention over the KV cache: the Q/K/V projections (separate or
//! fused), storing K and V of the ubatch into the cache, and attention over
//! the attended cells with either flash attention or mul_mat + softmax.

use ggml_core::{Graph, TensorId};

use crate::arch::TensorKind;
use crate::error::{LlamaError, Result};
use crate::graph::{import_cache, row_size, Builder};

/// Q, K and V of a layer: Q [head_k, n_head, n_tokens], K [head_k,
/// n_head_kv, n_tokens], V [n_embd_v_gqa, n_tokens].
pub struct Qkv {
    /// Queries.
    pub q: TensorId,
    /// Keys.
    pub k: TensorId,
    /// Values.
    pub v: TensorId,
}

/// `x` as `n` rows of `w` elements, copied only when not contiguous.
fn as_rows(g: &mut Graph, x: TensorId, w: usize, n: usize) -> Result<TensorId> {
    Ok(if g.desc(x).is_contiguous() {
        g.reshape(x, &[w, n])?
    } else {
        g.cont_shape(x, &[w, n])?
    })
}

impl Builder<'_> {
    /// The Q/K/V projections of layer `il` from the normed input `cur`, with
    /// biases where the model has them; a fused `attn_qkv` is split by views.
    pub fn qkv(&mut self, cur: TensorId, il: usize) -> Result<Qkv> {
        let hp = self.hp;
        let n_tokens = self.n_tokens();
        let head_k = hp.n_embd_head_k;
        let (n_head, n_head_kv) = (hp.n_head(il), hp.n_head_kv(il));
        if self.w.layers[il].get(TensorKind::AttnQkv).is_some() {
            let qkv = self.linear(cur, TensorKind::AttnQkv, None, il)?;
            let es = self.g.desc(qkv).ty.type_size();
            let row = self.g.desc(qkv).nb[1];
            let q_width = head_k * n_head;
            let k_width = hp.n_embd_k_gqa(il);
            let q = self
                .g
                .view_3d(qkv, [head_k, n_head, n_tokens], head_k * es, row, 0)?;
            let k = self.g.view_3d(
                qkv,
                [head_k, n_head_kv, n_tokens],
                head_k * es,
                row,
                q_width * es,
            )?;
            let v = self.g.view_2d(
                qkv,
                hp.n_embd_v_gqa(il),
                n_tokens,
                row,
                (q_width + k_width) * es,
            )?;
            let q = self.g.cont(q)?;
            let k = self.g.cont(k)?;
            let v = self.g.cont(v)?;
            return Ok(Qkv { q, k, v });
        }
        let q = self.linear(cur, TensorKind::AttnQ, Some(TensorKind::AttnQBias), il)?;
        let k = self.linear(cur, TensorKind::AttnK, Some(TensorKind::AttnKBias), il)?;
        let v = self.linear(cur, TensorKind::AttnV, Some(TensorKind::AttnVBias), il)?;
        let q = self.g.reshape(q, &[head_k, n_head, n_tokens])?;
        let k = self.g.reshape(k, &[head_k, n_head_kv, n_tokens])?;
        Ok(Qkv { q, k, v })
    }

    /// Stores K (roped) and V of the ubatch in layer `il`'s cache, then
    /// attends Q over the first n_kv cells with the layer's mask. Scores are
    /// `kq_scale * q.k`, soft-capped to `softcap * tanh(s / softcap)` when
    /// `softcap` is not 0. Returns [head_v * n_head, n_tokens] before the
    /// output projection.
    pub fn attention(
        &mut self,
        qkv: Qkv,
        il: usize,
        kq_scale: f32,
        softcap: f32,
    ) -> Result<TensorId> {
        self.attention_with_sinks(qkv, il, kq_scale, softcap, None)
    }

    /// [`Self::attention`] with attention sinks: `sinks` F32 [n_head], one
    /// logit per head that joins the softmax denominator (gpt-oss).
    pub fn attention_with_sinks(
        &mut self,
        qkv: Qkv,
        il: usize,
        kq_scale: f32,
        softcap: f32,
        sinks: Option<TensorId>,
    ) -> Result<TensorId> {
        let hp = self.hp;
        let kv = self
            .mem
            .kv()
            .ok_or_else(|| LlamaError::Decode(format!("no KV cache for layer {il}")))?
            .cache_for(hp, il);
        let n_tokens = self.n_tokens();
        let n_kv = if kv.cells.n_swa() > 0 {
            self.shape.n_kv_swa
        } else {
            self.shape.n_kv
        };
        let n_head = hp.n_head(il);
        let n_head_kv = hp.n_head_kv(il);
        let head_k = hp.n_embd_head_k;
        let head_v = hp.n_embd_head_v;
        let n_embd_k_gqa = hp.n_embd_k_gqa(il);
        let n_embd_v_gqa = hp.n_embd_v_gqa(il);
        let inp = self
            .inputs
            .kv_for(hp, il)
            .ok_or_else(|| LlamaError::Decode(format!("no KV cache inputs for layer {il}")))?;
        let (mask, k_idxs) = (inp.mask, inp.k_idxs);
        let v_idxs = inp.v_idx(n_embd_v_gqa);
        let kvl = kv.layer(il)?;
        let g = &mut self.g;

        let k_cache = import_cache(g, &kvl.k);
        let v_cache = import_cache(g, kvl.v()?);
        let k_row = row_size(kv.type_k, n_embd_k_gqa);
        // K and V rows of the ubatch go to its cells, which need not be adjacent.
        let k_cur = as_rows(g, qkv.k, n_embd_k_gqa, n_tokens)?;
        g.set_rows(k_cache, k_cur, k_idxs)?;
        let v_esize = kv.type_v.type_size();
        let v_cur = as_rows(g, qkv.v, n_embd_v_gqa, n_tokens)?;
        if kv.v_trans {
            // Transposed V: every value is a row of one element.
            let v_idxs = v_idxs.ok_or_else(|| {
                LlamaError::Decode(format!("no V index input for width {n_embd_v_gqa}"))
            })?;
            let v_dst = g.reshape(v_cache, &[1, n_embd_v_gqa * kv.size])?;
            let v_src = g.reshape(v_cur, &[1, n_embd_v_gqa * n_tokens])?;
            g.set_rows(v_dst, v_src, v_idxs)?;
        } else {
            g.set_rows(v_cache, v_cur, k_idxs)?;
        }

        let qp = g.permute(qkv.q, [0, 2, 1, 3])?;
        let kview = g.view_3d(
            k_cache,
            [head_k, n_kv, n_head_kv],
            k_row,
            row_size(kv.type_k, head_k),
            0,
        )?;
        if kv.v_trans {
            let mut kq = g.mul_mat(kview, qp)?;
            g.set_name(kq, format!("kq-{il}"));
            if softcap != 0.0 {
                kq = g.scale(kq, 1.0 / softcap)?;
                kq = g.unary(kq, ggml_core::UnaryOp::Tanh)?;
                kq = g.scale(kq, softcap)?;
            }
            let mut kq = g.soft_max_ext(kq, Some(mask), kq_scale, 0.0)?;
            if let Some(s) = sinks {
                kq = g.add_sinks(kq, s)?;
            }
            let vview = g.view_3d(
                v_cache,
                [n_kv, head_v, n_head_kv],
                kv.size * v_esize,
                kv.size * v_esize * head_v,
                0,
            )?;
            let kqv = g.mul_mat(vview, kq)?;
            let merged = g.permute(kqv, [0, 2, 1, 3])?;
            Ok(g.cont_shape(merged, &[head_v * n_head, n_tokens])?)
        } else {
            // Flash attention: V rows are stored like K rows.
            let vview = g.view_3d(
                v_cache,
                [head_v, n_kv, n_head_kv],
                row_size(kv.type_v, n_embd_v_gqa),
                row_size(kv.type_v, head_v),
                0,
            )?;
            let mut fa = g.flash_attn_ext(qp, kview, vview, Some(mask), kq_scale, 0.0, softcap)?;
            if let Some(s) = sinks {
                fa = g.add_sinks(fa, s)?;
            }
            g.set_name(fa, format!("fattn-{il}"));
            Ok(g.reshape(fa, &[head_v * n_head, n_tokens])?)
        }
    }

    /// The attention output projection (with its bias when present).
    pub fn attn_out(&mut self, x: TensorId, il: usize) -> Result<TensorId> {
        let y = self.linear(x, TensorKind::AttnOut, Some(TensorKind::AttnOutBias), il)?;
        self.g.set_name(y, format!("attn_out-{il}"));
        Ok(y)
    }
}
