//! Small value types shared by the tokenizers: token ids, token types and
//! attributes, vocabulary and pre-tokenizer kinds.

use std::fmt;
use std::ops::{BitOr, BitOrAssign};

/// A token id, signed as in llama.cpp (`llama_token`).
pub type TokenId = i32;

/// The tokenizer family (`tokenizer.ggml.model`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum VocabType {
    /// `no_vocab` / `none`: the model has no vocabulary; nothing tokenizes.
    NoVocab,
    /// `llama`: SentencePiece BPE with scores and byte fallback.
    Spm,
    /// `gpt2`: byte-level BPE with ranked merges and a pre-tokenizer.
    Bpe,
    /// `bert`: WordPiece, greedy longest match.
    Wpm,
    /// `t5`: Unigram, best-scoring segmentation.
    Ugm,
    /// `rwkv`: RWKV's world tokenizer, greedy longest match over bytes.
    Rwkv,
}

impl VocabType {
    /// The name llama.cpp prints for this type.
    pub fn name(self) -> &'static str {
        match self {
            VocabType::NoVocab => "no vocab",
            VocabType::Spm => "SPM",
            VocabType::Bpe => "BPE",
            VocabType::Wpm => "WPM",
            VocabType::Ugm => "UGM",
            VocabType::Rwkv => "RWKV",
        }
    }
}

/// The token type stored per token in `tokenizer.ggml.token_type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TokenType {
    /// 0, or any value outside the known range.
    Undefined,
    /// 1: an ordinary token.
    Normal,
    /// 2: the unknown-token placeholder.
    Unknown,
    /// 3: a control token (BOS, EOS, chat markers).
    Control,
    /// 4: a user-defined token, split out of the text before tokenizing.
    UserDefined,
    /// 5: an unused slot.
    Unused,
    /// 6: a byte-fallback token `<0xXX>`.
    Byte,
}

impl TokenType {
    /// The type for a stored value; unknown values read as `Undefined`,
    /// as llama.cpp does.
    pub fn from_i32(v: i32) -> TokenType {
        match v {
            1 => TokenType::Normal,
            2 => TokenType::Unknown,
            3 => TokenType::Control,
            4 => TokenType::UserDefined,
            5 => TokenType::Unused,
            6 => TokenType::Byte,
            _ => TokenType::Undefined,
        }
    }

    /// The stored value of this type.
    pub fn as_i32(self) -> i32 {
        match self {
            TokenType::Undefined => 0,
            TokenType::Normal => 1,
            TokenType::Unknown => 2,
            TokenType::Control => 3,
            TokenType::UserDefined => 4,
            TokenType::Unused => 5,
            TokenType::Byte => 6,
        }
    }

    /// The attribute set a token of this type starts with.
    pub fn attr(self) -> TokenAttr {
        match self {
            TokenType::Undefined => TokenAttr::UNDEFINED,
            TokenType::Normal => TokenAttr::NORMAL,
            TokenType::Unknown => TokenAttr::UNKNOWN,
            TokenType::Control => TokenAttr::CONTROL,
            TokenType::UserDefined => TokenAttr::USER_DEFINED,
            TokenType::Unused => TokenAttr::UNUSED,
            TokenType::Byte => TokenAttr::BYTE,
        }
    }
}

/// Token attributes (`llama_token_attr`), a bit set.
///
/// They start from the token type and are then adjusted by the loader
/// (control-looking end-of-turn tokens become `CONTROL`, some models get
/// `LSTRIP`/`RSTRIP` on their special tokens).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TokenAttr(pub u32);

impl TokenAttr {
    /// No attribute.
    pub const UNDEFINED: TokenAttr = TokenAttr(0);
    /// Unknown-token placeholder.
    pub const UNKNOWN: TokenAttr = TokenAttr(1 << 0);
    /// Unused slot.
    pub const UNUSED: TokenAttr = TokenAttr(1 << 1);
    /// Ordinary token.
    pub const NORMAL: TokenAttr = TokenAttr(1 << 2);
    /// Control token.
    pub const CONTROL: TokenAttr = TokenAttr(1 << 3);
    /// User-defined token.
    pub const USER_DEFINED: TokenAttr = TokenAttr(1 << 4);
    /// Byte-fallback token.
    pub const BYTE: TokenAttr = TokenAttr(1 << 5);
    /// Normalized (unused by the tokenizers here).
    pub const NORMALIZED: TokenAttr = TokenAttr(1 << 6);
    /// Strip whitespace before the token when splitting special tokens.
    pub const LSTRIP: TokenAttr = TokenAttr(1 << 7);
    /// Strip whitespace after the token when splitting special tokens.
    pub const RSTRIP: TokenAttr = TokenAttr(1 << 8);
    /// Single word (unused by the tokenizers here).
    pub const SINGLE_WORD: TokenAttr = TokenAttr(1 << 9);

    /// True when any bit of `other` is set in `self`.
    pub fn intersects(self, other: TokenAttr) -> bool {
        self.0 & other.0 != 0
    }

