//! The `--type` names, the `general.file_type` each one writes, and the
//! fall-backs for rows whose length is not a multiple of a type's block.

use std::fmt;
use std::str::FromStr;

use gguf::GgmlType;

use crate::error::Error;

/// llama.cpp's `llama_ftype` values (`general.file_type`), from the
/// llama crate's quantizer.
pub use llama::quantize::ftype::ft as ftype;

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
    ("mxfp4_moe", GgmlType::MXFP4, ftype::MOSTLY_MXFP4_MOE),
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
            ("mxfp4_moe", GgmlType::MXFP4, 38),
        ] {
            let t: OutType = name.parse().unwrap();
            assert_eq!((t.name, t.ty, t.file_type), (name, ty, file_type));
        }
        let e = "q9_0".parse::<OutType>().unwrap_err().to_string();
        assert!(e.contains("q9_0") && e.contains("iq4_nl"), "{e}");
    }
}
