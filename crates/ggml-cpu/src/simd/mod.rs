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

#[cfg(test)]
mod attn_tests;
#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
mod gemm_f16;
#[cfg(target_arch = "x86_64")]
mod gemm_f16_avx2;
#[cfg(target_arch = "x86_64")]
pub(crate) mod gemm_k;
#[cfg(target_arch = "x86_64")]
mod gemm_q;
#[cfg(test)]
mod gemm_tests;
#[cfg(all(test, target_arch = "x86_64"))]
mod lane_tests;
#[cfg(target_arch = "aarch64")]
mod neon;
pub(crate) mod scalar;
pub(crate) mod stream;
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

/// Numbers a [`DotFn`] reads as bytes: no padding, every bit pattern a value.
pub(crate) trait PlainFloat: Copy {}
impl PlainFloat for f32 {}
impl PlainFloat for f16 {}

/// `x . y` over the shorter length through `row`, the [`DotFn`] of `T`'s
/// type, as one row against one column: how a vector path gives its plain
/// `dot_f32` / `dot_f16` the same bits as its row kernel.
#[cfg_attr(
    not(any(target_arch = "x86_64", target_arch = "aarch64")),
    allow(dead_code)
)]
#[inline]
pub(crate) fn dot_by_row<T: PlainFloat>(x: &[T], y: &[T], row: DotFn) -> f32 {
    let n = x.len().min(y.len());
    let len = n * std::mem::size_of::<T>();
    // SAFETY: slices of plain numbers (no padding) viewed as their bytes,
    // same lifetime and length.
    let (xb, yb) = unsafe {
        (
            std::slice::from_raw_parts(x.as_ptr() as *const u8, len),
            std::slice::from_raw_parts(y.as_ptr() as *const u8, len),
        )
    };
    let mut out = [0f32];
    row(n, &[xb], &[yb], &mut out);
    out[0]
}

/// The partner type activations are converted to before a dot product with
/// a row of `ty` (as ggml's `vec_dot_type`).
pub(crate) fn vec_dot_type(ty: Type) -> Option<Type> {
    ggml_core::quants::vec_dot_type(ty)
}

/// Weight rows of one packed panel of a [`Gemm`] (one per 512-bit lane).
pub(crate) const PANEL_ROWS: usize = 16;
/// Most activation columns one [`Gemm::run`] call takes.
pub(crate) const GEMM_COLS: usize = 8;
/// Most activation columns one [`Gemm::run_pair`] call takes.
pub(crate) const PAIR_COLS: usize = 6;

/// A matrix x matrix kernel for many activation columns. The weights are
/// first packed, [`PANEL_ROWS`] rows at a time, into a panel whose layout
/// puts the same few weights of every row side by side, so that one vector
/// register holds them for all rows (one row per lane) and each activation
/// value is broadcast to all lanes. A lane then accumulates exactly one
/// (row, column) pair in a fixed order, so a result does not depend on how
/// many columns a call takes nor on where the row's panel starts.
/// Activation columns are also prepared once (the partner type's row
/// rearranged with whatever per-block sums the kernel needs).
pub(crate) struct Gemm {
    /// Bytes of one panel of `n`-element rows.
    pub panel_bytes: fn(n: usize) -> usize,
    /// Packs 1 to [`PANEL_ROWS`] weight rows of `n` elements into `out`
    /// (`panel_bytes(n)` bytes); missing rows are packed as zero weights.
    pub pack: fn(n: usize, rows: &[&[u8]], out: &mut [u8]),
    /// Bytes of one prepared activation column of `n` elements.
    pub act_bytes: fn(n: usize) -> usize,
    /// Prepares one activation row, given in the weight type's partner
    /// ([`vec_dot_type`]), into `out` (`act_bytes(n)` bytes).
    pub prep: fn(n: usize, y: &[u8], out: &mut [u8]),
    /// `out[c * PANEL_ROWS + r] = dot(row r of panel, column c)` for the 1
    /// to [`GEMM_COLS`] prepared columns `cols`.
    pub run: PanelFn,
    /// Where the kernel has one, [`Gemm::run`] on two panels at once
    /// (`a`'s results first, then `b`'s, each as `run` lays them out) for
    /// 1 to [`PAIR_COLS`] columns, with the same bits: the registers then
    /// hold twice the rows, so each column value loaded feeds twice the
    /// multiply-adds.
    pub run_pair: Option<PairFn>,
    /// For a layout made compact enough to be stored (see
    /// `crate::repack`), a faster kernel for many columns that its panels
    /// expand into.
    pub wide: Option<&'static Wide>,
}

