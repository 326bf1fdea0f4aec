//! The `--type` names, the `general.file_type` each one writes, and the
//! fall-backs for rows whose length is not a multiple of a type's block.

use std::fmt;
use std::str::FromStr;

use gguf::GgmlType;

use crate::error::Error;

/// An output type as named on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutType {
    /// The name as given (lower case).
    pub name: &'static str,
    /// Type of every 2-D weight (before fall-backs).
    pub ty: GgmlType,
    /// llama.cpp's `llama_ftype` value for `general.file_type`.
    pub file_type: u32,
}

/// Every accepted `--type`: (name, tensor type, llama_ftype).
///
/// `q3_k`, `q4_k` and `q5_k` are llama-quantize's aliases of the `_M`
/// variants and write their file type; the `_m` names quantize every 2-D
/// tensor with the base type (like `llama-quantize --pure`).
const TYPES: &[(&str, GgmlType, u32)] = &[
    ("f32", GgmlType::F32, 0),
    ("f16", GgmlType::F16, 1),
    ("bf16", GgmlType::BF16, 32),
    ("q4_0", GgmlType::Q4_0, 2),
    ("q4_1", GgmlType::Q4_1, 3),
    ("q5_0", GgmlType::Q5_0, 8),
    ("q5_1", GgmlType::Q5_1, 9),
    ("q8_0", GgmlType::Q8_0, 7),
    ("q2_k", GgmlType::Q2_K, 10),
    ("q3_k", GgmlType::Q3_K, 12),
    ("q4_k", GgmlType::Q4_K, 15),
    ("q5_k", GgmlType::Q5_K, 17),
    ("q6_k", GgmlType::Q6_K, 18),
    ("iq4_nl", GgmlType::IQ4_NL, 25),
    ("q3_k_m", GgmlType::Q3_K, 12),
    ("q4_k_m", GgmlType::Q4_K, 15),
    ("q5_k_m", GgmlType::Q5_K, 17),
];

impl OutType {
    /// All accepted names, for help texts.
    pub fn names() -> impl Iterator<Item = &'static str> {
        TYPES.iter().map(|t| t.0)
    }

    /// True for types that llama.cpp counts as quantized files (they carry
    /// `general.quantization_version`).
    pub fn is_quantized(&self) -> bool {
        self.ty.is_quantized()
    }
}

impl FromStr for OutType {
    type Err = Error;

    fn from_str(s: &str) -> Result<OutType, Error> {
        TYPES
            .iter()
            .find(|t| t.0.eq_ignore_ascii_case(s))
            .map(|&(name, ty, file_type)| OutType {
                name,
                ty,
                file_type,
            })
            .ok_or_else(|| {
                Error::Usage(format!(
                    "unknown type '{s}'; expected one of: {}",
                    OutType::names().collect::<Vec<_>>().join(", ")
                ))
            })
    }
}

impl fmt::Display for OutType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

/// The type a 2-D weight with rows of `ne0` elements is stored in when
/// `want` is asked for.
///
/// Follows llama-quantize: K-quants and IQ4_XS fall back to a 32-block type
/// (Q2_K/Q3_K/IQ4_XS -> IQ4_NL, Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0),
/// and anything that still does not fit becomes F16. (llama-quantize stops
/// with an error for a 32-block type that does not fit; F16 is the nearest
/// that works.)
pub fn storage_type(want: GgmlType, ne0: u64) -> GgmlType {
    let fits = |t: GgmlType| ne0 % t.block_size() as u64 == 0;
    if fits(want) {
        return want;
    }
    let fallback = match want {
        GgmlType::Q2_K | GgmlType::Q3_K | GgmlType::IQ4_XS => GgmlType::IQ4_NL,
        GgmlType::Q4_K => GgmlType::Q5_0,
        GgmlType::Q5_K => GgmlType::Q5_1,
        GgmlType::Q6_K => GgmlType::Q8_0,
        _ => GgmlType::F16,
    };
    if fits(fallback) {
        fallback
    } else {
        GgmlType::F16
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse() {
        let t: OutType = "Q4_K_M".parse().unwrap();
        assert_eq!((t.ty, t.file_type), (GgmlType::Q4_K, 15));
        let t: OutType = "bf16".parse().unwrap();
        assert_eq!((t.ty, t.file_type), (GgmlType::BF16, 32));
        let e = "q9_0".parse::<OutType>().unwrap_err().to_string();
        assert!(e.contains("q9_0") && e.contains("iq4_nl"), "{e}");
    }

    #[test]
    fn fallbacks() {
        assert_eq!(storage_type(GgmlType::Q4_K, 256), GgmlType::Q4_K);
        assert_eq!(storage_type(GgmlType::Q4_K, 64), GgmlType::Q5_0);
        assert_eq!(storage_type(GgmlType::Q4_K, 172), GgmlType::F16);
        assert_eq!(storage_type(GgmlType::Q6_K, 896), GgmlType::Q8_0);
        assert_eq!(storage_type(GgmlType::Q3_K, 64), GgmlType::IQ4_NL);
        assert_eq!(storage_type(GgmlType::Q5_K, 64), GgmlType::Q5_1);
        assert_eq!(storage_type(GgmlType::Q4_0, 172), GgmlType::F16);
        assert_eq!(storage_type(GgmlType::Q4_0, 64), GgmlType::Q4_0);
    }
}
