//! Building a [`Vocab`] from plain data: llama.cpp's defaults, validation,
//! special-token detection and attribute adjustments.

use std::collections::hash_map::Entry;
use std::collections::BTreeSet;

use super::error::{Result, VocabError};
use super::hash::FxHashMap;
use super::pretokenize::PreTokenizer;
use super::rwkv::Rwkv;
use super::types::{PreType, TokenAttr, TokenId, TokenType, VocabType};
use super::ugm::Ugm;
use super::{bpe, SpecialTokens, TokenData, Vocab};

/// Special token ids as stored in the metadata (`None`: key absent). Ids
/// that are given must name a token of the vocabulary.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpecialIds {
    /// `tokenizer.ggml.bos_token_id`.
    pub bos: Option<u64>,
    /// `tokenizer.ggml.eos_token_id`.
    pub eos: Option<u64>,
    /// `tokenizer.ggml.eot_token_id`.
    pub eot: Option<u64>,
    /// `tokenizer.ggml.eom_token_id`.
    pub eom: Option<u64>,
    /// `tokenizer.ggml.unknown_token_id`.
    pub unk: Option<u64>,
    /// `tokenizer.ggml.seperator_token_id` (sic).
    pub sep: Option<u64>,
    /// `tokenizer.ggml.padding_token_id`.
    pub pad: Option<u64>,
    /// `tokenizer.ggml.mask_token_id`.
    pub mask: Option<u64>,
    /// `tokenizer.ggml.fim_pre_token_id`.
    pub fim_pre: Option<u64>,
    /// `tokenizer.ggml.fim_suf_token_id`.
    pub fim_suf: Option<u64>,
    /// `tokenizer.ggml.fim_mid_token_id`.
    pub fim_mid: Option<u64>,
    /// `tokenizer.ggml.fim_pad_token_id`.
    pub fim_pad: Option<u64>,
    /// `tokenizer.ggml.fim_rep_token_id`.
    pub fim_rep: Option<u64>,
    /// `tokenizer.ggml.fim_sep_token_id`.
    pub fim_sep: Option<u64>,
    /// `tokenizer.ggml.prefix_token_id` (older name of `fim_pre`; wins over it).
    pub prefix: Option<u64>,
    /// `tokenizer.ggml.suffix_token_id` (older name of `fim_suf`; wins over it).
    pub suffix: Option<u64>,
    /// `tokenizer.ggml.middle_token_id` (older name of `fim_mid`; wins over it).
    pub middle: Option<u64>,
}

/// The metadata a vocabulary is built from, as plain data; each field
/// mirrors a GGUF key (`None` where the key is absent).
#[derive(Clone, Debug, Default)]
pub struct VocabData {
    /// `tokenizer.ggml.model`: `llama`, `gpt2`, `bert`, `t5` or `no_vocab`.
    pub model: String,
    /// `tokenizer.ggml.pre`.
    pub pre: Option<String>,
    /// `general.name` (a few models get attribute adjustments by name).
    pub name: Option<String>,
    /// `tokenizer.ggml.tokens`.
    pub tokens: Vec<Vec<u8>>,
    /// `tokenizer.ggml.scores`.
    pub scores: Option<Vec<f32>>,
    /// `tokenizer.ggml.token_type`.
    pub token_types: Option<Vec<i32>>,
    /// `tokenizer.ggml.merges` (required for `gpt2`).
    pub merges: Option<Vec<Vec<u8>>>,
    /// The special token id keys.
    pub special_ids: SpecialIds,
    /// `tokenizer.ggml.add_bos_token`.
    pub add_bos: Option<bool>,
    /// `tokenizer.ggml.add_eos_token`.
    pub add_eos: Option<bool>,
    /// `tokenizer.ggml.add_space_prefix`.
    pub add_space_prefix: Option<bool>,
    /// `tokenizer.ggml.remove_extra_whitespaces`.
    pub remove_extra_whitespaces: Option<bool>,
    /// `tokenizer.ggml.token_type_count`.
    pub token_type_count: Option<u32>,
    /// `<arch>.vocab_size`: the number of tokens of a `no_vocab` model.
    pub vocab_size: Option<u64>,
    /// `tokenizer.ggml.precompiled_charsmap`: the normalization map of a
    /// `t5` vocabulary.
    pub precompiled_charsmap: Option<Vec<u8>>,
    /// `tokenizer.ggml.normalizer.lowercase`: whether a `bert` vocabulary
    /// lower-cases the text (default: yes).
    pub normalizer_lowercase: Option<bool>,
    /// `tokenizer.ggml.normalizer.strip_accents`: whether a `bert`
    /// vocabulary decomposes letters and drops their marks (default: as
    /// `normalizer_lowercase`).
    pub normalizer_strip_accents: Option<bool>,
}

