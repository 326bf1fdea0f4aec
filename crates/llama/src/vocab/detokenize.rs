//! Token ids back to bytes.

use std::borrow::Cow;

use super::unicode::{cpt_to_byte, cpts_from_utf8, push_utf8};
use super::{TokenAttr, TokenId, Vocab, VocabType};

/// The byte of an SPM byte token `<0xXX>`: the two characters after `<0x`
/// read as C's `strtol(.., 16)` reads them (0 when they are not hex).
pub(crate) fn parse_byte_token(text: &[u8]) -> Option<u8> {
    let digits = text.get(3..)?;
    let digits = &digits[..digits.len().min(2)];
    let mut rest = digits;
    while let [b, tail @ ..] = rest {
        if matches!(b, b' ' | b'\t' | b'\n' | 0x0B | 0x0C | b'\r') {
            rest = tail;
        } else {
            break;
        }
    }
    let negative = rest.first() == Some(&b'-');
    if matches!(rest.first(), Some(b'-' | b'+')) {
        rest = &rest[1..];
    }
    let mut value: i64 = 0;
    for &b in rest {
        let Some(d) = (b as char).to_digit(16) else {
            break;
        };
        value = value * 16 + i64::from(d);
    }
    if negative {
        value = -value;
    }
    Some(value as u8)
}

/// Unescapes U+2581 back to spaces.
fn unescape_whitespace(text: &[u8]) -> Vec<u8> {
    const ESCAPED: &[u8] = "\u{2581}".as_bytes();
    let mut out = Vec::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        if text[i..].starts_with(ESCAPED) {
            out.push(b' ');
            i += ESCAPED.len();
        } else {
            out.push(text[i]);
            i += 1;
        }
    }
    out
}

/// Maps a byte-level BPE token text back to its bytes; a code point outside
/// the byte map is written as `[UNK_BYTE_0x<its UTF-8 in hex><text>]`.
fn decode_byte_level(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    for cpt in cpts_from_utf8(text) {
        match cpt_to_byte(cpt) {
            Some(b) => out.push(b),
            None => {
                let mut utf8 = Vec::with_capacity(4);
                push_utf8(&mut utf8, cpt);
                out.extend_from_slice(b"[UNK_BYTE_0x");
                for b in utf8 {
                    out.extend_from_slice(format!("{b:02x}").as_bytes());
                }
                out.extend_from_slice(text);
                out.push(b']');
            }
        }
    }
    out
}

/// The three passes of `clean_up_tokenization_spaces`, in place: drop the
/// space before `?!.,`; drop the spaces around a lone apostrophe; drop the
/// space before `'s`, `'m`, `'re` and `'ve`.
fn clean_spaces(text: &mut Vec<u8>) {
    // Pass 1: " ?", " !", " .", " ,".
    let n = text.len();
    let mut total = n.min(1);
    for i in 1..n {
        let x = text[i];
        if text[i - 1] == b' ' && matches!(x, b'?' | b'!' | b'.' | b',') {
            total -= 1;
        }
        text[total] = x;
        total += 1;
    }

    // Pass 2: " ' " becomes "'"; the following space is zeroed in place,
    // which the next comparisons see.
    let n = total;
    total = n.min(1);
    let mut i = 1;
    while i < n {
        let x = text[i];
        if x == b'\'' && i + 1 < n && text[i - 1] == b' ' && text[i + 1] == b' ' {
            total -= 1;
            i += 1;
            text[i] = 0;
        }
        text[total] = x;
        total += 1;
        i += 1;
    }

    // Pass 3: " 's", " 'm", " 're", " 've".
    let n = total;
    total = n.min(1);
    for i in 1..n {
        let x = text[i];
        if text[i - 1] == b' ' && x == b'\'' && i + 1 < n {
            let x1 = text[i + 1];
            if x1 == b's' || x1 == b'm' {
                total -= 1;
            } else if x1 != b't' && x1 != b'd' && i + 2 < n {
                let x2 = text[i + 2];
                if (x1 == b'r' || x1 == b'v') && x2 == b'e' {
                    total -= 1;
                }
            }
        }
        text[total] = x;
        total += 1;
    }
    text.truncate(total);
}

impl Vocab {
    /// The bytes of token `id`'s piece of text. Control and unknown tokens
    /// give their text only with `special`; an id outside the vocabulary
    /// gives nothing.
    pub fn token_to_piece(&self, id: TokenId, special: bool) -> Vec<u8> {
        let mut out = Vec::new();
        self.push_piece(id, special, false, &mut out);
        out
    }

