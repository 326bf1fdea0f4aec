//! Block layouts of the quantized types and their scalar reference kernels.
//!
//! * [`dequantize_row`]: bit-exact with ggml's `to_float` for every type it
//!   supports (f16 widening is exact; each type keeps ggml's arithmetic order).
//! * [`quantize_row`]: ggml's reference quantizers without an importance
//!   matrix, i.e. what `ggml_quantize_chunk` writes into model files and what
//!   the activation types (Q8_0, Q8_1, Q8_K) are made of.
//! * [`vec_dot`]: reference dot products against the partner type
//!   [`vec_dot_type`]; the summation order is documented in `dot.rs`.
//! * [`validate_row_data`]: NaN / infinity checks as ggml's.
//!
//! Rows are plain byte slices; lengths that are not a whole number of blocks
//! are errors, never panics.

#![warn(missing_docs)]

mod blocks;
mod dot;
mod fp;
mod grid_data;
mod iq1_quant;
mod iq4;
mod iq_grid;
mod iq_grid_quant;
mod iq_neighbours;
mod k_quants;
mod legacy;
mod search;
mod tables;
mod ternary;
mod validate;
mod weighted;

pub use blocks::{
    Block, BlockIq1M, BlockIq1S, BlockIq2S, BlockIq2Xs, BlockIq2Xxs, BlockIq3S, BlockIq3Xxs,
    BlockIq4Nl, BlockIq4Xs, BlockMxfp4, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ4_0, BlockQ4_1,
    BlockQ5K, BlockQ5_0, BlockQ5_1, BlockQ6K, BlockQ8K, BlockQ8_0, BlockQ8_1, BlockTq1_0,
    BlockTq2_0, QK4_0, QK4_1, QK4_NL, QK5_0, QK5_1, QK8_0, QK8_1, QK_K, QK_MXFP4,
};
pub use dot::{vec_dot, vec_dot_type};
pub use fp::{bf16_to_fp32, e8m0_to_fp32_half, fp16_to_fp32, fp32_to_bf16, fp32_to_fp16};
pub use tables::{
    IQ1S_DELTA, IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID, KMASK_IQ2XS,
    KSIGNS_IQ2XS, KVALUES_IQ4NL, KVALUES_MXFP4,
};
pub use validate::validate_row_data;

use crate::error::{Error, Result};
use crate::Type;

/// The weight types of MUL_MAT that every backend is checked with and
/// measured for: the conformance cases, the CPU's SIMD tests, the quant
/// property tests, the benches and `cargo xtask bench` all read this list,
/// so a weight type with matrix kernels is added here once.
pub const MATMUL_TYPES: &[Type] = &[
    Type::F32,
    Type::F16,
    Type::BF16,
    Type::Q4_0,
    Type::Q4_1,
    Type::Q5_0,
    Type::Q5_1,
    Type::Q8_0,
    Type::Q2_K,
    Type::Q3_K,
    Type::Q4_K,
    Type::Q5_K,
    Type::Q6_K,
    Type::IQ4_NL,
    Type::IQ4_XS,
    Type::MXFP4,
];

/// Bytes of a row of `n` elements of `ty`; fails when `n` is not a multiple
/// of the block size, for removed types, or on overflow.
pub fn row_size(ty: Type, n: usize) -> Result<usize> {
    if ty.is_removed() {
        return Err(Error::Quant(format!("type {ty} was removed from ggml")));
    }
    let bs = ty.block_size();
    if !n.is_multiple_of(bs) {
        return Err(Error::Quant(format!(
            "{n} elements is not a multiple of the {ty} block size {bs}"
        )));
    }
    (n / bs)
        .checked_mul(ty.type_size())
        .ok_or_else(|| Error::Quant(format!("a row of {n} {ty} elements overflows usize")))
}

