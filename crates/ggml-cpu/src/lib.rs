//! ggml-cpu
