//! The ggml tensor type table: ids as stored in GGUF files, names, block sizes
//! and bytes per block.

use std::fmt;

/// A ggml tensor element type, as stored in a GGUF tensor info (`u32` id).
///
/// Ids that ggml once used and then removed are kept as variants so that a
/// file carrying them can be reported precisely ("type 31 (Q4_0_4_4) was
/// removed from ggml") rather than as an unknown number.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u32)]
pub enum GgmlType {
    /// 32-bit float.
    F32 = 0,
    /// IEEE half float.
    F16 = 1,
    /// 4-bit blocks of 32 with an f16 scale.
    Q4_0 = 2,
    /// 4-bit blocks of 32 with f16 scale and minimum.
    Q4_1 = 3,
    /// Removed from ggml.
    Q4_2 = 4,
    /// Removed from ggml.
    Q4_3 = 5,
    /// 5-bit blocks of 32 with an f16 scale.
    Q5_0 = 6,
    /// 5-bit blocks of 32 with f16 scale and minimum.
    Q5_1 = 7,
    /// 8-bit blocks of 32 with an f16 scale.
    Q8_0 = 8,
    /// 8-bit blocks of 32 with f16 scale and sum (activations).
    Q8_1 = 9,
    /// 2-bit K-quant super-blocks of 256.
    Q2_K = 10,
    /// 3-bit K-quant super-blocks of 256.
    Q3_K = 11,
    /// 4-bit K-quant super-blocks of 256.
    Q4_K = 12,
    /// 5-bit K-quant super-blocks of 256.
    Q5_K = 13,
    /// 6-bit K-quant super-blocks of 256.
    Q6_K = 14,
    /// 8-bit K-quant super-blocks of 256 (activations).
    Q8_K = 15,
    /// 2.06-bit i-quant.
    IQ2_XXS = 16,
    /// 2.31-bit i-quant.
    IQ2_XS = 17,
    /// 3.06-bit i-quant.
    IQ3_XXS = 18,
    /// 1.56-bit i-quant.
    IQ1_S = 19,
    /// 4-bit non-linear blocks of 32.
    IQ4_NL = 20,
    /// 3.44-bit i-quant.
    IQ3_S = 21,
    /// 2.5-bit i-quant.
    IQ2_S = 22,
    /// 4.25-bit non-linear super-blocks of 256.
    IQ4_XS = 23,
    /// 8-bit integer.
    I8 = 24,
    /// 16-bit integer.
    I16 = 25,
    /// 32-bit integer.
    I32 = 26,
    /// 64-bit integer.
    I64 = 27,
    /// 64-bit float.
    F64 = 28,
    /// 1.75-bit i-quant.
    IQ1_M = 29,
    /// bfloat16.
    BF16 = 30,
    /// Removed from ggml (repacked Q4_0).
    Q4_0_4_4 = 31,
    /// Removed from ggml (repacked Q4_0).
    Q4_0_4_8 = 32,
    /// Removed from ggml (repacked Q4_0).
    Q4_0_8_8 = 33,
    /// Ternary 1.69-bit.
    TQ1_0 = 34,
    /// Ternary 2.06-bit.
    TQ2_0 = 35,
    /// Removed from ggml (repacked IQ4_NL).
    IQ4_NL_4_4 = 36,
    /// Removed from ggml (repacked IQ4_NL).
    IQ4_NL_4_8 = 37,
    /// Removed from ggml (repacked IQ4_NL).
    IQ4_NL_8_8 = 38,
    /// Microscaling FP4 blocks of 32.
    MXFP4 = 39,
}

/// One past the largest type id ggml knows.
pub const GGML_TYPE_COUNT: u32 = 40;

/// Static facts about a type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TypeTraits {
    /// ggml's name for the type (`"q4_K"` style names are ggml's own spelling).
    pub name: &'static str,
    /// Elements per block (1 for plain types).
    pub block_size: usize,
    /// Bytes per block.
    pub type_size: usize,
    /// True for ids that ggml removed; such tensors cannot be loaded.
    pub removed: bool,
    /// True for block-quantized types.
    pub quantized: bool,
}

const fn t(name: &'static str, block_size: usize, type_size: usize, quantized: bool) -> TypeTraits {
    TypeTraits {
        name,
        block_size,
        type_size,
        removed: false,
        quantized,
    }
}

const fn removed(name: &'static str, block_size: usize, type_size: usize) -> TypeTraits {
    TypeTraits {
        name,
        block_size,
        type_size,
        removed: true,
        quantized: true,
    }
}

/// Block size of every K-quant and most i-quants.
pub const QK_K: usize = 256;

