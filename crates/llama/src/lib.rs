//! llama: model loading and placement, vocabularies, KV cache, graph builders,
//! context, sampling and the command-line tools.

pub mod vocab;
