//! Importance matrices as llama.cpp's llama-imatrix computes them: a
//! model runs over a text while an eval observer ([`SharedCollector`])
//! sums the squared activations that enter each weight's matrix products
//! ([`collector`]); the chunking and the perplexity printed on the way are
//! in [`run`]; the GGUF and `.dat` files in [`file`]; `--show-statistics`
//! in [`statistics`]. [`crate::quantize::Imatrix`] reads the same files
//! for quantizing.

pub mod collector;
pub mod file;
pub mod run;
pub mod statistics;

pub use collector::{weight_name, Collector, CollectorParams, SharedCollector};
pub use file::{Entry, ImatrixFile, OutputFormat};
pub use run::{run_chunks, RunLog, RunParams, RunResult};
pub use statistics::statistics_table;
