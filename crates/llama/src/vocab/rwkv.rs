//! The RWKV "world" tokenizer (`tokenizer.ggml.model = "rwkv"`): tokens
//! are byte strings, stored in the file as text with escapes (`\t`, `\n`,
//! `\r`, `\xNN`, and a backslash before any other character standing for
//! that character), and text is cut greedily from the left into the
//! longest token that matches, over a trie of the tokens' bytes.

use super::TokenId;

/// The bytes of a token's stored text, with its escapes resolved as
/// llama.cpp resolves them (`\xNN` reads each digit as its distance from
/// `a` when at least `a`, from `0` otherwise, wrapping within a byte).
pub(crate) fn unescape(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    let mut escaping = false;
    let mut hex_left = 0u8;
    let mut hex = 0u8;
    for &c in text {
        if hex_left > 0 {
            let digit = if c >= b'a' {
                c.wrapping_sub(b'a').wrapping_add(10)
            } else {
                c.wrapping_sub(b'0')
            };
            hex = (hex << 4).wrapping_add(digit);
            hex_left -= 1;
            if hex_left == 0 {
                out.push(hex);
                hex = 0;
            }
            continue;
        }
        if escaping {
            match c {
                b't' => out.push(b'\t'),
                b'n' => out.push(b'\n'),
                b'r' => out.push(b'\r'),
                b'x' => hex_left = 2,
                c => out.push(c),
            }
            escaping = false;
            continue;
        }
        if c == b'\\' {
            escaping = true;
            continue;
        }
        out.push(c);
    }
    out
}

/// One trie node: its children by next byte (sorted) and the token that
/// ends here, if any.
#[derive(Clone, Debug, Default)]
struct Node {
    children: Vec<(u8, u32)>,
    token: Option<TokenId>,
}

impl Node {
    fn child(&self, b: u8) -> Option<u32> {
        self.children
            .binary_search_by_key(&b, |&(k, _)| k)
            .ok()
            .map(|i| self.children[i].1)
    }
}

/// The trie of every token's bytes.
#[derive(Clone, Debug)]
pub(crate) struct Rwkv {
    nodes: Vec<Node>,
}

impl Rwkv {
    /// The trie of `tokens` (stored texts, in id order). Of two tokens
    /// with the same bytes the later id wins, as in llama.cpp.
    pub(crate) fn new<'a>(tokens: impl Iterator<Item = &'a [u8]>) -> Rwkv {
        let mut nodes = vec![Node::default()];
        for (id, text) in tokens.enumerate() {
            let bytes = unescape(text);
            if bytes.is_empty() {
                continue;
            }
            let mut at = 0usize;
            for &b in &bytes {
                at = match nodes[at].children.binary_search_by_key(&b, |&(k, _)| k) {
                    Ok(i) => nodes[at].children[i].1 as usize,
                    Err(i) => {
                        let next = nodes.len();
                        nodes.push(Node::default());
                        nodes[at].children.insert(i, (b, next as u32));
                        next
                    }
                };
            }
            nodes[at].token = TokenId::try_from(id).ok();
        }
        Rwkv { nodes }
    }

    /// The token whose bytes are exactly `bytes`.
    pub(crate) fn exact(&self, bytes: &[u8]) -> Option<TokenId> {
        let mut at = 0u32;
        for &b in bytes {
            at = self.nodes[at as usize].child(b)?;
        }
        self.nodes[at as usize].token
    }

    /// The longest token that `text` starts with, and its length.
    fn longest(&self, text: &[u8]) -> Option<(TokenId, usize)> {
        let mut at = 0u32;
        let mut best = None;
        for (i, &b) in text.iter().enumerate() {
            match self.nodes[at as usize].child(b) {
                Some(next) => at = next,
                None => break,
            }
            if let Some(t) = self.nodes[at as usize].token {
                best = Some((t, i + 1));
            }
        }
        best
    }

    /// Appends the tokens of `text`: the longest matching token from the
    /// left, again and again. A byte that starts no token becomes `unk`
    /// (llama.cpp's world vocabularies have a token for every byte, which
    /// the vocabulary's loading checks when there is no unknown token).
    pub(crate) fn tokenize(&self, text: &[u8], unk: Option<TokenId>, out: &mut Vec<TokenId>) {
        let mut pos = 0;
        while pos < text.len() {
            match self.longest(&text[pos..]) {
                Some((t, n)) => {
                    out.push(t);
                    pos += n;
                }
                None => {
                    out.extend(unk);
                    pos += 1;
                }
            }
        }
    }

    /// The first byte value that no token covers on its own, if any.
    pub(crate) fn uncovered_byte(&self) -> Option<u8> {
        (0..=255u8).find(|&b| self.exact(&[b]).is_none())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_resolve_as_llama_cpp_reads_them() {
        assert_eq!(unescape(b"a\\tb\\nc\\rd"), b"a\tb\nc\rd");
        assert_eq!(unescape(b"\\x00\\xff\\x7f"), [0x00, 0xff, 0x7f]);
        assert_eq!(unescape(b"\\\\ \\' \\q"), b"\\ ' q");
        // Upper-case hex digits read as llama.cpp reads them: 'F' - '0'.
        assert_eq!(unescape(b"\\xF0"), [((b'F' - b'0') << 4)]);
        // An escape cut at the end of the text gives nothing more.
        assert_eq!(unescape(b"ab\\"), b"ab");
        assert_eq!(unescape(b"ab\\x4"), b"ab");
    }

    fn trie(tokens: &[&str]) -> Rwkv {
        Rwkv::new(tokens.iter().map(|t| t.as_bytes()))
    }

    #[test]
    fn longest_match_from_the_left() {
        let t = trie(&["<s>", "a", "b", "ab", "abc", "c", "\\n", "bcd"]);
        let mut out = Vec::new();
        t.tokenize(b"abcd\nab", None, &mut out);
        // "abc", then "d" starts no token: skipped without an unknown
        // token (a vocabulary that loads has one, or a token per byte).
        assert_eq!(out, vec![4, 6, 3]);
        out.clear();
        t.tokenize(b"abcab\nc", Some(0), &mut out);
        assert_eq!(out, vec![4, 3, 6, 5]);
        out.clear();
        // A path through bytes without a token falls back to the longest
        // token on it: "bc" is no token, "b" is.
        t.tokenize(b"bca", Some(0), &mut out);
        assert_eq!(out, vec![2, 5, 1]);
        assert_eq!(t.exact(b"\n"), Some(6));
        assert_eq!(t.exact(b"bc"), None);
        assert_eq!(t.uncovered_byte(), Some(0));
    }
}
