//! Panel matrix x matrix kernels ([`super::Gemm`]) for legacy quant weights (Q4_0, Q8_0).

use super::Kernels;

/// Installs the legacy-quant panel kernels (the caller checked AVX-512).
pub(super) fn install(k: &mut Kernels) {
    let _ = k;
}