/// Checks that `bytes` holds exactly a row of `n` elements of `ty`.
fn check_row(op: &str, ty: Type, n: usize, bytes: usize) -> Result<()> {
    let want = row_size(ty, n)?;
    if bytes != want {
        return Err(Error::Quant(format!(
            "{op}: {bytes} bytes given, a row of {n} {ty} elements takes {want}"
        )));
    }
    Ok(())
}

/// True when [`dequantize_row`] supports `ty`.
pub fn can_dequantize(ty: Type) -> bool {
    use Type::*;
    matches!(
        ty,
        F32 | F16
            | BF16
            | Q4_0
            | Q4_1
            | Q5_0
            | Q5_1
            | Q8_0
            | Q8_1
            | Q2_K
            | Q3_K
            | Q4_K
            | Q5_K
            | Q6_K
            | Q8_K
            | IQ2_XXS
            | IQ2_XS
            | IQ2_S
            | IQ3_XXS
            | IQ3_S
            | IQ1_S
            | IQ1_M
            | IQ4_NL
            | IQ4_XS
            | TQ1_0
            | TQ2_0
            | MXFP4
    )
}

/// True when [`quantize_row`] supports `ty`: every type
/// [`dequantize_row`] reads except IQ2_XXS, IQ2_XS and IQ1_S, which ggml
/// quantizes only with an importance matrix ([`quantize_rows`] with one).
pub fn can_quantize(ty: Type) -> bool {
    can_dequantize(ty) && !needs_imatrix(ty)
}

/// True for the types ggml cannot quantize without an importance matrix.
pub fn needs_imatrix(ty: Type) -> bool {
    matches!(ty, Type::IQ2_XXS | Type::IQ2_XS | Type::IQ1_S)
}

fn dequant<B: Block>(src: &[u8], dst: &mut [f32], f: impl Fn(&B, &mut [f32])) -> Result<()> {
    for (bytes, out) in src
        .chunks_exact(B::BYTES)
        .zip(dst.chunks_exact_mut(B::BLOCK_SIZE))
    {
        f(&B::read(bytes)?, out);
    }
    Ok(())
}

fn quant_try<B: Block>(src: &[f32], dst: &mut [u8], f: impl Fn(&[f32]) -> Result<B>) -> Result<()> {
    for (x, out) in src
        .chunks_exact(B::BLOCK_SIZE)
        .zip(dst.chunks_exact_mut(B::BYTES))
    {
        f(x)?.write(out)?;
    }
    Ok(())
}

fn quant<B: Block>(src: &[f32], dst: &mut [u8], f: impl Fn(&[f32]) -> B) -> Result<()> {
    for (x, out) in src
        .chunks_exact(B::BLOCK_SIZE)
        .zip(dst.chunks_exact_mut(B::BYTES))
    {
        f(x).write(out)?;
    }
    Ok(())
}

