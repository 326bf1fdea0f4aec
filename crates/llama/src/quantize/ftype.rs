//! The file types llama-quantize offers: their names, `llama_ftype`
//! numbers (written as `general.file_type`), descriptions and base types.

use gguf::GgmlType;

use crate::error::{LlamaError, Result};

/// A `llama_ftype` number: what `general.file_type` records.
pub type Ftype = u32;

/// The `llama_ftype` numbers the mixtures test.
#[allow(missing_docs)]
pub mod ft {
    use super::Ftype;
    pub const ALL_F32: Ftype = 0;
    pub const MOSTLY_F16: Ftype = 1;
    pub const MOSTLY_Q4_0: Ftype = 2;
    pub const MOSTLY_Q4_1: Ftype = 3;
    pub const MOSTLY_Q8_0: Ftype = 7;
    pub const MOSTLY_Q5_0: Ftype = 8;
    pub const MOSTLY_Q5_1: Ftype = 9;
    pub const MOSTLY_Q2_K: Ftype = 10;
    pub const MOSTLY_Q3_K_S: Ftype = 11;
    pub const MOSTLY_Q3_K_M: Ftype = 12;
    pub const MOSTLY_Q3_K_L: Ftype = 13;
    pub const MOSTLY_Q4_K_S: Ftype = 14;
    pub const MOSTLY_Q4_K_M: Ftype = 15;
    pub const MOSTLY_Q5_K_S: Ftype = 16;
    pub const MOSTLY_Q5_K_M: Ftype = 17;
    pub const MOSTLY_Q6_K: Ftype = 18;
    pub const MOSTLY_IQ2_XXS: Ftype = 19;
    pub const MOSTLY_IQ2_XS: Ftype = 20;
    pub const MOSTLY_Q2_K_S: Ftype = 21;
    pub const MOSTLY_IQ3_XS: Ftype = 22;
    pub const MOSTLY_IQ3_XXS: Ftype = 23;
    pub const MOSTLY_IQ1_S: Ftype = 24;
    pub const MOSTLY_IQ4_NL: Ftype = 25;
    pub const MOSTLY_IQ3_S: Ftype = 26;
    pub const MOSTLY_IQ3_M: Ftype = 27;
    pub const MOSTLY_IQ2_S: Ftype = 28;
    pub const MOSTLY_IQ2_M: Ftype = 29;
    pub const MOSTLY_IQ4_XS: Ftype = 30;
    pub const MOSTLY_IQ1_M: Ftype = 31;
    pub const MOSTLY_BF16: Ftype = 32;
    pub const MOSTLY_TQ1_0: Ftype = 36;
    pub const MOSTLY_TQ2_0: Ftype = 37;
    pub const MOSTLY_MXFP4_MOE: Ftype = 38;
    pub const MOSTLY_Q1_0: Ftype = 40;
    pub const MOSTLY_Q2_0: Ftype = 41;
}

/// One entry of llama-quantize's type list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileType {
    /// The name as llama-quantize lists it (`Q4_K_M`).
    pub name: &'static str,
    /// The `llama_ftype` written as `general.file_type`.
    pub ftype: Ftype,
    /// llama-quantize's one-line description.
    pub desc: &'static str,
}

