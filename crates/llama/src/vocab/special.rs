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

impl Vocab {
    /// Splits `text` (non-empty) into text fragments and special tokens.
    pub(crate) fn partition_special(&self, text: &[u8], parse_special: bool) -> Vec<Fragment> {
        let mut fragments = vec![Fragment::Text(0..text.len())];
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
            if needle.is_empty() {
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
