//! The parameters of a context (llama_context_params with llama.cpp's
//! defaults) and its timings.

use std::sync::Arc;
use std::time::Duration;

use ggml_core::Type;

use crate::error::{LlamaError, Result};

/// How token embeddings are pooled when embeddings are requested.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum PoolingType {
    /// One embedding per token.
    #[default]
    None,
    /// Mean over the sequence's tokens.
    Mean,
    /// The first token's.
    Cls,
    /// The last token's.
    Last,
}

/// Whether attention runs as one fused FLASH_ATTN_EXT op (llama.cpp's
/// `-fa on|off|auto`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FlashAttnType {
    /// On when every backend of the context supports it for the model's
    /// head shapes and the KV cache types.
    #[default]
    Auto,
    /// Always on.
    Enabled,
    /// Always off.
    Disabled,
}

impl std::str::FromStr for FlashAttnType {
    type Err = LlamaError;
    fn from_str(s: &str) -> Result<FlashAttnType> {
        match s {
            "auto" => Ok(FlashAttnType::Auto),
            "on" | "1" | "enabled" => Ok(FlashAttnType::Enabled),
            "off" | "0" | "disabled" => Ok(FlashAttnType::Disabled),
            other => Err(LlamaError::InvalidParam(format!(
                "flash attention '{other}': expected on, off or auto"
            ))),
        }
    }
}

/// Called between graph computations; returning true aborts the decode.
pub type AbortCallback = Arc<dyn Fn() -> bool + Send + Sync>;

/// Parameters of [`Context::new`] (llama_context_params), llama.cpp's defaults.
#[derive(Clone)]
pub struct ContextParams {
    /// Context size in tokens; 0 = the model's trained context.
    pub n_ctx: usize,
    /// Most tokens per decode call.
    pub n_batch: usize,
    /// Most tokens per graph computation.
    pub n_ubatch: usize,
    /// Most distinct sequences.
    pub n_seq_max: usize,
    /// Threads for single-token decoding.
    pub n_threads: usize,
    /// Threads for batches.
    pub n_threads_batch: usize,
    /// Keep each layer's KV cache on its device.
    pub offload_kqv: bool,
    /// Let a GPU run large-batch ops on weights stored on the CPU.
    pub op_offload: bool,
    /// K cache type.
    pub type_k: Type,
    /// V cache type.
    pub type_v: Type,
    /// Rope base frequency; 0 = the model's.
    pub rope_freq_base: f32,
    /// Rope position scale; 0 = the model's.
    pub rope_freq_scale: f32,
    /// YaRN extrapolation mix; negative = from the model.
    pub yarn_ext_factor: f32,
    /// YaRN magnitude scale.
    pub yarn_attn_factor: f32,
    /// YaRN low correction dim.
    pub yarn_beta_fast: f32,
    /// YaRN high correction dim.
    pub yarn_beta_slow: f32,
    /// YaRN original context; 0 = the model's.
    pub yarn_orig_ctx: usize,
    /// Fused attention: on, off, or on where every backend supports it.
    pub flash_attn_type: FlashAttnType,
    /// Give sliding-window layers a full-size KV cache (llama.cpp's
    /// `--swa-full`), instead of one that holds only their windows.
    pub swa_full: bool,
    /// Extract embeddings instead of (besides) logits.
    pub embeddings: bool,
    /// Pooling of embeddings.
    pub pooling: PoolingType,
    /// Abort callback.
    pub abort_callback: Option<AbortCallback>,
    /// Run the previous ubatch's graph again when the next ubatch has the
    /// same shape, instead of building, splitting and allocating a new one
    /// (only the inputs are written). `LLAMA_GRAPH_REUSE_DISABLE=1` in the
    /// environment turns it off whatever this says.
    pub graph_reuse: bool,
}

/// Default number of threads: the available cores (at most 4, as llama.cpp's default).
pub fn default_n_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(4)
        .min(4)
}

impl Default for ContextParams {
    fn default() -> ContextParams {
        ContextParams {
            n_ctx: 512,
            n_batch: 2048,
            n_ubatch: 512,
            n_seq_max: 1,
            n_threads: default_n_threads(),
            n_threads_batch: default_n_threads(),
            offload_kqv: true,
            op_offload: true,
            type_k: Type::F16,
            type_v: Type::F16,
            rope_freq_base: 0.0,
            rope_freq_scale: 0.0,
            yarn_ext_factor: -1.0,
            yarn_attn_factor: 1.0,
            yarn_beta_fast: 32.0,
            yarn_beta_slow: 1.0,
            yarn_orig_ctx: 0,
            flash_attn_type: FlashAttnType::Auto,
            swa_full: false,
            embeddings: false,
            pooling: PoolingType::None,
            abort_callback: None,
            graph_reuse: true,
        }
    }
}

/// Timings of a context (llama_perf_context).
#[derive(Clone, Copy, Debug, Default)]
pub struct Perf {
    /// Time in prompt (multi-token) decodes.
    pub t_prompt: Duration,
    /// Tokens in prompt decodes.
    pub n_prompt: usize,
    /// Time in single-token decodes.
    pub t_eval: Duration,
    /// Single-token decodes.
    pub n_eval: usize,
    /// Ubatch graphs built, split and allocated.
    pub n_graph_builds: usize,
    /// Ubatches that ran the previous graph again (llama.cpp's "graphs
    /// reused").
    pub n_graph_reuses: usize,
    /// Time spent getting ubatch graphs ready: building, splitting and
    /// allocating them, or checking that the previous one can run again.
    pub t_graph: Duration,
    /// Time spent computing ubatch graphs (the kernels, copies between
    /// devices and the final synchronization).
    pub t_compute: Duration,
}
