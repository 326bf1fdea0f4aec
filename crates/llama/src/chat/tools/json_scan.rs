//! Reading JSON that may still be streaming: where a value ends, its text
//! without insignificant whitespace (which only grows as more arrives),
//! and the name and arguments of a call object written so far.

/// How far one JSON value reaches from the start of a text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Extent {
    /// The value ends at this byte offset.
    Complete(usize),
    /// The text ends inside the value.
    Partial,
    /// The text is not JSON there.
    Invalid,
}

/// The extent of the JSON value at the start of `s` (after whitespace).
/// Brackets and strings are followed, not the grammar of every token, so
/// a complete value is checked with serde afterwards.
pub(crate) fn value_extent(s: &str) -> Extent {
    let b = s.as_bytes();
    let mut i = s.len() - s.trim_start().len();
    if i == b.len() {
        return Extent::Partial;
    }
    match b[i] {
        b'{' | b'[' => {
            let mut depth = Vec::new();
            let mut in_str = false;
            let mut esc = false;
            while i < b.len() {
                let c = b[i];
                if in_str {
                    if esc {
                        esc = false;
                    } else if c == b'\\' {
                        esc = true;
                    } else if c == b'"' {
                        in_str = false;
                    }
                } else {
                    match c {
                        b'"' => in_str = true,
                        b'{' | b'[' => depth.push(c),
                        b'}' | b']' => {
                            let open = if c == b'}' { b'{' } else { b'[' };
                            if depth.pop() != Some(open) {
                                return Extent::Invalid;
                            }
                            if depth.is_empty() {
                                return Extent::Complete(i + 1);
                            }
                        }
                        _ => {}
                    }
                }
                i += 1;
            }
            Extent::Partial
        }
        b'"' => match string_end(&s[i..]) {
            Some(e) => Extent::Complete(i + e),
            None => Extent::Partial,
        },
        c if c == b'-' || c.is_ascii_alphanumeric() => {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b"+-.".contains(&b[i])) {
                i += 1;
            }
            if i == b.len() {
                Extent::Partial
            } else if serde_json::from_str::<serde_json::Value>(&s[start..i]).is_ok() {
                Extent::Complete(i)
            } else {
                Extent::Invalid
            }
        }
        _ => Extent::Invalid,
    }
}

/// The byte just past the closing quote of the string starting at `s[0]`.
fn string_end(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    let mut esc = false;
    for (i, &c) in b.iter().enumerate().skip(1) {
        if esc {
            esc = false;
        } else if c == b'\\' {
            esc = true;
        } else if c == b'"' {
            return Some(i + 1);
        }
    }
    None
}

/// `s` without whitespace outside strings: llama.cpp's compact dump of a
/// value for the JSON written here, and for a prefix of a value a prefix
/// of that.
pub(crate) fn minify(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut in_str = false;
    let mut esc = false;
    for c in s.chars() {
        if in_str {
            out.push(c);
            if esc {
                esc = false;
            } else if c == '\\' {
                esc = true;
            } else if c == '"' {
                in_str = false;
            }
        } else if !c.is_whitespace() {
            if c == '"' {
                in_str = true;
            }
            out.push(c);
        }
    }
    out
}

/// A complete JSON value's compact text, or `None` when it is not JSON.
pub(crate) fn compact(s: &str) -> Option<String> {
    serde_json::from_str::<serde_json::Value>(s).ok()?;
    Some(minify(s.trim()))
}

/// The decoded text of a JSON string that may be cut short (`s` starts at
/// its opening quote), with whether it is closed and where it ends. An
/// escape cut in the middle is left out until it is whole.
pub(crate) fn partial_string(s: &str) -> Option<(String, Option<usize>)> {
    if !s.starts_with('"') {
        return None;
    }
    if let Some(end) = string_end(s) {
        let v: String = serde_json::from_str(&s[..end]).ok()?;
        return Some((v, Some(end)));
    }
    // Decode the longest prefix that ends outside an escape.
    let b = s.as_bytes();
    let mut cut = b.len();
    let mut i = 1;
    while i < b.len() {
        if b[i] == b'\\' {
            let need = if b.get(i + 1) == Some(&b'u') { 6 } else { 2 };
            if i + need > b.len() {
                cut = i;
                break;
            }
            i += need;
        } else {
            i += 1;
        }
    }
    let v: String = serde_json::from_str(&format!("{}\"", &s[..cut])).ok()?;
    Some((v, None))
}

/// A call object (`{"name": ..., "arguments": {...}, "id": ...}`) as far
/// as it is written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct CallObject {
    /// The name, once its string is closed.
    pub name: Option<String>,
    /// The arguments' compact text (a prefix while partial).
    pub arguments: Option<String>,
    /// The id, once closed.
    pub id: Option<String>,
    /// Where the object ends, when it is closed.
    pub end: Option<usize>,
}

