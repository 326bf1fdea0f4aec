//! NEON kernels (aarch64).

use super::Kernels;

/// Installs the NEON kernels (the caller checked the CPU has NEON).
pub(super) fn install(_k: &mut Kernels) {}
