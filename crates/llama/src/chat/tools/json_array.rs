//! Calls as a JSON array of `{"name", "arguments", "id"}` objects after a
//! marker: Mistral Nemo's `[TOOL_CALLS]`, Granite's `<|tool_call|>`.

use super::json_scan::call_object;
use super::parser::{interleaved, CallParse};
use super::{ParsedMessage, ToolCall};

pub(crate) fn parse(text: &str, partial: bool, marker: &str, out: &mut ParsedMessage) {
    interleaved(text, partial, &[marker], out, |_, after, partial| {
        array(after, partial)
    });
}

pub(crate) fn array(after: &str, partial: bool) -> CallParse {
    let t = after.trim_start();
    let mut i = after.len() - t.len();
    if t.is_empty() {
        return if partial {
            CallParse::Partial(Vec::new())
        } else {
            CallParse::Invalid
        };
    }
    if !t.starts_with('[') {
        return CallParse::Invalid;
    }
    i += 1;
    let mut calls = Vec::new();
    loop {
        let r = &after[i..];
        let rt = r.trim_start();
        i += r.len() - rt.len();
        if rt.is_empty() {
            return if partial {
                CallParse::Partial(calls)
            } else {
                CallParse::Invalid
            };
        }
        if rt.starts_with(']') {
            return CallParse::Done(calls, i + 1);
        }
        if rt.starts_with(',') && !calls.is_empty() {
            i += 1;
            continue;
        }
        let Some(obj) = call_object(rt, &["name"], &["arguments", "parameters"]) else {
            return CallParse::Invalid;
        };
        let call = obj.name.as_ref().map(|n| ToolCall {
            name: n.clone(),
            arguments: obj.arguments.clone().unwrap_or_default(),
            id: obj.id.clone().unwrap_or_default(),
        });
        match obj.end {
            Some(e) => {
                let Some(mut c) = call else {
                    return CallParse::Invalid;
                };
                if c.arguments.is_empty() {
                    c.arguments = "{}".into();
                }
                calls.push(c);
                i += e;
            }
            None if partial => {
                calls.extend(call);
                return CallParse::Partial(calls);
            }
            None => return CallParse::Invalid,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mistral_nemo_example_keeps_its_id() {
        let mut m = ParsedMessage::default();
        parse(
            "[TOOL_CALLS][{\"name\": \"special_function\", \"arguments\": {\"arg1\": 1}, \"id\": \"123456789\"}]",
            false,
            "[TOOL_CALLS]",
            &mut m,
        );
        assert_eq!(m.content, "");
        assert_eq!(
            m.tool_calls,
            [ToolCall {
                name: "special_function".into(),
                arguments: r#"{"arg1":1}"#.into(),
                id: "123456789".into()
            }]
        );
    }

    #[test]
    fn granite_parallel_calls() {
        let mut m = ParsedMessage::default();
        parse(
            "<|tool_call|>[{\"name\": \"a\", \"arguments\": {\"x\": 1}}, {\"name\": \"b\", \"arguments\": {}}]",
            false,
            "<|tool_call|>",
            &mut m,
        );
        assert_eq!(m.tool_calls.len(), 2);
        assert_eq!(m.tool_calls[1].name, "b");
    }
}
