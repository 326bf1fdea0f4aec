//! Functionary v3.2: the prompt ends with `>>>`, and every part of the
//! reply starts with its recipient and a newline: `all` for text to the
//! user, a function's name for a call with JSON arguments (`python` may
//! take raw code); parts are separated by `>>>`.

use super::functionary_v3_1::python_call;
use super::json_scan::{compact, minify, value_extent, Extent};
use super::parser::CallParse;
use super::scan::shown;
use super::{ParsedMessage, ToolCall};

const SEP: &str = ">>>";

pub(crate) fn parse(text: &str, partial: bool, out: &mut ParsedMessage) {
    let parts: Vec<&str> = text.split(SEP).collect();
    let n = parts.len();
    for (k, part) in parts.into_iter().enumerate() {
        let last = k + 1 == n;
        let part_partial = partial && last;
        let Some(nl) = part.find('\n') else {
            if !part_partial {
                // A part without a recipient line is text.
                push_content(out, part);
            }
            return;
        };
        let recipient = part[..nl].trim();
        let body = &part[nl + 1..];
        if recipient == "all" {
            push_content(out, shown(body, &[SEP], part_partial));
            continue;
        }
        let t = body.trim_start();
        if recipient == "python" && !t.starts_with('{') {
            if let CallParse::Done(c, _) | CallParse::Partial(c) = python_call(body, part_partial) {
                out.tool_calls.extend(c);
            }
            continue;
        }
        let name = recipient.to_string();
        match value_extent(t) {
            Extent::Complete(e) => match compact(&t[..e]) {
                Some(arguments) => out.tool_calls.push(ToolCall {
                    name,
                    arguments,
                    id: String::new(),
                }),
                None => push_content(out, part),
            },
            Extent::Partial if part_partial => out.tool_calls.push(ToolCall {
                name,
                arguments: minify(t),
                id: String::new(),
            }),
            _ => push_content(out, part),
        }
    }
}

fn push_content(out: &mut ParsedMessage, s: &str) {
    if !s.is_empty() {
        out.content.push_str(s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama_cpp_examples() {
        let mut m = ParsedMessage::default();
        parse("all\nHello, world!\nWhat's up?", false, &mut m);
        assert_eq!(m.content, "Hello, world!\nWhat's up?");
        assert!(m.tool_calls.is_empty());
        let mut c = ParsedMessage::default();
        parse("special_function\n{\"arg1\": 1}", false, &mut c);
        assert_eq!(c.content, "");
        assert_eq!(c.tool_calls[0].name, "special_function");
        assert_eq!(c.tool_calls[0].arguments, r#"{"arg1":1}"#);
        let mut two = ParsedMessage::default();
        parse(
            "all\nLet me look.>>>get\n{\"a\": 1}>>>put\n{}",
            false,
            &mut two,
        );
        assert_eq!(two.content, "Let me look.");
        assert_eq!(two.tool_calls.len(), 2);
    }
}