/// Reads the call object at the start of `s`. `name_keys` and `args_keys`
/// are the members holding the name and the arguments (first match wins);
/// arguments written as a JSON string are taken as their text. `None` when
/// the text is not such an object.
pub(crate) fn call_object(s: &str, name_keys: &[&str], args_keys: &[&str]) -> Option<CallObject> {
    let lead = s.len() - s.trim_start().len();
    let mut out = CallObject::default();
    let b = s.as_bytes();
    if b.get(lead) != Some(&b'{') {
        return if lead == s.len() { Some(out) } else { None };
    }
    let mut i = lead + 1;
    let skip_ws = |i: &mut usize| {
        while *i < b.len() && (b[*i] as char).is_ascii_whitespace() {
            *i += 1;
        }
    };
    loop {
        skip_ws(&mut i);
        if i == b.len() {
            return Some(out);
        }
        if b[i] == b'}' {
            out.end = Some(i + 1);
            return Some(out);
        }
        if b[i] != b'"' {
            return None;
        }
        let Some(ke) = string_end(&s[i..]) else {
            return Some(out);
        };
        let key: String = serde_json::from_str(&s[i..i + ke]).ok()?;
        i += ke;
        skip_ws(&mut i);
        if i == b.len() {
            return Some(out);
        }
        if b[i] != b':' {
            return None;
        }
        i += 1;
        skip_ws(&mut i);
        let rest = &s[i..];
        let is_args = args_keys.contains(&key.as_str());
        match value_extent(rest) {
            Extent::Invalid => return None,
            Extent::Partial => {
                if is_args && out.arguments.is_none() && out.name.is_some() {
                    out.arguments = Some(if rest.starts_with('"') {
                        partial_string(rest).map(|(v, _)| minify(&v))?
                    } else {
                        minify(rest)
                    });
                }
                return Some(out);
            }
            Extent::Complete(e) => {
                let v: serde_json::Value = serde_json::from_str(&rest[..e]).ok()?;
                if name_keys.contains(&key.as_str()) && out.name.is_none() {
                    out.name = Some(v.as_str()?.to_string());
                } else if is_args && out.arguments.is_none() {
                    out.arguments = Some(match &v {
                        serde_json::Value::String(t) => compact(t).unwrap_or_else(|| t.clone()),
                        _ => minify(&rest[..e]),
                    });
                } else if key == "id" {
                    out.id = Some(match &v {
                        serde_json::Value::String(t) => t.clone(),
                        o => o.to_string(),
                    });
                }
                i += e;
            }
        }
        skip_ws(&mut i);
        match b.get(i) {
            None => return Some(out),
            Some(b',') => i += 1,
            Some(b'}') => {
                out.end = Some(i + 1);
                return Some(out);
            }
            Some(_) => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extents_follow_nesting_and_strings() {
        assert_eq!(
            value_extent(r#" {"a": "}", "b": [1]} x"#),
            Extent::Complete(21)
        );
        assert_eq!(value_extent(r#"{"a": [1, 2"#), Extent::Partial);
        assert_eq!(value_extent(r#"{"a"]"#), Extent::Invalid);
        assert_eq!(value_extent("12 "), Extent::Complete(2));
        assert_eq!(value_extent("12"), Extent::Partial);
        assert_eq!(value_extent("\"ab\\\"c\" "), Extent::Complete(7));
    }

    #[test]
    fn minified_prefixes_grow_into_the_whole() {
        let full = "{ \"a\" : \"x y\",\n \"b\": [1, 2] }";
        let whole = minify(full);
        assert_eq!(whole, r#"{"a":"x y","b":[1,2]}"#);
        for i in 0..full.len() {
            assert!(whole.starts_with(&minify(&full[..i])), "{i}");
        }
    }

    #[test]
    fn partial_strings_decode_whole_escapes_only() {
        assert_eq!(partial_string(r#""a\nb"#), Some(("a\nb".into(), None)));
        assert_eq!(partial_string(r#""a\"#), Some(("a".into(), None)));
        assert_eq!(partial_string(r#""a\u00"#), Some(("a".into(), None)));
        assert_eq!(
            partial_string(r#""a\u00e9" x"#),
            Some(("aé".into(), Some(9)))
        );
    }

    #[test]
    fn call_objects_stream_name_then_arguments() {
        let full = r#"{"name": "f", "arguments": {"x": 1}, "id": "abc"}"#;
        let c = call_object(full, &["name"], &["arguments"]).unwrap();
        assert_eq!(c.name.as_deref(), Some("f"));
        assert_eq!(c.arguments.as_deref(), Some(r#"{"x":1}"#));
        assert_eq!(c.id.as_deref(), Some("abc"));
        assert_eq!(c.end, Some(full.len()));
        let p = call_object(
            r#"{"name": "f", "arguments": {"x"#,
            &["name"],
            &["arguments"],
        )
        .unwrap();
        assert_eq!(p.arguments.as_deref(), Some(r#"{"x"#));
        assert_eq!(p.end, None);
        let s = call_object(
            r#"{"name": "f", "arguments": "{\"x\": 1}"}"#,
            &["name"],
            &["arguments"],
        )
        .unwrap();
        assert_eq!(s.arguments.as_deref(), Some(r#"{"x":1}"#));
        assert!(call_object("[1]", &["name"], &["arguments"]).is_none());
    }
}
