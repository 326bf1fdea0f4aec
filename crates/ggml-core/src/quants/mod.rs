//! Block layouts of the quantized types and their scalar reference kernels.
