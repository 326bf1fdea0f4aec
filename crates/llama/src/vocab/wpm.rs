//! WordPiece (`bert` vocabularies).
//!
//! The text is normalized (unless the vocabulary says otherwise, each code
//! point replaced by the first code point of its canonical decomposition,
//! marks dropped, and lower-cased; control characters dropped) and split on
//! whitespace, with every punctuation mark, ASCII
//! symbol and CJK ideograph a word of its own. Each word, prefixed with
//! U+2581, is cut greedily into the longest tokens from the left; a word
//! that cannot be cut entirely becomes the unknown token.

use super::unicode::{self, cpts_from_utf8, push_utf8, Cpt};
use super::{TokenId, Vocab};

/// The CJK ranges BERT treats as single-character words (the upper bound of
/// extension E starts at U+2B920, as in the reference implementation).
fn is_chinese_char(cpt: Cpt) -> bool {
    matches!(
        cpt,
        0x4E00..=0x9FFF
            | 0x3400..=0x4DBF
            | 0x20000..=0x2A6DF
            | 0x2A700..=0x2B73F
            | 0x2B740..=0x2B81F
            | 0x2B920..=0x2CEAF
            | 0xF900..=0xFAFF
            | 0x2F800..=0x2FA1F
    )
}

/// Normalizes `text` (lower-casing and stripping accents as `lowercase`
/// and `strip_accents` say) and splits it into words.
fn preprocess(text: &[u8], lowercase: bool, strip_accents: bool) -> Vec<Vec<u8>> {
    let mut words: Vec<Vec<u8>> = vec![Vec::new()];
    for cpt in cpts_from_utf8(text) {
        let cpt = if strip_accents {
            unicode::nfd_first(cpt)
        } else {
            cpt
        };
        let flags = unicode::flags(cpt);
        if flags.whitespace {
            if words.last().is_some_and(|w| !w.is_empty()) {
                words.push(Vec::new());
            }
            continue;
        }
        if cpt == 0 || cpt == unicode::REPLACEMENT || flags.is_control() {
            continue;
        }
        if strip_accents && flags.is_mark() {
            continue;
        }
        let mut s = Vec::with_capacity(4);
        push_utf8(
            &mut s,
            if lowercase {
                unicode::to_lower(cpt)
            } else {
                cpt
            },
        );
        let alone =
            flags.is_punctuation() || (cpt < 0x7F && flags.is_symbol()) || is_chinese_char(cpt);
        let Some(last) = words.last_mut() else {
            continue;
        };
        if alone {
            if !last.is_empty() {
                words.push(s);
            } else {
                *last = s;
            }
            words.push(Vec::new());
        } else {
            last.extend_from_slice(&s);
        }
    }
    if words.last().is_some_and(Vec::is_empty) {
        words.pop();
    }
    words
}

/// Tokenizes `text` (one fragment), appending to `out`.
pub(crate) fn tokenize(vocab: &Vocab, text: &[u8], out: &mut Vec<TokenId>) {
    for word in preprocess(text, vocab.lowercase(), vocab.strip_accents()) {
        if word.is_empty() {
            continue;
        }
        let mut word1 = "\u{2581}".as_bytes().to_vec();
        word1.extend_from_slice(&word);
        let n = word1.len();
        let first_token = out.len();
        let mut i = 0;
        while i < n {
            let longest = (i + vocab.max_token_len() + 1).min(n);
            let found = (i + 1..=longest)
                .rev()
                .find_map(|j| vocab.text_to_token(&word1[i..j]).map(|id| (id, j)));
            match found {
                Some((id, j)) => {
                    out.push(id);
                    i = j;
                }
                None => {
                    // One piece cannot be matched: the whole word is unknown.
                    out.truncate(first_token);
                    break;
                }
            }
        }
        if out.len() == first_token {
            out.extend(vocab.unk());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<String> {
        words_with(text, true, true)
    }

    fn words_with(text: &str, lowercase: bool, strip_accents: bool) -> Vec<String> {
        preprocess(text.as_bytes(), lowercase, strip_accents)
            .into_iter()
            .map(|w| String::from_utf8(w).unwrap())
            .collect()
    }

    #[test]
    fn preprocess_splits_and_normalizes() {
        assert_eq!(words("Hello, World!"), ["hello", ",", "world", "!"]);
        assert_eq!(words("  Café\tnaïve  "), ["cafe", "naive"]);
        assert_eq!(words("a$b"), ["a", "$", "b"]);
        assert_eq!(words("中文"), ["中", "文"]);
        assert_eq!(words("x\u{0}\u{7}y"), ["xy"]);
        assert!(words("").is_empty());
        assert!(words("   ").is_empty());
    }

    #[test]
    fn accents_and_case_follow_the_normalizer_options() {
        // A combining accent and Devanagari vowel signs are marks.
        assert_eq!(
            words("Cafe\u{301} \u{928}\u{92e}\u{938}\u{94d}\u{924}\u{947}"),
            ["cafe", "\u{928}\u{92e}\u{938}\u{924}"]
        );
        assert_eq!(
            words_with("Café e\u{301}", true, false),
            ["café", "e\u{301}"]
        );
        assert_eq!(words_with("Café", false, true), ["Cafe"]);
        assert_eq!(words_with("Café", false, false), ["Café"]);
    }
}
