//! Multi-head latent attention (DeepSeek V2/V3, llama.cpp's `deepseek2`).
//! Each token's keys and values come from one compressed latent c
//! (`attn_kv_a_mqa`, RMS-normed) plus one rotary key part k_pe shared by
//! every head; queries come from `attn_q` or the low-rank `attn_q_a` ->
//! norm -> `attn_q_b`, each head split into a non-rotary and a rotary
//! part.
//!
//! With the absorbed layout (`attn_k_b`, `attn_v_b`) the cache holds one
//! row [c, k_pe] per token, as llama.cpp's: the non-rotary query is carried
//! into the latent space through `attn_k_b`, attention runs as one KV head
//! over [c, k_pe] whose values are c (the first `kv_lora_rank` elements of
//! each key row), and the result goes back to each head's value width
//! through `attn_v_b`.

use ggml_core::{TensorId, Type};

use crate::arch::TensorKind;
use crate::error::{LlamaError, Result};
use crate::graph::{import_cache, row_size, Builder};
use crate::hparams::Mla;

impl Builder<'_> {
    /// The attention scale of multi-head latent attention:
    /// mscale^2 / sqrt(head_k), with YaRN's magnitude correction moved
    /// from rope into the scale (llama.cpp's deepseek2 graph).
    pub fn mla_kq_scale(&self, m: &Mla) -> f32 {
        let hp = self.hp;
        let rope = self.rope;
        let ln_factor = (1.0 / rope.freq_scale).ln();
        // The rope's attn_factor has YaRN's correction cancelled; undo that.
        let attn_factor_org = rope.attn_factor * (1.0 + 0.1 * ln_factor);
        let mscale = attn_factor_org * (1.0 + 0.1 * hp.rope_yarn_log_mul * ln_factor);
        mscale * mscale / (m.head_k as f32).sqrt()
    }

    /// Multi-head latent attention of layer `il` on the normed input
    /// `cur` [n_embd, n_tokens]: stores the ubatch's latent rows in the
    /// cache and attends over it. Returns [n_head * head_v, n_tokens],
    /// before the output projection.
    pub fn mla_attention(&mut self, cur: TensorId, il: usize) -> Result<TensorId> {
        let hp = self.hp;
        let m = hp.mla.ok_or_else(|| {
            LlamaError::Decode("multi-head latent attention without its sizes".into())
        })?;
        if !m.absorbed {
            return Err(LlamaError::NotSupported(format!(
                "layer {il}: the fused '{}' layout of multi-head latent attention \
                 (files with split attn_k_b and attn_v_b are supported)",
                TensorKind::AttnKvB.name(Some(il))
            )));
        }
        let n_tokens = self.n_tokens();
        let n_head = hp.n_head(il);
        let n_rot = hp.n_rot;
        let nope = m.head_k - n_rot;
        let lora = m.kv_lora_rank;
        let f32_size = Type::F32.type_size();

        // Queries [head_k, n_head, n_tokens], split into nope and rope parts.
        let q = if m.q_lora_rank > 0 {
            let q = self.linear(cur, TensorKind::AttnQA, None, il)?;
            let q = self.rms_norm(q, TensorKind::AttnQANorm, il)?;
            self.linear(q, TensorKind::AttnQB, None, il)?
        } else {
            self.linear(cur, TensorKind::AttnQ, None, il)?
        };
        let q = self.g.reshape(q, &[m.head_k, n_head, n_tokens])?;
        let (qnb1, qnb2) = {
            let d = self.g.desc(q);
            (d.nb[1], d.nb[2])
        };
        let q_nope = self.g.view_3d(q, [nope, n_head, n_tokens], qnb1, qnb2, 0)?;
        let q_pe = self
            .g
            .view_3d(q, [n_rot, n_head, n_tokens], qnb1, qnb2, nope * f32_size)?;
        let q_pe = self.rope(q_pe, il)?;

        // The latent [lora, n_tokens] and the shared rotary key [n_rot, 1, n_tokens].
        let kv_cmpr_pe = self.linear(cur, TensorKind::AttnKvAMqa, None, il)?;
        let row = self.g.desc(kv_cmpr_pe).nb[1];
        let kv_cmpr = self.g.view_2d(kv_cmpr_pe, lora, n_tokens, row, 0)?;
        let k_pe = self
            .g
            .view_3d(kv_cmpr_pe, [n_rot, 1, n_tokens], row, row, lora * f32_size)?;
        let k_pe = self.rope(k_pe, il)?;
        let kv_cmpr = self.rms_norm(kv_cmpr, TensorKind::AttnKvANorm, il)?;

        // The non-rotary query in latent space: per head, attn_k_b
        // [nope, lora] times q_nope -> [lora, n_tokens, n_head].
        let q_nope = self.g.permute(q_nope, [0, 2, 1, 3])?;
        let wk_b = self.weight(TensorKind::AttnKB, il)?;
        let q_abs = self.g.mul_mat(wk_b, q_nope)?;
        self.g.set_name(q_abs, format!("q_nope_absorbed-{il}"));
        let q_abs = self.g.permute(q_abs, [0, 2, 1, 3])?; // [lora, n_head, n_tokens]
        let q_cur = self.g.concat(q_abs, q_pe, 0)?; // [lora + n_rot, n_head, n_tokens]
        let kv_cmpr = self.g.reshape(kv_cmpr, &[lora, 1, n_tokens])?;
        let k_cur = self.g.concat(kv_cmpr, k_pe, 0)?; // [lora + n_rot, 1, n_tokens]

        let kv = self
            .mem
            .kv()
            .ok_or_else(|| LlamaError::Decode(format!("no KV cache for layer {il}")))?
            .cache_for(hp, il);
        let n_kv = self.shape.n_kv;
        let width = hp.n_embd_k_gqa(il);
        if width != lora + n_rot {
            return Err(LlamaError::HParams(format!(
                "layer {il}: KV cache rows of {width} values, but the latent and rotary \
                 key take {lora} + {n_rot}"
            )));
        }
        let inp = self
            .inputs
            .kv_for(hp, il)
            .ok_or_else(|| LlamaError::Decode(format!("no KV cache inputs for layer {il}")))?;
        let (mask, k_idxs) = (inp.mask, inp.k_idxs);
        let kvl = kv.layer(il)?;
        let kq_scale = self.mla_kq_scale(&m);
        let flash = !kv.v_trans;
        let type_k = kv.type_k;
        let g = &mut self.g;

        let k_cache = import_cache(g, &kvl.k);
        let k_rows = g.reshape(k_cur, &[width, n_tokens])?;
        g.set_rows(k_cache, k_rows, k_idxs)?;
        let k_row = row_size(type_k, width);
        let kview = g.view_3d(k_cache, [width, n_kv, 1], k_row, k_row * n_kv, 0)?;
        // The values are the latent: the first `lora` elements of each key row.
        let vview = g.view_3d(k_cache, [lora, n_kv, 1], k_row, k_row * n_kv, 0)?;
        let qp = g.permute(q_cur, [0, 2, 1, 3])?; // [width, n_tokens, n_head]
        let wv_b = {
            let w = self.w.layers[il].req(TensorKind::AttnVB)?;
            crate::graph::import(g, w)
        };
        let out = if flash {
            let fa = g.flash_attn_ext(qp, kview, vview, Some(mask), kq_scale, 0.0, 0.0)?;
            g.set_name(fa, format!("fattn-{il}"));
            // [lora, n_head, n_tokens] -> per head through attn_v_b.
            let fa = g.permute(fa, [0, 2, 1, 3])?; // [lora, n_tokens, n_head]
            let o = g.mul_mat(wv_b, fa)?; // [head_v, n_tokens, n_head]
            g.set_name(o, format!("fattn_mla-{il}"));
            let o = g.permute(o, [0, 2, 1, 3])?; // [head_v, n_head, n_tokens]
            g.cont_shape(o, &[m.head_v * n_head, n_tokens])?
        } else {
            let kq = g.mul_mat(kview, qp)?; // [n_kv, n_tokens, n_head]
            g.set_name(kq, format!("kq-{il}"));
            let kq = g.soft_max_ext(kq, Some(mask), kq_scale, 0.0)?;
            let vt = g.transpose(vview)?;
            let vt = g.cont(vt)?; // [n_kv, lora, 1]
            let kqv = g.mul_mat(vt, kq)?; // [lora, n_tokens, n_head]
            let o = g.mul_mat(wv_b, kqv)?; // [head_v, n_tokens, n_head]
            g.set_name(o, format!("kqv_mla-{il}"));
            let o = g.permute(o, [0, 2, 1, 3])?;
            g.cont_shape(o, &[m.head_v * n_head, n_tokens])?
        };
        Ok(out)
    }
}
