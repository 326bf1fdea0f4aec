//! Unigram (`t5` vocabularies), as SentencePiece's optimized Viterbi search.
//!
//! The text is first normalized: the longest prefix that names a
//! user-defined token stays as is, otherwise the longest prefix found in the
//! precompiled character map (an XOR-compressed double array) is replaced,
//! otherwise one UTF-8 character is copied (invalid bytes become U+FFFD);
//! spaces become U+2581 and are added, kept or merged as the vocabulary's
//! flags say. Then, moving one code point at a time, every token that starts
//! there extends the best tokenization of its start (highest sum of scores;
//! user-defined tokens score 0); a code point no token covers alone costs
//! the unknown-token score. The best path is read back from the end, with
//! runs of unknown tokens merged into one.

use super::error::{Result, VocabError};
use super::hash::FxHashMap;
use super::unicode::{decode_one, utf8_len};
use super::{TokenAttr, TokenData, TokenId, Vocab};

/// A byte trie; node 0 is the root.
#[derive(Clone, Debug)]
struct Trie {
    children: FxHashMap<(u32, u8), u32>,
    values: Vec<Option<TokenId>>,
}

impl Trie {
    const ROOT: u32 = 0;

    fn new() -> Trie {
        Trie {
            children: FxHashMap::default(),
            values: vec![None],
        }
    }

    fn insert(&mut self, key: &[u8], value: TokenId) {
        let mut node = Trie::ROOT;
        for &b in key {
            let next = self.values.len() as u32;
            node = *self.children.entry((node, b)).or_insert(next);
            if node == next {
                self.values.push(None);
            }
        }
        self.values[node as usize] = Some(value);
    }

    fn child(&self, node: u32, b: u8) -> Option<u32> {
        self.children.get(&(node, b)).copied()
    }

    fn value(&self, node: u32) -> Option<TokenId> {
        self.values.get(node as usize).copied().flatten()
    }

    /// How many bytes of `key` the trie's edges follow from the root, whether
    /// or not a key ends there.
    fn walk_depth(&self, key: &[u8]) -> usize {
        let mut node = Trie::ROOT;
        for (depth, &b) in key.iter().enumerate() {
            match self.child(node, b) {
                Some(next) => node = next,
                None => return depth,
            }
        }
        key.len()
    }
}

/// The Unigram tokenizer's tables.
#[derive(Clone, Debug)]
pub(crate) struct Ugm {
    /// Normal, user-defined and unused tokens.
    tokens: Trie,
    /// User-defined tokens, which normalization leaves untouched.
    user_defined: Trie,
    /// Score of a code point no token covers: the lowest normal score - 10.
    unknown_score: f32,
    /// The character map's double array (bit-packed nodes).
    xcda: Vec<u32>,
    /// NUL-terminated replacement strings the leaves point into.
    replacements: Vec<u8>,
}

/// Penalty of the unknown token below the lowest normal score.
const UNKNOWN_PENALTY: f32 = 10.0;

/// U+FFFD, for a byte that starts no UTF-8 sequence.
const REPLACEMENT_UTF8: &[u8] = "\u{FFFD}".as_bytes();

fn xcda_base(node: u32) -> u32 {
    (node >> 10) << ((node & (1 << 9)) >> 6)
}

fn xcda_lcheck(node: u32) -> u32 {
    node & ((1 << 31) | 0xFF)
}

fn xcda_leaf(node: u32) -> bool {
    (node >> 8) & 1 != 0
}

fn xcda_value(node: u32) -> u32 {
    node & ((1 << 31) - 1)
}

/// One step of the search: the best tokenization ending here.
#[derive(Clone, Copy, Debug)]
struct Best {
    token: Option<TokenId>,
    start: usize,
    score: f32,
}

impl Ugm {
    /// Builds the tables from the tokens (with their file attributes) and
    /// the precompiled character map.
    pub(crate) fn new(tokens: &[TokenData], charsmap: Option<&[u8]>) -> Result<Ugm> {
        const KEY: &str = "tokenizer.ggml.precompiled_charsmap";
        let mut xcda = Vec::new();
        let mut replacements = Vec::new();
        if let Some(map) = charsmap.filter(|m| !m.is_empty()) {
            let invalid = |reason: String| VocabError::InvalidValue { key: KEY, reason };
            let head: [u8; 4] = map
                .get(..4)
                .and_then(|h| h.try_into().ok())
                .ok_or_else(|| {
                    invalid(format!("{} bytes cannot hold its 4-byte header", map.len()))
                })?;
            let blob = u32::from_le_bytes(head) as usize;
            if blob.saturating_add(4) >= map.len() {
                return Err(invalid(format!(
                    "its double array ({blob} bytes) does not fit in its {} bytes",
                    map.len()
                )));
            }
            xcda = map[4..4 + blob]
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            replacements = map[4 + blob..].to_vec();
        }

        let mut trie = Trie::new();
        let mut user_defined = Trie::new();
        let mut min_score = f32::MAX;
        for (id, t) in tokens.iter().enumerate() {
            let normal = t.attr.intersects(TokenAttr::NORMAL);
            if normal {
                min_score = min_score.min(t.score);
            }
            let user = t.attr.intersects(TokenAttr::USER_DEFINED);
            if normal || user || t.attr.intersects(TokenAttr::UNUSED) {
                trie.insert(&t.text, id as TokenId);
            }
            if user {
                user_defined.insert(&t.text, 0);
            }
        }
        Ok(Ugm {
            tokens: trie,
            user_defined,
            unknown_score: min_score - UNKNOWN_PENALTY,
            xcda,
            replacements,
        })
    }

