//! A `pattern` (a regular expression anchored with `^` and `$`) translated
//! to grammar rules: literals, character classes, `.`, groups, alternation
//! and the `* + ? {m,n}` repetitions. What the grammar cannot express
//! (lookaround, backreferences, `\d`-style classes, anchors inside the
//! pattern) is an error.

use std::collections::HashMap;

use super::convert::Converter;
use super::error::SchemaError;
use super::literal::escape_length;
use super::repetition::build_repetition;

/// Deepest group nesting translated.
const MAX_PATTERN_DEPTH: usize = 100;

fn non_literal(c: u8) -> bool {
    matches!(
        c,
        b'|' | b'.' | b'(' | b')' | b'[' | b']' | b'{' | b'}' | b'*' | b'+' | b'?' | b'^' | b'$'
    )
}

/// Characters a regex escapes that a grammar literal holds as they are.
fn escaped_in_regex_only(c: u8) -> bool {
    matches!(
        c,
        b'^' | b'$' | b'.' | b'[' | b']' | b'(' | b')' | b'|' | b'{' | b'}' | b'*' | b'+' | b'?'
    )
}

/// A piece of the translation: grammar text, or literal characters still
/// to be quoted (and merged with their neighbours).
type Piece = (Vec<u8>, bool);

fn to_rule(p: &Piece) -> Vec<u8> {
    if p.1 {
        let mut v = Vec::with_capacity(p.0.len() + 2);
        v.push(b'"');
        v.extend_from_slice(&p.0);
        v.push(b'"');
        v
    } else {
        p.0.clone()
    }
}

/// C's `stoi`: optional spaces and sign, digits, anything after ignored.
fn stoi(s: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(s).ok()?.trim_start();
    let (neg, digits) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let end = digits
        .bytes()
        .position(|c| !c.is_ascii_digit())
        .unwrap_or(digits.len());
    if end == 0 {
        return None;
    }
    let n: i64 = digits[..end].parse().ok()?;
    let n = if neg { -n } else { n };
    (i64::from(i32::MIN)..=i64::from(i32::MAX))
        .contains(&n)
        .then_some(n)
}

struct Pattern<'a> {
    p: &'a [u8],
    i: usize,
    depth: usize,
    sub_ids: HashMap<Vec<u8>, String>,
    name: &'a str,
}

impl Converter {
    /// The rule for strings matching `pattern`, named `name`.
    pub(super) fn visit_pattern(
        &mut self,
        pattern: &str,
        name: &str,
        path: &str,
    ) -> Result<String, SchemaError> {
        let err = |why: &str| SchemaError::Pattern {
            path: path.to_string(),
            pattern: pattern.to_string(),
            why: why.to_string(),
        };
        let b = pattern.as_bytes();
        if b.len() < 2 || b[0] != b'^' || b[b.len() - 1] != b'$' {
            return Err(err("it is not anchored with '^' and '$'"));
        }
        let mut st = Pattern {
            p: &b[1..b.len() - 1],
            i: 0,
            depth: 0,
            sub_ids: HashMap::new(),
            name,
        };
        let piece = self.transform(&mut st).map_err(|w| err(&w))?;
        if st.depth != 0 {
            return Err(err("unbalanced parentheses"));
        }
        let rule = String::from_utf8(to_rule(&piece))
            .map_err(|_| err("a repetition applies to part of a multi-byte character"))?;
        Ok(self.add_rule(name, &format!("\"\\\"\" ({rule}) \"\\\"\"")))
    }

    fn dot(&mut self) -> String {
        let rule = if self.dotall {
            "[\\U00000000-\\U0010FFFF]"
        } else {
            "[^\\x0A\\x0D]"
        };
        self.add_rule("dot", rule)
    }

    fn rule_text(&mut self, name: &str, body: &[u8]) -> Result<String, String> {
        let body = std::str::from_utf8(body)
            .map_err(|_| "a repetition applies to part of a multi-byte character".to_string())?;
        Ok(self.add_rule(name, body))
    }