/// Dequantizes a row: `dst.len()` elements from `src`, which must hold
/// exactly `row_size(ty, dst.len())` bytes. Bit-exact with ggml.
pub fn dequantize_row(ty: Type, src: &[u8], dst: &mut [f32]) -> Result<()> {
    if !can_dequantize(ty) {
        return Err(Error::Quant(format!(
            "dequantize: type {ty} is not supported"
        )));
    }
    check_row("dequantize", ty, dst.len(), src.len())?;
    use Type::*;
    match ty {
        F32 => {
            for (y, b) in dst.iter_mut().zip(src.chunks_exact(4)) {
                *y = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
            Ok(())
        }
        F16 => {
            for (y, b) in dst.iter_mut().zip(src.chunks_exact(2)) {
                *y = fp16_to_fp32(u16::from_le_bytes([b[0], b[1]]));
            }
            Ok(())
        }
        BF16 => {
            for (y, b) in dst.iter_mut().zip(src.chunks_exact(2)) {
                *y = bf16_to_fp32(u16::from_le_bytes([b[0], b[1]]));
            }
            Ok(())
        }
        Q4_0 => dequant(src, dst, BlockQ4_0::dequantize),
        Q4_1 => dequant(src, dst, BlockQ4_1::dequantize),
        Q5_0 => dequant(src, dst, BlockQ5_0::dequantize),
        Q5_1 => dequant(src, dst, BlockQ5_1::dequantize),
        Q8_0 => dequant(src, dst, BlockQ8_0::dequantize),
        Q8_1 => dequant(src, dst, BlockQ8_1::dequantize),
        Q2_K => dequant(src, dst, BlockQ2K::dequantize),
        Q3_K => dequant(src, dst, BlockQ3K::dequantize),
        Q4_K => dequant(src, dst, BlockQ4K::dequantize),
        Q5_K => dequant(src, dst, BlockQ5K::dequantize),
        Q6_K => dequant(src, dst, BlockQ6K::dequantize),
        Q8_K => dequant(src, dst, BlockQ8K::dequantize),
        IQ2_XXS => dequant(src, dst, BlockIq2Xxs::dequantize),
        IQ2_XS => dequant(src, dst, BlockIq2Xs::dequantize),
        IQ2_S => dequant(src, dst, BlockIq2S::dequantize),
        IQ3_XXS => dequant(src, dst, BlockIq3Xxs::dequantize),
        IQ3_S => dequant(src, dst, BlockIq3S::dequantize),
        IQ1_S => dequant(src, dst, BlockIq1S::dequantize),
        IQ1_M => dequant(src, dst, BlockIq1M::dequantize),
        IQ4_NL => dequant(src, dst, BlockIq4Nl::dequantize),
        IQ4_XS => dequant(src, dst, BlockIq4Xs::dequantize),
        TQ1_0 => dequant(src, dst, BlockTq1_0::dequantize),
        TQ2_0 => dequant(src, dst, BlockTq2_0::dequantize),
        MXFP4 => dequant(src, dst, BlockMxfp4::dequantize),
        _ => Err(Error::Quant(format!(
            "dequantize: type {ty} is not supported"
        ))),
    }
}

/// Quantizes a row: `src.len()` elements into `dst`, which must hold exactly
/// `row_size(ty, src.len())` bytes. Uses the quantizer ggml's
/// `ggml_quantize_chunk` runs for each type without an importance matrix
/// (the `*_ref` functions, and for IQ4_NL / IQ4_XS the 7-trial search), so
/// the bytes equal those of llama.cpp's model files. Blocks are independent:
/// a whole tensor can be passed as one row.
pub fn quantize_row(ty: Type, src: &[f32], dst: &mut [u8]) -> Result<()> {
    if needs_imatrix(ty) {
        return Err(Error::Quant(format!(
            "quantize: type {ty} needs an importance matrix"
        )));
    }
    if !can_quantize(ty) {
        return Err(Error::Quant(format!(
            "quantize: type {ty} is not supported"
        )));
    }
    check_row("quantize", ty, src.len(), dst.len())?;
    use Type::*;
    match ty {
        F32 => {
            for (x, out) in src.iter().zip(dst.chunks_exact_mut(4)) {
                out.copy_from_slice(&x.to_le_bytes());
            }
            Ok(())
        }
        F16 => {
            for (x, out) in src.iter().zip(dst.chunks_exact_mut(2)) {
                out.copy_from_slice(&fp32_to_fp16(*x).to_le_bytes());
            }
            Ok(())
        }
        BF16 => {
            for (x, out) in src.iter().zip(dst.chunks_exact_mut(2)) {
                out.copy_from_slice(&fp32_to_bf16(*x).to_le_bytes());
            }
            Ok(())
        }
        Q4_0 => quant(src, dst, BlockQ4_0::quantize),
        Q4_1 => quant(src, dst, BlockQ4_1::quantize),
        Q5_0 => quant(src, dst, BlockQ5_0::quantize),
        Q5_1 => quant(src, dst, BlockQ5_1::quantize),
        Q8_0 => quant(src, dst, BlockQ8_0::quantize),
        Q8_1 => quant(src, dst, BlockQ8_1::quantize),
        Q2_K => quant(src, dst, BlockQ2K::quantize),
        Q3_K => quant(src, dst, BlockQ3K::quantize),
        Q4_K => quant(src, dst, BlockQ4K::quantize),
        Q5_K => quant(src, dst, BlockQ5K::quantize),
        Q6_K => quant(src, dst, BlockQ6K::quantize),
        Q8_K => quant(src, dst, BlockQ8K::quantize),
        IQ4_NL => quant(src, dst, BlockIq4Nl::quantize),
        IQ4_XS => quant(src, dst, BlockIq4Xs::quantize),
        TQ1_0 => quant(src, dst, BlockTq1_0::quantize),
        TQ2_0 => quant(src, dst, BlockTq2_0::quantize),
        MXFP4 => quant(src, dst, BlockMxfp4::quantize),
        IQ2_S => quant_try(src, dst, |x| BlockIq2S::quantize_weighted(x, None)),
        IQ3_XXS => quant_try(src, dst, |x| BlockIq3Xxs::quantize_weighted(x, None)),
        IQ3_S => quant_try(src, dst, |x| BlockIq3S::quantize_weighted(x, None)),
        IQ1_M => quant_try(src, dst, |x| BlockIq1M::quantize_weighted(x, None)),
        _ => Err(Error::Quant(format!(
            "quantize: type {ty} is not supported"
        ))),
    }
}

/// True when ggml's quantizer for `ty` weighs the rounding error with an
/// importance matrix when one is given; the others ignore it. Of these,
/// [`can_quantize_with_imatrix`] says which are implemented here.
pub fn uses_imatrix(ty: Type) -> bool {
    use Type::*;
    matches!(
        ty,
        Q4_0 | Q4_1
            | Q5_0
            | Q5_1
            | Q2_K
            | Q3_K
            | Q4_K
            | Q5_K
            | Q6_K
            | IQ2_XXS
            | IQ2_XS
            | IQ2_S
            | IQ3_XXS
            | IQ3_S
            | IQ1_S
            | IQ1_M
            | IQ4_NL
            | IQ4_XS
    )
}

/// True when [`quantize_rows`] quantizes `ty` with an importance matrix
/// (or ignores it, as ggml does).
pub fn can_quantize_with_imatrix(ty: Type) -> bool {
    (can_quantize(ty) || weighted::has_weighted(ty))
        && (!uses_imatrix(ty) || weighted::has_weighted(ty))
}

/// Quantizes whole rows of `n_per_row` values, as ggml's
/// `ggml_quantize_chunk` does: `src` holds the rows one after another and
/// `dst` exactly their quantized bytes. `imatrix` (one weight per column)
/// is for the types that use one ([`uses_imatrix`]); the others ignore it.
/// Rows are independent, so any split of a tensor into chunks of rows
/// gives the same bytes.
pub fn quantize_rows(
    ty: Type,
    src: &[f32],
    dst: &mut [u8],
    n_per_row: usize,
    imatrix: Option<&[f32]>,
) -> Result<()> {
    if n_per_row == 0 || !src.len().is_multiple_of(n_per_row) {
        return Err(Error::Quant(format!(
            "quantize: {} values are not whole rows of {n_per_row}",
            src.len()
        )));
    }
    row_size(ty, n_per_row)?;
    match imatrix {
        Some(w) if uses_imatrix(ty) => {
            if w.len() != n_per_row {
                return Err(Error::Quant(format!(
                    "quantize: importance matrix of {} values for rows of {n_per_row}",
                    w.len()
                )));
            }
            let rs = row_size(ty, n_per_row)?;
            if dst.len() != rs * (src.len() / n_per_row) {
                return Err(Error::Quant(format!(
                    "quantize: {} bytes given for {} rows of {rs}",
                    dst.len(),
                    src.len() / n_per_row
                )));
            }
            for (x, out) in src.chunks_exact(n_per_row).zip(dst.chunks_exact_mut(rs)) {
                weighted::quantize_row_weighted(ty, x, w, out)?;
            }
            Ok(())
        }
        _ => quantize_row(ty, src, dst),
    }
}
