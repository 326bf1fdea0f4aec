//! Hyperparameters read from GGUF metadata (with overrides) and checked for
//! consistency before any tensor is touched.

use gguf::{Metadata, Value};

use crate::arch::Arch;
use crate::error::{LlamaError, Result};
use crate::params::{KvOverride, KvOverrideValue};

mod rwkv;

pub use rwkv::RwkvHParams;

/// Largest layer count accepted (llama.cpp's LLAMA_MAX_LAYERS).
pub const MAX_LAYERS: usize = 512;

/// Largest expert count accepted (llama.cpp's LLAMA_MAX_EXPERTS).
pub const MAX_EXPERTS: usize = 1024;

/// How rope positions are scaled beyond the trained context.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeScaling {
    /// No scaling.
    None,
    /// Positions divided by the factor.
    Linear,
    /// YaRN.
    Yarn,
}

/// How a mixture-of-experts router turns its logits into expert scores.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpertGating {
    /// Softmax over all experts (`expert_gating_func` 1, the default).
    Softmax,
    /// Sigmoid of each logit (`expert_gating_func` 2, DeepSeek V3).
    Sigmoid,
}

/// Multi-head latent attention sizes (DeepSeek V2/V3): queries from an
/// optional low-rank projection, keys and values from one compressed
/// latent per token plus a shared rotary part.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Mla {
    /// Rank of the query projection (`attention.q_lora_rank`; 0: a plain
    /// `attn_q`).
    pub q_lora_rank: usize,
    /// Width of the compressed latent (`attention.kv_lora_rank`).
    pub kv_lora_rank: usize,
    /// Width of a query/key head, rotary part included
    /// (`attention.key_length_mla`).
    pub head_k: usize,
    /// Width of a value head (`attention.value_length_mla`).
    pub head_v: usize,
    /// True when the file has the absorbed layout (`attn_k_b` and
    /// `attn_v_b`, the cache holds the latent), false for one fused
    /// `attn_kv_b` (the cache holds decompressed keys and values).
    pub absorbed: bool,
}

