//! DeepSeek R1: calls between `<｜tool▁calls▁begin｜>` and
//! `<｜tool▁calls▁end｜>`, each `<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME`,
//! the arguments in a ```json fence, then `<｜tool▁call▁end｜>`. The
//! section and its markers are shared with V3.1.

use super::json_scan::{compact, minify, value_extent, Extent};
use super::parser::{interleaved, CallParse};
use super::scan::is_marker_prefix;
use super::{ParsedMessage, ToolCall};

pub(crate) const CALLS_BEGIN: &str = "<｜tool▁calls▁begin｜>";
pub(crate) const CALLS_END: &str = "<｜tool▁calls▁end｜>";
pub(crate) const CALL_BEGIN: &str = "<｜tool▁call▁begin｜>";
pub(crate) const CALL_END: &str = "<｜tool▁call▁end｜>";
pub(crate) const SEP: &str = "<｜tool▁sep｜>";

/// A section of calls (after its opening marker), each read by `one`
/// after its `CALL_BEGIN`.
pub(crate) fn section(
    marker: &str,
    after: &str,
    partial: bool,
    one: &dyn Fn(&str, bool) -> CallParse,
) -> CallParse {
    if marker == CALL_BEGIN {
        return one(after, partial);
    }
    let mut i = 0;
    let mut calls = Vec::new();
    loop {
        let r = &after[i..];
        let t = r.trim_start();
        let ws = r.len() - t.len();
        if t.starts_with(CALLS_END) {
            return CallParse::Done(calls, i + ws + CALLS_END.len());
        }
        if let Some(body) = t.strip_prefix(CALL_BEGIN) {
            match one(body, partial) {
                CallParse::Done(c, used) => {
                    calls.extend(c);
                    i += ws + CALL_BEGIN.len() + used;
                }
                CallParse::Partial(c) => {
                    calls.extend(c);
                    return CallParse::Partial(calls);
                }
                CallParse::Invalid if calls.is_empty() => return CallParse::Invalid,
                CallParse::Invalid => return CallParse::Done(calls, i),
            }
            continue;
        }
        if partial
            && (t.is_empty() || is_marker_prefix(t, CALL_BEGIN) || is_marker_prefix(t, CALLS_END))
        {
            return CallParse::Partial(calls);
        }
        return if calls.is_empty() && !partial {
            CallParse::Invalid
        } else {
            CallParse::Done(calls, i)
        };
    }
}

/// Arguments as a JSON value at the start of `s`, then `close` (after
/// optional whitespace): the call's compact arguments and the bytes used,
/// or what is known while partial.
pub(crate) fn args_then(
    s: &str,
    close: &str,
    partial: bool,
) -> Result<(String, usize), Option<String>> {
    match value_extent(s) {
        Extent::Complete(e) => {
            let args = compact(&s[..e]).ok_or(None)?;
            let t = s[e..].trim_start();
            let ws = s.len() - e - t.len();
            if t.starts_with(close) {
                Ok((args, e + ws + close.len()))
            } else if partial && (t.is_empty() || is_marker_prefix(t, close)) {
                Err(Some(args))
            } else {
                Ok((args, e))
            }
        }
        Extent::Partial if partial => Err(Some(minify(s))),
        _ => Err(None),
    }
}

fn one(body: &str, partial: bool) -> CallParse {
    let Some(sep) = body.find(SEP) else {
        return if partial {
            CallParse::Partial(Vec::new())
        } else {
            CallParse::Invalid
        };
    };
    let after = &body[sep + SEP.len()..];
    let Some(nl) = after.find('\n') else {
        return if partial {
            CallParse::Partial(Vec::new())
        } else {
            CallParse::Invalid
        };
    };
    let name = after[..nl].trim().to_string();
    let rest = &after[nl + 1..];
    const FENCE: &str = "```json";
    let t = rest.trim_start();
    let Some(json) = t.strip_prefix(FENCE) else {
        if partial && (t.is_empty() || is_marker_prefix(t, FENCE)) {
            return CallParse::Partial(vec![ToolCall {
                name,
                ..ToolCall::default()
            }]);
        }
        return CallParse::Invalid;
    };
    let base = rest.len() - json.len() + nl + 1 + sep + SEP.len();
    match args_then(json, "```", partial) {
        Ok((arguments, used)) => {
            let mut used = base + used;
            let t = body[used..].trim_start();
            if t.starts_with(CALL_END) {
                used = body.len() - t.len() + CALL_END.len();
            } else if partial && (t.is_empty() || is_marker_prefix(t, CALL_END)) {
                return CallParse::Partial(vec![ToolCall {
                    name,
                    arguments,
                    id: String::new(),
                }]);
            }
            CallParse::Done(
                vec![ToolCall {
                    name,
                    arguments,
                    id: String::new(),
                }],
                used,
            )
        }
        Err(Some(arguments)) => CallParse::Partial(vec![ToolCall {
            name,
            arguments,
            id: String::new(),
        }]),
        Err(None) => CallParse::Invalid,
    }
}

pub(crate) fn parse(text: &str, partial: bool, out: &mut ParsedMessage) {
    interleaved(
        text,
        partial,
        &[CALLS_BEGIN, CALL_BEGIN],
        out,
        |m, after, partial| section(m, after, partial, &one),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama_cpp_example() {
        let mut m = ParsedMessage::default();
        parse(
            "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>special_function\n```json\n{\"arg1\": 1}```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
            false,
            &mut m,
        );
        assert_eq!(m.content, "");
        assert_eq!(m.tool_calls.len(), 1);
        assert_eq!(m.tool_calls[0].name, "special_function");
        assert_eq!(m.tool_calls[0].arguments, r#"{"arg1":1}"#);
    }
}
