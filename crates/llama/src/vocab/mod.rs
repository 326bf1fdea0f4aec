//! Tokenizers: SPM, BPE, WPM and UGM vocabularies read from GGUF metadata, with
//! llama.cpp's exact tokenization and detokenization.
//!
//! A [`Vocab`] is built from a GGUF file ([`Vocab::from_gguf`]) or from
//! plain data ([`Vocab::from_parts`] with a [`VocabData`]). Building applies
//! llama.cpp's defaults for absent keys (an SPM vocabulary adds BOS unless
//! told otherwise, a BPE vocabulary without `tokenizer.ggml.pre` uses the
//! default pre-tokenizer, ...), detects end-of-generation tokens by their
//! text, and rejects malformed data with a [`VocabError`] naming the key at
//! fault. No input text and no vocabulary makes it panic.
//!
//! - [`Vocab::tokenize`]: text to token ids, optionally adding BOS/EOS and
//!   parsing special tokens written in the text.
//! - [`Vocab::token_to_piece`] and [`Vocab::detokenize`]: ids back to bytes.
//!
//! Token texts are bytes, as in GGUF: a vocabulary may hold tokens that are
//! not valid UTF-8 (byte-level pieces), and detokenized text can end inside a
//! multi-byte character.
//!
//! Where llama.cpp cannot be followed exactly, or would abort, the choices
//! are:
//! - a special token id key naming no token is an error (llama.cpp warns and
//!   keeps the default); a default id that names no token is absent;
//! - when several texts could make the EOT (or a FIM) token, the lowest id
//!   wins (llama.cpp takes the first in hash-map order), and equally long
//!   special tokens are split out in id order (llama.cpp's sort is unstable);
//! - a byte an SPM vocabulary cannot spell becomes the unknown token, and
//!   BOS/EOS/CLS/SEP that the vocabulary lacks are not added (llama.cpp
//!   aborts in both cases);
//! - `rwkv` vocabularies are not supported.

mod bpe;
mod build;
mod detokenize;
mod error;
mod gguf;
mod hash;
mod pretokenize;
mod rwkv;
mod special;
mod spm;
mod symbols;
mod types;
mod ugm;
mod unicode;
#[rustfmt::skip]
mod unicode_data;
mod wpm;

use std::collections::BTreeSet;
use std::fmt;

pub use build::{SpecialIds, VocabData};
pub use error::{Result, VocabError};
pub use types::{PreType, TokenAttr, TokenId, TokenType, VocabType};

use hash::FxHashMap;
use pretokenize::PreTokenizer;
use rwkv::Rwkv;
use special::Fragment;
use ugm::Ugm;

/// One token of the vocabulary.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenData {
    /// The token's text as stored (SPM writes spaces as U+2581, byte-level
    /// BPE writes bytes through GPT-2's byte-to-unicode map).
    pub text: Vec<u8>,
    /// Merge score (SPM); 0 when the file has none.
    pub score: f32,
    /// The type stored in the file (`Normal` when the file has none).
    pub token_type: TokenType,
    /// Effective attributes, after the loader's adjustments.
    pub attr: TokenAttr,
}

/// The special token ids of a vocabulary; `None` where the vocabulary has
/// no such token.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpecialTokens {
    /// Beginning of sequence (also CLS for WPM).
    pub bos: Option<TokenId>,
    /// End of sequence.
    pub eos: Option<TokenId>,
    /// End of turn.
    pub eot: Option<TokenId>,
    /// End of message.
    pub eom: Option<TokenId>,
    /// Unknown.
    pub unk: Option<TokenId>,
    /// Separator.
    pub sep: Option<TokenId>,
    /// Padding.
    pub pad: Option<TokenId>,
    /// Mask.
    pub mask: Option<TokenId>,
    /// Newline.
    pub nl: Option<TokenId>,
    /// Fill-in-the-middle: prefix.
    pub fim_pre: Option<TokenId>,
    /// Fill-in-the-middle: suffix.
    pub fim_suf: Option<TokenId>,
    /// Fill-in-the-middle: middle.
    pub fim_mid: Option<TokenId>,
    /// Fill-in-the-middle: padding.
    pub fim_pad: Option<TokenId>,
    /// Fill-in-the-middle: repository.
    pub fim_rep: Option<TokenId>,
    /// Fill-in-the-middle: file separator.
    pub fim_sep: Option<TokenId>,
}