/// Texts that make a token the end-of-turn token, when no key names one.
const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<\u{ff5c}end\u{2581}of\u{2581}sentence\u{ff5c}>",
    "<end_of_utterance>",
];
/// Texts that make a token the end-of-message token.
const EOM_TEXTS: &[&str] = &["<|eom_id|>"];
/// Texts of fill-in-the-middle tokens, per role.
const FIM_PRE_TEXTS: &[&str] = &[
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<\u{ff5c}fim\u{2581}begin\u{ff5c}>",
    "<PRE>",
    "\u{2581}<PRE>",
    "<|code_prefix|>",
    "<|prefix|>",
];
const FIM_SUF_TEXTS: &[&str] = &[
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<\u{ff5c}fim\u{2581}hole\u{ff5c}>",
    "<SUF>",
    "\u{2581}<SUF>",
    "<|code_suffix|>",
    "<|suffix|>",
];
const FIM_MID_TEXTS: &[&str] = &[
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<\u{ff5c}fim\u{2581}end\u{ff5c}>",
    "<MID>",
    "\u{2581}<MID>",
    "<|code_middle|>",
    "<|middle|>",
];
const FIM_PAD_TEXTS: &[&str] = &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"];
const FIM_REP_TEXTS: &[&str] = &[
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
];
const FIM_SEP_TEXTS: &[&str] = &["<|file_sep|>"];
/// Texts that end generation, whatever the keys say.
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<\u{ff5c}end\u{2581}of\u{2581}sentence\u{ff5c}>",
    "[e~[",
];
/// Tokens of the harmony chat format that are always rendered.
const ALWAYS_RENDERED: &[&str] = &["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"];

/// Selects one id of [`SpecialTokens`].
type Slot = fn(&mut SpecialTokens) -> &mut Option<TokenId>;

fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Flags a pre-tokenizer name sets on top of the BPE defaults.
struct PreFlags {
    pre: PreType,
    clean_spaces: bool,
    ignore_merges: bool,
    add_bos: bool,
    no_bos: bool,
}

fn pre_flags(name: Option<&str>) -> Result<PreFlags> {
    let name = name.unwrap_or("");
    let pre = if name.is_empty() {
        crate::warn!(
            "vocab: missing pre-tokenizer type (tokenizer.ggml.pre), using 'default'; \
             generation quality will be degraded, consider regenerating the model"
        );
        PreType::Default
    } else {
        PreType::from_name(name).ok_or_else(|| {
            if PreType::UNSUPPORTED.contains(&name) {
                VocabError::UnsupportedPreTokenizer(name.to_string())
            } else {
                VocabError::UnknownPreTokenizer(name.to_string())
            }
        })?
    };
    let keeps_spaces = matches!(
        name,
        "deepseek-llm"
            | "deepseek-coder"
            | "deepseek-v3"
            | "command-r"
            | "qwen2"
            | "deepseek-r1-qwen"
            | "poro-chat"
            | "viking"
            | "tekken"
            | "smollm"
            | "chameleon"
            | "spark2_5"
            | "youtu"
            | "kormo"
            | "f2llmv2"
            | "qwen35"
            | "trillion"
            | "granite-docling"
            | "bailingmoe"
            | "bailingmoe2"
            | "llada-moe"
            | "seed-coder"
            | "hunyuan"
            | "hunyuan-dense"
            | "hy_v4"
            | "joyai-llm"
            | "ufakzeka"
            | "grok-2"
            | "laguna"
            | "minimax-m2"
            | "solar-open"
            | "gpt-4o"
            | "llama4"
            | "kanana2"
            | "talkie"
            | "granite-embed-multi-97m"
    );
    Ok(PreFlags {
        pre,
        clean_spaces: !keeps_spaces,
        ignore_merges: matches!(
            pre,
            PreType::Llama3
                | PreType::Tekken
                | PreType::Minicpm5
                | PreType::Youtu
                | PreType::GraniteEmbMulti
        ) || matches!(name, "glm4" | "glm5"),
        add_bos: matches!(pre, PreType::Llama3 | PreType::Tekken | PreType::Chameleon),
        no_bos: pre == PreType::Chatglm4,
    })
}