/// llama-quantize's type list, in its order. `COPY` copies tensors as they
/// are (file type F32's number, the tensors' own types).
pub const FILE_TYPES: &[FileType] = &[
    f("Q1_0", ft::MOSTLY_Q1_0, " 1.125 bpw quantization"),
    f("Q2_0", ft::MOSTLY_Q2_0, " 2.25 bpw quantization (group 64)"),
    f("Q4_0", ft::MOSTLY_Q4_0, " 4.34G, +0.4685 ppl @ Llama-3-8B"),
    f("Q4_1", ft::MOSTLY_Q4_1, " 4.78G, +0.4511 ppl @ Llama-3-8B"),
    f("MXFP4_MOE", ft::MOSTLY_MXFP4_MOE, " MXFP4 MoE"),
    f("Q5_0", ft::MOSTLY_Q5_0, " 5.21G, +0.1316 ppl @ Llama-3-8B"),
    f("Q5_1", ft::MOSTLY_Q5_1, " 5.65G, +0.1062 ppl @ Llama-3-8B"),
    f("IQ2_XXS", ft::MOSTLY_IQ2_XXS, " 2.06 bpw quantization"),
    f("IQ2_XS", ft::MOSTLY_IQ2_XS, " 2.31 bpw quantization"),
    f("IQ2_S", ft::MOSTLY_IQ2_S, " 2.5  bpw quantization"),
    f("IQ2_M", ft::MOSTLY_IQ2_M, " 2.7  bpw quantization"),
    f("IQ1_S", ft::MOSTLY_IQ1_S, " 1.56 bpw quantization"),
    f("IQ1_M", ft::MOSTLY_IQ1_M, " 1.75 bpw quantization"),
    f("TQ1_0", ft::MOSTLY_TQ1_0, " 1.69 bpw ternarization"),
    f("TQ2_0", ft::MOSTLY_TQ2_0, " 2.06 bpw ternarization"),
    f("Q2_K", ft::MOSTLY_Q2_K, " 2.96G, +3.5199 ppl @ Llama-3-8B"),
    f(
        "Q2_K_S",
        ft::MOSTLY_Q2_K_S,
        " 2.96G, +3.1836 ppl @ Llama-3-8B",
    ),
    f("IQ3_XXS", ft::MOSTLY_IQ3_XXS, " 3.06 bpw quantization"),
    f("IQ3_S", ft::MOSTLY_IQ3_S, " 3.44 bpw quantization"),
    f("IQ3_M", ft::MOSTLY_IQ3_M, " 3.66 bpw quantization mix"),
    f("Q3_K", ft::MOSTLY_Q3_K_M, "alias for Q3_K_M"),
    f("IQ3_XS", ft::MOSTLY_IQ3_XS, " 3.3 bpw quantization"),
    f(
        "Q3_K_S",
        ft::MOSTLY_Q3_K_S,
        " 3.41G, +1.6321 ppl @ Llama-3-8B",
    ),
    f(
        "Q3_K_M",
        ft::MOSTLY_Q3_K_M,
        " 3.74G, +0.6569 ppl @ Llama-3-8B",
    ),
    f(
        "Q3_K_L",
        ft::MOSTLY_Q3_K_L,
        " 4.03G, +0.5562 ppl @ Llama-3-8B",
    ),
    f(
        "IQ4_NL",
        ft::MOSTLY_IQ4_NL,
        " 4.50 bpw non-linear quantization",
    ),
    f(
        "IQ4_XS",
        ft::MOSTLY_IQ4_XS,
        " 4.25 bpw non-linear quantization",
    ),
    f("Q4_K", ft::MOSTLY_Q4_K_M, "alias for Q4_K_M"),
    f(
        "Q4_K_S",
        ft::MOSTLY_Q4_K_S,
        " 4.37G, +0.2689 ppl @ Llama-3-8B",
    ),
    f(
        "Q4_K_M",
        ft::MOSTLY_Q4_K_M,
        " 4.58G, +0.1754 ppl @ Llama-3-8B",
    ),
    f("Q5_K", ft::MOSTLY_Q5_K_M, "alias for Q5_K_M"),
    f(
        "Q5_K_S",
        ft::MOSTLY_Q5_K_S,
        " 5.21G, +0.1049 ppl @ Llama-3-8B",
    ),
    f(
        "Q5_K_M",
        ft::MOSTLY_Q5_K_M,
        " 5.33G, +0.0569 ppl @ Llama-3-8B",
    ),
    f("Q6_K", ft::MOSTLY_Q6_K, " 6.14G, +0.0217 ppl @ Llama-3-8B"),
    f("Q8_0", ft::MOSTLY_Q8_0, " 7.96G, +0.0026 ppl @ Llama-3-8B"),
    f("F16", ft::MOSTLY_F16, "14.00G, +0.0020 ppl @ Mistral-7B"),
    f("BF16", ft::MOSTLY_BF16, "14.00G, -0.0050 ppl @ Mistral-7B"),
    f("F32", ft::ALL_F32, "26.00G              @ 7B"),
    f("COPY", ft::ALL_F32, "only copy tensors, no quantizing"),
];

