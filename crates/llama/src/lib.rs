//! llama: model loading and placement, vocabularies, KV cache, graph builders,
//! context, sampling and the command-line tools.

pub mod arch;
pub mod error;
pub mod hparams;
pub mod models;
pub mod params;
pub mod vocab;

pub use arch::{Arch, TensorKind};
pub use error::{LlamaError, Result};
pub use hparams::HParams;
pub use params::{
    KvOverride, KvOverrideValue, LoadMode, ModelParams, SplitMode, TensorBuftOverride,
};
pub mod devices;
pub mod loader;
pub mod log;
pub mod model;
pub mod placement;
pub mod progress;

pub use devices::backend_init;
pub use model::{Model, Weight, Weights};
pub mod adapter;
pub mod batch;
pub mod context;
pub mod fit;
pub mod grammar;
pub mod graph;
pub mod kv_cache;
pub mod kv_cells;
pub mod kv_memory;
pub mod memory;
pub mod memory_plan;

pub use batch::{Batch, Token};
pub use context::{Context, ContextParams, Perf, PoolingType};
pub use memory_plan::{MemoryPlan, PlanBytes};
pub mod chat;
pub mod cli;
pub mod imatrix;
pub mod json_schema;
pub mod perplexity;
pub mod quantize;
pub mod sampling;
pub mod speculative;
pub mod stats;
