//! Tokenizer metadata: a synthetic SentencePiece (SPM) vocabulary, or the
//! `tokenizer.*` keys of an existing GGUF file.

use std::collections::HashSet;
use std::path::Path;

use gguf::{GgufFile, StringArray, Value};

use crate::error::{Error, Result};

/// llama.cpp token types.
const TOKEN_NORMAL: i32 = 1;
const TOKEN_UNKNOWN: i32 = 2;
const TOKEN_CONTROL: i32 = 3;
const TOKEN_BYTE: i32 = 6;

/// `<unk>`, `<s>`, `</s>` and the 256 byte tokens.
pub const SPM_FIXED_TOKENS: usize = 3 + 256;

/// SentencePiece's word-boundary marker.
const SPACE: char = '\u{2581}';

/// Words whose pieces come first (highest scores), like a vocabulary trained
/// on simple stories.
const WORDS: &[&str] = &[
    "the", "and", "a", "to", "was", "he", "she", "it", "they", "of", "in", "with", "her", "his",
    "on", "that", "said", "day", "one", "big", "little", "time", "once", "upon", "there", "named",
    "play", "happy", "friend", "friends", "saw", "went", "wanted", "very", "had", "is", "for",
    "not", "but", "so", "all", "we", "you", "can", "go", "like", "see", "what", "when", "were",
    "would", "could", "tree", "ball", "dog", "cat", "sun", "park", "home", "look", "help", "fun",
    "toy", "good", "new", "red", "blue", "mom", "dad", "girl", "boy", "bird", "sky", "up", "down",
    "out", "at", "be", "have", "do", "did", "are", "from", "this", "then", "them", "too", "loved",
    "played", "smiled", "together", "car", "box", "food", "water",
];

/// Capitalised words that start sentences.
const CAPITALISED: &[&str] = &[
    "The", "Once", "One", "She", "He", "They", "It", "Lily", "Tom", "Ben", "Sue", "But", "Then",
];

/// Frequent word-inner pieces.
const INNER: &[&str] = &[
    "he", "in", "er", "an", "re", "on", "at", "en", "nd", "ed", "ing", "ou", "it", "is", "ay",
    "om", "im", "il", "id", "ar", "or", "ll", "le", "st", "ly", "ow", "ee", "oo", "ch", "sh",
];

/// Single characters kept in the vocabulary (lowest scores, like a trained
/// SPM model lists them last).
fn single_chars() -> Vec<String> {
    let mut v: Vec<String> = vec![SPACE.to_string()];
    v.extend(('a'..='z').map(String::from));
    v.extend(('A'..='Z').map(String::from));
    v.extend(('0'..='9').map(String::from));
    v.extend(".,!?'\"-:;()".chars().map(String::from));
    v
}

/// Multi-character pieces in score order. Every piece's prefix without its
/// last character comes earlier, so SPM's bigram merges can build each of
/// them from single characters.
struct Pieces {
    seen: HashSet<String>,
    queue: Vec<String>,
    level: u32,
    index: u64,
}

impl Pieces {
    fn new() -> Pieces {
        let mut p = Pieces {
            seen: HashSet::new(),
            queue: Vec::new(),
            level: 1,
            index: 0,
        };
        for c in single_chars() {
            p.seen.insert(c);
        }
        let marked = WORDS
            .iter()
            .chain(CAPITALISED)
            .map(|w| format!("{SPACE}{w}"));
        let words: Vec<String> = marked.chain(INNER.iter().map(|s| s.to_string())).collect();
        for w in words {
            let chars: Vec<char> = w.chars().collect();
            for n in 2..=chars.len() {
                p.push(chars[..n].iter().collect());
            }
        }
        p.queue.reverse();
        p
    }

    fn push(&mut self, s: String) {
        if self.seen.insert(s.clone()) {
            self.queue.push(s);
        }
    }

    /// The `index`-th lower-case string of `len` letters, in lexicographic order.
    fn letters(mut index: u64, len: u32) -> String {
        let mut out = vec![b'a'; len as usize];
        for slot in out.iter_mut().rev() {
            *slot = b'a' + (index % 26) as u8;
            index /= 26;
        }
        String::from_utf8(out).unwrap_or_default()
    }
}

impl Iterator for Pieces {
    type Item = String;

    /// After the curated pieces: level by level, `▁` + (level-1 letters)
    /// then (level letters), each in lexicographic order.
    fn next(&mut self) -> Option<String> {
        loop {
            if let Some(s) = self.queue.pop() {
                return Some(s);
            }
            let per_level = 26u64.checked_pow(self.level)?;
            if self.index >= per_level {
                self.level += 1;
                self.index = 0;
                continue;
            }
            let i = self.index;
            self.index += 1;
            let marked = format!("{SPACE}{}", Pieces::letters(i / 26, self.level - 1));
            if i % 26 == 0 {
                // Once per prefix: the marked piece of one letter less.
                self.push(marked);
            }
            self.push(Pieces::letters(i, self.level));
        }
    }
}

/// Tokenizer keys for a model: `(key, value)` in file order.
#[derive(Clone, Debug)]
pub struct Vocab {
    /// Number of tokens.
    pub n_vocab: u32,
    /// The `tokenizer.*` keys.
    pub keys: Vec<(String, Value)>,
}

