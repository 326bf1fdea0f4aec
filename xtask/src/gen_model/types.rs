//! The `--type` names, the `general.file_type` each one writes, and the
//! fall-backs for rows whose length is not a multiple of a type's block.

use std::fmt;
use std::str::FromStr;

use gguf::GgmlType;

use crate::error::Error;

/// llama.cpp's `llama_ftype` values (`general.file_type`) of the file types
/// offered here.
pub mod ftype {
    /// Every tensor F32.
    pub const ALL_F32: u32 = 0;
    /// F16 weights.
    pub const MOSTLY_F16: u32 = 1;
    /// Q4_0 weights.
    pub const MOSTLY_Q4_0: u32 = 2;
    /// Q4_1 weights.
    pub const MOSTLY_Q4_1: u32 = 3;
    /// Q8_0 weights.
    pub const MOSTLY_Q8_0: u32 = 7;
    /// Q5_0 weights.
    pub const MOSTLY_Q5_0: u32 = 8;
    /// Q5_1 weights.
    pub const MOSTLY_Q5_1: u32 = 9;
    /// Q2_K mixture.
    pub const MOSTLY_Q2_K: u32 = 10;
    /// Q3_K small mixture.
    pub const MOSTLY_Q3_K_S: u32 = 11;
    /// Q3_K medium mixture.
    pub const MOSTLY_Q3_K_M: u32 = 12;
    /// Q3_K large mixture.
    pub const MOSTLY_Q3_K_L: u32 = 13;
    /// Q4_K small mixture.
    pub const MOSTLY_Q4_K_S: u32 = 14;
    /// Q4_K medium mixture.
    pub const MOSTLY_Q4_K_M: u32 = 15;
    /// Q5_K small mixture.
    pub const MOSTLY_Q5_K_S: u32 = 16;
    /// Q5_K medium mixture.
    pub const MOSTLY_Q5_K_M: u32 = 17;
    /// Q6_K weights.
    pub const MOSTLY_Q6_K: u32 = 18;
    /// IQ4_NL weights.
    pub const MOSTLY_IQ4_NL: u32 = 25;
    /// BF16 weights.
    pub const MOSTLY_BF16: u32 = 32;
}

/// An output type as named on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutType {
    /// The name as given (lower case).
    pub name: &'static str,
    /// The file type's base type: what a 2-D weight gets unless the
    /// file type's mixture gives it another (before fall-backs).
    pub ty: GgmlType,
    /// llama.cpp's `llama_ftype` value for `general.file_type` (see
    /// [`ftype`]).
    pub file_type: u32,
    /// Every 2-D weight in the base type, without the file type's mixture
    /// (`llama-quantize --pure`). Parsing a name gives `false`.
    pub pure: bool,
}

/// Every accepted `--type`: (name, base type, llama_ftype), with
/// llama-quantize's names.
///
/// Quantized file types give some weights other types than the base one,
/// as llama-quantize does (see [`mixture`](super::mixture)); `q3_k`, `q4_k`
/// and `q5_k` are llama-quantize's aliases of the `_m` variants and write
/// their mixture and file type.
const TYPES: &[(&str, GgmlType, u32)] = &[
    ("f32", GgmlType::F32, ftype::ALL_F32),
    ("f16", GgmlType::F16, ftype::MOSTLY_F16),
    ("bf16", GgmlType::BF16, ftype::MOSTLY_BF16),
    ("q4_0", GgmlType::Q4_0, ftype::MOSTLY_Q4_0),
    ("q4_1", GgmlType::Q4_1, ftype::MOSTLY_Q4_1),
    ("q5_0", GgmlType::Q5_0, ftype::MOSTLY_Q5_0),
    ("q5_1", GgmlType::Q5_1, ftype::MOSTLY_Q5_1),
    ("q8_0", GgmlType::Q8_0, ftype::MOSTLY_Q8_0),
    ("q2_k", GgmlType::Q2_K, ftype::MOSTLY_Q2_K),
    ("q3_k", GgmlType::Q3_K, ftype::MOSTLY_Q3_K_M),
    ("q4_k", GgmlType::Q4_K, ftype::MOSTLY_Q4_K_M),
    ("q5_k", GgmlType::Q5_K, ftype::MOSTLY_Q5_K_M),
    ("q6_k", GgmlType::Q6_K, ftype::MOSTLY_Q6_K),
    ("iq4_nl", GgmlType::IQ4_NL, ftype::MOSTLY_IQ4_NL),
    ("q3_k_s", GgmlType::Q3_K, ftype::MOSTLY_Q3_K_S),
    ("q3_k_m", GgmlType::Q3_K, ftype::MOSTLY_Q3_K_M),
    ("q3_k_l", GgmlType::Q3_K, ftype::MOSTLY_Q3_K_L),
    ("q4_k_s", GgmlType::Q4_K, ftype::MOSTLY_Q4_K_S),
    ("q4_k_m", GgmlType::Q4_K, ftype::MOSTLY_Q4_K_M),
    ("q5_k_s", GgmlType::Q5_K, ftype::MOSTLY_Q5_K_S),
    ("q5_k_m", GgmlType::Q5_K, ftype::MOSTLY_Q5_K_M),
];

impl OutType {
    /// All accepted names, for help texts.
    pub fn names() -> impl Iterator<Item = &'static str> {
        TYPES.iter().map(|t| t.0)
    }

    /// True for types that llama.cpp counts as quantized files (they carry
    /// `general.quantization_version` and, unless pure, a type mixture).
    pub fn is_quantized(&self) -> bool {
        self.ty.is_quantized()
    }

    /// The same file type with every 2-D weight in the base type.
    pub fn pure(self) -> OutType {
        OutType { pure: true, ..self }
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
                pure: false,
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
        assert_eq!((t.ty, t.file_type, t.pure), (GgmlType::Q4_K, 15, false));
        assert!(t.pure().pure);
        let t: OutType = "bf16".parse().unwrap();
        assert_eq!((t.ty, t.file_type), (GgmlType::BF16, 32));
        // llama-quantize's names and llama_ftype values; q3_k, q4_k and q5_k
        // are its aliases of the _M mixtures.
        for (name, ty, file_type) in [
            ("q2_k", GgmlType::Q2_K, 10),
            ("q3_k_s", GgmlType::Q3_K, 11),
            ("q3_k_m", GgmlType::Q3_K, 12),
            ("q3_k", GgmlType::Q3_K, 12),
            ("q3_k_l", GgmlType::Q3_K, 13),
            ("q4_k_s", GgmlType::Q4_K, 14),
            ("q4_k", GgmlType::Q4_K, 15),
            ("q5_k_s", GgmlType::Q5_K, 16),
            ("q5_k_m", GgmlType::Q5_K, 17),
            ("q5_k", GgmlType::Q5_K, 17),
            ("q6_k", GgmlType::Q6_K, 18),
            ("iq4_nl", GgmlType::IQ4_NL, 25),
        ] {
            let t: OutType = name.parse().unwrap();
            assert_eq!((t.name, t.ty, t.file_type), (name, ty, file_type));
        }
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
