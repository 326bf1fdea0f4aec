//! Whether the panel kernels that stream stored panels from memory (token
//! generation: a matrix x vector reads every weight byte once) ask the
//! cache for the bytes ahead of them with software prefetches, by kind of
//! CPU. (The row kernels always ask, for the rows after their tile: there
//! several short rows are read side by side, which no hardware prefetcher
//! follows; without the requests the same Zen 4 read Q8_0, Q4_K and Q6_K
//! rows at 5-10 GB/s instead of 19-23.)
//!
//! The hardware prefetchers of CPUs differ. Measured with
//! `cargo bench -p ggml-cpu --bench matvec` (2048 x 5632 matrices whose
//! copies take turns past the last-level cache, best GB/s of weights):
//! * AMD EPYC with AVX-512 (Zen 4), prefetches 2 to 16 KiB ahead against
//!   none: stored Q4_K panels 27 against 32 on one thread and 32-34
//!   against 50-52 on two, Q8_0 panels 21-24 against 28 and 29-31 against
//!   47; F16 panels alike either way (25-26, 33-47). The AVX2 kernels on
//!   the same CPU (`GGML_CPU_ISA=avx2`), one thread: Q4_K 23-24 against
//!   29, F16 26-28 against 29-31, Q8_0 alike. The requests take load
//!   slots its prefetchers would fill better.
//! * Ice Lake Xeon and AVX2-only EPYC (earlier measurements, in the
//!   comments at each distance): the requests raised the same streams
//!   from 14 to 21-25 GB/s (Q8_0 rows) and 17-21 to 30-31 (F16 panels).
//!
//! So AMD CPUs with AVX-512 stream without them and every other kind with
//! them; `GGML_CPU_PREFETCH=0` or `=1` overrides the choice.

use std::sync::OnceLock;

use crate::features::cpu_kind;

/// True when the panel kernels streaming from memory should ask for the
/// bytes ahead.
#[inline]
pub(crate) fn software_prefetch() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| match std::env::var("GGML_CPU_PREFETCH").as_deref() {
        Ok("0") => false,
        Ok("1") => true,
        _ => by_kind(),
    })
}

/// The choice for this kind of CPU (see the module's notes).
fn by_kind() -> bool {
    let k = cpu_kind();
    !(k.amd && crate::features::cpu_features().avx512)
}
