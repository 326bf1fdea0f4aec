//! The gated DeltaNet mixer of Qwen3.5's linear-attention layers over the
//! recurrent memory. One projection gives the q, k and v channels, which
//! go through the causal depthwise convolution (its last `d_conv - 1`
//! inputs per channel kept as the conv state, as Mamba's); q and k are
//! L2-normalised per head; the delta rule (GATED_DELTA_NET) runs from each
//! sequence's stored state matrices and stores the final ones; the output
//! is RMS-normed per head, gated by SiLU(z) and projected back.
//!
//! Shapes: `ssm.group_count` Q/K heads and `ssm.time_step_rank` V heads,
//! all `ssm.state_size` wide; V head h reads Q/K head h mod the Q/K heads.

use ggml_core::{TensorId, UnaryOp};

use crate::arch::TensorKind;
use crate::error::Result;
use crate::graph::{import_cache, Builder};

impl Builder<'_> {
    /// L2 norm of each row of `x` as llama.cpp computes it for DeltaNet:
    /// an RMS norm with `eps / n` scaled by `1 / sqrt(n)`, that is
    /// `x / sqrt(sum(x^2) + eps)`.
    fn l2_norm_rows(&mut self, x: TensorId, eps: f32) -> Result<TensorId> {
        let n = self.g.desc(x).ne[0] as f32;
        let y = self.g.rms_norm(x, eps / n)?;
        Ok(self.g.scale(y, 1.0 / n.sqrt())?)
    }

    /// The gated DeltaNet mixer of recurrent layer `il` on its normed input
    /// `cur` [n_embd, n_tokens]. Returns [n_embd, n_tokens].
    pub fn delta_net_mixer(&mut self, cur: TensorId, il: usize) -> Result<TensorId> {
        let hp = self.hp;
        let (n_t, n_s) = self.seq_blocks()?;
        let s = hp.ssm_d_state;
        let (h_k, h_v) = (hp.ssm_n_group, hp.ssm_dt_rank);
        let conv_dim = hp.ssm_conv_dim();
        let f = 4;

        let qkv = self.linear(cur, TensorKind::AttnQkv, None, il)?;
        let qkv = self.g.reshape(qkv, &[conv_dim, n_t, n_s])?;
        let z = self.linear(cur, TensorKind::AttnGate, None, il)?;
        let beta = self.linear(cur, TensorKind::SsmBeta, None, il)?;
        let beta = self.g.reshape(beta, &[1, h_v, n_t, n_s])?;
        let beta = self.g.unary(beta, UnaryOp::Sigmoid)?;
        let alpha = self.linear(cur, TensorKind::SsmAlpha, None, il)?;
        let alpha = self.g.reshape(alpha, &[h_v, n_t, n_s])?;
        let dt_bias = self.weight(TensorKind::SsmDtBias, il)?;
        let alpha = self.g.add_op(alpha, dt_bias)?;
        let alpha = self.g.unary(alpha, UnaryOp::Softplus)?;
        let a = self.weight(TensorKind::SsmANoScan, il)?;
        let gate = self.g.mul(alpha, a)?;
        let gate = self.g.reshape(gate, &[1, h_v, n_t, n_s])?;
        self.g.set_name(gate, format!("gate-{il}"));

        let conv = self.ssm_conv_block(qkv, il)?;
        let nb = self.g.desc(conv).nb;
        let q = self
            .g
            .view_4d(conv, [s, h_k, n_t, n_s], [s * f, nb[1], nb[2]], 0)?;
        let k = self
            .g
            .view_4d(conv, [s, h_k, n_t, n_s], [s * f, nb[1], nb[2]], s * h_k * f)?;
        let v = self.g.view_4d(
            conv,
            [s, h_v, n_t, n_s],
            [s * f, nb[1], nb[2]],
            2 * s * h_k * f,
        )?;
        let eps = hp.f_norm_rms_eps;
        let q = self.l2_norm_rows(q, eps)?;
        let k = self.l2_norm_rows(k, eps)?;

        let (inp, layer) = self.rs_parts(il)?;
        let n_embd_s = hp.n_embd_s();
        let all = import_cache(&mut self.g, &layer.s);
        let state = self.g.get_rows(all, inp.src)?;
        let state = self.g.reshape(state, &[s, s, h_v, n_s])?;
        let r = self.g.gated_delta_net(q, k, v, gate, beta, state)?;
        self.g.set_name(r, format!("gdn-{il}"));
        let n_out = s * h_v * n_t * n_s;
        let new_state = self.g.view_2d(r, n_embd_s, n_s, n_embd_s * f, n_out * f)?;
        self.g.set_rows(all, new_state, inp.dst)?;
        let o = self.g.view_4d(
            r,
            [s, h_v, n_t, n_s],
            [s * f, s * h_v * f, s * h_v * n_t * f],
            0,
        )?;

        let o = self.rms_norm(o, TensorKind::SsmNorm, il)?;
        let z = self.g.reshape(z, &[s, h_v, n_t, n_s])?;
        let z = self.g.unary(z, UnaryOp::Silu)?;
        let y = self.g.mul(o, z)?;
        let y = self.g.reshape(y, &[s * h_v, n_t * n_s])?;
        let out = self.linear(y, TensorKind::SsmOut, None, il)?;
        self.g.set_name(out, format!("linear_attn_out-{il}"));
        Ok(out)
    }
}
