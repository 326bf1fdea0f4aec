//! Llama 3.x: a reply that is one JSON object `{"name": ..., "parameters":
//! {...}}` is a call; with built-in tools, `<|python_tag|>` starts either
//! `tool.call(key="value", ...)` or Python code (a call of `python`).

use super::functionary_v3_1::{python_call, PYTHON_TAG};
use super::json_scan::call_object;
use super::parser::CallParse;
use super::scan::{is_marker_prefix, shown};
use super::{ParsedMessage, ToolCall};

const NAME_KEYS: &[&str] = &["name"];
const ARGS_KEYS: &[&str] = &["parameters", "arguments"];

pub(crate) fn parse(text: &str, partial: bool, python_tag: bool, out: &mut ParsedMessage) {
    let t = text.trim_start();
    if python_tag {
        if let Some(i) = text.find(PYTHON_TAG) {
            out.content.push_str(text[..i].trim_end());
            let code = &text[i + PYTHON_TAG.len()..];
            if let Some(call) = builtin_call(code) {
                out.tool_calls.push(call);
                return;
            }
            if partial
                && code
                    .trim_start()
                    .chars()
                    .all(|c| c.is_alphanumeric() || "_.(".contains(c))
            {
                // Maybe a built-in call still being written.
                return;
            }
            if let CallParse::Done(c, _) | CallParse::Partial(c) = python_call(code, partial) {
                out.tool_calls.extend(c);
            }
            return;
        }
        if partial && is_marker_prefix(t, PYTHON_TAG) {
            return;
        }
    }
    if t.starts_with('{') {
        if let Some(obj) = call_object(t, NAME_KEYS, ARGS_KEYS) {
            match (obj.end, obj.name) {
                (Some(end), Some(name)) if t[end..].trim().is_empty() => {
                    out.tool_calls.push(ToolCall {
                        name,
                        arguments: obj.arguments.unwrap_or_else(|| "{}".into()),
                        id: String::new(),
                    });
                    return;
                }
                (None, name) if partial => {
                    if let Some(name) = name {
                        out.tool_calls.push(ToolCall {
                            name,
                            arguments: obj.arguments.unwrap_or_default(),
                            id: String::new(),
                        });
                    }
                    return;
                }
                _ => {}
            }
        }
    }
    let markers: &[&str] = if python_tag { &[PYTHON_TAG] } else { &[] };
    out.content.push_str(shown(text, markers, partial));
}

/// `name.call(key=value, ...)` with Python literal values, as a call.
fn builtin_call(code: &str) -> Option<ToolCall> {
    let code = code.trim();
    let (name, rest) = code.split_once(".call(")?;
    if name.is_empty() || !name.chars().all(|c| c.is_alphanumeric() || c == '_') {
        return None;
    }
    let inner = rest.strip_suffix(')')?;
    let mut args = serde_json::Map::new();
    let mut s = inner.trim();
    while !s.is_empty() {
        let (key, r) = s.split_once('=')?;
        let key = key.trim();
        let r = r.trim_start();
        let (val, used) = python_literal(r)?;
        args.insert(key.to_string(), val);
        s = r[used..].trim_start();
        s = s.strip_prefix(',').unwrap_or(s).trim_start();
    }
    Some(ToolCall {
        name: name.to_string(),
        arguments: serde_json::Value::Object(args).to_string(),
        id: String::new(),
    })
}

/// A Python string, number, `True`, `False` or `None` at the start of `s`.
fn python_literal(s: &str) -> Option<(serde_json::Value, usize)> {
    let q = s.chars().next()?;
    if q == '"' || q == '\'' {
        let mut out = String::new();
        let mut esc = false;
        for (i, c) in s.char_indices().skip(1) {
            if esc {
                out.push(match c {
                    'n' => '\n',
                    't' => '\t',
                    o => o,
                });
                esc = false;
            } else if c == '\\' {
                esc = true;
            } else if c == q {
                return Some((out.into(), i + 1));
            } else {
                out.push(c);
            }
        }
        return None;
    }
    let end = s.find([',', ')']).unwrap_or(s.len());
    let word = s[..end].trim();
    let v = match word {
        "True" => true.into(),
        "False" => false.into(),
        "None" => serde_json::Value::Null,
        w => serde_json::from_str::<serde_json::Number>(w).ok()?.into(),
    };
    Some((v, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_calls_builtin_calls_and_text() {
        let mut m = ParsedMessage::default();
        parse(
            "{\"name\": \"special_function\", \"parameters\": {\"arg1\": 1}}",
            false,
            true,
            &mut m,
        );
        assert_eq!(m.tool_calls[0].name, "special_function");
        assert_eq!(m.tool_calls[0].arguments, r#"{"arg1":1}"#);
        let mut b = ParsedMessage::default();
        parse(
            "<|python_tag|>brave_search.call(query=\"today's weather\")",
            false,
            true,
            &mut b,
        );
        assert_eq!(b.tool_calls[0].name, "brave_search");
        assert_eq!(b.tool_calls[0].arguments, r#"{"query":"today's weather"}"#);
        let mut c = ParsedMessage::default();
        parse("<|python_tag|>print('hey')", false, true, &mut c);
        assert_eq!(c.tool_calls[0].arguments, r#"{"code":"print('hey')"}"#);
        let mut t = ParsedMessage::default();
        parse("Hello, world!\nWhat's up?", false, true, &mut t);
        assert_eq!(t.content, "Hello, world!\nWhat's up?");
        let mut j = ParsedMessage::default();
        parse("{\"answer\": 42}", false, false, &mut j);
        assert_eq!(j.content, "{\"answer\": 42}");
    }
}