    fn transform(&mut self, st: &mut Pattern<'_>) -> Result<Piece, String> {
        let p = st.p;
        let len = p.len();
        let mut seq: Vec<Piece> = Vec::new();
        while st.i < len {
            let c = p[st.i];
            match c {
                b'.' => {
                    seq.push((self.dot().into_bytes(), false));
                    st.i += 1;
                }
                b'(' => {
                    st.i += 1;
                    if st.i < len && p[st.i] == b'?' {
                        if st.i + 1 < len && p[st.i + 1] == b':' {
                            st.i += 2;
                        } else {
                            return Err("unsupported group syntax".into());
                        }
                    }
                    st.depth += 1;
                    if st.depth > MAX_PATTERN_DEPTH {
                        return Err("groups nested too deeply".into());
                    }
                    let inner = self.transform(st)?;
                    let mut g = b"(".to_vec();
                    g.extend(to_rule(&inner));
                    g.push(b')');
                    seq.push((g, false));
                }
                b')' => {
                    st.i += 1;
                    if st.depth == 0 {
                        return Err("unbalanced parentheses".into());
                    }
                    st.depth -= 1;
                    return Ok(join_seq(&seq));
                }
                b'^' | b'$' => return Err("an anchor inside the pattern".into()),
                b'[' => {
                    let mut class = vec![b'['];
                    st.i += 1;
                    while st.i < len && p[st.i] != b']' {
                        if p[st.i] == b'\\' {
                            let n = escape_length(p, st.i);
                            if n == 0 {
                                let end = (st.i + 2).min(len);
                                return Err(format!(
                                    "unsupported escape in a character class: {}",
                                    String::from_utf8_lossy(&p[st.i..end])
                                ));
                            }
                            class.extend_from_slice(&p[st.i..st.i + n]);
                            st.i += n;
                        } else {
                            class.push(p[st.i]);
                            st.i += 1;
                        }
                    }
                    if st.i >= len {
                        return Err("unterminated character class".into());
                    }
                    // `[]` matches nothing and `[^]` anything in a regular
                    // expression; GBNF has neither (its empty class is no
                    // item at all).
                    if class == b"[" || class == b"[^" {
                        return Err(format!(
                            "an empty character class {}]",
                            String::from_utf8_lossy(&class)
                        ));
                    }
                    class.push(b']');
                    st.i += 1;
                    seq.push((class, false));
                }
                b'|' => {
                    seq.push((b"|".to_vec(), false));
                    st.i += 1;
                }
                b'*' | b'+' | b'?' => {
                    let Some(last) = seq.last_mut() else {
                        return Err("nothing to repeat".into());
                    };
                    let mut r = to_rule(last);
                    r.push(c);
                    *last = (r, false);
                    st.i += 1;
                }
                b'{' => {
                    let start = st.i + 1;
                    st.i += 1;
                    while st.i < len && p[st.i] != b'}' {
                        st.i += 1;
                    }
                    if st.i >= len {
                        return Err("unterminated curly brackets".into());
                    }
                    let inside = &p[start..st.i];
                    st.i += 1;
                    let nums: Vec<&[u8]> = inside.split(|&b| b == b',').collect();
                    let bad_number = || "invalid number in curly brackets".to_string();
                    let (min, max) = match nums.as_slice() {
                        [n] => {
                            let n = stoi(n).ok_or_else(bad_number)?;
                            (n, Some(n))
                        }
                        [lo, hi] => {
                            let lo = if lo.is_empty() {
                                0
                            } else {
                                stoi(lo).ok_or_else(bad_number)?
                            };
                            let hi = if hi.is_empty() {
                                None
                            } else {
                                Some(stoi(hi).ok_or_else(bad_number)?)
                            };
                            (lo, hi)
                        }
                        _ => return Err("wrong number of values in curly brackets".into()),
                    };
                    if min < 0 || max.is_some_and(|m| m < min) {
                        return Err("invalid bounds in curly brackets".into());
                    }
                    let limit = crate::grammar::MAX_REPETITION as i64;
                    if min.max(max.unwrap_or(0)) > limit {
                        return Err(format!(
                            "a repetition count above the grammar's limit of {limit}"
                        ));
                    }
                    let Some(last) = seq.last_mut() else {
                        return Err("nothing to repeat".into());
                    };
                    let item = if last.1 {
                        to_rule(last)
                    } else {
                        let key = last.0.clone();
                        let id = match st.sub_ids.get(&key) {
                            Some(id) => id.clone(),
                            None => {
                                let n = st.sub_ids.len() + 1;
                                let id = self.rule_text(&format!("{}-{n}", st.name), &key)?;
                                st.sub_ids.insert(key, id.clone());
                                id
                            }
                        };
                        id.into_bytes()
                    };
                    let item = String::from_utf8(item).map_err(|_| {
                        "a repetition applies to part of a multi-byte character".to_string()
                    })?;
                    let rep = build_repetition(&item, min as u32, max.map(|m| m as u32), "");
                    *last = (rep.into_bytes(), false);
                }
                _ => {
                    let mut lit = Vec::new();
                    while st.i < len {
                        let ch = p[st.i];
                        if ch == b'\\' {
                            if st.i == len - 1 {
                                return Err("trailing backslash".into());
                            }
                            let next = p[st.i + 1];
                            if escaped_in_regex_only(next) {
                                lit.push(next);
                                st.i += 2;
                            } else {
                                let n = escape_length(p, st.i);
                                if n == 0 {
                                    return Err(format!(
                                        "unsupported escape: {}",
                                        String::from_utf8_lossy(&p[st.i..st.i + 2])
                                    ));
                                }
                                lit.extend_from_slice(&p[st.i..st.i + n]);
                                st.i += n;
                            }
                        } else if ch == b'"' {
                            lit.extend_from_slice(b"\\\"");
                            st.i += 1;
                        } else if !non_literal(ch)
                            && (st.i == len - 1
                                || lit.is_empty()
                                || p[st.i + 1] == b'.'
                                || !non_literal(p[st.i + 1]))
                        {
                            lit.push(ch);
                            st.i += 1;
                        } else {
                            break;
                        }
                    }
                    if lit.is_empty() {
                        return Err(format!("unsupported character: {}", c as char));
                    }
                    seq.push((lit, true));
                }
            }
        }
        Ok(join_seq(&seq))
    }
}

/// Joins a sequence, merging neighbouring literals into one.
fn join_seq(seq: &[Piece]) -> Piece {
    let mut out: Vec<Vec<u8>> = Vec::new();
    let mut lit: Vec<u8> = Vec::new();
    for item in seq {
        if item.1 {
            lit.extend_from_slice(&item.0);
        } else {
            if !lit.is_empty() {
                out.push(to_rule(&(std::mem::take(&mut lit), true)));
            }
            out.push(item.0.clone());
        }
    }
    if !lit.is_empty() {
        out.push(to_rule(&(lit, true)));
    }
    (out.join(&b' '), false)
}
