//! Dot-product kernels with run-time dispatch: a scalar path for every type
//! and vector paths (AVX2, AVX-512, NEON) for the types that matter most.
//!
//! A dot kernel computes a register tile: 1 or [`MAX_ROWS`] weight rows
//! against 1 to [`MAX_COLS`] activation rows (already converted to the
//! weight type's partner, see [`vec_dot_type`]), so that each weight block
//! is decoded once for all columns and each activation block is loaded once
//! for all rows. Every (row, column) pair keeps its own accumulators and
//! sees the same sequence of operations whatever the tile, so a result does
//! not depend on how rows and columns are grouped.

use std::sync::OnceLock;

use ggml_core::Type;
use half::f16;

use crate::features::{self, Isa};

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "aarch64")]
mod neon;
pub(crate) mod scalar;
#[cfg(test)]
mod tests;

/// Most activation rows (columns of the result) one kernel call takes.
pub(crate) const MAX_COLS: usize = 4;
/// Weight rows of a full tile; a kernel takes 1 or `MAX_ROWS` rows.
pub(crate) const MAX_ROWS: usize = 4;

/// `out[r * ys.len() + c] = dot(xs[r], ys[c])` over `n` elements, for
/// `xs.len()` 1 or [`MAX_ROWS`] and `1 <= ys.len() <= MAX_COLS`. Every
/// `xs[r]` holds at least a row of `n` weights, every `ys[c]` a row of `n`
/// partner values.
pub(crate) type DotFn = fn(n: usize, xs: &[&[u8]], ys: &[&[u8]], out: &mut [f32]);

/// The partner type activations are converted to before a dot product with
/// a row of `ty` (as ggml's `vec_dot_type`).
pub(crate) fn vec_dot_type(ty: Type) -> Option<Type> {
    ggml_core::quants::vec_dot_type(ty)
}

/// A set of kernels for one instruction-set level.
pub(crate) struct Kernels {
    /// The level.
    pub isa: Isa,
    /// f32 dot product of two slices of equal length.
    pub dot_f32: fn(&[f32], &[f32]) -> f32,
    /// f16 dot product (f32 accumulation) of two slices of equal length.
    pub dot_f16: fn(&[f16], &[f16]) -> f32,
    /// `x[i] = exp(x[i] - max)` in place; returns the sum in f64.
    pub exp_sum: fn(&mut [f32], f32) -> f64,
    /// `out[i] = silu(x[i])`.
    pub silu: fn(&[f32], &mut [f32]),
    /// `out[i] = silu(g[i]) * u[i]`.
    pub swiglu: fn(&[f32], &[f32], &mut [f32]),
    table: Vec<Option<DotFn>>,
}

impl std::fmt::Debug for Kernels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Kernels({})", self.isa.name())
    }
}

impl Kernels {
    /// The row kernel for weights of type `ty`.
    pub fn dot(&self, ty: Type) -> Option<DotFn> {
        self.table.get(ty.id() as usize).copied().flatten()
    }

    fn set(&mut self, ty: Type, f: DotFn) {
        self.table[ty.id() as usize] = Some(f);
    }

    fn scalar() -> Kernels {
        let mut k = Kernels {
            isa: Isa::Scalar,
            dot_f32: scalar::dot_f32,
            dot_f16: scalar::dot_f16,
            exp_sum: scalar::exp_sum,
            silu: scalar::silu,
            swiglu: scalar::swiglu,
            table: vec![None; ggml_core::Type::all().len().max(64)],
        };
        for &ty in Type::all() {
            if let Some(f) = scalar::row_kernel(ty) {
                k.set(ty, f);
            }
        }
        k
    }

    fn build(isa: Isa) -> Kernels {
        let mut k = Kernels::scalar();
        k.isa = isa;
        match isa {
            Isa::Scalar => {}
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => avx2::install(&mut k),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => {
                avx2::install(&mut k);
                avx512::install(&mut k);
            }
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => neon::install(&mut k),
            #[allow(unreachable_patterns)]
            _ => {}
        }
        k
    }
}