    /// True when every bit of `other` is set in `self`.
    pub fn contains(self, other: TokenAttr) -> bool {
        self.0 & other.0 == other.0
    }

    /// `self` with the bits of `other` set or cleared.
    pub fn with(self, other: TokenAttr, on: bool) -> TokenAttr {
        if on {
            TokenAttr(self.0 | other.0)
        } else {
            TokenAttr(self.0 & !other.0)
        }
    }
}

impl BitOr for TokenAttr {
    type Output = TokenAttr;
    fn bitor(self, rhs: TokenAttr) -> TokenAttr {
        TokenAttr(self.0 | rhs.0)
    }
}

impl BitOrAssign for TokenAttr {
    fn bitor_assign(&mut self, rhs: TokenAttr) {
        self.0 |= rhs.0;
    }
}

impl fmt::Debug for TokenAttr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAMES: [&str; 10] = [
            "UNKNOWN",
            "UNUSED",
            "NORMAL",
            "CONTROL",
            "USER_DEFINED",
            "BYTE",
            "NORMALIZED",
            "LSTRIP",
            "RSTRIP",
            "SINGLE_WORD",
        ];
        if self.0 == 0 {
            return f.write_str("UNDEFINED");
        }
        let mut first = true;
        for (bit, name) in NAMES.iter().enumerate() {
            if self.0 & (1 << bit) != 0 {
                if !first {
                    f.write_str(" | ")?;
                }
                f.write_str(name)?;
                first = false;
            }
        }
        let rest = self.0 & !((1 << NAMES.len()) - 1);
        if rest != 0 {
            if !first {
                f.write_str(" | ")?;
            }
            write!(f, "{rest:#x}")?;
        }
        Ok(())
    }
}

/// The pre-tokenizer of a BPE vocabulary (`tokenizer.ggml.pre`).
///
/// Several names map to one type, as in llama.cpp; the type selects the list
/// of splitting regexes and a few flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PreType {
    /// `default`, or no `pre` key at all.
    Default,
    /// `llama3`, `llama-v3`, `llama-bpe`, `falcon3`.
    Llama3,
    /// `deepseek-llm`.
    DeepseekLlm,
    /// `deepseek-coder`.
    DeepseekCoder,
    /// `deepseek-v3`.
    Deepseek3Llm,
    /// `falcon`.
    Falcon,
    /// `mpt`.
    Mpt,
    /// `starcoder`.
    Starcoder,
    /// `gpt-2` and the GPT-2-like names (`phi-2`, `jina-*`, `roberta-bpe`, ...).
    Gpt2,
    /// `refact`.
    Refact,
    /// `command-r`.
    CommandR,
    /// `stablelm2`.
    Stablelm2,
    /// `qwen2`, `deepseek-r1-qwen`, `megrez`.
    Qwen2,
    /// `olmo`.
    Olmo,
    /// `dbrx`.
    Dbrx,
    /// `smaug-bpe`.
    Smaug,
    /// `poro-chat`.
    Poro,
    /// `chatglm-bpe`.
    Chatglm4,
    /// `viking`.
    Viking,
    /// `jais`.
    Jais,
    /// `tekken`.
    Tekken,
    /// `smollm`.
    Smollm,
    /// `codeshell`.
    Codeshell,
    /// `bloom`.
    Bloom,
    /// `gpt3-finnish`.
    Gpt3Finnish,
    /// `exaone`.
    Exaone,
    /// `chameleon`.
    Chameleon,
    /// `minerva-7b`.
    Minerva,
    /// `jais-2`.
    Jais2,
    /// `spark2_5`.
    Spark25,
    /// `youtu`.
    Youtu,
    /// `gpt-4o`, `llama4`, `kanana2`, `talkie`, `minimax-m2`.
    Gpt4o,
    /// `granite-embed-multi-97m`.
    GraniteEmbMulti,
    /// `bailingmoe`, `bailingmoe2`, `llada-moe`.
    Bailingmoe,
    /// `seed-coder`.
    SeedCoder,
    /// `ufakzeka`.
    Ufakzeka,
    /// `laguna`.
    Laguna,
    /// `exaone-moe`.
    ExaoneMoe,
    /// `minicpm5`.
    Minicpm5,
    /// `qwen35`.
    Qwen35,
}

impl PreType {
    /// Every pre-tokenizer, in declaration order (`ALL[i] as usize == i`),
    /// so that tests cover a new one without being told.
    pub const ALL: [PreType; 40] = [
        PreType::Default,
        PreType::Llama3,
        PreType::DeepseekLlm,
        PreType::DeepseekCoder,
        PreType::Deepseek3Llm,
        PreType::Falcon,
        PreType::Mpt,
        PreType::Starcoder,
        PreType::Gpt2,
        PreType::Refact,
        PreType::CommandR,
        PreType::Stablelm2,
        PreType::Qwen2,
        PreType::Olmo,
        PreType::Dbrx,
        PreType::Smaug,
        PreType::Poro,
        PreType::Chatglm4,
        PreType::Viking,
        PreType::Jais,
        PreType::Tekken,
        PreType::Smollm,
        PreType::Codeshell,
        PreType::Bloom,
        PreType::Gpt3Finnish,
        PreType::Exaone,
        PreType::Chameleon,
        PreType::Minerva,
        PreType::Jais2,
        PreType::Spark25,
        PreType::Youtu,
        PreType::Gpt4o,
        PreType::GraniteEmbMulti,
        PreType::Bailingmoe,
        PreType::SeedCoder,
        PreType::Ufakzeka,
        PreType::Laguna,
        PreType::ExaoneMoe,
        PreType::Minicpm5,
        PreType::Qwen35,
    ];

