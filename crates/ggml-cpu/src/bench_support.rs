//! The panel matrix x matrix kernels by name, for the crate's benches
//! (`benches/gemm.rs`), which time them without the backend around them.
//! Hidden from the documentation: not a stable interface.

use ggml_core::Type;

/// Weight rows of one panel.
pub const PANEL_ROWS: usize = crate::simd::PANEL_ROWS;
/// Most activation columns one [`PanelKernel::run`] call takes.
pub const GEMM_COLS: usize = crate::simd::GEMM_COLS;
/// Most activation columns one [`PanelKernel::run_pair`] call takes.
pub const PAIR_COLS: usize = crate::simd::PAIR_COLS;

/// One panel kernel: weight rows packed [`PANEL_ROWS`] at a time into a
/// panel, activation rows (in the weight type's partner type) prepared, then
/// up to [`GEMM_COLS`] prepared columns against one panel per call.
#[derive(Clone, Copy)]
pub struct PanelKernel {
    g: &'static crate::simd::Gemm,
}

/// Every panel kernel of the instruction-set level in use (none below
/// AVX-512), named by its weight type, with the variants kept only for
/// comparison (named with what they do differently).
pub fn panel_kernels() -> Vec<(String, Type, PanelKernel)> {
    crate::simd::panel_kernels()
        .into_iter()
        .map(|(name, ty, g)| (name, ty, PanelKernel { g }))
        .collect()
}

/// The partner type that activation rows take before [`PanelKernel::prep`].
pub fn vec_dot_type(ty: Type) -> Option<Type> {
    crate::simd::vec_dot_type(ty)
}

impl PanelKernel {
    /// Bytes of one panel of `n`-element rows.
    pub fn panel_bytes(&self, n: usize) -> usize {
        (self.g.panel_bytes)(n)
    }

    /// Packs 1 to [`PANEL_ROWS`] weight rows into `out` (`panel_bytes(n)`).
    pub fn pack(&self, n: usize, rows: &[&[u8]], out: &mut [u8]) {
        (self.g.pack)(n, rows, out)
    }

    /// Bytes of one prepared activation column.
    pub fn act_bytes(&self, n: usize) -> usize {
        (self.g.act_bytes)(n)
    }

    /// Prepares one activation row `y` into `out` (`act_bytes(n)`).
    pub fn prep(&self, n: usize, y: &[u8], out: &mut [u8]) {
        (self.g.prep)(n, y, out)
    }

    /// `out[c * PANEL_ROWS + r]` = row `r` of `panel` times column `c`.
    pub fn run(&self, n: usize, panel: &[u8], cols: &[&[u8]], out: &mut [f32]) {
        (self.g.run)(n, panel, cols, out)
    }

    /// True when the kernel takes two panels at a time ([`Self::run_pair`]).
    pub fn has_pair(&self) -> bool {
        self.g.run_pair.is_some()
    }

    /// [`Self::run`] on panels `a` and `b` at once (up to [`PAIR_COLS`]
    /// columns; `a`'s results, then `b`'s); `run` on each where the kernel
    /// has no pair kernel.
    pub fn run_pair(&self, n: usize, a: &[u8], b: &[u8], cols: &[&[u8]], out: &mut [f32]) {
        match self.g.run_pair {
            Some(f) => f(n, a, b, cols, out),
            None => {
                let (oa, ob) = out.split_at_mut(cols.len() * PANEL_ROWS);
                (self.g.run)(n, a, cols, oa);
                (self.g.run)(n, b, cols, ob);
            }
        }
    }
}

/// `len` bytes of `buf` from a cache-line boundary, growing it as needed:
/// how the backend lays out packed panels and prepared columns.
pub fn aligned_mut(buf: &mut Vec<u8>, len: usize) -> &mut [u8] {
    crate::matmul::aligned_mut(buf, len)
}

/// The layout of a Q4_K panel super-block, for a bench kernel that reads
/// it without the arithmetic around the dot products (the ceiling of the
/// Q4_K kernel): bytes of a panel super-block, offset of its 32 level
/// vectors, bytes of a prepared activation super-block.
#[cfg(target_arch = "x86_64")]
pub const Q4K_PANEL_LAYOUT: (usize, usize, usize) = (
    crate::simd::gemm_k::Q4K_SB,
    crate::simd::gemm_k::Q4K_QS,
    crate::simd::gemm_k::A4_SB,
);

/// Makes every node of the graphs computed from now on run on the calling
/// thread (`Some(false)`) or split across the team (`Some(true)`), or lets
/// each node's work decide (`None`, the default): what `benches/split.rs`
/// measures the work thresholds with.
pub fn force_split(split: Option<bool>) {
    crate::compute::force_split(split)
}
