//! AVX2 + FMA + F16C kernels.

use super::Kernels;

/// Installs the AVX2 kernels (the caller checked the CPU has AVX2, FMA, F16C).
pub(super) fn install(_k: &mut Kernels) {}