const TRAITS: [TypeTraits; GGML_TYPE_COUNT as usize] = [
    t("f32", 1, 4, false),
    t("f16", 1, 2, false),
    t("q4_0", 32, 18, true),
    t("q4_1", 32, 20, true),
    removed("q4_2", 32, 18),
    removed("q4_3", 32, 20),
    t("q5_0", 32, 22, true),
    t("q5_1", 32, 24, true),
    t("q8_0", 32, 34, true),
    t("q8_1", 32, 36, true),
    t("q2_K", QK_K, 84, true),
    t("q3_K", QK_K, 110, true),
    t("q4_K", QK_K, 144, true),
    t("q5_K", QK_K, 176, true),
    t("q6_K", QK_K, 210, true),
    t("q8_K", QK_K, 292, true),
    t("iq2_xxs", QK_K, 66, true),
    t("iq2_xs", QK_K, 74, true),
    t("iq3_xxs", QK_K, 98, true),
    t("iq1_s", QK_K, 50, true),
    t("iq4_nl", 32, 18, true),
    t("iq3_s", QK_K, 110, true),
    t("iq2_s", QK_K, 82, true),
    t("iq4_xs", QK_K, 136, true),
    t("i8", 1, 1, false),
    t("i16", 1, 2, false),
    t("i32", 1, 4, false),
    t("i64", 1, 8, false),
    t("f64", 1, 8, false),
    t("iq1_m", QK_K, 56, true),
    t("bf16", 1, 2, false),
    removed("q4_0_4_4", 32, 18),
    removed("q4_0_4_8", 32, 18),
    removed("q4_0_8_8", 32, 18),
    t("tq1_0", QK_K, 54, true),
    t("tq2_0", QK_K, 66, true),
    removed("iq4_nl_4_4", 32, 18),
    removed("iq4_nl_4_8", 32, 18),
    removed("iq4_nl_8_8", 32, 18),
    t("mxfp4", 32, 17, true),
];

const ALL: [GgmlType; GGML_TYPE_COUNT as usize] = {
    use GgmlType::*;
    [
        F32, F16, Q4_0, Q4_1, Q4_2, Q4_3, Q5_0, Q5_1, Q8_0, Q8_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,
        Q8_K, IQ2_XXS, IQ2_XS, IQ3_XXS, IQ1_S, IQ4_NL, IQ3_S, IQ2_S, IQ4_XS, I8, I16, I32, I64,
        F64, IQ1_M, BF16, Q4_0_4_4, Q4_0_4_8, Q4_0_8_8, TQ1_0, TQ2_0, IQ4_NL_4_4, IQ4_NL_4_8,
        IQ4_NL_8_8, MXFP4,
    ]
};

impl GgmlType {
    /// Every id, in id order (removed ones included).
    pub fn all() -> &'static [GgmlType] {
        &ALL
    }

    /// The type for a stored id, or `None` when the id is out of range.
    pub fn from_u32(id: u32) -> Option<GgmlType> {
        ALL.get(id as usize).copied()
    }

    /// Looks a type up by ggml's name, case-insensitively (`"q4_k"`, `"Q4_K"`, `"f16"`).
    pub fn from_name(name: &str) -> Option<GgmlType> {
        ALL.iter()
            .copied()
            .find(|t| t.name().eq_ignore_ascii_case(name))
    }

    /// The stored id.
    pub fn id(self) -> u32 {
        self as u32
    }

    /// Static facts about the type.
    pub fn traits(self) -> &'static TypeTraits {
        &TRAITS[self as usize]
    }

    /// ggml's name for the type.
    pub fn name(self) -> &'static str {
        self.traits().name
    }

    /// Elements per block.
    pub fn block_size(self) -> usize {
        self.traits().block_size
    }

    /// Bytes per block.
    pub fn type_size(self) -> usize {
        self.traits().type_size
    }

    /// True for ids ggml removed.
    pub fn is_removed(self) -> bool {
        self.traits().removed
    }

    /// True for block-quantized types.
    pub fn is_quantized(self) -> bool {
        self.traits().quantized
    }

    /// Bytes of a row of `n` elements, or `None` when `n` is not a multiple of
    /// the block size or the size overflows.
    pub fn row_size(self, n: u64) -> Option<u64> {
        let bs = self.block_size() as u64;
        if n % bs != 0 {
            return None;
        }
        (n / bs).checked_mul(self.type_size() as u64)
    }

    /// Bytes of a contiguous tensor with dimensions `ne` (ggml order: `ne[0]` is
    /// the row length), or `None` on a partial block or overflow.
    pub fn tensor_size(self, ne: &[u64]) -> Option<u64> {
        let (first, rest) = match ne.split_first() {
            Some(x) => x,
            None => return Some(self.type_size() as u64),
        };
        let mut size = self.row_size(*first)?;
        for &d in rest {
            size = size.checked_mul(d)?;
        }
        Some(size)
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name().to_ascii_uppercase())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip() {
        for (i, t) in GgmlType::all().iter().enumerate() {
            assert_eq!(t.id(), i as u32);
            assert_eq!(GgmlType::from_u32(i as u32), Some(*t));
            assert_eq!(GgmlType::from_name(t.name()), Some(*t));
        }
        assert_eq!(GgmlType::from_u32(GGML_TYPE_COUNT), None);
    }

    #[test]
    fn sizes() {
        assert_eq!(GgmlType::Q4_0.row_size(64), Some(36));
        assert_eq!(GgmlType::Q4_0.row_size(33), None);
        assert_eq!(GgmlType::Q4_K.tensor_size(&[256, 3]), Some(432));
        assert_eq!(GgmlType::F32.tensor_size(&[u64::MAX, 2]), None);
        assert!(GgmlType::Q4_0_4_4.is_removed());
        assert_eq!(GgmlType::Q6_K.to_string(), "Q6_K");
    }
}
