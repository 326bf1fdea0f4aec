//! GGUF: the model file format of ggml and llama.cpp.
//!
//! This crate stands alone: it reads and writes GGUF files and knows the ggml
//! type table, and depends on nothing else of the workspace.

pub mod types;

pub use types::{GgmlType, TypeTraits, GGML_TYPE_COUNT, QK_K};