/// The kernels of the level in use: the best this CPU supports, or a lower
/// one named by `GGML_CPU_ISA` (`scalar`, `avx2`, `avx512`, `neon`) for
/// comparisons.
pub(crate) fn kernels() -> &'static Kernels {
    static BEST: OnceLock<Kernels> = OnceLock::new();
    BEST.get_or_init(|| Kernels::build(features::selected_isa()))
}

/// The kernels of a given level, when this CPU can run it.
#[cfg(test)]
pub(crate) fn kernels_for(isa: Isa) -> Option<&'static Kernels> {
    static ALL: OnceLock<Vec<Kernels>> = OnceLock::new();
    let all = ALL.get_or_init(|| {
        features::available_isas()
            .into_iter()
            .map(Kernels::build)
            .collect()
    });
    all.iter().find(|k| k.isa == isa)
}

/// Bytes ahead of the current block that the streaming kernels ask the
/// cache to fetch: several weight rows are read at once, which the hardware
/// prefetchers follow less well than a single stream (1 KiB measured best
/// of 128 B to 2 KiB on matrices larger than the last-level cache).
#[cfg(target_arch = "x86_64")]
const PREFETCH_DISTANCE: usize = 1024;

/// See [`PREFETCH_DISTANCE`].
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn prefetch_distance() -> usize {
    PREFETCH_DISTANCE
}

/// Hints that `x[at..at + len]` will be read soon (no-op past the end).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn prefetch_ahead(x: &[u8], at: usize, len: usize) {
    let mut o = at;
    while o < at + len && o < x.len() {
        // SAFETY: prefetching is a hint and the address is inside `x`.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                x.as_ptr().add(o) as *const i8
            )
        };
        o += 64;
    }
}

/// Hints that the first [`PREFETCH_DISTANCE`] bytes of a weight row will be
/// read soon (the kernels prefetch the rest from inside the row).
#[inline]
pub(crate) fn prefetch_row_start(x: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    prefetch_ahead(x, 0, PREFETCH_DISTANCE);
    #[cfg(not(target_arch = "x86_64"))]
    let _ = x;
}

/// Calls `$f::<R, C>(args)` with `R = $xs.len()` (1 or 4) and `C =
/// $ys.len()` (1..=4).
macro_rules! by_tile {
    ($f:ident, $n:expr, $xs:expr, $ys:expr, $out:expr) => {
        match ($xs.len(), $ys.len()) {
            (1, 1) => $f::<1, 1>($n, $xs, $ys, $out),
            (1, 2) => $f::<1, 2>($n, $xs, $ys, $out),
            (1, 3) => $f::<1, 3>($n, $xs, $ys, $out),
            (1, 4) => $f::<1, 4>($n, $xs, $ys, $out),
            (4, 1) => $f::<4, 1>($n, $xs, $ys, $out),
            (4, 2) => $f::<4, 2>($n, $xs, $ys, $out),
            (4, 3) => $f::<4, 3>($n, $xs, $ys, $out),
            (4, 4) => $f::<4, 4>($n, $xs, $ys, $out),
            (r, c) => panic!("dot kernel called with a {r}x{c} tile"),
        }
    };
}
pub(crate) use by_tile;

/// Checks the slice lengths a tile kernel relies on (an internal invariant
/// of the MUL_MAT driver, so a failure is a bug, not bad input): `nb`
/// blocks of `xbytes` in every weight row, of `ybytes` in every activation
/// row, and room for every result.
#[inline]
pub(crate) fn check_tile(
    nb: usize,
    xs: &[&[u8]],
    xbytes: usize,
    ys: &[&[u8]],
    ybytes: usize,
    out: &[f32],
) {
    assert!(
        xs.iter().all(|x| x.len() >= nb * xbytes)
            && ys.iter().all(|y| y.len() >= nb * ybytes)
            && out.len() >= xs.len() * ys.len(),
        "dot kernel: row slices shorter than {nb} blocks"
    );
}