impl Vocab {
    /// Builds a vocabulary from plain data, as llama.cpp's loader does from
    /// the GGUF keys.
    pub fn from_parts(mut data: VocabData) -> Result<Vocab> {
        let mut v = Vocab {
            vocab_type: VocabType::NoVocab,
            pre_type: PreType::Default,
            tokens: Vec::new(),
            n_dummy_tokens: 0,
            token_to_id: FxHashMap::default(),
            bpe_ranks: FxHashMap::default(),
            n_merges: 0,
            special: SpecialTokens::default(),
            eog: BTreeSet::new(),
            special_cache: Vec::new(),
            add_space_prefix: false,
            add_bos: false,
            add_eos: false,
            ignore_merges: false,
            clean_spaces: false,
            remove_extra_whitespaces: false,
            lowercase: true,
            strip_accents: true,
            max_token_len: 0,
            n_token_types: data.token_type_count.unwrap_or(0),
            pretokenizer: None,
            ugm: None,
            rwkv: None,
        };

        // Tokenizer family and its default special tokens.
        let mut defaults = SpecialTokens::default();
        match data.model.as_str() {
            "no_vocab" | "none" => {
                v.n_dummy_tokens = data
                    .vocab_size
                    .map_or(0, |n| usize::try_from(n).unwrap_or(usize::MAX));
                if v.n_dummy_tokens > TokenId::MAX as usize {
                    return Err(VocabError::TooManyTokens(v.n_dummy_tokens));
                }
                return Ok(v);
            }
            "llama" => {
                v.vocab_type = VocabType::Spm;
                defaults.bos = Some(1);
                defaults.eos = Some(2);
                defaults.unk = Some(0);
                v.add_space_prefix = true;
                v.add_bos = true;
            }
            "bert" => {
                v.vocab_type = VocabType::Wpm;
                defaults.bos = Some(101);
                defaults.unk = Some(100);
                defaults.sep = Some(102);
                defaults.pad = Some(0);
                defaults.mask = Some(103);
                v.clean_spaces = true;
                v.add_bos = true;
                v.lowercase = data.normalizer_lowercase.unwrap_or(true);
                v.strip_accents = data.normalizer_strip_accents.unwrap_or(v.lowercase);
            }
            "gpt2" => {
                v.vocab_type = VocabType::Bpe;
                defaults.bos = Some(11);
                defaults.eos = Some(11);
                let flags = pre_flags(data.pre.as_deref())?;
                v.pre_type = flags.pre;
                v.clean_spaces = flags.clean_spaces;
                v.ignore_merges = flags.ignore_merges;
                v.add_bos = flags.add_bos;
                if flags.no_bos {
                    defaults.bos = None;
                }
            }
            "t5" => {
                v.vocab_type = VocabType::Ugm;
                defaults.eos = Some(1);
                defaults.unk = Some(2);
                defaults.pad = Some(0);
                v.add_eos = true;
            }
            "rwkv" => {
                // No default special tokens; no space prefix, BOS or EOS.
                v.vocab_type = VocabType::Rwkv;
                v.add_space_prefix = false;
                v.clean_spaces = false;
                v.add_bos = false;
                v.add_eos = false;
            }
            other => return Err(VocabError::UnknownModel(other.to_string())),
        }
        if let Some(b) = data.add_space_prefix {
            v.add_space_prefix = b;
        }
        if let Some(b) = data.remove_extra_whitespaces {
            v.remove_extra_whitespaces = b;
        }

        v.load_tokens(
            std::mem::take(&mut data.tokens),
            data.scores.as_deref(),
            data.token_types.as_deref(),
        )?;
        if v.vocab_type == VocabType::Bpe {
            v.load_merges(data.merges.as_deref())?;
            v.pretokenizer = Some(PreTokenizer::new(v.pre_type)?);
        }
        if v.vocab_type == VocabType::Ugm {
            v.ugm = Some(Ugm::new(&v.tokens, data.precompiled_charsmap.as_deref())?);
        }
        if v.vocab_type == VocabType::Rwkv {
            v.rwkv = Some(Rwkv::new(v.tokens.iter().map(|t| t.text.as_slice())));
        }

        // Defaults that name no token of this vocabulary do not apply.
        let n = v.tokens.len();
        let in_range = |id: Option<TokenId>| id.filter(|&i| (i as usize) < n);
        v.special = SpecialTokens {
            bos: in_range(defaults.bos),
            eos: in_range(defaults.eos),
            unk: in_range(defaults.unk),
            sep: in_range(defaults.sep),
            pad: in_range(defaults.pad),
            mask: in_range(defaults.mask),
            ..SpecialTokens::default()
        };

        // The newline token is found before the keys are read, so a padding
        // fallback is the type's default padding token.
        v.special.nl = match v.vocab_type {
            VocabType::Spm => v.byte_to_token(b'\n').or(v.special.pad),
            VocabType::Wpm => v.special.pad,
            VocabType::Bpe | VocabType::Ugm => {
                // The text "Ċ", as llama.cpp looks the newline up.
                let text = "\u{010A}".as_bytes();
                let mut ids = Vec::new();
                if let Some(pre) = &v.pretokenizer {
                    bpe::tokenize(&v, pre, text, &mut ids);
                }
                if let Some(ugm) = &v.ugm {
                    ugm.tokenize(&v, text, &mut ids);
                }
                ids.first().copied().or(v.special.pad)
            }
            VocabType::Rwkv => v.rwkv.as_ref().and_then(|r| r.exact(b"\n")),
            VocabType::NoVocab => None,
        };

        v.apply_special_ids(&data.special_ids)?;
        if let (Some(rwkv), None) = (&v.rwkv, v.special.unk) {
            if let Some(b) = rwkv.uncovered_byte() {
                return Err(VocabError::RwkvByteMissing(b));
            }
        }
        if let Some(b) = data.add_bos {
            v.add_bos = b;
        }
        if let Some(b) = data.add_eos {
            v.add_eos = b;
        }
        v.detect_special_by_text();
        v.build_special_cache();
        v.adjust_attrs(
            data.pre.as_deref().unwrap_or(""),
            data.name.as_deref().unwrap_or(""),
        );
        Ok(v)
    }

