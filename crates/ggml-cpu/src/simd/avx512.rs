//! AVX-512 kernels.

use super::Kernels;

/// Installs the AVX-512 kernels (the caller checked the CPU has them).
pub(super) fn install(_k: &mut Kernels) {}