impl Gemm {
    /// The kernel for weight rows packed for a call with many columns: the
    /// wide kernel where this layout has one (packing rows for it gives
    /// the bytes that expanding this layout's panels would).
    pub fn for_packed_rows(&'static self) -> &'static Gemm {
        self.wide.map_or(self, |w| w.gemm)
    }

    /// The wide kernel that a call of `cols` columns on weights stored in
    /// this layout runs, after expanding them: from `GEMM_MIN_COLS`
    /// columns, where the layout has one.
    pub fn wide_for(&self, cols: usize) -> Option<&'static Wide> {
        self.wide.filter(|w| cols >= w.min_cols)
    }
}

/// The kernel that a compact stored panel layout expands its panels into
/// when a MUL_MAT has enough columns to repay it (prompt processing): a
/// tile's panels are expanded once and then read by every column group.
/// It takes the same prepared columns as the compact layout's kernel.
pub(crate) struct Wide {
    /// The kernel of the expanded panels.
    pub gemm: &'static Gemm,
    /// Expands one stored panel of `n`-element rows into `out`
    /// (`gemm.panel_bytes(n)` bytes).
    pub expand: fn(n: usize, panel: &[u8], out: &mut [u8]),
    /// Columns from which expanding repays itself (at least
    /// `GEMM_MIN_COLS`).
    pub min_cols: usize,
}

/// See [`Kernels::gemm_f32`].
pub(crate) type GemmF32Fn = fn(c: &mut [f32], a: &[f32], b: &[f32], m: usize, k: usize, n: usize);

/// See [`Kernels::exp_sum_rows`]: (rows, row length, max of each row,
/// sum of each row).
pub(crate) type ExpRowsFn = fn(&mut [f32], usize, &[f32], &mut [f64]);

/// [`Kernels::exp_sum_rows`] through a level's `exp_sum`, a row at a time.
pub(crate) fn exp_sum_rows_by(
    exp_sum: fn(&mut [f32], f32) -> f64,
    x: &mut [f32],
    w: usize,
    maxes: &[f32],
    sums: &mut [f64],
) {
    for ((row, &m), s) in x.chunks_exact_mut(w.max(1)).zip(maxes).zip(sums) {
        if m != f32::NEG_INFINITY {
            *s = exp_sum(row, m);
        }
    }
}

/// See [`Gemm::run`].
pub(crate) type PanelFn = fn(n: usize, panel: &[u8], cols: &[&[u8]], out: &mut [f32]);

/// See [`Gemm::run_pair`].
pub(crate) type PairFn = fn(n: usize, a: &[u8], b: &[u8], cols: &[&[u8]], out: &mut [f32]);

/// See [`Kernels::dot_f16_rows`]: (query, rows, row stride in bytes, listed
/// rows, one result per listed row).
pub(crate) type DotRowsFn = fn(&[f16], &[u8], usize, &[u32], &mut [f32]);

/// See [`Kernels::attn_values_f16`]: (sum, rows, row stride in bytes,
/// listed rows, rescale and weight per listed row).
pub(crate) type ValuesFn = fn(&mut [f16], &[u8], usize, &[u32], &[f32], &[f32]);

/// See [`Kernels::ssm_step`].
pub(crate) type SsmStepFn = fn(s: &mut [f32], b: &[f32], c: &[f32], da: f32, x_dt: f32) -> f32;

/// See [`Kernels::ssm_step_decay`].
pub(crate) type SsmDecayFn =
    fn(s: &mut [f32], a: &[f32], b: &[f32], c: &[f32], dt: f32, x_dt: f32) -> f32;