const fn f(name: &'static str, ftype: Ftype, desc: &'static str) -> FileType {
    FileType { name, ftype, desc }
}

impl FileType {
    /// Looks a type up as llama-quantize does: by name, case-insensitively,
    /// else by number (the first entry with that number: `15` is
    /// `Q4_K`, `0` is `F32`, never `COPY`).
    pub fn parse(s: &str) -> Option<FileType> {
        if let Some(t) = FILE_TYPES.iter().find(|t| t.name.eq_ignore_ascii_case(s)) {
            return Some(*t);
        }
        let n = parse_leading_int(s)?;
        FILE_TYPES.iter().find(|t| i64::from(t.ftype) == n).copied()
    }

    /// True for `COPY`.
    pub fn is_copy(&self) -> bool {
        self.name == "COPY"
    }

    /// The type 2-D weights get unless the mixture says otherwise
    /// (llama.cpp's `llama_ftype_get_default_type`).
    pub fn default_type(&self) -> Result<GgmlType> {
        default_type(self.ftype)
    }

    /// The list as llama-quantize's help prints it.
    pub fn help_list() -> String {
        let mut s = String::new();
        for t in FILE_TYPES {
            if t.is_copy() {
                s.push_str("          ");
            } else {
                s.push_str(&format!("  {:2}  or  ", t.ftype));
            }
            s.push_str(&format!("{:<7} : {}\n", t.name, t.desc));
        }
        s
    }
}

/// llama.cpp's mark on a file type it guessed (`LLAMA_FTYPE_GUESSED`).
pub const GUESSED: Ftype = 1024;

/// The file type llama.cpp guesses for a file without
/// `general.file_type`: that of the most common tensor type (the first to
/// reach the count, in the order given), marked [`GUESSED`].
pub fn guess(types: impl IntoIterator<Item = GgmlType>) -> Ftype {
    use GgmlType as T;
    let mut counts = std::collections::HashMap::new();
    let (mut best, mut top) = (T::F32, 0u32);
    for t in types {
        let c = counts.entry(t).or_insert(0u32);
        *c += 1;
        if top < *c {
            (top, best) = (*c, t);
        }
    }
    let f = match best {
        T::F16 => ft::MOSTLY_F16,
        T::BF16 => ft::MOSTLY_BF16,
        T::Q4_0 => ft::MOSTLY_Q4_0,
        T::Q4_1 => ft::MOSTLY_Q4_1,
        T::Q5_0 => ft::MOSTLY_Q5_0,
        T::Q5_1 => ft::MOSTLY_Q5_1,
        T::Q8_0 => ft::MOSTLY_Q8_0,
        T::Q2_K => ft::MOSTLY_Q2_K,
        T::Q3_K => ft::MOSTLY_Q3_K_M,
        T::Q4_K => ft::MOSTLY_Q4_K_M,
        T::Q5_K => ft::MOSTLY_Q5_K_M,
        T::Q6_K => ft::MOSTLY_Q6_K,
        T::TQ1_0 => ft::MOSTLY_TQ1_0,
        T::TQ2_0 => ft::MOSTLY_TQ2_0,
        T::IQ2_XXS => ft::MOSTLY_IQ2_XXS,
        T::IQ2_XS => ft::MOSTLY_IQ2_XS,
        T::IQ2_S => ft::MOSTLY_IQ2_S,
        T::IQ3_XXS => ft::MOSTLY_IQ3_XXS,
        T::IQ1_S => ft::MOSTLY_IQ1_S,
        T::IQ1_M => ft::MOSTLY_IQ1_M,
        T::IQ4_NL => ft::MOSTLY_IQ4_NL,
        T::IQ4_XS => ft::MOSTLY_IQ4_XS,
        T::IQ3_S => ft::MOSTLY_IQ3_S,
        _ => ft::ALL_F32,
    };
    f | GUESSED
}

/// `std::stoi`'s reading: optional blanks and sign, then digits; the rest
/// is ignored.
fn parse_leading_int(s: &str) -> Option<i64> {
    let t = s.trim_start();
    let (neg, t) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let digits = t.bytes().take_while(u8::is_ascii_digit).count();
    let v: i64 = t[..digits].parse().ok()?;
    i32::try_from(v).ok()?;
    Some(if neg { -v } else { v })
}

