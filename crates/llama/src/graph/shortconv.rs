//! LFM2's short gated convolution over the recurrent memory: one input
//! projection to B, C and x, the causal depthwise convolution (`l_cache`
//! taps, the last `l_cache - 1` inputs of each sequence kept as its
//! state) of B * x, gated by C, then the output projection. No bias and
//! no activation.

use ggml_core::TensorId;

use crate::arch::TensorKind;
use crate::error::Result;
use crate::graph::Builder;

impl Builder<'_> {
    /// The short-convolution block of layer `il` on its normed input `cur`
    /// [n_embd, n_tokens]. Returns [n_embd, n_tokens].
    pub fn shortconv(&mut self, cur: TensorId, il: usize) -> Result<TensorId> {
        let n_embd = self.hp.n_embd;
        let (n_t, n_s) = self.seq_blocks()?;
        let bcx = self.linear(cur, TensorKind::ShortconvInProj, None, il)?;
        let bcx = self.g.reshape(bcx, &[3 * n_embd, n_t, n_s])?;
        let nb = self.g.desc(bcx).nb;
        let es = self.g.desc(bcx).ty.type_size();
        let mut part = |i: usize| {
            self.g
                .view_3d(bcx, [n_embd, n_t, n_s], nb[1], nb[2], i * n_embd * es)
        };
        let (b, c, x) = (part(0)?, part(1)?, part(2)?);
        let bx = self.g.mul(b, x)?;
        let conv = self.causal_conv(bx, TensorKind::ShortconvConv, il)?;
        self.g.set_name(conv, format!("shortconv-{il}"));
        let y = self.g.mul(c, conv)?;
        let y = self.g.reshape(y, &[n_embd, n_t * n_s])?;
        let out = self.linear(y, TensorKind::ShortconvOutProj, None, il)?;
        self.g.set_name(out, format!("shortconv_out-{il}"));
        Ok(out)
    }
}