    fn load_tokens(
        &mut self,
        texts: Vec<Vec<u8>>,
        scores: Option<&[f32]>,
        types: Option<&[i32]>,
    ) -> Result<()> {
        let n = texts.len();
        if n > TokenId::MAX as usize {
            return Err(VocabError::TooManyTokens(n));
        }
        if let Some(scores) = scores {
            if scores.len() != n {
                return Err(VocabError::LengthMismatch {
                    key: "tokenizer.ggml.scores",
                    got: scores.len(),
                    expected: n,
                });
            }
        }
        if let Some(types) = types {
            if types.len() != n {
                return Err(VocabError::LengthMismatch {
                    key: "tokenizer.ggml.token_type",
                    got: types.len(),
                    expected: n,
                });
            }
        }
        self.tokens.reserve(n);
        self.token_to_id.reserve(n);
        for (i, text) in texts.into_iter().enumerate() {
            let text = if text.is_empty() {
                crate::warn!("vocab: empty token at index {i}");
                format!("[EMPTY_{i}]").into_bytes()
            } else {
                text
            };
            match self.token_to_id.entry(text) {
                Entry::Occupied(e) => {
                    return Err(VocabError::DuplicateToken {
                        id: i,
                        first: *e.get() as usize,
                        text: lossy(e.key()),
                    });
                }
                Entry::Vacant(e) => {
                    let text = e.key().clone();
                    e.insert(i as TokenId);
                    self.max_token_len = self.max_token_len.max(text.len());
                    let token_type = types.map_or(TokenType::Normal, |t| TokenType::from_i32(t[i]));
                    self.tokens.push(TokenData {
                        text,
                        score: scores.map_or(0.0, |s| s[i]),
                        token_type,
                        attr: token_type.attr(),
                    });
                }
            }
        }
        Ok(())
    }

    fn load_merges(&mut self, merges: Option<&[Vec<u8>]>) -> Result<()> {
        let merges = merges.ok_or(VocabError::MissingKey("tokenizer.ggml.merges"))?;
        self.n_merges = merges.len();
        self.bpe_ranks.reserve(merges.len());
        for (index, merge) in merges.iter().enumerate() {
            // The separator is the first space after the first byte, so a
            // left part may start with a space.
            let pos = merge.iter().skip(1).position(|&b| b == b' ').map(|p| p + 1);
            let Some(pos) = pos else {
                return Err(VocabError::MalformedMerge {
                    index,
                    merge: lossy(merge),
                });
            };
            let (left, right) = (&merge[..pos], &merge[pos + 1..]);
            let id = |part: &[u8]| {
                self.text_to_token(part)
                    .ok_or_else(|| VocabError::MergeUnknownToken {
                        index,
                        merge: lossy(merge),
                        token: lossy(part),
                    })
            };
            let key = (id(left)?, id(right)?);
            let rank = u32::try_from(index).unwrap_or(u32::MAX);
            // A repeated rule keeps its first (lowest) rank.
            self.bpe_ranks.entry(key).or_insert(rank);
        }
        Ok(())
    }

