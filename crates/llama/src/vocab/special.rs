//! Splitting special tokens out of the text before tokenizing.
//!
//! Each special token, longest text first, is searched in every text
//! fragment left so far; an occurrence becomes the token and the text on its
//! sides stays text (minus the whitespace its LSTRIP/RSTRIP attributes
//! strip). Control and unknown tokens take part only when the caller asks to
//! parse special tokens; user-defined tokens always do.

use std::ops::Range;

use super::{find_bytes, TokenAttr, TokenId, Vocab};

/// A piece of the text to tokenize, or a token already decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Fragment {
    /// Bytes of the input, still to tokenize.
    Text(Range<usize>),
    /// A special token found in the input.
    Token(TokenId),
}

/// C's `isspace` in the C locale.
fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0B | 0x0C | b'\r')
}

/// Which bytes and pairs of adjacent bytes occur in a text: a token with a
/// byte or pair the text lacks cannot occur in it, which spares searching
/// for most of the (sometimes thousands of) special tokens.
struct Presence {
    bytes: [u64; 4],
    pairs: Vec<u64>,
}

impl Presence {
    fn new(text: &[u8]) -> Presence {
        let mut p = Presence {
            bytes: [0; 4],
            pairs: vec![0; 65536 / 64],
        };
        for &b in text {
            p.bytes[usize::from(b >> 6)] |= 1 << (b & 63);
        }
        for w in text.windows(2) {
            let k = usize::from(w[0]) << 8 | usize::from(w[1]);
            p.pairs[k >> 6] |= 1 << (k & 63);
        }
        p
    }

    fn may_contain(&self, needle: &[u8]) -> bool {
        let has_byte = |b: u8| self.bytes[usize::from(b >> 6)] & (1 << (b & 63)) != 0;
        let has_pair = |w: &[u8]| {
            let k = usize::from(w[0]) << 8 | usize::from(w[1]);
            self.pairs[k >> 6] & (1 << (k & 63)) != 0
        };
        needle.iter().all(|&b| has_byte(b)) && needle.windows(2).all(has_pair)
    }
}

impl Vocab {
    /// Splits `text` (non-empty) into text fragments and special tokens.
    pub(crate) fn partition_special(&self, text: &[u8], parse_special: bool) -> Vec<Fragment> {
        let mut fragments = vec![Fragment::Text(0..text.len())];
        let presence = Presence::new(text);
        for &id in &self.special_cache {
            let Some(token) = self.token(id) else {
                continue;
            };
            if !parse_special
                && token
                    .attr
                    .intersects(TokenAttr::CONTROL | TokenAttr::UNKNOWN)
            {
                continue;
            }
            let needle = token.text.as_slice();
            if needle.is_empty() || !presence.may_contain(needle) {
                continue;
            }
            let lstrip = token.attr.intersects(TokenAttr::LSTRIP);
            let rstrip = token.attr.intersects(TokenAttr::RSTRIP);
            let mut next = Vec::with_capacity(fragments.len());
            for fragment in fragments {
                let Fragment::Text(range) = fragment else {
                    next.push(fragment);
                    continue;
                };
                let (mut off, mut len) = (range.start, range.len());
                loop {
                    let Some(p) = find_bytes(&text[off..off + len], needle) else {
                        if len > 0 {
                            next.push(Fragment::Text(off..off + len));
                        }
                        break;
                    };
                    let mut left = p;
                    if lstrip {
                        while left > 0 && is_c_space(text[off + left - 1]) {
                            left -= 1;
                        }
                    }
                    if left > 0 {
                        next.push(Fragment::Text(off..off + left));
                    }
                    next.push(Fragment::Token(id));
                    let end = off + p + needle.len();
                    let mut right_len = off + len - end;
                    let mut right_off = end;
                    if right_len == 0 {
                        break;
                    }
                    if rstrip {
                        while right_len > 0 && is_c_space(text[right_off]) {
                            right_off += 1;
                            right_len -= 1;
                        }
                    }
                    off = right_off;
                    len = right_len;
                }
            }
            fragments = next;
        }
        fragments
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presence_is_a_necessary_condition() {
        let p = Presence::new(b"hello <|im_end|>");
        assert!(p.may_contain(b"<|im_end|>"));
        assert!(p.may_contain(b"lo <"));
        assert!(!p.may_contain(b"<|im_start|>"));
        assert!(!p.may_contain(b"z"));
        assert!(!p.may_contain(b"oh"));
    }
}