    /// The longest character-map match at the start of `input`: its length
    /// and its replacement. A map that points outside itself matches nothing.
    fn charsmap_match(&self, input: &[u8]) -> Option<(usize, &[u8])> {
        let node_at = |i: u32| self.xcda.get(i as usize).copied();
        let mut node = xcda_base(node_at(0)?);
        let mut longest = None;
        for (i, &c) in input.iter().enumerate() {
            if c == 0 {
                break;
            }
            node ^= u32::from(c);
            let Some(packed) = node_at(node) else { break };
            if xcda_lcheck(packed) != u32::from(c) {
                break;
            }
            node ^= xcda_base(packed);
            if xcda_leaf(packed) {
                let Some(value) = node_at(node) else { break };
                longest = Some((i + 1, xcda_value(value) as usize));
            }
        }
        let (len, offset) = longest?;
        let tail = self.replacements.get(offset..)?;
        let end = tail.iter().position(|&b| b == 0).unwrap_or(tail.len());
        Some((len, &tail[..end]))
    }

    /// The normalized form of the start of `input` and how many bytes it
    /// consumes.
    fn normalize_prefix<'a>(&'a self, input: &'a [u8]) -> (&'a [u8], usize) {
        let user = self.user_defined.walk_depth(input);
        if user > 0 {
            return (&input[..user], user);
        }
        if let Some((len, replacement)) = self.charsmap_match(input) {
            return (replacement, len);
        }
        match decode_one(input, 0) {
            Some((_, n)) => (&input[..n], n),
            None => (REPLACEMENT_UTF8, 1),
        }
    }

    /// Normalizes `input` and writes spaces as U+2581.
    fn normalize(&self, vocab: &Vocab, input: &[u8]) -> Vec<u8> {
        const SPACE: &[u8] = "\u{2581}".as_bytes();
        let prepend = vocab.add_space_prefix();
        let merge = vocab.remove_extra_whitespaces();
        let mut out = Vec::with_capacity(input.len() * 3);
        let mut prepended = false;
        let mut in_word = false;
        let mut offset = 0;
        while offset < input.len() {
            let (piece, consumed) = self.normalize_prefix(&input[offset..]);
            for &c in piece {
                if c != b' ' {
                    if !in_word {
                        in_word = true;
                        if (prepend && !prepended) || merge {
                            out.extend_from_slice(SPACE);
                            prepended = true;
                        }
                    }
                    out.push(c);
                } else {
                    in_word = false;
                    if !merge {
                        out.extend_from_slice(SPACE);
                    }
                }
            }
            offset += consumed;
        }
        out
    }

    /// Tokenizes `text` (one fragment), appending to `out`.
    pub(crate) fn tokenize(&self, vocab: &Vocab, text: &[u8], out: &mut Vec<TokenId>) {
        let norm = self.normalize(vocab, text);
        let n = norm.len();
        if n == 0 {
            return;
        }
        let unk = vocab.unk();
        let mut best = vec![
            Best {
                token: unk,
                start: 0,
                score: -f32::MAX
            };
            n + 1
        ];
        best[0].score = 0.0;
        let mut offset = 0;
        while offset < n {
            let cp_len = utf8_len(norm[offset]).min(n - offset);
            let current = best[offset];
            let mut whole_code_point = false;
            let mut node = self.tokens.child(Trie::ROOT, norm[offset]);
            let mut end = offset + 1;
            while let Some(at) = node {
                if let Some(id) = self.tokens.value(at) {
                    if end - offset == cp_len {
                        whole_code_point = true;
                    }
                    // User-defined tokens score 0 to be preferred; sums are
                    // computed in double precision and stored in single.
                    let score = if vocab.is_user_defined(id) {
                        0.0
                    } else {
                        f64::from(vocab.get_score(id).unwrap_or(0.0))
                    };
                    let challenger = f64::from(current.score) + score;
                    if challenger > f64::from(best[end].score) {
                        best[end] = Best {
                            token: Some(id),
                            start: offset,
                            score: challenger as f32,
                        };
                    }
                }
                if end >= n {
                    break;
                }
                node = self.tokens.child(at, norm[end]);
                end += 1;
            }
            if !whole_code_point {
                let challenger = current.score + self.unknown_score;
                let end = offset + cp_len;
                if challenger > best[end].score {
                    best[end] = Best {
                        token: unk,
                        start: offset,
                        score: challenger,
                    };
                }
            }
            offset += cp_len;
        }

        let first = out.len();
        let mut prev_unknown = false;
        let mut step = best[n];
        loop {
            let unknown = step.token == unk;
            if !(prev_unknown && unknown) {
                out.extend(step.token);
            }
            if step.start == 0 {
                break;
            }
            prev_unknown = unknown;
            step = best[step.start];
        }
        out[first..].reverse();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trie() {
        let mut t = Trie::new();
        t.insert(b"ab", 1);
        t.insert(b"abc", 2);
        t.insert(b"b", 3);
        let a = t.child(Trie::ROOT, b'a').unwrap();
        assert_eq!(t.value(a), None);
        let ab = t.child(a, b'b').unwrap();
        assert_eq!(t.value(ab), Some(1));
        assert_eq!(t.walk_depth(b"abx"), 2);
        assert_eq!(t.walk_depth(b"abcd"), 3);
        assert_eq!(t.walk_depth(b"x"), 0);
    }

    #[test]
    fn malformed_charsmap() {
        assert!(Ugm::new(&[], Some(&[1, 0])).is_err());
        assert!(Ugm::new(&[], Some(&[8, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8])).is_err());
        let ugm = Ugm::new(&[], Some(&[4, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0])).unwrap();
        // A double array pointing outside itself matches nothing.
        assert_eq!(ugm.charsmap_match(b"abc"), None);
    }
}
