//! Panel matrix x matrix kernels ([`super::Gemm`]) for K-quant weights.

use super::Kernels;

/// Installs the K-quant panel kernels (the caller checked AVX-512).
pub(super) fn install(k: &mut Kernels) {
    let _ = k;
}
