//! The sizes of RWKV-6 and RWKV-7 models: head size, token shifts, the
//! widths of their low-rank projections, read and checked once.

use super::{checked_dim, HParams, MetaView};
use crate::error::{LlamaError, Result};

/// RWKV's hyperparameters (zero for other architectures).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RwkvHParams {
    /// Width of a WKV head (`wkv.head_size`; 0: not RWKV).
    pub head_size: usize,
    /// Token shifts kept per sequence and layer (`token_shift_count`,
    /// default 2: one before the time mix, one before the channel mix).
    pub token_shift_count: usize,
    /// RWKV-6: width of each of the five data-dependent lerps
    /// (`time_mix_extra_dim`).
    pub time_mix_extra_dim: usize,
    /// RWKV-6: width of the decay projection (`time_decay_extra_dim`).
    pub time_decay_extra_dim: usize,
    /// RWKV-6: the residual stream is halved after every this many layers
    /// (`rescale_every_n_layers`, 0: never).
    pub rescale_every_n_layers: usize,
    /// RWKV-7: rank of the decay projection (`attention.decay_lora_rank`).
    pub n_lora_decay: usize,
    /// RWKV-7: rank of the in-context learning rate projection
    /// (`attention.iclr_lora_rank`).
    pub n_lora_iclr: usize,
    /// RWKV-7: rank of the value residual mix
    /// (`attention.value_residual_mix_lora_rank`).
    pub n_lora_value_res_mix: usize,
    /// RWKV-7: rank of the output gate (`attention.gate_lora_rank`).
    pub n_lora_gate: usize,
}

impl RwkvHParams {
    /// WKV heads of a model `n_embd` wide.
    pub fn n_head(&self, n_embd: usize) -> usize {
        n_embd / self.head_size.max(1)
    }

    /// Floats of one sequence's token shifts in a layer.
    pub fn n_embd_r(&self, n_embd: usize) -> usize {
        self.token_shift_count * n_embd
    }

    /// Floats of one sequence's WKV state in a layer: a head_size x
    /// head_size matrix per head.
    pub fn n_embd_s(&self, n_embd: usize) -> usize {
        n_embd * self.head_size
    }

    /// Rank of layer `il`'s value residual mix: layer 0 has none of its
    /// own (its projections, unused, are of the iclr rank, as llama.cpp
    /// loads them).
    pub fn value_res_rank(&self, il: usize) -> usize {
        if il == 0 {
            self.n_lora_iclr
        } else {
            self.n_lora_value_res_mix
        }
    }
}

impl HParams {
    /// Reads the keys every RWKV model has: the LayerNorm epsilon,
    /// `wkv.head_size` (positive, dividing the embedding width) and
    /// `token_shift_count` (2, the only count the graphs take).
    fn load_rwkv_common(&mut self, meta: &MetaView<'_>) -> Result<()> {
        let key = |s: &str| self.arch.key(s);
        let eps_key = key("attention.layer_norm_epsilon");
        self.f_norm_eps = meta
            .get_f32_opt(&eps_key)?
            .ok_or_else(|| LlamaError::Metadata(format!("key '{eps_key}' not found")))?;
        if !(self.f_norm_eps > 0.0 && self.f_norm_eps.is_finite()) {
            return Err(LlamaError::HParams(format!(
                "{eps_key} = {} must be a positive number",
                self.f_norm_eps
            )));
        }
        let hs_key = key("wkv.head_size");
        let hs = meta.get_usize(&hs_key)?;
        if hs == 0 || self.n_embd % hs != 0 {
            return Err(LlamaError::HParams(format!(
                "{hs_key} = {hs} must be positive and divide {} = {}",
                key("embedding_length"),
                self.n_embd
            )));
        }
        checked_dim("RWKV state (n_embd * wkv.head_size)", &[self.n_embd, hs])?;
        self.rwkv.head_size = hs;
        let ts_key = key("token_shift_count");
        let ts = meta.get_usize_opt(&ts_key)?.unwrap_or(2);
        if ts != 2 {
            return Err(LlamaError::NotSupported(format!(
                "{ts_key} = {ts}: only 2 token shifts (time mix and channel mix) are supported"
            )));
        }
        self.rwkv.token_shift_count = ts;
        for il in 0..self.n_layer {
            if self.n_ff(il) == 0 {
                return Err(LlamaError::HParams(format!(
                    "{} of layer {il} is 0",
                    key("feed_forward_length")
                )));
            }
        }
        Ok(())
    }

    /// A positive size under `key`.
    fn rwkv_size(&self, meta: &MetaView<'_>, suffix: &str) -> Result<usize> {
        let k = self.arch.key(suffix);
        let v = meta.get_usize(&k)?;
        if v == 0 {
            return Err(LlamaError::HParams(format!("{k} = 0 must be positive")));
        }
        checked_dim(&k, &[v, 6])?;
        Ok(v)
    }

    /// Reads and checks RWKV-6's keys.
    pub fn load_rwkv6(&mut self, meta: &MetaView<'_>) -> Result<()> {
        self.load_rwkv_common(meta)?;
        self.rwkv.time_mix_extra_dim = self.rwkv_size(meta, "time_mix_extra_dim")?;
        self.rwkv.time_decay_extra_dim = self.rwkv_size(meta, "time_decay_extra_dim")?;
        self.rwkv.rescale_every_n_layers = meta
            .get_usize_opt(&self.arch.key("rescale_every_n_layers"))?
            .unwrap_or(0);
        Ok(())
    }

    /// Reads and checks RWKV-7's keys (`attention.gate_lora_rank` may be
    /// absent only in a file without the gate's tensors, which loading
    /// then refuses by name).
    pub fn load_rwkv7(&mut self, meta: &MetaView<'_>) -> Result<()> {
        self.load_rwkv_common(meta)?;
        self.rwkv.n_lora_decay = self.rwkv_size(meta, "attention.decay_lora_rank")?;
        self.rwkv.n_lora_iclr = self.rwkv_size(meta, "attention.iclr_lora_rank")?;
        self.rwkv.n_lora_value_res_mix =
            self.rwkv_size(meta, "attention.value_residual_mix_lora_rank")?;
        self.rwkv.n_lora_gate = meta
            .get_usize_opt(&self.arch.key("attention.gate_lora_rank"))?
            .unwrap_or(0);
        checked_dim("attention.gate_lora_rank", &[self.rwkv.n_lora_gate, 2])?;
        Ok(())
    }
}
