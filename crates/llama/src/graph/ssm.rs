//! The SSM mixers of Mamba and Mamba-2 layers over the recurrent memory.
//! A ubatch holds `n_seqs` sequence sets of `n_seq_tokens` tokens each,
//! set after set. Each set reads its convolution and SSM states from the
//! cell the memory gave it (input `inp_s_src`) and writes the new ones to
//! its cell (`inp_s_dst`): the last `d_conv - 1` inputs of every channel,
//! and the scan's final state.

use ggml_core::{GluOp, TensorId, UnaryOp};

use crate::arch::TensorKind;
use crate::error::{LlamaError, Result};
use crate::graph::{import_cache, Builder, RsInputs};
use crate::memory::RsLayer;

impl Builder<'_> {
    /// The SSM mixer of recurrent layer `il` on its normed input `cur`
    /// [n_embd, n_tokens]: Mamba-1, or Mamba-2 when the model has
    /// `ssm.group_count`. Returns [n_embd, n_tokens].
    pub fn ssm_mixer(&mut self, cur: TensorId, il: usize) -> Result<TensorId> {
        if self.hp.ssm_n_group == 0 {
            self.mamba1_mixer(cur, il)
        } else {
            self.mamba2_mixer(cur, il)
        }
    }

    pub(super) fn rs_parts(&self, il: usize) -> Result<(RsInputs, RsLayer)> {
        let inp = self.inputs.rs.ok_or_else(|| {
            LlamaError::Decode(format!("no recurrent state inputs for layer {il}"))
        })?;
        let layer = self
            .mem
            .rs()
            .and_then(|rs| rs.layer(il))
            .cloned()
            .ok_or_else(|| LlamaError::Decode(format!("no recurrent states for layer {il}")))?;
        Ok((inp, layer))
    }

    /// (tokens per sequence set, sequence sets) of the ubatch.
    pub(crate) fn seq_blocks(&self) -> Result<(usize, usize)> {
        let (n, s) = (self.shape.n_tokens, self.shape.n_seqs.max(1));
        if n % s != 0 {
            return Err(LlamaError::Decode(format!(
                "a ubatch of {n} tokens does not split into {s} equal sequence blocks"
            )));
        }
        Ok((n / s, s))
    }

    /// The causal depthwise convolution of `xbc` [ch, n_t, n_s] over the
    /// previous `d_conv - 1` inputs of each sequence and its own; stores the
    /// new convolution states; adds the bias and applies SiLU.
    pub(super) fn ssm_conv_block(&mut self, xbc: TensorId, il: usize) -> Result<TensorId> {
        let mut y = self.causal_conv(xbc, TensorKind::SsmConv1d, il)?;
        if let Some(b) = self.weight_opt(TensorKind::SsmConv1dBias, il) {
            y = self.g.add_op(y, b)?;
        }
        Ok(self.g.unary(y, UnaryOp::Silu)?)
    }

    /// The causal depthwise convolution of `x` [ch, n_t, n_s] by the
    /// layer's kernel `kernel` [d_conv, ch] (`ssm.conv_kernel` wide) over
    /// the previous `d_conv - 1` inputs of each sequence, read from its
    /// state cell, and its own; stores the last `d_conv - 1` inputs as the
    /// new state. Returns [ch, n_t, n_s], without bias or activation.
    pub(crate) fn causal_conv(
        &mut self,
        x: TensorId,
        kernel: TensorKind,
        il: usize,
    ) -> Result<TensorId> {
        let hp = self.hp;
        let (n_t, n_s) = self.seq_blocks()?;
        let (inp, layer) = self.rs_parts(il)?;
        let ch = self.g.desc(x).ne[0];
        let d = hp.ssm_d_conv - 1;
        let all = import_cache(&mut self.g, &layer.r);
        let conv = self.g.get_rows(all, inp.src)?;
        let conv = self.g.reshape(conv, &[d, ch, n_s])?;
        let xt = self.g.transpose(x)?;
        let conv_x = self.g.concat(conv, xt, 0)?;
        self.g.set_name(conv_x, format!("conv_x-{il}"));
        let nb = self.g.desc(conv_x).nb;
        let last = self
            .g
            .view_3d(conv_x, [d, ch, n_s], nb[1], nb[2], n_t * nb[0])?;
        let last = self.g.cont(last)?;
        let last = self.g.reshape(last, &[d * ch, n_s])?;
        self.g.set_rows(all, last, inp.dst)?;
        let w = self.weight(kernel, il)?;
        Ok(self.g.ssm_conv(conv_x, w)?)
    }

    /// The selective scan over `x` [head_dim, n_head, n_t, n_s] from each
    /// set's stored state `[d_state, head_dim, n_head]`; stores the final
    /// states and returns y, contiguous, as x's shape.
    #[allow(clippy::too_many_arguments)]
    fn ssm_scan_block(
        &mut self,
        x: TensorId,
        dt: TensorId,
        b: TensorId,
        c: TensorId,
        head_dim: usize,
        n_head: usize,
        il: usize,
    ) -> Result<TensorId> {
        let hp = self.hp;
        let (n_t, n_s) = self.seq_blocks()?;
        let (inp, layer) = self.rs_parts(il)?;
        let size = layer.s.desc.ne[1];
        let all = import_cache(&mut self.g, &layer.s);
        let s4 = self
            .g
            .reshape(all, &[hp.ssm_d_state, head_dim, n_head, size])?;
        let a = self.weight(TensorKind::SsmA, il)?;
        let y_ssm = self.g.ssm_scan(s4, x, dt, a, b, c, inp.src)?;
        self.g.set_name(y_ssm, format!("ssm_scan-{il}"));
        let f = 4; // F32
        let n_x = head_dim * n_head * n_t * n_s;
        let n_embd_s = hp.n_embd_s();
        let states = self
            .g
            .view_2d(y_ssm, n_embd_s, n_s, n_embd_s * f, n_x * f)?;
        self.g.set_rows(all, states, inp.dst)?;
        let row = head_dim * n_head * f;
        let y = self.g.view_4d(
            y_ssm,
            [head_dim, n_head, n_t, n_s],
            [head_dim * f, row, row * n_t],
            0,
        )?;
        Ok(y)
    }

    fn mamba2_mixer(&mut self, cur: TensorId, il: usize) -> Result<TensorId> {
        let hp = self.hp;
        let (n_t, n_s) = self.seq_blocks()?;
        let (d_inner, d_state, n_group) = (hp.ssm_d_inner, hp.ssm_d_state, hp.ssm_n_group);
        let n_head = hp.ssm_dt_rank;
        let head_dim = d_inner / n_head;
        let conv_dim = hp.ssm_conv_dim();
        let f = 4;
        let zx = self.linear(cur, TensorKind::SsmIn, None, il)?;
        let zx = self.g.reshape(zx, &[hp.ssm_d_in_proj(), n_t, n_s])?;
        let nb = self.g.desc(zx).nb;
        let z = self.g.view_4d(
            zx,
            [head_dim, n_head, n_t, n_s],
            [head_dim * f, nb[1], nb[2]],
            0,
        )?;
        let xbc = self
            .g
            .view_3d(zx, [conv_dim, n_t, n_s], nb[1], nb[2], d_inner * f)?;
        let dt = self.g.view_3d(
            zx,
            [n_head, n_t, n_s],
            nb[1],
            nb[2],
            (d_inner + conv_dim) * f,
        )?;
        let xbc = self.ssm_conv_block(xbc, il)?;
        let nb = self.g.desc(xbc).nb;
        let x = self.g.view_4d(
            xbc,
            [head_dim, n_head, n_t, n_s],
            [head_dim * f, nb[1], nb[2]],
            0,
        )?;
        let b = self.g.view_4d(
            xbc,
            [d_state, n_group, n_t, n_s],
            [d_state * f, nb[1], nb[2]],
            d_inner * f,
        )?;
        let c = self.g.view_4d(
            xbc,
            [d_state, n_group, n_t, n_s],
            [d_state * f, nb[1], nb[2]],
            (d_inner + n_group * d_state) * f,
        )?;
        let dt = self.g.cont(dt)?;
        let dt_b = self.weight(TensorKind::SsmDtBias, il)?;
        let dt = self.g.add_op(dt, dt_b)?;
        let y = self.ssm_scan_block(x, dt, b, c, head_dim, n_head, il)?;
        let d = self.weight(TensorKind::SsmD, il)?;
        let xd = self.g.mul(x, d)?;
        let y = self.g.add_op(y, xd)?;
        let z = self.g.cont(z)?;
        let y = self.g.glu_split(z, y, GluOp::Swiglu)?;
        let y = self.g.reshape(y, &[d_inner / n_group, n_group, n_t, n_s])?;
        let y = self.rms_norm(y, TensorKind::SsmNorm, il)?;
        let y = self.g.reshape(y, &[d_inner, n_t * n_s])?;
        let out = self.linear(y, TensorKind::SsmOut, None, il)?;
        self.g.set_name(out, format!("mamba_out-{il}"));
        Ok(out)
    }

    fn mamba1_mixer(&mut self, cur: TensorId, il: usize) -> Result<TensorId> {
        let hp = self.hp;
        let (n_t, n_s) = self.seq_blocks()?;
        let (d_inner, d_state, dt_rank) = (hp.ssm_d_inner, hp.ssm_d_state, hp.ssm_dt_rank);
        let f = 4;
        let xz = self.linear(cur, TensorKind::SsmIn, None, il)?;
        let xz = self.g.reshape(xz, &[2 * d_inner, n_t, n_s])?;
        let nb = self.g.desc(xz).nb;
        let x = self.g.view_3d(xz, [d_inner, n_t, n_s], nb[1], nb[2], 0)?;
        let z = self
            .g
            .view_3d(xz, [d_inner, n_t, n_s], nb[1], nb[2], d_inner * f)?;
        let x = self.ssm_conv_block(x, il)?;
        let x_db = self.linear(x, TensorKind::SsmX, None, il)?;
        let nb = self.g.desc(x_db).nb;
        let dt = self.g.view_3d(x_db, [dt_rank, n_t, n_s], nb[1], nb[2], 0)?;
        let b = self.g.view_4d(
            x_db,
            [d_state, 1, n_t, n_s],
            [d_state * f, nb[1], nb[2]],
            dt_rank * f,
        )?;
        let c = self.g.view_4d(
            x_db,
            [d_state, 1, n_t, n_s],
            [d_state * f, nb[1], nb[2]],
            (dt_rank + d_state) * f,
        )?;
        let dt = self.g.cont(dt)?;
        let dt = self.linear(dt, TensorKind::SsmDt, Some(TensorKind::SsmDtBias), il)?;
        let x4 = self.g.reshape(x, &[1, d_inner, n_t, n_s])?;
        let y = self.ssm_scan_block(x4, dt, b, c, 1, d_inner, il)?;
        let y = self.g.reshape(y, &[d_inner, n_t, n_s])?;
        let d = self.weight(TensorKind::SsmD, il)?;
        let xd = self.g.mul(x, d)?;
        let y = self.g.add_op(y, xd)?;
        let z = self.g.cont(z)?;
        let y = self.g.glu_split(z, y, GluOp::Swiglu)?;
        let y = self.g.reshape(y, &[d_inner, n_t * n_s])?;
        let out = self.linear(y, TensorKind::SsmOut, None, il)?;
        self.g.set_name(out, format!("mamba_out-{il}"));
        Ok(out)
    }
}