impl Vocab {
    /// A synthetic SPM vocabulary of `n_vocab` tokens: `<unk>`, `<s>`, `</s>`,
    /// the byte tokens `<0x00>`..`<0xFF>`, then pieces with decreasing
    /// scores, single characters last.
    pub fn synthetic_spm(n_vocab: u32) -> Result<Vocab> {
        let n = n_vocab as usize;
        if n < SPM_FIXED_TOKENS {
            return Err(Error::Usage(format!(
                "a synthetic SPM vocabulary needs at least {SPM_FIXED_TOKENS} tokens \
                 (3 special + 256 byte tokens), --n-vocab is {n}"
            )));
        }
        let mut tokens = StringArray::with_capacity(n, n * 8);
        let mut scores = Vec::with_capacity(n);
        let mut types = Vec::with_capacity(n);
        for (t, ty) in [
            ("<unk>", TOKEN_UNKNOWN),
            ("<s>", TOKEN_CONTROL),
            ("</s>", TOKEN_CONTROL),
        ] {
            tokens.push(t);
            scores.push(0.0f32);
            types.push(ty);
        }
        for b in 0..=255u8 {
            tokens.push(format!("<0x{b:02X}>"));
            scores.push(0.0);
            types.push(TOKEN_BYTE);
        }
        let chars = single_chars();
        let room = n - SPM_FIXED_TOKENS;
        let n_chars = chars.len().min(room);
        let n_pieces = room - n_chars;
        let mut pieces = Pieces::new();
        for k in 0..room {
            let piece = if k < n_pieces {
                pieces.next().ok_or_else(|| {
                    Error::Usage(format!(
                        "--n-vocab {n} is too large for a synthetic vocabulary"
                    ))
                })?
            } else {
                chars[k - n_pieces].clone()
            };
            tokens.push(piece);
            scores.push(-(k as f32));
            types.push(TOKEN_NORMAL);
        }
        let keys: Vec<(String, Value)> = vec![
            ("tokenizer.ggml.model".into(), "llama".into()),
            ("tokenizer.ggml.tokens".into(), tokens.into()),
            ("tokenizer.ggml.scores".into(), scores.into()),
            ("tokenizer.ggml.token_type".into(), types.into()),
            ("tokenizer.ggml.bos_token_id".into(), 1u32.into()),
            ("tokenizer.ggml.eos_token_id".into(), 2u32.into()),
            ("tokenizer.ggml.unknown_token_id".into(), 0u32.into()),
            ("tokenizer.ggml.padding_token_id".into(), 0u32.into()),
            ("tokenizer.ggml.add_bos_token".into(), true.into()),
            ("tokenizer.ggml.add_eos_token".into(), false.into()),
        ];
        Ok(Vocab { n_vocab, keys })
    }

    /// Every `tokenizer.*` key of the GGUF file at `path`; the vocabulary
    /// size is the length of its `tokenizer.ggml.tokens`.
    pub fn from_gguf(path: &Path) -> Result<Vocab> {
        let file = GgufFile::open(path)?;
        let n = file.get_array_len("tokenizer.ggml.tokens").map_err(|e| {
            Error::Usage(format!(
                "--vocab-from '{}' has no token list: {e}",
                path.display()
            ))
        })?;
        let n_vocab = u32::try_from(n).map_err(|_| {
            Error::Usage(format!(
                "--vocab-from '{}': {n} tokens is too many",
                path.display()
            ))
        })?;
        let keys = file
            .metadata()
            .iter()
            .filter(|(k, _)| k.starts_with("tokenizer."))
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        Ok(Vocab { n_vocab, keys })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token_strings(v: &Vocab) -> Vec<String> {
        let Some((_, Value::Array(gguf::Array::String(a)))) =
            v.keys.iter().find(|(k, _)| k == "tokenizer.ggml.tokens")
        else {
            panic!("no tokens")
        };
        a.iter()
            .map(|b| String::from_utf8(b.to_vec()).unwrap())
            .collect()
    }

    #[test]
    fn small_vocab_layout() {
        let v = Vocab::synthetic_spm(512).unwrap();
        let t = token_strings(&v);
        assert_eq!(t.len(), 512);
        assert_eq!(&t[..3], ["<unk>", "<s>", "</s>"]);
        assert_eq!(t[3], "<0x00>");
        assert_eq!(t[258], "<0xFF>");
        assert_eq!(t[259], "\u{2581}t");
        assert!(t.contains(&"\u{2581}the".to_string()));
        assert_eq!(t[511], ")");
        let unique: HashSet<&String> = t.iter().collect();
        assert_eq!(unique.len(), 512);
    }

    #[test]
    fn prefixes_come_first_and_large_vocab_is_unique() {
        let v = Vocab::synthetic_spm(151_936).unwrap();
        let t = token_strings(&v);
        assert_eq!(t.len(), 151_936);
        let mut seen: HashSet<&str> = t[..SPM_FIXED_TOKENS].iter().map(|s| s.as_str()).collect();
        let chars = single_chars();
        seen.extend(chars.iter().map(|s| s.as_str()));
        for s in &t[SPM_FIXED_TOKENS..] {
            let cut = s.char_indices().last().map(|(i, _)| i).unwrap_or(0);
            if cut > 0 {
                assert!(seen.contains(&s[..cut]), "prefix of '{s}' missing");
            }
            assert!(
                seen.insert(s.as_str()) || chars.contains(s),
                "duplicate '{s}'"
            );
        }
    }

    #[test]
    fn too_small() {
        assert!(Vocab::synthetic_spm(258).is_err());
        let v = Vocab::synthetic_spm(260).unwrap();
        assert_eq!(token_strings(&v)[259], "\u{2581}");
    }
}