/// The model's hyperparameters.
#[derive(Clone, Debug, PartialEq)]
pub struct HParams {
    /// Architecture.
    pub arch: Arch,
    /// Context the model was trained with.
    pub n_ctx_train: usize,
    /// Embedding width.
    pub n_embd: usize,
    /// Number of layers.
    pub n_layer: usize,
    /// Vocabulary size (rows of the token embeddings).
    pub n_vocab: usize,
    /// Query heads per layer.
    pub n_head_arr: Vec<usize>,
    /// Key/value heads per layer.
    pub n_head_kv_arr: Vec<usize>,
    /// FFN width per layer.
    pub n_ff_arr: Vec<usize>,
    /// Width of a key head.
    pub n_embd_head_k: usize,
    /// Width of a value head.
    pub n_embd_head_v: usize,
    /// Rotated dims per head.
    pub n_rot: usize,
    /// RMS norm epsilon.
    pub f_norm_rms_eps: f32,
    /// LayerNorm epsilon (`attention.layer_norm_epsilon`; 0 when absent).
    pub f_norm_eps: f32,
    /// RWKV's sizes (all zero for other architectures).
    pub rwkv: RwkvHParams,
    /// Trained rope base frequency.
    pub rope_freq_base_train: f32,
    /// Trained rope frequency scale (1 / scaling factor).
    pub rope_freq_scale_train: f32,
    /// Rope scaling type.
    pub rope_scaling: RopeScaling,
    /// Original context of YaRN scaling.
    pub n_ctx_orig_yarn: usize,
    /// Sliding window in positions (0: no sliding-window layers).
    pub n_swa: usize,
    /// Per layer: true when the layer attends only the last `n_swa` positions.
    pub swa_layers: Vec<bool>,
    /// Rope base frequency of sliding-window layers.
    pub rope_freq_base_train_swa: f32,
    /// Rope frequency scale of sliding-window layers.
    pub rope_freq_scale_train_swa: f32,
    /// Soft-capping of attention logits (0: off).
    pub f_attn_logit_softcapping: f32,
    /// Soft-capping of the output logits (0: off).
    pub f_final_logit_softcapping: f32,
    /// Scale of the attention scores; 0 = 1/sqrt(n_embd_head_k).
    pub f_attention_scale: f32,
    /// Experts per mixture-of-experts layer (0: dense FFN).
    pub n_expert: usize,
    /// Experts each token uses, per layer (0 without experts).
    pub n_expert_used_arr: Vec<usize>,
    /// Width of one expert's FFN, per layer (0 without experts).
    pub n_ff_exp_arr: Vec<usize>,
    /// Whether the selected experts' weights are divided by their sum.
    pub expert_weights_norm: bool,
    /// Width of the shared expert's FFN (0: none).
    pub n_ff_shexp: usize,
    /// How the router scores experts.
    pub expert_gating: ExpertGating,
    /// Factor of the selected experts' weights (0 or 1: none).
    pub expert_weights_scale: f32,
    /// Groups the experts are split into for routing (0 or 1: no groups).
    pub n_expert_groups: usize,
    /// Groups a token's experts are chosen from (the best by the sum of
    /// their two best scores).
    pub n_group_used: usize,
    /// Leading layers with a dense FFN in a mixture-of-experts model.
    pub n_layer_dense_lead: usize,
    /// Multi-head latent attention sizes (None: ordinary attention).
    pub mla: Option<Mla>,
    /// YaRN's `mscale_all_dim` (`rope.scaling.yarn_log_multiplier`, 0:
    /// none): with it the YaRN magnitude correction of rope is cancelled
    /// and the attention scale carries it.
    pub rope_yarn_log_mul: f32,
    /// YaRN's `mscale` (1 unless the architecture says otherwise).
    pub rope_yarn_mscale: f32,
    /// Per layer: true when the layer is recurrent (keeps a fixed-size
    /// state per sequence instead of K and V per token).
    pub recurrent_layers: Vec<bool>,
    /// SSM convolution width (`ssm.conv_kernel`; 0 without SSM layers).
    pub ssm_d_conv: usize,
    /// SSM inner width (`ssm.inner_size`).
    pub ssm_d_inner: usize,
    /// SSM state size per channel (`ssm.state_size`).
    pub ssm_d_state: usize,
    /// Mamba: rank of dt; Mamba-2: number of SSM heads
    /// (`ssm.time_step_rank`).
    pub ssm_dt_rank: usize,
    /// Mamba-2 groups of B and C (`ssm.group_count`; 0 for Mamba).
    pub ssm_n_group: usize,
    /// Whether attention layers rotate Q and K (false: no rope at all).
    pub use_rope: bool,
    /// Scale of the token embeddings (0: none).
    pub f_embedding_scale: f32,
    /// Scale of every block's output before its residual add (0: none).
    pub f_residual_scale: f32,
    /// Divisor of the logits (0: none).
    pub f_logit_scale: f32,
}

/// Largest width of any one tensor dim the hyperparameters may imply; a
/// hostile file cannot make the products below overflow.
pub const MAX_DIM: usize = 1 << 31;

pub(crate) fn checked_dim(what: &str, parts: &[usize]) -> Result<usize> {
    let mut acc = 1usize;
    for &p in parts {
        acc = acc
            .checked_mul(p)
            .filter(|&x| x <= MAX_DIM)
            .ok_or_else(|| {
                LlamaError::HParams(format!("{what} = {parts:?} multiplied is too large"))
            })?;
    }
    Ok(acc)
}

