//! The CPU backend: one device ("CPU") whose buffers are plain host memory
//! (or a file mapping, used in place), and kernels for every op of
//! [`ggml_core::Op`], computed by a team of spinning worker threads (`pool.rs`) with SIMD kernels chosen at
//! run time (AVX-512, AVX2, NEON, or portable scalar code).
//!
//! ```no_run
//! ggml_cpu::register();
//! let dev = ggml_core::registry::device_by_name("CPU").unwrap();
//! let mut backend = dev.init_backend().unwrap();
//! backend.set_n_threads(4);
//! ```
//!
//! How a node is computed (`compute.rs`): its memory and its sources' are
//! resolved to host pointers and checked against their buffers; shapes and
//! types are checked as the kernels rely on them (a bad graph is an error
//! naming the node, never a panic); a source that shares memory with the
//! result is either an in-place update of the same layout (its rows are
//! copied before being overwritten) or copied aside first. Kernels work on
//! f32 rows: rows of other types are converted on the way in and out, as
//! ggml computes them.
//!
//! MUL_MAT (`matmul.rs`) converts the activations to the weight type's
//! partner (Q8_0 / Q8_1 / Q8_K, F16, BF16) and runs integer block dot
//! products in register tiles of 4 weight rows x up to 4 columns
//! (`simd/`); every vector path is tested against the scalar one, which
//! agrees bit for bit with ggml-core's reference `vec_dot`. With 16
//! columns or more (prompt processing), the types that have a panel kernel
//! (`simd::Gemm`; with AVX2: F32, F16, Q4_0, Q5_0, Q8_0, Q4_K and Q6_K;
//! with AVX-512 VNNI also BF16, Q5_K and Q3_K) have their weight rows packed, 16 at a time, into panels with one
//! row per vector lane, each activation value broadcast to all lanes; a
//! lane sums its (row, column) pair in a fixed order, so results do not
//! depend on the tiling either, and agree with the row kernels within f32
//! rounding.
//!
//! Weights can also be stored already packed (`repack.rs`, the
//! `CPU_REPACK` buffer type that the CPU device offers as an extra type,
//! as ggml's CPU backend does): MUL_MAT and MUL_MAT_ID then run the panel
//! kernels for every batch size, token generation included, without
//! packing anything.

#![warn(missing_docs)]

#[doc(hidden)]
pub mod bench_support;
mod compute;
mod convert;
mod device;
pub mod features;
mod fuse;
mod matmul;
mod ops;
mod pool;
mod profile;
mod repack;
mod simd;
mod tensor;

use std::sync::Arc;

pub use device::{
    cpu_buffer_type, cpu_device, default_n_threads, CpuBackend, CpuDevice, CpuReg, CPU_NAME,
};
pub use repack::{repack_buffer_type, RepackBuffer, RepackBufferType, REPACK_NAME};

/// Registers the CPU backend in ggml-core's registry (idempotent).
pub fn register() {
    ggml_core::registry::register(Arc::new(CpuReg));
}

/// The CPU registration.
pub fn cpu_reg() -> Arc<dyn ggml_core::BackendReg> {
    Arc::new(CpuReg)
}
