//! Dot-product kernels with run-time dispatch: a scalar path for every type
//! and vector paths (AVX2, AVX-512, NEON) for the types that matter most.
//!
//! A quantized dot kernel multiplies one weight row with up to
//! [`MAX_COLS`] activation rows at once (already converted to the weight
//! type's partner, see [`vec_dot_type`]), so that each weight block is
//! decoded once and reused across columns. Every column keeps its own
//! accumulators and sees the same sequence of operations whatever the
//! number of columns, so a result does not depend on how columns are
//! grouped.

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

/// Most activation rows one kernel call takes.
pub(crate) const MAX_COLS: usize = 4;

/// `out[c] = dot(x, ys[c])` over `n` elements, for `1 <= ys.len() <= MAX_COLS`.
/// `x` holds at least a row of `n` weights, every `ys[c]` a row of `n`
/// partner values.
pub(crate) type DotFn = fn(n: usize, x: &[u8], ys: &[&[u8]], out: &mut [f32]);

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

/// The kernels of the best level this CPU supports.
pub(crate) fn kernels() -> &'static Kernels {
    static BEST: OnceLock<Kernels> = OnceLock::new();
    BEST.get_or_init(|| Kernels::build(features::best_isa()))
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

/// Calls `$f::<C>(args)` with `C = $ys.len()` (1..=4).
macro_rules! by_cols {
    ($f:ident, $n:expr, $x:expr, $ys:expr, $out:expr) => {
        match $ys.len() {
            1 => $f::<1>($n, $x, $ys, $out),
            2 => $f::<2>($n, $x, $ys, $out),
            3 => $f::<3>($n, $x, $ys, $out),
            4 => $f::<4>($n, $x, $ys, $out),
            c => panic!("dot kernel called with {c} columns"),
        }
    };
}
pub(crate) use by_cols;

/// Checks the slice lengths a row kernel relies on (an internal invariant
/// of the MUL_MAT driver, so a failure is a bug, not bad input).
#[inline]
pub(crate) fn check_rows(
    n: usize,
    x: &[u8],
    xbytes: usize,
    ys: &[&[u8]],
    ybytes: usize,
    out: &[f32],
) {
    assert!(
        x.len() >= n * xbytes && ys.iter().all(|y| y.len() >= n * ybytes) && out.len() >= ys.len(),
        "dot kernel: row slices shorter than {n} blocks"
    );
}
