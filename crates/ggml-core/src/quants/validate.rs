//! Checks of row data for NaN and infinity, as ggml's `ggml_validate_row_data`:
//! every value of the float types, the scales (`d`, and `m` / `dmin` where a
//! block has one) of the block types.

use half::f16;

use super::blocks::*;
use crate::error::{Error, Result};
use crate::Type;

fn bad(ty: Type, index: usize, unit: &str, what: &str) -> Error {
    Error::Quant(format!("{ty} data: {unit} {index}: {what}"))
}

fn check_f32(ty: Type, v: f32, index: usize, unit: &str, field: &str) -> Result<()> {
    if v.is_infinite() {
        return Err(bad(ty, index, unit, &format!("{field} is infinite")));
    }
    if v.is_nan() {
        return Err(bad(ty, index, unit, &format!("{field} is NaN")));
    }
    Ok(())
}

fn check_f16(ty: Type, h: f16, index: usize, field: &str) -> Result<()> {
    let bits = h.to_bits();
    if bits & 0x7c00 == 0x7c00 {
        let what = if bits & 0x03ff == 0 {
            "infinite"
        } else {
            "NaN"
        };
        return Err(bad(ty, index, "block", &format!("{field} is {what}")));
    }
    Ok(())
}

fn blocks<B: Block, const N: usize>(
    data: &[u8],
    scales: impl Fn(&B) -> [(&'static str, f16); N],
) -> Result<()> {
    for (i, b) in iter_blocks::<B>(data).enumerate() {
        for (field, h) in scales(&b?) {
            check_f16(B::TYPE, h, i, field)?;
        }
    }
    Ok(())
}

/// Checks a buffer of `ty` data: its length must be a whole number of blocks
/// (elements for the plain types), float values and block scales must be
/// finite. Errors name the block (or element) index and what is wrong.
pub fn validate_row_data(ty: Type, data: &[u8]) -> Result<()> {
    let ts = ty.type_size();
    if ty.is_removed() {
        return Err(Error::Quant(format!("type {ty} was removed from ggml")));
    }
    if !data.len().is_multiple_of(ts) {
        return Err(Error::Quant(format!(
            "{ty} data: {} bytes is not a multiple of the type size {ts}",
            data.len()
        )));
    }
    use Type::*;
    match ty {
        F32 => {
            for (i, b) in data.chunks_exact(4).enumerate() {
                let v = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                check_f32(ty, v, i, "element", "value")?;
            }
            Ok(())
        }
        F64 => {
            for (i, b) in data.chunks_exact(8).enumerate() {
                let mut a = [0u8; 8];
                a.copy_from_slice(b);
                let v = f64::from_le_bytes(a);
                if v.is_infinite() {
                    return Err(bad(ty, i, "element", "value is infinite"));
                }
                if v.is_nan() {
                    return Err(bad(ty, i, "element", "value is NaN"));
                }
            }
            Ok(())
        }
        F16 => {
            for (i, b) in data.chunks_exact(2).enumerate() {
                let h = f16::from_bits(u16::from_le_bytes([b[0], b[1]]));
                if h.to_bits() & 0x7c00 == 0x7c00 {
                    let what = if h.to_bits() & 0x03ff == 0 {
                        "infinite"
                    } else {
                        "NaN"
                    };
                    return Err(bad(ty, i, "element", &format!("value is {what}")));
                }
            }
            Ok(())
        }
        BF16 => {
            for (i, b) in data.chunks_exact(2).enumerate() {
                let v = u16::from_le_bytes([b[0], b[1]]) & 0x7fff;
                if v > 0x7f80 {
                    return Err(bad(ty, i, "element", "value is NaN"));
                }
                if v == 0x7f80 {
                    return Err(bad(ty, i, "element", "value is infinite"));
                }
            }
            Ok(())
        }
        I8 | I16 | I32 | I64 => Ok(()),
        Q4_0 => blocks::<BlockQ4_0, _>(data, |b| [("d", b.d)]),
        Q4_1 => blocks::<BlockQ4_1, _>(data, |b| [("d", b.d), ("m", b.m)]),
        Q5_0 => blocks::<BlockQ5_0, _>(data, |b| [("d", b.d)]),
        Q5_1 => blocks::<BlockQ5_1, _>(data, |b| [("d", b.d), ("m", b.m)]),
        Q8_0 => blocks::<BlockQ8_0, _>(data, |b| [("d", b.d)]),
        Q8_1 => blocks::<BlockQ8_1, _>(data, |b| [("d", b.d), ("s", b.s)]),
        Q2_K => blocks::<BlockQ2K, _>(data, |b| [("d", b.d), ("dmin", b.dmin)]),
        Q3_K => blocks::<BlockQ3K, _>(data, |b| [("d", b.d)]),
        Q4_K => blocks::<BlockQ4K, _>(data, |b| [("d", b.d), ("dmin", b.dmin)]),
        Q5_K => blocks::<BlockQ5K, _>(data, |b| [("d", b.d), ("dmin", b.dmin)]),
        Q6_K => blocks::<BlockQ6K, _>(data, |b| [("d", b.d)]),
        Q8_K => {
            for (i, b) in iter_blocks::<BlockQ8K>(data).enumerate() {
                check_f32(ty, b?.d, i, "block", "d")?;
            }
            Ok(())
        }
        IQ2_XXS => blocks::<BlockIq2Xxs, _>(data, |b| [("d", b.d)]),
        IQ2_XS => blocks::<BlockIq2Xs, _>(data, |b| [("d", b.d)]),
        IQ2_S => blocks::<BlockIq2S, _>(data, |b| [("d", b.d)]),
        IQ3_XXS => blocks::<BlockIq3Xxs, _>(data, |b| [("d", b.d)]),
        IQ3_S => blocks::<BlockIq3S, _>(data, |b| [("d", b.d)]),
        IQ1_S => blocks::<BlockIq1S, _>(data, |b| [("d", b.d)]),
        IQ1_M => blocks::<BlockIq1M, _>(data, |b| [("d", f16::from_bits(b.scale_bits()))]),
        IQ4_NL => blocks::<BlockIq4Nl, _>(data, |b| [("d", b.d)]),
        IQ4_XS => blocks::<BlockIq4Xs, _>(data, |b| [("d", b.d)]),
        TQ1_0 => blocks::<BlockTq1_0, _>(data, |b| [("d", b.d)]),
        TQ2_0 => blocks::<BlockTq2_0, _>(data, |b| [("d", b.d)]),
        MXFP4 => {
            for (i, b) in iter_blocks::<BlockMxfp4>(data).enumerate() {
                if b?.e == 0xff {
                    return Err(bad(ty, i, "block", "exponent e is 0xff (NaN)"));
                }
            }
            Ok(())
        }
        _ => Err(Error::Quant(format!("cannot validate data of type {ty}"))),
    }
}