impl HParams {
    /// Query heads of layer `il`.
    pub fn n_head(&self, il: usize) -> usize {
        self.n_head_arr[il]
    }
    /// Key/value heads of layer `il`.
    pub fn n_head_kv(&self, il: usize) -> usize {
        self.n_head_kv_arr[il]
    }
    /// FFN width of layer `il`.
    pub fn n_ff(&self, il: usize) -> usize {
        self.n_ff_arr[il]
    }
    /// Key width of all KV heads of layer `il`.
    pub fn n_embd_k_gqa(&self, il: usize) -> usize {
        self.n_embd_head_k * self.n_head_kv(il)
    }
    /// Value width of all KV heads of layer `il`.
    pub fn n_embd_v_gqa(&self, il: usize) -> usize {
        self.n_embd_head_v * self.n_head_kv(il)
    }
    /// True when layer `il` uses the sliding window.
    pub fn is_swa(&self, il: usize) -> bool {
        self.n_swa > 0 && self.swa_layers.get(il).copied().unwrap_or(false)
    }
    /// True when some layer uses the sliding window.
    pub fn has_swa(&self) -> bool {
        (0..self.n_layer).any(|il| self.is_swa(il))
    }
    /// True when layer `il` of a mixture-of-experts model has a dense FFN
    /// (one of the leading dense layers), or the model has no experts.
    pub fn is_dense_ffn(&self, il: usize) -> bool {
        self.n_expert == 0 || il < self.n_layer_dense_lead
    }
    /// Experts each token uses in layer `il`.
    pub fn n_expert_used(&self, il: usize) -> usize {
        self.n_expert_used_arr[il]
    }
    /// Width of one expert's FFN in layer `il`.
    pub fn n_ff_exp(&self, il: usize) -> usize {
        self.n_ff_exp_arr[il]
    }
    /// True when layer `il` is recurrent.
    pub fn is_recurrent(&self, il: usize) -> bool {
        self.recurrent_layers.get(il).copied().unwrap_or(false)
    }
    /// True when some layer is recurrent.
    pub fn has_recurrent(&self) -> bool {
        self.recurrent_layers.iter().any(|&r| r)
    }
    /// True when some layer attends over a KV cache.
    pub fn has_attention(&self) -> bool {
        (0..self.n_layer).any(|il| !self.is_recurrent(il))
    }
    /// Channels of the SSM convolution: x, then B and C of every group
    /// (Mamba-2).
    pub fn ssm_conv_dim(&self) -> usize {
        self.ssm_d_inner + 2 * self.ssm_n_group * self.ssm_d_state
    }
    /// Rows of the SSM input projection: Mamba's x and z; Mamba-2's z, the
    /// convolution channels and one dt per head.
    pub fn ssm_d_in_proj(&self) -> usize {
        if self.ssm_n_group == 0 {
            2 * self.ssm_d_inner
        } else {
            self.ssm_d_inner + self.ssm_conv_dim() + self.ssm_dt_rank
        }
    }
    /// Values of dt per token: one per channel (Mamba) or per head (Mamba-2).
    pub fn ssm_n_dt(&self) -> usize {
        if self.ssm_n_group == 0 {
            self.ssm_d_inner
        } else {
            self.ssm_dt_rank
        }
    }
    /// Floats of one sequence's convolution state in a recurrent layer: the
    /// last `d_conv - 1` inputs of every channel (RWKV: its token shifts).
    pub fn n_embd_r(&self) -> usize {
        if self.rwkv.head_size > 0 {
            return self.rwkv.n_embd_r(self.n_embd);
        }
        self.ssm_d_conv.saturating_sub(1) * self.ssm_conv_dim()
    }
    /// Floats of one sequence's SSM state in a recurrent layer (RWKV: its
    /// WKV state).
    pub fn n_embd_s(&self) -> usize {
        if self.rwkv.head_size > 0 {
            return self.rwkv.n_embd_s(self.n_embd);
        }
        self.ssm_d_state * self.ssm_d_inner
    }

