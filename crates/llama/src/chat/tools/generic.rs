//! llama.cpp's generic format, for templates that know nothing of tools:
//! the tools and the answer's shape are described in the system message,
//! and the model answers with one JSON object, `{"tool_call": {"name",
//! "arguments"}}`, `{"tool_calls": [...]}` or `{"response": "..."}`.
//! Calls and tool results of earlier turns are written back as JSON text.

use serde_json::{json, Value};

use super::json_array::array;
use super::json_scan::{call_object, partial_string, value_extent, Extent};
use super::parser::CallParse;
use super::scan::shown;
use super::{ParsedMessage, ToolCall};
use crate::chat::Message;

/// The first words of the system message that describes the tools.
pub const GENERIC_SYSTEM_INTRO: &str =
    "Respond in JSON format, either with `tool_call` (a request to call tools) or with `response` reply to the user's request";

/// The JSON schema of a generic answer for `tools`.
pub(crate) fn answer_schema(tools: &[Value], parallel: bool) -> Value {
    let calls: Vec<Value> = tools
        .iter()
        .filter_map(|t| {
            let f = t.get("function")?;
            Some(json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string", "const": f.get("name")?},
                    "arguments": f.get("parameters").cloned().unwrap_or_else(|| json!({"type": "object"})),
                },
                "required": ["name", "arguments"],
            }))
        })
        .collect();
    let call = if calls.len() == 1 {
        calls[0].clone()
    } else {
        json!({"anyOf": calls})
    };
    let call_key = if parallel {
        json!({"tool_calls": {"type": "array", "items": call, "minItems": 1}})
    } else {
        json!({"tool_call": call})
    };
    let key = if parallel { "tool_calls" } else { "tool_call" };
    json!({
        "anyOf": [
            {"type": "object", "properties": call_key, "required": [key]},
            {"type": "object", "properties": {"response": {"type": "string"}}, "required": ["response"]},
        ]
    })
}

/// `messages` rewritten for a template without tool support: the tools
/// and the answer's schema joined to the system message (one is added when
/// there is none), calls and tool results written as JSON text.
pub fn generic_messages(messages: &[Message], tools: &[Value], parallel: bool) -> Vec<Message> {
    let schema = answer_schema(tools, parallel);
    let intro = format!(
        "{GENERIC_SYSTEM_INTRO}:\n```json\n{}\n```",
        serde_json::to_string_pretty(&schema).unwrap_or_default()
    );
    let mut out = Vec::with_capacity(messages.len() + 1);
    let mut added = false;
    for m in messages {
        let mut m = m.clone();
        if m.role == "system" && !added {
            m.content = format!("{}\n\n{intro}", m.content);
            added = true;
        }
        if !m.tool_calls.is_empty() {
            let calls: Vec<Value> = m
                .tool_calls
                .iter()
                .map(|c| {
                    let args = serde_json::from_str(&c.arguments)
                        .unwrap_or(Value::String(c.arguments.clone()));
                    let mut v = json!({"name": c.name, "arguments": args});
                    if !c.id.is_empty() {
                        v["id"] = c.id.clone().into();
                    }
                    v
                })
                .collect();
            let mut v = if calls.len() == 1 && !parallel {
                json!({"tool_call": calls[0]})
            } else {
                json!({"tool_calls": calls})
            };
            if !m.content.is_empty() {
                v["content"] = m.content.clone().into();
            }
            m.content = serde_json::to_string_pretty(&v).unwrap_or_default();
            m.tool_calls.clear();
        }
        if m.role == "tool" {
            let mut v = json!({"content": m.content});
            if let Some(n) = &m.name {
                v["tool"] = n.clone().into();
            }
            if let Some(id) = &m.tool_call_id {
                v["tool_call_id"] = id.clone().into();
            }
            m = Message::new(
                "user",
                serde_json::to_string_pretty(&json!({"tool_response": v})).unwrap_or_default(),
            );
        }
        out.push(m);
    }
    if !added {
        out.insert(0, Message::new("system", intro));
    }
    out
}