    /// Names llama.cpp knows whose splitting needs code of its own that
    /// this crate does not have (digit grouping, Han runs, raw UTF-8 BPE).
    pub const UNSUPPORTED: [&'static str; 9] = [
        "afmoe",
        "tiny_aya",
        "cohere2moe",
        "kimi-k2",
        "superbpe",
        "gemma4",
        "granite-embed-multi-311m",
        "sarvam-moe",
        "whitespace",
    ];

    /// The type for a `tokenizer.ggml.pre` name, `None` for an unknown name.
    pub fn from_name(name: &str) -> Option<PreType> {
        Some(match name {
            "default" => PreType::Default,
            "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral"
            | "midm-2.0" | "lfm2" | "jina-v5-nano" => PreType::Llama3,
            "deepseek-llm" => PreType::DeepseekLlm,
            "deepseek-coder" => PreType::DeepseekCoder,
            "deepseek-v3" | "hunyuan-dense" | "joyai-llm" | "hy_v4" => PreType::Deepseek3Llm,
            "falcon" => PreType::Falcon,
            "mpt" => PreType::Mpt,
            "starcoder" | "mellum2" => PreType::Starcoder,
            "gpt-2" | "phi-2" | "jina-es" | "jina-de" | "gigachat" | "jina-v1-en"
            | "jina-v2-es" | "jina-v2-de" | "jina-v2-code" | "roberta-bpe" | "a.x-4.0"
            | "mellum" | "modern-bert" | "exaone4" | "trillion" | "granite-docling" => {
                PreType::Gpt2
            }
            "refact" => PreType::Refact,
            "command-r" => PreType::CommandR,
            "qwen2" | "deepseek-r1-qwen" | "megrez" | "kormo" | "f2llmv2" | "hunyuan"
            | "solar-open" | "grok-2" => PreType::Qwen2,
            "stablelm2" => PreType::Stablelm2,
            "olmo" => PreType::Olmo,
            "dbrx" => PreType::Dbrx,
            "smaug-bpe" => PreType::Smaug,
            "poro-chat" => PreType::Poro,
            "chatglm-bpe" | "glm4" | "glm5" => PreType::Chatglm4,
            "viking" => PreType::Viking,
            "jais" => PreType::Jais,
            "tekken" => PreType::Tekken,
            "smollm" => PreType::Smollm,
            "codeshell" => PreType::Codeshell,
            "bloom" => PreType::Bloom,
            "gpt3-finnish" => PreType::Gpt3Finnish,
            "exaone" => PreType::Exaone,
            "chameleon" => PreType::Chameleon,
            "minerva-7b" => PreType::Minerva,
            "jais-2" => PreType::Jais2,
            "spark2_5" => PreType::Spark25,
            "youtu" => PreType::Youtu,
            "gpt-4o" | "llama4" | "kanana2" | "talkie" | "minimax-m2" => PreType::Gpt4o,
            "granite-embed-multi-97m" => PreType::GraniteEmbMulti,
            "bailingmoe" | "bailingmoe2" | "llada-moe" => PreType::Bailingmoe,
            "seed-coder" => PreType::SeedCoder,
            "ufakzeka" => PreType::Ufakzeka,
            "laguna" => PreType::Laguna,
            "exaone-moe" => PreType::ExaoneMoe,
            "minicpm5" => PreType::Minicpm5,
            "qwen35" => PreType::Qwen35,
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_type_round_trip() {
        for v in 0..7 {
            assert_eq!(TokenType::from_i32(v).as_i32(), v);
        }
        assert_eq!(TokenType::from_i32(42), TokenType::Undefined);
        assert_eq!(TokenType::from_i32(-1), TokenType::Undefined);
    }

    #[test]
    fn attr_bits() {
        let a = TokenAttr::CONTROL | TokenAttr::RSTRIP;
        assert!(a.contains(TokenAttr::CONTROL));
        assert!(a.intersects(TokenAttr::CONTROL | TokenAttr::UNKNOWN));
        assert!(!a.intersects(TokenAttr::UNKNOWN));
        assert_eq!(a.with(TokenAttr::RSTRIP, false), TokenAttr::CONTROL);
        assert_eq!(format!("{a:?}"), "CONTROL | RSTRIP");
    }

    #[test]
    fn pre_names() {
        assert_eq!(PreType::from_name("llama-bpe"), Some(PreType::Llama3));
        assert_eq!(PreType::from_name("deepseek-r1-qwen"), Some(PreType::Qwen2));
        assert_eq!(PreType::from_name("nonsense"), None);
    }
}