    /// Appends token `id`'s piece to `out`, without its first byte when
    /// that is a space and `lstrip` is set.
    fn push_piece(&self, id: TokenId, special: bool, lstrip: bool, out: &mut Vec<u8>) {
        let Some(token) = self.token(id) else { return };
        let attr = token.attr;
        let raw_attrs = TokenAttr::UNKNOWN | TokenAttr::CONTROL;
        if !special && attr.intersects(raw_attrs) {
            return;
        }
        let text = token.text.as_slice();
        let piece: Cow<'_, [u8]> = match self.vocab_type {
            VocabType::Spm | VocabType::Wpm | VocabType::Ugm => {
                if attr.intersects(raw_attrs | TokenAttr::USER_DEFINED) {
                    Cow::Borrowed(text)
                } else if attr.intersects(TokenAttr::NORMAL) {
                    Cow::Owned(unescape_whitespace(text))
                } else if attr.intersects(TokenAttr::BYTE) && self.vocab_type != VocabType::Wpm {
                    match parse_byte_token(text) {
                        Some(b) => Cow::Owned(vec![b]),
                        None => return,
                    }
                } else {
                    return;
                }
            }
            VocabType::Bpe => {
                if attr.intersects(raw_attrs | TokenAttr::USER_DEFINED) {
                    Cow::Borrowed(text)
                } else if attr.intersects(TokenAttr::NORMAL) {
                    Cow::Owned(decode_byte_level(text))
                } else {
                    return;
                }
            }
            VocabType::Rwkv => Cow::Owned(super::rwkv::unescape(text)),
            VocabType::NoVocab => return,
        };
        let skip = usize::from(lstrip && piece.first() == Some(&b' '));
        out.extend_from_slice(&piece[skip..]);
    }

    /// The text of `ids`.
    ///
    /// `remove_special` drops a leading BOS and a trailing EOS when the
    /// vocabulary adds them; `unparse_special` writes control tokens as
    /// their text. For SPM the space prefix added when tokenizing is
    /// removed from the first piece, unless a BOS was dropped.
    pub fn detokenize(
        &self,
        ids: &[TokenId],
        remove_special: bool,
        unparse_special: bool,
    ) -> Vec<u8> {
        let mut out = Vec::new();
        if self.vocab_type == VocabType::NoVocab {
            return out;
        }
        let mut ids = ids;
        let mut remove_space = self.add_space_prefix;
        if remove_special && self.add_bos {
            if let (Some(&first), Some(bos)) = (ids.first(), self.special.bos) {
                if first == bos {
                    remove_space = false;
                    ids = &ids[1..];
                }
            }
        }
        if remove_special && self.add_eos {
            if let (Some(&last), Some(eos)) = (ids.last(), self.special.eos) {
                if last == eos {
                    ids = &ids[..ids.len() - 1];
                }
            }
        }
        for &id in ids {
            self.push_piece(id, unparse_special, remove_space, &mut out);
            remove_space = false;
        }
        if self.clean_spaces {
            clean_spaces(&mut out);
        }
        out
    }

    /// [`Vocab::detokenize`] as a `String`, invalid UTF-8 replaced by U+FFFD.
    pub fn detokenize_lossy(
        &self,
        ids: &[TokenId],
        remove_special: bool,
        unparse_special: bool,
    ) -> String {
        String::from_utf8_lossy(&self.detokenize(ids, remove_special, unparse_special)).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clean(s: &str) -> String {
        let mut v = s.as_bytes().to_vec();
        clean_spaces(&mut v);
        String::from_utf8(v).unwrap()
    }

    #[test]
    fn byte_tokens() {
        assert_eq!(parse_byte_token(b"<0x0A>"), Some(10));
        assert_eq!(parse_byte_token(b"<0xff>"), Some(255));
        assert_eq!(parse_byte_token(b"<0xZZ>"), Some(0));
        assert_eq!(parse_byte_token(b"<0x"), Some(0));
        assert_eq!(parse_byte_token(b"<0"), None);
    }

    #[test]
    fn byte_level_decoding() {
        assert_eq!(decode_byte_level("Ġhello".as_bytes()), b" hello");
        assert_eq!(decode_byte_level("Ċ".as_bytes()), b"\n");
        assert_eq!(
            decode_byte_level("€".as_bytes()),
            "[UNK_BYTE_0xe282ac€]".as_bytes()
        );
    }

    #[test]
    fn cleaning() {
        assert_eq!(clean("Hello , world !"), "Hello, world!");
        assert_eq!(clean("it ' s"), "it's");
        assert_eq!(clean("I 'm here , you 're there"), "I'm here, you're there");
        assert_eq!(clean("don 't"), "don 't");
        assert_eq!(clean(" ."), ".");
        assert_eq!(clean(""), "");
        assert_eq!(clean("a ' ' b"), "a'' b");
    }
}