    /// Reads the SSM keys (`ssm.conv_kernel`, `ssm.inner_size`,
    /// `ssm.state_size`, `ssm.time_step_rank` and, with `groups`, Mamba-2's
    /// `ssm.group_count`) and checks them: all positive, the inner width a
    /// multiple of the groups and of the heads, every product in range.
    pub fn load_ssm(&mut self, meta: &MetaView<'_>, groups: bool) -> Result<()> {
        let key = |s: &str| self.arch.key(s);
        let positive = |k: String| -> Result<usize> {
            let v = meta.get_usize(&k)?;
            if v == 0 {
                return Err(LlamaError::HParams(format!("{k} = 0 must be positive")));
            }
            Ok(v)
        };
        self.ssm_d_conv = positive(key("ssm.conv_kernel"))?;
        self.ssm_d_inner = positive(key("ssm.inner_size"))?;
        self.ssm_d_state = positive(key("ssm.state_size"))?;
        self.ssm_dt_rank = positive(key("ssm.time_step_rank"))?;
        for (k, v) in [
            ("ssm.conv_kernel", self.ssm_d_conv),
            ("ssm.inner_size", self.ssm_d_inner),
            ("ssm.state_size", self.ssm_d_state),
            ("ssm.time_step_rank", self.ssm_dt_rank),
        ] {
            checked_dim(&key(k), &[v])?;
        }
        if groups {
            self.ssm_n_group = positive(key("ssm.group_count"))?;
            checked_dim(&key("ssm.group_count"), &[self.ssm_n_group])?;
            if self.ssm_d_inner % self.ssm_n_group != 0 {
                return Err(LlamaError::HParams(format!(
                    "{} = {} is not divisible by {} = {}",
                    key("ssm.inner_size"),
                    self.ssm_d_inner,
                    key("ssm.group_count"),
                    self.ssm_n_group
                )));
            }
            if self.ssm_d_inner % self.ssm_dt_rank != 0 {
                return Err(LlamaError::HParams(format!(
                    "{} = {} is not divisible by the number of SSM heads {} = {}",
                    key("ssm.inner_size"),
                    self.ssm_d_inner,
                    key("ssm.time_step_rank"),
                    self.ssm_dt_rank
                )));
            }
            if self.ssm_dt_rank % self.ssm_n_group != 0 {
                return Err(LlamaError::HParams(format!(
                    "{} = {} SSM heads are not divisible by {} = {}",
                    key("ssm.time_step_rank"),
                    self.ssm_dt_rank,
                    key("ssm.group_count"),
                    self.ssm_n_group
                )));
            }
        }
        checked_dim(
            "ssm d_state * n_group",
            &[self.ssm_d_state, self.ssm_n_group.max(1), 2],
        )?;
        checked_dim("ssm input projection", &[self.ssm_d_in_proj()])?;
        checked_dim("ssm conv state", &[self.ssm_d_conv, self.ssm_conv_dim()])?;
        checked_dim("ssm state", &[self.ssm_d_state, self.ssm_d_inner])?;
        checked_dim(
            "ssm x projection",
            &[self.ssm_dt_rank + 2 * self.ssm_d_state, 2],
        )?;
        Ok(())
    }

    /// Requires an SSM inner width of twice the embedding width (the only
    /// expansion factor llama.cpp runs).
    pub fn require_ssm_expand_2(&self) -> Result<()> {
        if self.ssm_d_inner != 2 * self.n_embd {
            return Err(LlamaError::NotSupported(format!(
                "{} = {} with {} = {}: only an SSM expansion factor of 2 is supported",
                self.arch.key("ssm.inner_size"),
                self.ssm_d_inner,
                self.arch.key("embedding_length"),
                self.n_embd
            )));
        }
        Ok(())
    }

    /// Query heads per KV head (GQA ratio) of layer `il`.
    pub fn n_gqa(&self, il: usize) -> usize {
        self.n_head(il) / self.n_head_kv(il).max(1)
    }

