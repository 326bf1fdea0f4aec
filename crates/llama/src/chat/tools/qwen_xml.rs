//! Qwen 3.5 / Qwen3-Coder: `<tool_call>` holding `<function=NAME>` and one
//! `<parameter=KEY>` block per argument, whose text is read as JSON unless
//! the tool's schema says the parameter is a string.

use serde_json::Value;

use super::parser::{interleaved, CallParse};
use super::scan::is_marker_prefix;
use super::{ParsedMessage, ToolCall};

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";
const FN_OPEN: &str = "<function=";
const FN_CLOSE: &str = "</function>";
const P_OPEN: &str = "<parameter=";
const P_CLOSE: &str = "</parameter>";

/// Whether the schema of `tool`'s parameter `key` is a plain string.
fn is_string_param(tools: &[Value], tool: &str, key: &str) -> bool {
    tools.iter().any(|t| {
        let f = t.get("function").unwrap_or(t);
        f.get("name").and_then(Value::as_str) == Some(tool)
            && f.pointer(&format!(
                "/parameters/properties/{}/type",
                key.replace('~', "~0").replace('/', "~1")
            ))
            .and_then(Value::as_str)
                == Some("string")
    })
}

/// A parameter's text as a JSON value.
fn value(text: &str, string: bool) -> String {
    if !string {
        if let Ok(v) = serde_json::from_str::<Value>(text) {
            return v.to_string();
        }
    }
    Value::String(text.to_string()).to_string()
}

fn call(after: &str, partial: bool, tools: &[Value]) -> CallParse {
    let pending = |c: Vec<ToolCall>| {
        if partial {
            CallParse::Partial(c)
        } else {
            CallParse::Invalid
        }
    };
    let t = after.trim_start();
    let mut i = after.len() - t.len();
    let Some(f) = t.strip_prefix(FN_OPEN) else {
        return if is_marker_prefix(t, FN_OPEN) || t.is_empty() {
            pending(Vec::new())
        } else {
            CallParse::Invalid
        };
    };
    let Some(gt) = f.find('>') else {
        return pending(Vec::new());
    };
    let name = f[..gt].trim().to_string();
    i += FN_OPEN.len() + gt + 1;
    let mut args: Vec<String> = Vec::new();
    let build = |args: &[String], closed: bool| {
        let mut s = format!("{{{}", args.join(","));
        if closed {
            s.push('}');
        }
        s
    };
    loop {
        let r = &after[i..];
        let t = r.trim_start();
        let ws = r.len() - t.len();
        if let Some(p) = t.strip_prefix(P_OPEN) {
            let Some(gt) = p.find('>') else {
                return pending(vec![ToolCall {
                    name,
                    arguments: build(&args, false),
                    id: String::new(),
                }]);
            };
            let key = p[..gt].trim().to_string();
            let body = &p[gt + 1..];
            let Some(end) = body.find(P_CLOSE) else {
                return pending(vec![ToolCall {
                    name,
                    arguments: build(&args, false),
                    id: String::new(),
                }]);
            };
            let text = body[..end].strip_prefix('\n').unwrap_or(&body[..end]);
            let text = text.strip_suffix('\n').unwrap_or(text);
            let string = is_string_param(tools, &name, &key);
            args.push(format!("{}:{}", Value::String(key), value(text, string)));
            i += ws + P_OPEN.len() + gt + 1 + end + P_CLOSE.len();
            continue;
        }
        if let Some(rest) = t.strip_prefix(FN_CLOSE) {
            let used = i + ws + FN_CLOSE.len();
            let rt = rest.trim_start();
            let call = vec![ToolCall {
                name,
                arguments: build(&args, true),
                id: String::new(),
            }];
            if rt.starts_with(CLOSE) {
                return CallParse::Done(call, used + (rest.len() - rt.len()) + CLOSE.len());
            }
            if partial && (rt.is_empty() || is_marker_prefix(rt, CLOSE)) {
                return CallParse::Partial(call);
            }
            return CallParse::Done(call, used);
        }
        if partial && (t.is_empty() || is_marker_prefix(t, P_OPEN) || is_marker_prefix(t, FN_CLOSE))
        {
            return CallParse::Partial(vec![ToolCall {
                name,
                arguments: build(&args, false),
                id: String::new(),
            }]);
        }
        return CallParse::Invalid;
    }
}

pub(crate) fn parse(text: &str, partial: bool, tools: &[Value], out: &mut ParsedMessage) {
    interleaved(text, partial, &[OPEN], out, |_, after, partial| {
        call(after, partial, tools)
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_by_schema_type() {
        let tools = vec![
            serde_json::json!({"type": "function", "function": {"name": "special_function",
            "parameters": {"type": "object", "properties": {"arg1": {"type": "integer"}, "s": {"type": "string"}}}}}),
        ];
        let text = "<tool_call>\n<function=special_function>\n<parameter=arg1>\n1\n</parameter>\n<parameter=s>\n42\n</parameter>\n</function>\n</tool_call>";
        let mut m = ParsedMessage::default();
        parse(text, false, &tools, &mut m);
        assert_eq!(m.content, "");
        assert_eq!(m.tool_calls[0].name, "special_function");
        assert_eq!(m.tool_calls[0].arguments, r#"{"arg1":1,"s":"42"}"#);
        for i in 0..text.len() {
            if !text.is_char_boundary(i) {
                continue;
            }
            let mut p = ParsedMessage::default();
            parse(&text[..i], true, &tools, &mut p);
            if let Some(c) = p.tool_calls.first() {
                assert!(
                    m.tool_calls[0].arguments.starts_with(&c.arguments),
                    "{i}: {}",
                    c.arguments
                );
            }
        }
    }
}