    fn apply_special_ids(&mut self, ids: &SpecialIds) -> Result<()> {
        // In llama.cpp's order: the older FIM keys come last and win.
        let keys: [(&'static str, Option<u64>, Slot); 17] = [
            ("tokenizer.ggml.bos_token_id", ids.bos, |s| &mut s.bos),
            ("tokenizer.ggml.eos_token_id", ids.eos, |s| &mut s.eos),
            ("tokenizer.ggml.eot_token_id", ids.eot, |s| &mut s.eot),
            ("tokenizer.ggml.eom_token_id", ids.eom, |s| &mut s.eom),
            ("tokenizer.ggml.unknown_token_id", ids.unk, |s| &mut s.unk),
            ("tokenizer.ggml.seperator_token_id", ids.sep, |s| &mut s.sep),
            ("tokenizer.ggml.padding_token_id", ids.pad, |s| &mut s.pad),
            ("tokenizer.ggml.mask_token_id", ids.mask, |s| &mut s.mask),
            ("tokenizer.ggml.fim_pre_token_id", ids.fim_pre, |s| {
                &mut s.fim_pre
            }),
            ("tokenizer.ggml.fim_suf_token_id", ids.fim_suf, |s| {
                &mut s.fim_suf
            }),
            ("tokenizer.ggml.fim_mid_token_id", ids.fim_mid, |s| {
                &mut s.fim_mid
            }),
            ("tokenizer.ggml.fim_pad_token_id", ids.fim_pad, |s| {
                &mut s.fim_pad
            }),
            ("tokenizer.ggml.fim_rep_token_id", ids.fim_rep, |s| {
                &mut s.fim_rep
            }),
            ("tokenizer.ggml.fim_sep_token_id", ids.fim_sep, |s| {
                &mut s.fim_sep
            }),
            ("tokenizer.ggml.prefix_token_id", ids.prefix, |s| {
                &mut s.fim_pre
            }),
            ("tokenizer.ggml.suffix_token_id", ids.suffix, |s| {
                &mut s.fim_suf
            }),
            ("tokenizer.ggml.middle_token_id", ids.middle, |s| {
                &mut s.fim_mid
            }),
        ];
        let n = self.tokens.len();
        for (key, id, slot) in keys {
            let Some(id) = id else { continue };
            if id >= n as u64 {
                // As llama.cpp: a bad id is ignored and the default kept.
                let keep = *slot(&mut self.special);
                crate::warn!(
                    "vocab: bad special token: '{key}' = {id} is outside the {n} tokens; using default id {}",
                    keep.map_or("none".to_string(), |k| k.to_string())
                );
                continue;
            }
            *slot(&mut self.special) = Some(id as TokenId);
        }
        Ok(())
    }

    /// Makes token `id` a control token (end-of-turn and FIM markers are
    /// sometimes stored as normal or user-defined tokens).
    /// Adds the control attribute to a token found by its text.
    fn force_control(&mut self, id: TokenId) {
        let token = &mut self.tokens[id as usize];
        if !token.attr.intersects(TokenAttr::CONTROL) {
            crate::warn!(
                "vocab: control-looking token {id} '{}' was not control-type; its type is overridden",
                lossy(&token.text)
            );
            token.attr = token.attr.with(TokenAttr::CONTROL, true);
        }
    }

    /// Finds EOT/EOM/FIM tokens the keys do not name, by their text (the
    /// lowest id wins when several texts match), marks unused control
    /// tokens, and collects the end-of-generation set, with llama.cpp's
    /// exceptions for the harmony and Solar Open formats (`<|end|>` ends a
    /// message, not generation) and for Gemma 4 and PLaMo (`</s>` is text).
    fn detect_special_by_text(&mut self) {
        let roles: [(&[&str], Slot); 8] = [
            (EOT_TEXTS, |s| &mut s.eot),
            (EOM_TEXTS, |s| &mut s.eom),
            (FIM_PRE_TEXTS, |s| &mut s.fim_pre),
            (FIM_SUF_TEXTS, |s| &mut s.fim_suf),
            (FIM_MID_TEXTS, |s| &mut s.fim_mid),
            (FIM_PAD_TEXTS, |s| &mut s.fim_pad),
            (FIM_REP_TEXTS, |s| &mut s.fim_rep),
            (FIM_SEP_TEXTS, |s| &mut s.fim_sep),
        ];
        for (texts, slot) in roles {
            if slot(&mut self.special).is_some() {
                continue;
            }
            let found = texts
                .iter()
                .filter_map(|t| self.text_to_token(t.as_bytes()))
                .min();
            if let Some(id) = found {
                *slot(&mut self.special) = Some(id);
                self.force_control(id);
            }
        }

        for t in &mut self.tokens {
            if t.attr.intersects(TokenAttr::CONTROL)
                && super::find_bytes(&t.text, b"unused").is_some()
            {
                t.attr = t.attr.with(TokenAttr::UNUSED, true);
            }
        }

        let mut eog = BTreeSet::new();
        let s = self.special;
        eog.extend(s.fim_pad);
        eog.extend(s.fim_rep);
        eog.extend(s.fim_sep);
        for text in EOG_TEXTS {
            if let Some(id) = self.text_to_token(text.as_bytes()) {
                eog.insert(id);
                self.force_control(id);
            }
        }
        for text in ALWAYS_RENDERED {
            if let Some(id) = self.text_to_token(text.as_bytes()) {
                self.tokens[id as usize].attr = TokenAttr::USER_DEFINED;
            }
        }
        eog.extend(s.eos);
        eog.extend(s.eot);
        eog.extend(s.eom);

        let in_eog = |v: &Vocab, eog: &BTreeSet<TokenId>, text: &str| {
            v.text_to_token(text.as_bytes())
                .filter(|id| eog.contains(id))
        };
        let has = |v: &Vocab, eog: &BTreeSet<TokenId>, text: &str| in_eog(v, eog, text).is_some();
        let call = has(self, &eog, "<|call|>") || has(self, &eog, "<|calls|>");
        let ends_messages = call && (has(self, &eog, "<|return|>") || has(self, &eog, "<|flush|>"));
        if let Some(end) = in_eog(self, &eog, "<|end|>").filter(|_| ends_messages) {
            crate::warn!("vocab: '<|end|>' ends a message here, not generation");
            eog.remove(&end);
            self.tokens[end as usize].attr = TokenAttr::USER_DEFINED;
        }
        let s_is_text = has(self, &eog, "<|tool_response>") || has(self, &eog, "<|plamo:eos|>");
        if let Some(s_id) = in_eog(self, &eog, "</s>").filter(|_| s_is_text) {
            crate::warn!("vocab: '</s>' is a normal token here, not the end of generation");
            eog.remove(&s_id);
            self.tokens[s_id as usize].attr = TokenAttr::NORMAL;
        }
        self.eog = eog;
    }

    fn build_special_cache(&mut self) {
        let special = TokenAttr::CONTROL | TokenAttr::USER_DEFINED | TokenAttr::UNKNOWN;
        let mut cache: Vec<TokenId> = (0..self.tokens.len())
            .filter(|&i| self.tokens[i].attr.intersects(special))
            .map(|i| i as TokenId)
            .collect();
        // Longest first; equal lengths keep id order.
        cache.sort_by_key(|&id| std::cmp::Reverse(self.tokens[id as usize].text.len()));
        self.special_cache = cache;
    }

    /// Per-model attribute adjustments llama.cpp makes by pre-tokenizer and
    /// model name.
    fn adjust_attrs(&mut self, pre: &str, name: &str) {
        fn set(v: &mut Vocab, text: &str, attr: TokenAttr, on: bool) {
            if let Some(id) = v.text_to_token(text.as_bytes()) {
                let t = &mut v.tokens[id as usize];
                t.attr = t.attr.with(attr, on);
            }
        }
        let name = name.to_ascii_lowercase();
        if ["jina-v2-de", "jina-v2-es", "jina-v2-code"]
            .iter()
            .any(|p| pre.contains(p))
        {
            set(self, "<mask>", TokenAttr::LSTRIP, true);
        } else if name.contains("phi-3") || name.contains("phi3") {
            for i in 0..self.special_cache.len() {
                let id = self.special_cache[i] as usize;
                self.tokens[id].attr = self.tokens[id].attr.with(TokenAttr::RSTRIP, true);
            }
            set(self, "</s>", TokenAttr::RSTRIP, true);
            for text in ["<unk>", "<s>", "<|endoftext|>"] {
                set(self, text, TokenAttr::RSTRIP, false);
            }
        }
    }
}