    /// Reads and checks the hyperparameters of `arch` from `meta`.
    pub fn load(arch: Arch, meta: &MetaView<'_>) -> Result<HParams> {
        let k = |s: &str| arch.key(s);
        let n_ctx_train = meta.get_usize(&k("context_length"))?;
        let n_embd = meta.get_usize(&k("embedding_length"))?;
        let n_layer = meta.get_usize(&k("block_count"))?;
        if n_layer == 0 || n_layer > MAX_LAYERS {
            return Err(LlamaError::HParams(format!(
                "{} = {n_layer} is outside 1..={MAX_LAYERS}",
                k("block_count")
            )));
        }
        let (n_expert, n_expert_used_arr) = load_experts(arch, meta, n_layer)?;
        let n_ff_arr = meta.get_per_layer(&k("feed_forward_length"), n_layer)?;
        let n_head_arr = meta.get_per_layer(&k("attention.head_count"), n_layer)?;
        let n_head_kv_arr = match meta.get_per_layer_opt(&k("attention.head_count_kv"), n_layer)? {
            Some(v) => v,
            None => n_head_arr.clone(),
        };
        let recurrent_layers = recurrent_rule(arch, &n_head_kv_arr);
        let attn_layers: Vec<usize> = (0..n_layer).filter(|&il| !recurrent_layers[il]).collect();
        let key_len = meta.get_usize_opt(&k("attention.key_length"))?;
        let val_len = meta.get_usize_opt(&k("attention.value_length"))?;
        let (mut n_embd_head_k, mut n_embd_head_v, mut n_rot) = (0, 0, 0);
        if let Some(&il0) = attn_layers.first() {
            if attn_layers.iter().any(|&il| n_head_arr[il] == 0) {
                return Err(LlamaError::HParams(format!(
                    "{} has a zero entry",
                    k("attention.head_count")
                )));
            }
            let n_head0 = n_head_arr[il0];
            if (key_len.is_none() || val_len.is_none()) && n_embd % n_head0 != 0 {
                return Err(LlamaError::HParams(format!(
                    "n_embd = {n_embd} is not divisible by n_head = {n_head0}"
                )));
            }
            n_embd_head_k = key_len.unwrap_or(n_embd / n_head0);
            n_embd_head_v = val_len.unwrap_or(n_embd / n_head0);
            for &il in &attn_layers {
                let (h, hkv) = (n_head_arr[il], n_head_kv_arr[il]);
                if hkv == 0 || h % hkv != 0 {
                    return Err(LlamaError::HParams(format!(
                        "layer {il}: n_head_kv = {hkv} does not divide n_head = {h}"
                    )));
                }
                if n_ff_arr[il] == 0 && n_expert == 0 {
                    return Err(LlamaError::HParams(format!("layer {il}: n_ff = 0")));
                }
            }
            n_rot = meta
                .get_usize_opt(&k("rope.dimension_count"))?
                .unwrap_or(n_embd_head_k);
            if n_rot > n_embd_head_k || n_rot % 2 != 0 || n_rot == 0 {
                return Err(LlamaError::HParams(format!(
                    "rope dimension count {n_rot} must be even, non-zero and at most the head width {n_embd_head_k}"
                )));
            }
            if n_embd_head_k == 0 || n_embd_head_v == 0 {
                return Err(LlamaError::HParams("zero embedding or head width".into()));
            }
        }
        if n_embd == 0 {
            return Err(LlamaError::HParams("zero embedding or head width".into()));
        }
        // Required unless the architecture normalizes with LayerNorm only
        // (its hook then sets `f_norm_eps`); checked after the hook.
        let rms_eps = meta.get_f32_opt(&k("attention.layer_norm_rms_epsilon"))?;
        let f_norm_rms_eps = rms_eps.unwrap_or(0.0);
        let rope_freq_base_train = meta.get_f32_opt(&k("rope.freq_base"))?.unwrap_or(10000.0);
        let scaling_type = meta.get_str_opt(&k("rope.scaling.type"))?;
        let rope_scaling = match scaling_type.as_deref() {
            None | Some("none") => RopeScaling::None,
            Some("linear") => RopeScaling::Linear,
            Some("yarn") => RopeScaling::Yarn,
            Some(other) => {
                return Err(LlamaError::NotSupported(format!(
                    "rope scaling type '{other}'"
                )));
            }
        };
        // llama.cpp reads rope.scaling.factor, then the older rope.scale_linear.
        let factor = match meta.get_f32_opt(&k("rope.scaling.factor"))? {
            Some(f) => Some(f),
            None => meta.get_f32_opt(&k("rope.scale_linear"))?,
        };
        let rope_freq_scale_train = match factor {
            Some(f) if f != 0.0 => 1.0 / f,
            _ => 1.0,
        };
        let n_ctx_orig_yarn = meta
            .get_usize_opt(&k("rope.scaling.original_context_length"))?
            .unwrap_or(n_ctx_train);
        // Every product the shapes use, checked once so later arithmetic
        // cannot overflow.
        checked_dim("n_embd", &[n_embd])?;
        for il in 0..n_layer {
            checked_dim("n_ff", &[n_ff_arr[il], 2])?;
        }
        for &il in &attn_layers {
            checked_dim("n_embd_head_k * n_head", &[n_embd_head_k, n_head_arr[il]])?;
            checked_dim("n_embd_head_v * n_head", &[n_embd_head_v, n_head_arr[il]])?;
            let q = n_embd_head_k * n_head_arr[il];
            let kv = n_embd_head_k.max(n_embd_head_v) * n_head_kv_arr[il];
            checked_dim("fused qkv width", &[q + 2 * kv])?;
        }
        let n_vocab = match meta.get_usize_opt(&k("vocab_size"))? {
            Some(v) => v,
            None => meta.array_len_opt("tokenizer.ggml.tokens").unwrap_or(0),
        };
        checked_dim("n_embd * n_vocab", &[n_embd, n_vocab.max(1)])
            .or_else(|_| checked_dim("n_vocab", &[n_vocab]))?;
        let mut hp = HParams {
            arch,
            n_ctx_train,
            n_embd,
            n_layer,
            n_vocab,
            n_head_arr,
            n_head_kv_arr,
            n_ff_arr,
            n_embd_head_k,
            n_embd_head_v,
            n_rot,
            f_norm_rms_eps,
            f_norm_eps: 0.0,
            rwkv: RwkvHParams::default(),
            rope_freq_base_train,
            rope_freq_scale_train,
            rope_scaling,
            n_ctx_orig_yarn,
            n_swa: 0,
            swa_layers: vec![false; n_layer],
            rope_freq_base_train_swa: 10000.0,
            rope_freq_scale_train_swa: 1.0,
            f_attn_logit_softcapping: 0.0,
            f_final_logit_softcapping: 0.0,
            f_attention_scale: 0.0,
            n_expert,
            n_expert_used_arr,
            n_ff_exp_arr: vec![0; n_layer],
            expert_weights_norm: false,
            n_ff_shexp: 0,
            expert_gating: ExpertGating::Softmax,
            expert_weights_scale: 0.0,
            n_expert_groups: 0,
            n_group_used: 0,
            n_layer_dense_lead: 0,
            mla: None,
            rope_yarn_log_mul: 0.0,
            rope_yarn_mscale: 1.0,
            recurrent_layers,
            ssm_d_conv: 0,
            ssm_d_inner: 0,
            ssm_d_state: 0,
            ssm_dt_rank: 0,
            ssm_n_group: 0,
            use_rope: true,
            f_embedding_scale: 0.0,
            f_residual_scale: 0.0,
            f_logit_scale: 0.0,
        };
        if n_expert > 0 {
            if let Some(v) = meta.get_per_layer_opt(&k("expert_feed_forward_length"), n_layer)? {
                hp.n_ff_exp_arr = v;
            }
        }
        (arch.def().load_hparams)(&mut hp, meta)?;
        if rms_eps.is_none() && hp.f_norm_eps == 0.0 {
            return Err(LlamaError::Metadata(format!(
                "key '{}' not found",
                k("attention.layer_norm_rms_epsilon")
            )));
        }
        hp.check_experts()?;
        Ok(hp)
    }

