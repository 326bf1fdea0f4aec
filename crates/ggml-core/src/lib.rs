//! ggml-core: tensors, graphs, quant formats, backend interfaces, allocators
//! and the scheduler. The vocabulary mirrors ggml's.

pub mod quants;

pub use gguf::GgmlType as Type;