/// A vocabulary and its tokenizer.
#[derive(Clone)]
pub struct Vocab {
    vocab_type: VocabType,
    pre_type: PreType,
    tokens: Vec<TokenData>,
    /// `NoVocab` only: the number of (textless) tokens.
    n_dummy_tokens: usize,
    token_to_id: FxHashMap<Vec<u8>, TokenId>,
    /// Merge rank by the ids of its two parts.
    bpe_ranks: FxHashMap<(TokenId, TokenId), u32>,
    n_merges: usize,
    special: SpecialTokens,
    eog: BTreeSet<TokenId>,
    /// Control, user-defined and unknown tokens, longest text first: the
    /// order in which they are split out of the text.
    special_cache: Vec<TokenId>,
    add_space_prefix: bool,
    add_bos: bool,
    add_eos: bool,
    ignore_merges: bool,
    clean_spaces: bool,
    remove_extra_whitespaces: bool,
    /// WordPiece normalization: lower-case the text.
    lowercase: bool,
    /// WordPiece normalization: decompose letters and drop their marks.
    strip_accents: bool,
    max_token_len: usize,
    n_token_types: u32,
    pretokenizer: Option<PreTokenizer>,
    ugm: Option<Ugm>,
    rwkv: Option<Rwkv>,
}

impl fmt::Debug for Vocab {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Vocab")
            .field("type", &self.vocab_type)
            .field("pre", &self.pre_type)
            .field("n_tokens", &self.n_tokens())
            .field("n_merges", &self.n_merges)
            .field("special", &self.special)
            .field("eog", &self.eog)
            .field("add_bos", &self.add_bos)
            .field("add_eos", &self.add_eos)
            .field("add_space_prefix", &self.add_space_prefix)
            .finish()
    }
}

/// `str::contains` for bytes.
fn find_bytes(hay: &[u8], needle: &[u8]) -> Option<usize> {
    let (&first, rest) = needle.split_first()?;
    let mut from = 0;
    while from + needle.len() <= hay.len() {
        let p = from
            + hay[from..hay.len() - rest.len()]
                .iter()
                .position(|&b| b == first)?;
        if &hay[p + 1..p + needle.len()] == rest {
            return Some(p);
        }
        from = p + 1;
    }
    None
}

/// Replaces every space with U+2581, as SentencePiece stores them.
fn escape_whitespace(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len() + text.len() / 2);
    for &b in text {
        if b == b' ' {
            out.extend_from_slice("\u{2581}".as_bytes());
        } else {
            out.push(b);
        }
    }
    out
}

impl Vocab {
    /// The tokenizer family.
    pub fn vocab_type(&self) -> VocabType {
        self.vocab_type
    }

    /// The pre-tokenizer type (`Default` for non-BPE vocabularies).
    pub fn pre_type(&self) -> PreType {
        self.pre_type
    }

    /// Number of tokens.
    pub fn n_tokens(&self) -> usize {
        if self.vocab_type == VocabType::NoVocab {
            self.n_dummy_tokens
        } else {
            self.tokens.len()
        }
    }

    /// Number of BPE merge rules.
    pub fn n_merges(&self) -> usize {
        self.n_merges
    }

    /// `tokenizer.ggml.token_type_count` (BERT segment types), 0 if absent.
    pub fn n_token_types(&self) -> u32 {
        self.n_token_types
    }

    /// Length in bytes of the longest token text.
    pub fn max_token_len(&self) -> usize {
        self.max_token_len
    }

    /// Everything known about token `id`; `None` for an id outside the
    /// vocabulary.
    pub fn token(&self, id: TokenId) -> Option<&TokenData> {
        usize::try_from(id).ok().and_then(|i| self.tokens.get(i))
    }

    /// The stored text of token `id`.
    pub fn get_text(&self, id: TokenId) -> Option<&[u8]> {
        self.token(id).map(|t| t.text.as_slice())
    }

    /// The score of token `id`.
    pub fn get_score(&self, id: TokenId) -> Option<f32> {
        self.token(id).map(|t| t.score)
    }

    /// The stored type of token `id`.
    pub fn token_type(&self, id: TokenId) -> Option<TokenType> {
        self.token(id).map(|t| t.token_type)
    }

    /// The effective attributes of token `id` (`UNDEFINED` for an id
    /// outside the vocabulary).
    pub fn token_attr(&self, id: TokenId) -> TokenAttr {
        self.token(id).map_or(TokenAttr::UNDEFINED, |t| t.attr)
    }

    /// Whether token `id` is an ordinary token.
    pub fn is_normal(&self, id: TokenId) -> bool {
        self.token_attr(id).intersects(TokenAttr::NORMAL)
    }

    /// Whether token `id` is the unknown-token placeholder.
    pub fn is_unknown(&self, id: TokenId) -> bool {
        self.token_attr(id).intersects(TokenAttr::UNKNOWN)
    }

    /// Whether token `id` is a control token.
    pub fn is_control(&self, id: TokenId) -> bool {
        self.token_attr(id).intersects(TokenAttr::CONTROL)
    }

    /// Whether token `id` is a byte-fallback token.
    pub fn is_byte(&self, id: TokenId) -> bool {
        self.token_attr(id).intersects(TokenAttr::BYTE)
    }

