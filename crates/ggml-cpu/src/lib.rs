//! The CPU backend: one device ("CPU") whose buffers are plain host memory
//! (or a file mapping, used in place), and kernels for every op of
//! [`ggml_core::Op`], computed on a rayon pool with SIMD kernels chosen at
//! run time (AVX-512, AVX2, NEON, or portable scalar code).
//!
//! ```no_run
//! ggml_cpu::register();
//! let dev = ggml_core::registry::device_by_name("CPU").unwrap();
//! let mut backend = dev.init_backend().unwrap();
//! backend.set_n_threads(4);
//! ```

#![warn(missing_docs)]

mod compute;
mod convert;
mod device;
pub mod features;
mod matmul;
mod ops;
mod simd;
mod tensor;

use std::sync::Arc;

pub use device::{
    cpu_buffer_type, cpu_device, default_n_threads, CpuBackend, CpuDevice, CpuReg, CPU_NAME,
};

/// Registers the CPU backend in ggml-core's registry (idempotent).
pub fn register() {
    ggml_core::registry::register(Arc::new(CpuReg));
}

/// The CPU registration.
pub fn cpu_reg() -> Arc<dyn ggml_core::BackendReg> {
    Arc::new(CpuReg)
}