    /// Checks the expert widths an architecture hook settled on.
    fn check_experts(&self) -> Result<()> {
        if self.n_expert == 0 {
            return Ok(());
        }
        let key = self.arch.key("expert_feed_forward_length");
        for il in 0..self.n_layer {
            let n_ff_exp = self.n_ff_exp(il);
            if n_ff_exp == 0 {
                return Err(LlamaError::HParams(format!(
                    "layer {il}: expert width 0 ({key}, or the architecture's default)"
                )));
            }
            checked_dim("n_ff_exp * n_embd", &[n_ff_exp, self.n_embd])?;
        }
        Ok(())
    }

    /// Reads the sliding window (`attention.sliding_window`, which must be
    /// positive) and which layers use it: `attention.sliding_window_pattern`
    /// as one integer (layer il is local iff il % n < n - 1; 0 = every layer)
    /// or as one bool per layer; `default_pattern` when absent. Without the
    /// window key the model has no sliding window unless `default_window`.
    pub fn load_swa(
        &mut self,
        meta: &MetaView<'_>,
        default_pattern: usize,
        default_window: Option<usize>,
    ) -> Result<()> {
        let key = self.arch.key("attention.sliding_window");
        let Some(n_swa) = meta.get_usize_opt(&key)?.or(default_window) else {
            return Ok(());
        };
        if n_swa == 0 {
            return Err(LlamaError::HParams(format!(
                "{key} = 0: a sliding window must hold at least one position"
            )));
        }
        self.n_swa = n_swa;
        let pkey = self.arch.key("attention.sliding_window_pattern");
        if let Some(arr) = meta.metadata().get(&pkey).and_then(|v| v.as_array()) {
            if arr.len() != self.n_layer {
                return Err(LlamaError::HParams(format!(
                    "{pkey} has {} entries, expected one per layer ({})",
                    arr.len(),
                    self.n_layer
                )));
            }
            let vals = meta
                .metadata()
                .get_array::<bool>(&pkey)
                .map_err(|e| LlamaError::Metadata(format!("key '{pkey}': {e}")))?;
            self.swa_layers = vals;
            return Ok(());
        }
        let n = meta.get_usize_opt(&pkey)?.unwrap_or(default_pattern);
        self.swa_layers = (0..self.n_layer)
            .map(|il| n == 0 || il % n < n - 1)
            .collect();
        Ok(())
    }
}

