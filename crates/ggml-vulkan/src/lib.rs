//! ggml-vulkan