/// The base type of a file type (llama.cpp's `llama_ftype_get_default_type`).
pub fn default_type(ftype: Ftype) -> Result<GgmlType> {
    use GgmlType as T;
    Ok(match ftype {
        ft::MOSTLY_Q4_0 => T::Q4_0,
        ft::MOSTLY_Q4_1 => T::Q4_1,
        ft::MOSTLY_Q5_0 => T::Q5_0,
        ft::MOSTLY_Q5_1 => T::Q5_1,
        ft::MOSTLY_Q8_0 => T::Q8_0,
        ft::MOSTLY_F16 => T::F16,
        ft::MOSTLY_BF16 => T::BF16,
        ft::ALL_F32 => T::F32,
        ft::MOSTLY_MXFP4_MOE => T::MXFP4,
        ft::MOSTLY_Q2_K_S | ft::MOSTLY_Q2_K => T::Q2_K,
        ft::MOSTLY_IQ3_XS => T::IQ3_S,
        ft::MOSTLY_Q3_K_S | ft::MOSTLY_Q3_K_M | ft::MOSTLY_Q3_K_L => T::Q3_K,
        ft::MOSTLY_Q4_K_S | ft::MOSTLY_Q4_K_M => T::Q4_K,
        ft::MOSTLY_Q5_K_S | ft::MOSTLY_Q5_K_M => T::Q5_K,
        ft::MOSTLY_Q6_K => T::Q6_K,
        ft::MOSTLY_TQ1_0 => T::TQ1_0,
        ft::MOSTLY_TQ2_0 => T::TQ2_0,
        ft::MOSTLY_IQ2_XXS => T::IQ2_XXS,
        ft::MOSTLY_IQ2_XS | ft::MOSTLY_IQ2_S => T::IQ2_XS,
        ft::MOSTLY_IQ2_M => T::IQ2_S,
        ft::MOSTLY_IQ3_XXS => T::IQ3_XXS,
        ft::MOSTLY_IQ1_S => T::IQ1_S,
        ft::MOSTLY_IQ1_M => T::IQ1_M,
        ft::MOSTLY_IQ4_NL => T::IQ4_NL,
        ft::MOSTLY_IQ4_XS => T::IQ4_XS,
        ft::MOSTLY_IQ3_S | ft::MOSTLY_IQ3_M => T::IQ3_S,
        ft::MOSTLY_Q1_0 | ft::MOSTLY_Q2_0 => {
            return Err(LlamaError::NotSupported(format!(
                "file type {ftype} (the Q1_0 and Q2_0 tensor types)"
            )))
        }
        _ => {
            return Err(LlamaError::InvalidParam(format!(
                "invalid output file type {ftype}"
            )))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_numbers() {
        let t = FileType::parse("q4_k_m").unwrap();
        assert_eq!((t.name, t.ftype), ("Q4_K_M", 15));
        assert_eq!(FileType::parse("15").unwrap().name, "Q4_K");
        assert_eq!(FileType::parse("0").unwrap().name, "F32");
        assert_eq!(FileType::parse("copy").unwrap().name, "COPY");
        assert!(FileType::parse("q9_9").is_none());
        assert!(FileType::parse("99").is_none());
        assert!(FileType::parse("model.gguf").is_none());
        assert_eq!(default_type(15).unwrap(), GgmlType::Q4_K);
        assert_eq!(default_type(28).unwrap(), GgmlType::IQ2_XS);
        assert!(default_type(40).is_err());
        assert!(default_type(5).is_err());
    }

    #[test]
    fn help_lists_every_type_as_llama_cpp() {
        let h = FileType::help_list();
        assert!(
            h.contains("  15  or  Q4_K_M  :  4.58G, +0.1754 ppl @ Llama-3-8B\n"),
            "{h}"
        );
        assert!(h.contains("          COPY    : only copy tensors, no quantizing\n"));
        assert_eq!(h.lines().count(), FILE_TYPES.len());
    }
}