/// A set of kernels for one instruction-set level.
pub(crate) struct Kernels {
    /// The level.
    pub isa: Isa,
    /// f32 dot product of two slices of equal length.
    pub dot_f32: fn(&[f32], &[f32]) -> f32,
    /// f16 dot product (f32 accumulation) of two slices of equal length
    /// (read by the x86 kernels and the tests).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub dot_f16: fn(&[f16], &[f16]) -> f32,
    /// `acc[i] = f16(f32(acc[i]) * s)` (see [`scalar::scale_f16`]).
    pub scale_f16: fn(&mut [f16], f32),
    /// `acc[i] = f16(f32(acc[i]) + f32(v[i]) * s)` (see [`scalar::mad_f16`]).
    pub mad_f16: fn(&mut [f16], &[f16], f32),
    /// One query's F16 dot products with listed F16 key rows (see
    /// [`scalar::dot_f16_rows`]); each equals `dot_f16` of the row.
    pub dot_f16_rows: DotRowsFn,
    /// One query's F16 value sum (see [`scalar::attn_values_f16`]); the
    /// same bits as `scale_f16` and `mad_f16` row by row.
    pub attn_values_f16: ValuesFn,
    /// `x[i] = exp(x[i] - max)` in place; returns the sum in f64.
    pub exp_sum: fn(&mut [f32], f32) -> f64,
    /// `x[i] = x[i] * scale (+ mask[i])` in place, returning the largest
    /// (see [`scalar::scale_mask_max`]); every level gives the same bits.
    pub scale_mask_max: fn(&mut [f32], Option<&[f32]>, f32) -> f32,
    /// `exp_sum` of each row of `w` values of `x` whose `max` is not
    /// `-inf`, its sum into `sums` (those rows untouched); the bits of
    /// `exp_sum` row by row.
    pub exp_sum_rows: ExpRowsFn,
    /// `out[i] = silu(x[i])`.
    pub silu: fn(&[f32], &mut [f32]),
    /// `out[i] = silu(g[i]) * u[i]`.
    pub swiglu: fn(&[f32], &[f32], &mut [f32]),
    /// `out[i] = gelu(g[i]) * u[i]`, with ggml's f16 GELU table.
    pub geglu: fn(&[f32], &[f32], &mut [f32]),
    /// `c += a x b` for row-major f32 matrices `c` (m x n), `a` (m x k) and
    /// `b` (k x n); each element of `c` takes one fused multiply-add per
    /// step of k, in order, so every level gives the same bits.
    pub gemm_f32: GemmF32Fn,
    /// One token of a Mamba-2 state row (SSM_SCAN with a scalar decay per
    /// head): `s[k] = s[k] * da + b[k] * x_dt`, returning
    /// `sum_k s[k] * c[k]`.
    pub ssm_step: SsmStepFn,
    /// One token of a Mamba-1 state row (a decay per state element):
    /// `s[k] = s[k] * exp(dt * a[k]) + b[k] * x_dt`, returning
    /// `sum_k s[k] * c[k]`; the exponentials are [`scalar::exp_f32`]'s.
    pub ssm_step_decay: SsmDecayFn,
    table: Vec<Option<DotFn>>,
    gemms: Vec<Option<&'static Gemm>>,
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