    /// Whether token `id` is user-defined.
    pub fn is_user_defined(&self, id: TokenId) -> bool {
        self.token_attr(id).intersects(TokenAttr::USER_DEFINED)
    }

    /// Whether token `id` is an unused slot.
    pub fn is_unused(&self, id: TokenId) -> bool {
        self.token_attr(id).intersects(TokenAttr::UNUSED)
    }

    /// Whether token `id` ends generation (EOS, EOT, EOM and the tokens
    /// recognised by their text, such as `<|im_end|>`).
    pub fn is_eog(&self, id: TokenId) -> bool {
        self.eog.contains(&id)
    }

    /// All end-of-generation tokens, in id order.
    pub fn eog_ids(&self) -> impl Iterator<Item = TokenId> + '_ {
        self.eog.iter().copied()
    }

    /// All special token ids.
    pub fn special(&self) -> &SpecialTokens {
        &self.special
    }

    /// Beginning-of-sequence token.
    pub fn bos(&self) -> Option<TokenId> {
        self.special.bos
    }

    /// End-of-sequence token.
    pub fn eos(&self) -> Option<TokenId> {
        self.special.eos
    }

    /// End-of-turn token.
    pub fn eot(&self) -> Option<TokenId> {
        self.special.eot
    }

    /// End-of-message token.
    pub fn eom(&self) -> Option<TokenId> {
        self.special.eom
    }

    /// Unknown token.
    pub fn unk(&self) -> Option<TokenId> {
        self.special.unk
    }

    /// Separator token.
    pub fn sep(&self) -> Option<TokenId> {
        self.special.sep
    }

    /// Padding token.
    pub fn pad(&self) -> Option<TokenId> {
        self.special.pad
    }

    /// Mask token.
    pub fn mask(&self) -> Option<TokenId> {
        self.special.mask
    }

    /// Newline token.
    pub fn nl(&self) -> Option<TokenId> {
        self.special.nl
    }

    /// Whether tokenizing with `add_special` prepends BOS.
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    /// Whether tokenizing with `add_special` appends EOS.
    pub fn add_eos(&self) -> bool {
        self.add_eos
    }

    /// Whether SPM text gets a leading space (and detokenizing drops it).
    pub fn add_space_prefix(&self) -> bool {
        self.add_space_prefix
    }

    /// Whether a BPE word that is a whole token skips the merges.
    pub fn ignore_merges(&self) -> bool {
        self.ignore_merges
    }

    /// Whether detokenizing removes spaces before punctuation and
    /// contractions (`clean_up_tokenization_spaces`).
    pub fn clean_spaces(&self) -> bool {
        self.clean_spaces
    }

    /// Whether WordPiece lower-cases the text
    /// (`tokenizer.ggml.normalizer.lowercase`).
    pub fn lowercase(&self) -> bool {
        self.lowercase
    }

    /// Whether WordPiece decomposes letters and drops their marks
    /// (`tokenizer.ggml.normalizer.strip_accents`).
    pub fn strip_accents(&self) -> bool {
        self.strip_accents
    }

    /// `tokenizer.ggml.remove_extra_whitespaces` (unused by these tokenizers).
    pub fn remove_extra_whitespaces(&self) -> bool {
        self.remove_extra_whitespaces
    }

    /// The token whose text is exactly `text`.
    pub fn text_to_token(&self, text: &[u8]) -> Option<TokenId> {
        self.token_to_id.get(text).copied()
    }

    /// The token standing for byte `b`: `<0xXX>` (or the byte itself) for
    /// SPM, the byte's unicode stand-in for BPE and WPM.
    pub fn byte_to_token(&self, b: u8) -> Option<TokenId> {
        match self.vocab_type {
            VocabType::Spm | VocabType::Ugm => {
                let hex = format!("<0x{b:02X}>");
                self.text_to_token(hex.as_bytes())
                    .or_else(|| self.text_to_token(&[b]))
            }
            VocabType::Bpe | VocabType::Wpm => {
                let mut s = Vec::with_capacity(2);
                unicode::push_utf8(&mut s, unicode::byte_to_cpt(b));
                self.text_to_token(&s)
            }
            VocabType::Rwkv => self.rwkv.as_ref()?.exact(&[b]),
            VocabType::NoVocab => None,
        }
    }

    /// The byte of an SPM or UGM byte token (`<0xXX>`); `None` for other
    /// tokens.
    pub fn token_to_byte(&self, id: TokenId) -> Option<u8> {
        if !matches!(self.vocab_type, VocabType::Spm | VocabType::Ugm) || !self.is_byte(id) {
            return None;
        }
        detokenize::parse_byte_token(self.get_text(id)?)
    }

    /// The rank of the BPE merge of `left` and `right` (lower merges first).
    pub fn find_bpe_rank(&self, left: &[u8], right: &[u8]) -> Option<u32> {
        let l = self.text_to_token(left)?;
        let r = self.text_to_token(right)?;
        self.bpe_ranks.get(&(l, r)).copied()
    }

    /// Tokenizes `text`.
    ///
    /// `add_special` adds BOS/EOS as the vocabulary asks (CLS/SEP for WPM);
    /// `parse_special` lets control tokens written in the text (`<s>`,
    /// `<|im_end|>`) become those tokens. User-defined tokens are always
    /// split out of the text first.
    pub fn tokenize(&self, text: &str, add_special: bool, parse_special: bool) -> Vec<TokenId> {
        self.tokenize_bytes(text.as_bytes(), add_special, parse_special)
    }

    /// [`Vocab::tokenize`] for text that may not be valid UTF-8 (invalid
    /// bytes are byte-fallback tokens for SPM and U+FFFD for the others).
    pub fn tokenize_bytes(
        &self,
        text: &[u8],
        add_special: bool,
        parse_special: bool,
    ) -> Vec<TokenId> {
        let fragments = if text.is_empty() {
            Vec::new()
        } else {
            self.partition_special(text, parse_special)
        };
        let mut out = Vec::new();
        match self.vocab_type {
            VocabType::NoVocab => {}
            VocabType::Spm => {
                // A text fragment at the start or after a special token
                // gets the space prefix.
                let mut prev_special = true;
                if add_special && self.add_bos {
                    out.extend(self.special.bos);
                }
                for fragment in &fragments {
                    match fragment {
                        Fragment::Text(range) => {
                            let mut raw = Vec::with_capacity(range.len() + 1);
                            if self.add_space_prefix && prev_special {
                                raw.push(b' ');
                            }
                            raw.extend_from_slice(&text[range.clone()]);
                            spm::tokenize(self, &escape_whitespace(&raw), &mut out);
                            prev_special = false;
                        }
                        Fragment::Token(id) => {
                            out.push(*id);
                            prev_special = true;
                        }
                    }
                }
                if add_special && self.add_eos {
                    out.extend(self.special.eos);
                }
            }
            VocabType::Bpe => {
                self.tokenize_plain(text, &fragments, add_special, &mut out, |t, out| {
                    if let Some(pre) = &self.pretokenizer {
                        bpe::tokenize(self, pre, t, out);
                    }
                })
            }
            VocabType::Ugm => {
                self.tokenize_plain(text, &fragments, add_special, &mut out, |t, out| {
                    if let Some(ugm) = &self.ugm {
                        ugm.tokenize(self, t, out);
                    }
                })
            }
            VocabType::Rwkv => {
                self.tokenize_plain(text, &fragments, add_special, &mut out, |t, out| {
                    if let Some(rwkv) = &self.rwkv {
                        rwkv.tokenize(t, self.special.unk, out);
                    }
                })
            }
            VocabType::Wpm => {
                if add_special {
                    out.extend(self.special.bos);
                }
                for fragment in &fragments {
                    match fragment {
                        Fragment::Text(range) => {
                            wpm::tokenize(self, &text[range.clone()], &mut out)
                        }
                        Fragment::Token(id) => out.push(*id),
                    }
                }
                if add_special {
                    out.extend(self.special.sep);
                }
            }
        }
        out
    }

    /// The tokens of `fragments` of `text` for the tokenizers that take
    /// each text fragment as it is: BOS and EOS as the vocabulary adds them,
    /// special tokens as they are, and each text fragment through `cut`.
    fn tokenize_plain(
        &self,
        text: &[u8],
        fragments: &[Fragment],
        add_special: bool,
        out: &mut Vec<TokenId>,
        cut: impl Fn(&[u8], &mut Vec<TokenId>),
    ) {
        if add_special && self.add_bos {
            out.extend(self.special.bos);
        }
        for fragment in fragments {
            match fragment {
                Fragment::Text(range) => cut(&text[range.clone()], out),
                Fragment::Token(id) => out.push(*id),
            }
        }
        if add_special && self.add_eos {
            out.extend(self.special.eos);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn find_bytes_works() {
        assert_eq!(find_bytes(b"hello", b"ll"), Some(2));
        assert_eq!(find_bytes(b"hello", b"lo"), Some(3));
        assert_eq!(find_bytes(b"hello", b"hello!"), None);
        assert_eq!(find_bytes(b"aaab", b"ab"), Some(2));
        assert_eq!(find_bytes(b"", b"a"), None);
        assert_eq!(find_bytes(b"abc", b""), None);
    }

    #[test]
    fn vocab_is_shareable() {
        fn check<T: Send + Sync + Clone>() {}
        check::<Vocab>();
    }

    #[test]
    fn escape() {
        assert_eq!(escape_whitespace(b" a b"), "\u{2581}a\u{2581}b".as_bytes());
    }
}