/// Which layers of `arch` are recurrent, by its tensor table: none without
/// rows for recurrent layers; all when it has no rows for attention layers
/// (Mamba); otherwise the layers whose `attention.head_count_kv` is 0
/// (Granite 4's hybrid).
fn recurrent_rule(arch: Arch, n_head_kv: &[usize]) -> Vec<bool> {
    use crate::arch::Need;
    let has = |n: Need| arch.tensors().any(|s| s.need == n);
    if !has(Need::Recurrent) {
        vec![false; n_head_kv.len()]
    } else if !has(Need::Attention) {
        vec![true; n_head_kv.len()]
    } else {
        n_head_kv.iter().map(|&h| h == 0).collect()
    }
}

/// Reads `expert_count` and `expert_used_count` (one value or one per
/// layer) and checks them against each other and against the
/// architecture's tensor table (an architecture without a router tensor
/// has no expert layout).
fn load_experts(arch: Arch, meta: &MetaView<'_>, n_layer: usize) -> Result<(usize, Vec<usize>)> {
    let count_key = arch.key("expert_count");
    let used_key = arch.key("expert_used_count");
    let n_expert = meta.get_usize_opt(&count_key)?.unwrap_or(0);
    let used = meta
        .get_per_layer_opt(&used_key, n_layer)?
        .unwrap_or_else(|| vec![0; n_layer]);
    if n_expert == 0 {
        if let Some(u) = used.iter().find(|&&u| u != 0) {
            return Err(LlamaError::HParams(format!(
                "{used_key} = {u} but the model has no experts ({count_key} absent or 0)"
            )));
        }
        return Ok((0, used));
    }
    let has_router = arch
        .tensors()
        .any(|s| s.kind == crate::arch::TensorKind::FfnGateInp);
    if !has_router {
        return Err(LlamaError::NotSupported(format!(
            "mixture-of-experts models of architecture '{}' ({count_key} = {n_expert})",
            arch.name()
        )));
    }
    if n_expert > MAX_EXPERTS {
        return Err(LlamaError::HParams(format!(
            "{count_key} = {n_expert} is above the limit of {MAX_EXPERTS}"
        )));
    }
    for (il, &u) in used.iter().enumerate() {
        if u == 0 || u > n_expert {
            return Err(LlamaError::HParams(format!(
                "{used_key} = {u} (layer {il}) must be between 1 and {count_key} = {n_expert}"
            )));
        }
    }
    Ok((n_expert, used))
}

/// Metadata seen through the user's overrides, with the typed getters the
/// architecture code needs. Errors name the key.
pub struct MetaView<'a> {
    meta: &'a Metadata,
    overrides: &'a [KvOverride],
}

fn type_err(key: &str, want: &str, found: &str) -> LlamaError {
    LlamaError::Metadata(format!("key '{key}' has type {found}, expected {want}"))
}

