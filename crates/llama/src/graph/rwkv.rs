//! The blocks RWKV-6 and RWKV-7 share: LayerNorms with bias, the token
//! shift (each sequence's last normed input of the previous ubatch, kept
//! in the recurrent memory's `r` states, two per layer: one before the
//! time mix, one before the channel mix), the WKV state load and store
//! (the `s` states), the per-head GroupNorm of the WKV output, the
//! channel mixes and the LayerNorm output head.
//!
//! A ubatch holds `n_seqs` sequence sets of `n_seq_tokens` tokens each,
//! set after set; the residual stream is [n_embd, n_tokens].

use ggml_core::{TensorId, UnaryOp};

use crate::arch::TensorKind;
use crate::error::Result;
use crate::graph::{import, import_cache, Builder};

/// ggml's GroupNorm epsilon of the WKV output (fixed in llama.cpp).
const WKV_GROUP_NORM_EPS: f32 = 64e-5;

/// F32 bytes.
const F: usize = 4;

/// One layer's token shifts: what the time mix and the channel mix see as
/// their previous token at the start of each sequence set.
pub struct TokenShift {
    /// [n_embd, 1, n_s] (a view of the loaded states).
    pub att: TensorId,
    /// [n_embd, 1, n_s].
    pub ffn: TensorId,
}