/// The first key of the object at the start of `t` and where its value
/// starts.
fn first_key(t: &str) -> Option<(String, usize)> {
    let inner = t.strip_prefix('{')?;
    let k = inner.trim_start();
    let mut off = 1 + inner.len() - k.len();
    let (key, e) = match partial_string(k)? {
        (key, Some(e)) => (key, e),
        _ => return None,
    };
    off += e;
    let r = t[off..].trim_start();
    let r2 = r.strip_prefix(':')?;
    off = t.len() - r2.len();
    let v = r2.trim_start();
    off += r2.len() - v.len();
    Some((key, off))
}

pub(crate) fn parse(text: &str, partial: bool, out: &mut ParsedMessage) {
    let t = text.trim();
    if t.starts_with('{') {
        let complete = matches!(value_extent(t), Extent::Complete(e) if e == t.len());
        if complete || partial {
            if let Some((key, at)) = first_key(t) {
                let v = &t[at..];
                match key.as_str() {
                    "response" => {
                        if let Some((s, end)) = partial_string(v) {
                            if end.is_some() || partial {
                                out.content.push_str(&s);
                                return;
                            }
                        }
                    }
                    "tool_call" => {
                        if let Some(o) = call_object(v, &["name"], &["arguments"]) {
                            if o.end.is_some() || partial {
                                if let Some(name) = o.name {
                                    out.tool_calls.push(ToolCall {
                                        name,
                                        arguments: o.arguments.unwrap_or_default(),
                                        id: o.id.unwrap_or_default(),
                                    });
                                }
                                return;
                            }
                        }
                    }
                    "tool_calls" => match array(v, partial) {
                        CallParse::Done(c, _) | CallParse::Partial(c) => {
                            out.tool_calls.extend(c);
                            return;
                        }
                        CallParse::Invalid => {}
                    },
                    _ => {}
                }
            } else if partial {
                return;
            }
        }
    }
    if partial && (t.is_empty() || t.starts_with('{')) {
        return;
    }
    out.content.push_str(shown(text, &[], partial));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_in_each_shape() {
        let mut m = ParsedMessage::default();
        parse(
            "{\"tool_call\": {\"name\": \"special_function\", \"arguments\": {\"arg1\": 1}}}",
            false,
            &mut m,
        );
        assert_eq!(m.tool_calls[0].name, "special_function");
        assert_eq!(m.tool_calls[0].arguments, r#"{"arg1":1}"#);
        let mut p = ParsedMessage::default();
        parse("{\"tool_calls\": [{\"name\": \"a\", \"arguments\": {}}, {\"name\": \"b\", \"arguments\": {\"x\": 2}}]}", false, &mut p);
        assert_eq!(p.tool_calls.len(), 2);
        let mut r = ParsedMessage::default();
        parse(
            "{\"response\": \"Hello, world!\\nWhat's up?\"}",
            false,
            &mut r,
        );
        assert_eq!(r.content, "Hello, world!\nWhat's up?");
        let mut s = ParsedMessage::default();
        parse("{\"response\": \"Hello, wo", true, &mut s);
        assert_eq!(s.content, "Hello, wo");
        let mut plain = ParsedMessage::default();
        parse("Hello", false, &mut plain);
        assert_eq!(plain.content, "Hello");
    }

    #[test]
    fn messages_carry_tools_calls_and_results_as_text() {
        let tools = vec![
            json!({"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}),
        ];
        let mut a = Message::new("assistant", "");
        a.tool_calls.push(ToolCall {
            name: "f".into(),
            arguments: "{}".into(),
            id: "1".into(),
        });
        let mut t = Message::new("tool", "42");
        t.tool_call_id = Some("1".into());
        let out = generic_messages(&[Message::new("user", "hi"), a, t], &tools, false);
        assert_eq!(out[0].role, "system");
        assert!(out[0].content.starts_with(GENERIC_SYSTEM_INTRO));
        assert!(out[2].content.contains("\"tool_call\""));
        assert_eq!(out[3].role, "user");
        assert!(out[3].content.contains("tool_response"));
    }
}
