//! Gated full attention (Qwen3.5, Qwen3-Next): the query projection gives,
//! per head, the queries followed by as many gate values; Q and K get
//! per-head RMS norms and rope; the attention output is multiplied by
//! sigmoid(gate) before the output projection.

use ggml_core::{TensorId, UnaryOp};

use crate::arch::TensorKind;
use crate::error::Result;
use crate::graph::{Builder, Qkv};

impl Builder<'_> {
    /// The gated attention block of layer `il` on its normed input `cur`
    /// [n_embd, n_tokens], with scores scaled by `kq_scale`. Returns
    /// [n_embd, n_tokens].
    pub fn gated_attention(&mut self, cur: TensorId, il: usize, kq_scale: f32) -> Result<TensorId> {
        let hp = self.hp;
        let n_tokens = self.n_tokens();
        let hd = hp.n_embd_head_k;
        let (n_head, n_head_kv) = (hp.n_head(il), hp.n_head_kv(il));
        let qg = self.linear(cur, TensorKind::AttnQ, None, il)?;
        let es = self.g.desc(qg).ty.type_size();
        let q = self.g.view_3d(
            qg,
            [hd, n_head, n_tokens],
            2 * hd * es,
            2 * hd * n_head * es,
            0,
        )?;
        let q = self.g.cont(q)?;
        let gate = self.g.view_3d(
            qg,
            [hd, n_head, n_tokens],
            2 * hd * es,
            2 * hd * n_head * es,
            hd * es,
        )?;
        let gate = self.g.cont_shape(gate, &[hd * n_head, n_tokens])?;
        let q = self.rms_norm(q, TensorKind::AttnQNorm, il)?;
        let k = self.linear(cur, TensorKind::AttnK, None, il)?;
        let k = self.g.reshape(k, &[hd, n_head_kv, n_tokens])?;
        let k = self.rms_norm(k, TensorKind::AttnKNorm, il)?;
        let v = self.linear(cur, TensorKind::AttnV, None, il)?;
        let q = self.rope(q, il)?;
        let k = self.rope(k, il)?;
        let a = self.attention(Qkv { q, k, v }, il, kq_scale, 0.0)?;
        let gate = self.g.unary(gate, UnaryOp::Sigmoid)?;
        let a = self.g.mul(a, gate)?;
        self.g.set_name(a, format!("attn_gated-{il}"));
        self.attn_out(a, il)
    }
}