impl Builder<'_> {
    /// `norm(x) * w + b`, pinned to layer `il`'s device.
    pub fn layer_norm(
        &mut self,
        x: TensorId,
        w: TensorKind,
        b: TensorKind,
        il: usize,
    ) -> Result<TensorId> {
        let n = self.g.norm(x, self.hp.f_norm_eps)?;
        self.pins.push((n, il));
        let wt = self.weight(w, il)?;
        let bt = self.weight(b, il)?;
        let y = self.g.mul(n, wt)?;
        let y = self.g.add_op(y, bt)?;
        self.g.set_name(y, format!("{}-{il}", w.info().name));
        Ok(y)
    }

    /// The input embeddings through the embeddings' LayerNorm.
    pub fn rwkv_inp(&mut self) -> Result<TensorId> {
        let (x, _) = self.inp_embd()?;
        let Some((w, b)) = self.w.tok_norm.as_ref() else {
            return Ok(x);
        };
        let (w, b) = (import(&mut self.g, w), import(&mut self.g, b));
        let n = self.g.norm(x, self.hp.f_norm_eps)?;
        self.pins.push((n, 0));
        let y = self.g.mul(n, w)?;
        let y = self.g.add_op(y, b)?;
        self.g.set_name(y, "inp_norm");
        Ok(y)
    }

    /// `a - b` (ggml_sub) as `a + (-b)`, which rounds the same.
    pub fn sub(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        let nb = self.g.unary(b, UnaryOp::Neg)?;
        Ok(self.g.add_op(a, nb)?)
    }

    /// `x + (prev - x) * mu`: the lerp of a token shift.
    pub fn lerp(&mut self, x: TensorId, sx: TensorId, mu: TensorId) -> Result<TensorId> {
        let m = self.g.mul(sx, mu)?;
        Ok(self.g.add_op(m, x)?)
    }

    /// Loads layer `il`'s token shifts of the ubatch's sequence sets.
    pub fn token_shift_load(&mut self, il: usize) -> Result<TokenShift> {
        let (_, n_s) = self.seq_blocks()?;
        let (inp, layer) = self.rs_parts(il)?;
        let n_embd = self.hp.n_embd;
        let all = import_cache(&mut self.g, &layer.r);
        let ts = self.g.get_rows(all, inp.src)?;
        self.g.set_name(ts, format!("token_shift-{il}"));
        let nb1 = self.hp.n_embd_r() * F;
        let att = self.g.view_3d(ts, [n_embd, 1, n_s], nb1, nb1, 0)?;
        let ffn = self.g.view_3d(ts, [n_embd, 1, n_s], nb1, nb1, n_embd * F)?;
        Ok(TokenShift { att, ffn })
    }

    /// Each token's previous one, [n_embd, n_tokens]: the shift state for
    /// the first token of a set, the set's own `x` [n_embd, n_tokens] for
    /// the others.
    pub fn token_prev(&mut self, shift: TensorId, x: TensorId) -> Result<TensorId> {
        let (n_t, n_s) = self.seq_blocks()?;
        let n_embd = self.hp.n_embd;
        let prev = if n_t == 1 {
            self.g.cont(shift)?
        } else {
            let row = n_embd * F;
            let head = self
                .g
                .view_3d(x, [n_embd, n_t - 1, n_s], row, row * n_t, 0)?;
            self.g.concat(shift, head, 1)?
        };
        Ok(self.g.reshape(prev, &[n_embd, n_t * n_s])?)
    }

    /// Stores the last token of each set of `att` and `ffn` (both
    /// [n_embd, n_tokens]) as layer `il`'s token shifts.
    pub fn token_shift_store(&mut self, att: TensorId, ffn: TensorId, il: usize) -> Result<()> {
        let (n_t, n_s) = self.seq_blocks()?;
        let (inp, layer) = self.rs_parts(il)?;
        let n_embd = self.hp.n_embd;
        let row = n_embd * F;
        let last = (n_t - 1) * row;
        let a = self
            .g
            .view_3d(att, [n_embd, 1, n_s], row, row * n_t, last)?;
        let f = self
            .g
            .view_3d(ffn, [n_embd, 1, n_s], row, row * n_t, last)?;
        let both = self.g.concat(a, f, 1)?;
        let both = self.g.reshape(both, &[2 * n_embd, n_s])?;
        let all = import_cache(&mut self.g, &layer.r);
        self.g.set_rows(all, both, inp.dst)?;
        Ok(())
    }

    /// Layer `il`'s WKV states of the ubatch's sets, [n_embd_s, n_s].
    pub fn wkv_state_load(&mut self, il: usize) -> Result<TensorId> {
        let (inp, layer) = self.rs_parts(il)?;
        let all = import_cache(&mut self.g, &layer.s);
        let s = self.g.get_rows(all, inp.src)?;
        self.g.set_name(s, format!("wkv_state-{il}"));
        Ok(s)
    }

    /// Stores the final states of a WKV result [n_embd, n_tokens + ..] as
    /// layer `il`'s and returns its outputs as [head_size, n_head,
    /// n_tokens].
    pub fn wkv_finish(&mut self, out: TensorId, il: usize) -> Result<TensorId> {
        let (_, n_s) = self.seq_blocks()?;
        let (inp, layer) = self.rs_parts(il)?;
        let (n_embd, n_tokens) = (self.hp.n_embd, self.n_tokens());
        let n_embd_s = self.hp.n_embd_s();
        let states = self
            .g
            .view_2d(out, n_embd_s, n_s, n_embd_s * F, n_embd * n_tokens * F)?;
        let all = import_cache(&mut self.g, &layer.s);
        self.g.set_rows(all, states, inp.dst)?;
        let hs = self.hp.rwkv.head_size;
        let nh = self.hp.rwkv.n_head(n_embd);
        Ok(self
            .g
            .view_3d(out, [hs, nh, n_tokens], hs * F, n_embd * F, 0)?)
    }

    /// The per-head GroupNorm of the WKV outputs `y` [head_size, n_head,
    /// n_tokens] with `time_mix_ln`; returns [n_embd, n_tokens].
    pub fn wkv_group_norm(&mut self, y: TensorId, il: usize) -> Result<TensorId> {
        let n = self.g.norm(y, WKV_GROUP_NORM_EPS)?;
        let n = self.g.reshape(n, &[self.hp.n_embd, self.n_tokens()])?;
        let w = self.weight(TensorKind::TimeMixLn, il)?;
        let b = self.weight(TensorKind::TimeMixLnBias, il)?;
        let n = self.g.mul(n, w)?;
        Ok(self.g.add_op(n, b)?)
    }

    /// `relu(key x)^2` through `value`: the squared-ReLU FFN of both
    /// channel mixes, on the lerp `xk`.
    fn channel_mix_kv(&mut self, xk: TensorId, il: usize) -> Result<TensorId> {
        let k = self.linear(xk, TensorKind::ChannelMixKey, None, il)?;
        let k = self.g.unary(k, UnaryOp::Relu)?;
        let k = self.g.mul(k, k)?;
        self.linear(k, TensorKind::ChannelMixValue, None, il)
    }

    /// RWKV-6's channel mix of `x` [n_embd, n] with its previous tokens
    /// `prev`: `sigmoid(receptance xr) * value(relu(key xk)^2)`.
    pub fn channel_mix6(&mut self, x: TensorId, prev: TensorId, il: usize) -> Result<TensorId> {
        let sx = self.sub(prev, x)?;
        let mk = self.weight(TensorKind::ChannelMixLerpK, il)?;
        let mr = self.weight(TensorKind::ChannelMixLerpR, il)?;
        let xk = self.lerp(x, sx, mk)?;
        let xr = self.lerp(x, sx, mr)?;
        let r = self.linear(xr, TensorKind::ChannelMixReceptance, None, il)?;
        let r = self.g.unary(r, UnaryOp::Sigmoid)?;
        let kv = self.channel_mix_kv(xk, il)?;
        Ok(self.g.mul(r, kv)?)
    }

    /// RWKV-7's channel mix: `value(relu(key xk)^2)`.
    pub fn channel_mix7(&mut self, x: TensorId, prev: TensorId, il: usize) -> Result<TensorId> {
        let sx = self.sub(prev, x)?;
        let mk = self.weight(TensorKind::ChannelMixLerpK, il)?;
        let xk = self.lerp(x, sx, mk)?;
        self.channel_mix_kv(xk, il)
    }

    /// The layers of an RWKV model around its time mix `time_mix(b, x,
    /// prev, il)` and channel mix, then the LayerNorm output head.
    /// `rescale` halves the residual stream after every that many layers
    /// (0: never). Returns (logits, normed hidden state).
    pub fn rwkv_decoder(
        &mut self,
        rescale: usize,
        mut time_mix: impl FnMut(&mut Self, TensorId, TensorId, usize) -> Result<TensorId>,
        channel_mix: fn(&mut Self, TensorId, TensorId, usize) -> Result<TensorId>,
    ) -> Result<(TensorId, TensorId)> {
        let mut inp_l = self.rwkv_inp()?;
        for il in 0..self.hp.n_layer {
            let shift = self.token_shift_load(il)?;
            let att_norm =
                self.layer_norm(inp_l, TensorKind::AttnNorm, TensorKind::AttnNormBias, il)?;
            let prev = self.token_prev(shift.att, att_norm)?;
            let cur = time_mix(self, att_norm, prev, il)?;
            let ffn_inp = self.g.add_op(cur, inp_l)?;
            self.g.set_name(ffn_inp, format!("ffn_inp-{il}"));
            let ffn_norm = self.layer_norm(
                ffn_inp,
                TensorKind::AttnNorm2,
                TensorKind::AttnNorm2Bias,
                il,
            )?;
            let prev = self.token_prev(shift.ffn, ffn_norm)?;
            self.token_shift_store(att_norm, ffn_norm, il)?;
            let (ffn_inp, ffn_norm, prev) = if il + 1 == self.hp.n_layer {
                (
                    self.out_rows(ffn_inp)?,
                    self.out_rows(ffn_norm)?,
                    self.out_rows(prev)?,
                )
            } else {
                (ffn_inp, ffn_norm, prev)
            };
            let cur = channel_mix(self, ffn_norm, prev, il)?;
            let mut cur = self.g.add_op(cur, ffn_inp)?;
            if rescale != 0 && (il + 1) % rescale == 0 {
                cur = self.g.scale(cur, 0.5)?;
            }
            cur = self.layer_out(cur, il)?;
            inp_l = cur;
        }
        self.rwkv_output_head(inp_l)
    }

    /// LayerNorm with bias, then the output projection.
    fn rwkv_output_head(&mut self, x: TensorId) -> Result<(TensorId, TensorId)> {
        let n = self.g.norm(x, self.hp.f_norm_eps)?;
        let w = import(&mut self.g, &self.w.output_norm);
        let mut embd = self.g.mul(n, w)?;
        if let Some(b) = self.w.output_norm_b.as_ref() {
            let b = import(&mut self.g, b);
            embd = self.g.add_op(embd, b)?;
        }
        self.g.set_name(embd, "result_norm");
        let logits = self.output_proj(embd)?;
        self.g.set_name(logits, "result_output");
        Ok((logits, embd))
    }
}