    /// The matrix x matrix kernel for weights of type `ty`, if any.
    pub fn gemm(&self, ty: Type) -> Option<&'static Gemm> {
        self.gemms.get(ty.id() as usize).copied().flatten()
    }

    /// Installs a panel kernel (only the x86 levels have them).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    fn set_gemm(&mut self, ty: Type, g: &'static Gemm) {
        self.gemms[ty.id() as usize] = Some(g);
    }

    fn scalar() -> Kernels {
        let mut k = Kernels {
            isa: Isa::Scalar,
            dot_f32: scalar::dot_f32,
            dot_f16: scalar::dot_f16,
            scale_f16: scalar::scale_f16,
            mad_f16: scalar::mad_f16,
            dot_f16_rows: scalar::dot_f16_rows,
            attn_values_f16: scalar::attn_values_f16,
            exp_sum: scalar::exp_sum,
            scale_mask_max: scalar::scale_mask_max,
            exp_sum_rows: scalar::exp_sum_rows,
            silu: scalar::silu,
            swiglu: scalar::swiglu,
            geglu: scalar::geglu,
            gemm_f32: scalar::gemm_f32,
            ssm_step: scalar::ssm_step,
            ssm_step_decay: scalar::ssm_step_decay,
            table: vec![None; ggml_core::Type::all().len().max(64)],
            gemms: vec![None; ggml_core::Type::all().len().max(64)],
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
            Isa::Avx2 => {
                avx2::install(&mut k);
                gemm_q::install_avx2(&mut k);
                gemm_k::install_avx2(&mut k);
                gemm_f16_avx2::install(&mut k);
            }
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => {
                avx2::install(&mut k);
                avx512::install(&mut k);
                gemm_q::install(&mut k);
                gemm_k::install(&mut k);
                gemm_f16::install(&mut k);
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

/// The panel kernels of the level in use, named by their weight type, the
/// wide kernels of stored layouts (see [`Wide`]), and on x86-64 the
/// variants that are kept only for comparison: what the benches time (see
/// `crate::bench_support`).
pub(crate) fn panel_kernels() -> Vec<(String, Type, &'static Gemm)> {
    let k = kernels();
    let mut v: Vec<(String, Type, &'static Gemm)> = ggml_core::MATMUL_TYPES
        .iter()
        .filter_map(|&ty| Some((ty.to_string(), ty, k.gemm(ty)?)))
        .collect();
    let wide: Vec<_> = v
        .iter()
        .filter_map(|&(_, ty, g)| Some((format!("{ty} (wide)"), ty, g.wide?.gemm)))
        .collect();
    v.extend(wide);
    #[cfg(target_arch = "x86_64")]
    if k.isa == Isa::Avx512 {
        v.extend(
            gemm_f16::variants()
                .into_iter()
                .map(|(name, ty, g)| (name.to_string(), ty, g)),
        );
    }
    v
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

/// How a kernel asks for the weight bytes it reads next. When the rows of
/// a full register tile lie back to back (as MUL_MAT hands them over, rows
/// of one matrix), the rows that follow them are the next tile's: they are
/// asked for as one sequential stream that runs [`MAX_ROWS`] times as fast
/// as each row, so that the whole next tile is in cache when the kernel
/// gets to it. Four streams each [`PREFETCH_DISTANCE`] ahead of itself
/// kept too few lines in flight: a matrix x vector from memory read
/// 14 -> 21-25 GB/s (Q8_0) and 9 -> 12-19 GB/s (Q4_0) per second of one
/// core's time with the single stream. Otherwise (one row, or rows
/// elsewhere) each row is prefetched ahead of itself.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
pub(crate) struct RowPrefetch {
    /// First byte after the last row when the rows are back to back.
    next: Option<*const u8>,
    /// Rows of the tile.
    rows: usize,
}

#[cfg(target_arch = "x86_64")]
impl RowPrefetch {
    /// The plan for weight rows `xs`.
    #[inline(always)]
    pub fn new(xs: &[&[u8]]) -> RowPrefetch {
        let back_to_back = xs.len() > 1
            && xs
                .windows(2)
                .all(|w| w[0].as_ptr().wrapping_add(w[0].len()) == w[1].as_ptr());
        let next = back_to_back
            .then(|| xs.last().map(|x| x.as_ptr().wrapping_add(x.len())))
            .flatten();
        RowPrefetch {
            next,
            rows: xs.len(),
        }
    }

    /// Hints the bytes read after `x[at..at + len]` of every row `x` of
    /// `xs` (the rows the plan was made for).
    #[inline(always)]
    pub fn ahead(&self, xs: &[&[u8]], at: usize, len: usize) {
        match self.next {
            Some(next) => {
                let mut o = at * self.rows;
                let end = (at + len) * self.rows;
                while o < end {
                    // SAFETY: a prefetch is only a hint: it never faults
                    // and reads nothing the program sees, so the address
                    // may lie past the matrix.
                    unsafe {
                        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                            next.wrapping_add(o) as *const i8,
                        )
                    };
                    o += 64;
                }
            }
            None => {
                for x in xs {
                    prefetch_ahead(x, at + PREFETCH_DISTANCE, len);
                }
            }
        }
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
/// $ys.len()` (1..=4); `by_tile!(f[X], ...)` calls `f::<R, C, X>` (one
/// kernel serving two types through a const parameter).
macro_rules! by_tile {
    ($f:ident[$x:expr], $n:expr, $xs:expr, $ys:expr, $out:expr) => {
        by_tile!(@ $f [{ $x }], $n, $xs, $ys, $out)
    };
    ($f:ident, $n:expr, $xs:expr, $ys:expr, $out:expr) => {
        by_tile!(@ $f [], $n, $xs, $ys, $out)
    };
    (@ $f:ident [$($x:tt)?], $n:expr, $xs:expr, $ys:expr, $out:expr) => {
        match ($xs.len(), $ys.len()) {
            (1, 1) => $f::<1, 1 $(, $x)?>($n, $xs, $ys, $out),
            (1, 2) => $f::<1, 2 $(, $x)?>($n, $xs, $ys, $out),
            (1, 3) => $f::<1, 3 $(, $x)?>($n, $xs, $ys, $out),
            (1, 4) => $f::<1, 4 $(, $x)?>($n, $xs, $ys, $out),
            (4, 1) => $f::<4, 1 $(, $x)?>($n, $xs, $ys, $out),
            (4, 2) => $f::<4, 2 $(, $x)?>($n, $xs, $ys, $out),
            (4, 3) => $f::<4, 3 $(, $x)?>($n, $xs, $ys, $out),
            (4, 4) => $f::<4, 4 $(, $x)?>($n, $xs, $ys, $out),
            (r, c) => panic!("dot kernel called with a {r}x{c} tile"),
        }
    };
}
pub(crate) use by_tile;

/// Checks the slice lengths of a [`Kernels::gemm_f32`] call (an internal
/// invariant of its callers: a failure is a bug, not bad input).
#[inline]
pub(crate) fn check_gemm_f32(c: &[f32], a: &[f32], b: &[f32], m: usize, k: usize, n: usize) {
    assert!(
        c.len() >= m * n && a.len() >= m * k && b.len() >= k * n,
        "gemm_f32: slices shorter than {m}x{k} times {k}x{n}"
    );
}

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
