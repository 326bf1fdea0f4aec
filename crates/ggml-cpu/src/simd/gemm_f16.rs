//! Panel matrix x matrix kernels ([`super::Gemm`]) for float weights.

use super::Kernels;

/// Installs the float panel kernels (the caller checked AVX-512).
pub(super) fn install(k: &mut Kernels) {
    let _ = k;
}