impl<'a> MetaView<'a> {
    /// A view of `meta` with `overrides` applied.
    pub fn new(meta: &'a Metadata, overrides: &'a [KvOverride]) -> MetaView<'a> {
        MetaView { meta, overrides }
    }

    /// The underlying metadata.
    pub fn metadata(&self) -> &'a Metadata {
        self.meta
    }

    fn over(&self, key: &str) -> Option<&'a KvOverrideValue> {
        self.overrides
            .iter()
            .rev()
            .find(|o| o.key == key)
            .map(|o| &o.value)
    }

    /// An integer that must be present.
    pub fn get_usize(&self, key: &str) -> Result<usize> {
        self.get_usize_opt(key)?
            .ok_or_else(|| LlamaError::Metadata(format!("key '{key}' not found")))
    }

    /// An optional non-negative integer (any integer type in the file).
    pub fn get_usize_opt(&self, key: &str) -> Result<Option<usize>> {
        if let Some(o) = self.over(key) {
            return match o {
                KvOverrideValue::Int(v) if *v >= 0 => Ok(Some(*v as usize)),
                KvOverrideValue::Int(v) => Err(LlamaError::Metadata(format!(
                    "override of '{key}' is negative: {v}"
                ))),
                other => Err(type_err(key, "int override", &format!("{other:?}"))),
            };
        }
        match self.meta.get(key) {
            None => Ok(None),
            Some(v) => match v.as_integer() {
                Some(i) if i >= 0 && i <= usize::MAX as i128 => Ok(Some(i as usize)),
                Some(i) => Err(LlamaError::Metadata(format!(
                    "key '{key}' has out-of-range value {i}"
                ))),
                None => Err(type_err(key, "an integer", &v.type_description())),
            },
        }
    }

    /// A float that must be present.
    pub fn get_f32(&self, key: &str) -> Result<f32> {
        self.get_f32_opt(key)?
            .ok_or_else(|| LlamaError::Metadata(format!("key '{key}' not found")))
    }

    /// An optional float (F32 or F64 in the file).
    pub fn get_f32_opt(&self, key: &str) -> Result<Option<f32>> {
        if let Some(o) = self.over(key) {
            return match o {
                KvOverrideValue::Float(v) => Ok(Some(*v as f32)),
                other => Err(type_err(key, "float override", &format!("{other:?}"))),
            };
        }
        match self.meta.get(key) {
            None => Ok(None),
            Some(Value::F32(v)) => Ok(Some(*v)),
            Some(Value::F64(v)) => Ok(Some(*v as f32)),
            Some(v) => Err(type_err(key, "f32", &v.type_description())),
        }
    }

    /// An optional bool.
    pub fn get_bool_opt(&self, key: &str) -> Result<Option<bool>> {
        if let Some(o) = self.over(key) {
            return match o {
                KvOverrideValue::Bool(v) => Ok(Some(*v)),
                other => Err(type_err(key, "bool override", &format!("{other:?}"))),
            };
        }
        match self.meta.get(key) {
            None => Ok(None),
            Some(Value::Bool(v)) => Ok(Some(*v)),
            Some(v) => Err(type_err(key, "bool", &v.type_description())),
        }
    }

    /// An optional string.
    pub fn get_str_opt(&self, key: &str) -> Result<Option<String>> {
        if let Some(o) = self.over(key) {
            return match o {
                KvOverrideValue::Str(v) => Ok(Some(v.clone())),
                other => Err(type_err(key, "str override", &format!("{other:?}"))),
            };
        }
        match self.meta.get(key) {
            None => Ok(None),
            Some(v) => match v.as_str() {
                Some(s) => Ok(Some(s.to_string())),
                None => Err(type_err(key, "string", &v.type_description())),
            },
        }
    }

    /// Length of an array key, if present.
    pub fn array_len_opt(&self, key: &str) -> Option<usize> {
        self.meta
            .get(key)
            .and_then(|v| v.as_array())
            .map(|a| a.len())
    }

    /// A value that is either one integer for all layers or an array with
    /// one integer per layer.
    pub fn get_per_layer(&self, key: &str, n_layer: usize) -> Result<Vec<usize>> {
        self.get_per_layer_opt(key, n_layer)?
            .ok_or_else(|| LlamaError::Metadata(format!("key '{key}' not found")))
    }

    /// Like [`MetaView::get_per_layer`], `None` when absent.
    pub fn get_per_layer_opt(&self, key: &str, n_layer: usize) -> Result<Option<Vec<usize>>> {
        if self.over(key).is_none() {
            if let Some(arr) = self.meta.get(key).and_then(|v| v.as_array()) {
                if arr.len() != n_layer {
                    return Err(LlamaError::Metadata(format!(
                        "key '{key}' has {} entries, expected one per layer ({n_layer})",
                        arr.len()
                    )));
                }
                let vals: Vec<i64> = self
                    .meta
                    .get_array::<i32>(key)
                    .map(|v| v.into_iter().map(i64::from).collect())
                    .or_else(|_| {
                        self.meta
                            .get_array::<u32>(key)
                            .map(|v| v.into_iter().map(i64::from).collect())
                    })
                    .map_err(|e| LlamaError::Metadata(format!("key '{key}': {e}")))?;
                return vals
                    .into_iter()
                    .map(|v| {
                        usize::try_from(v).map_err(|_| {
                            LlamaError::Metadata(format!("key '{key}' has negative entry {v}"))
                        })
                    })
                    .collect::<Result<Vec<_>>>()
                    .map(Some);
            }
        }
        Ok(self.get_usize_opt(key)?.map(|v| vec![v; n_layer]))
    }
}
