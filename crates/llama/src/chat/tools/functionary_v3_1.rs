//! Functionary v3.1 (Llama 3.1 based): calls written
//! `<function=NAME>{ARGS}</function>`, and Python code after
//! `<|python_tag|>` as a call of `python` with `{"code": ...}`.

use super::deepseek_r1::args_then;
use super::parser::{interleaved, CallParse};
use super::scan::is_marker_prefix;
use super::{ParsedMessage, ToolCall};

const OPEN: &str = "<function=";
const CLOSE: &str = "</function>";
pub(crate) const PYTHON_TAG: &str = "<|python_tag|>";

/// Code after the Python tag: the rest of the reply.
pub(crate) fn python_call(code: &str, partial: bool) -> CallParse {
    if partial && code.trim().is_empty() {
        return CallParse::Partial(Vec::new());
    }
    let arguments = serde_json::json!({ "code": code }).to_string();
    let call = ToolCall {
        name: "python".into(),
        arguments: if partial {
            // The JSON string stays open while the code streams.
            arguments[..arguments.len() - 2].to_string()
        } else {
            arguments
        },
        id: String::new(),
    };
    if partial {
        CallParse::Partial(vec![call])
    } else {
        CallParse::Done(vec![call], code.len())
    }
}

fn function(after: &str, partial: bool) -> CallParse {
    let Some(gt) = after.find('>') else {
        return if partial {
            CallParse::Partial(Vec::new())
        } else {
            CallParse::Invalid
        };
    };
    let name = after[..gt].trim().to_string();
    if name.is_empty() || name.contains(char::is_whitespace) {
        return CallParse::Invalid;
    }
    let body = &after[gt + 1..];
    match args_then(body, CLOSE, partial) {
        Ok((arguments, used)) => CallParse::Done(
            vec![ToolCall {
                name,
                arguments,
                id: String::new(),
            }],
            gt + 1 + used,
        ),
        Err(Some(arguments)) => CallParse::Partial(vec![ToolCall {
            name,
            arguments,
            id: String::new(),
        }]),
        Err(None)
            if partial && (body.trim().is_empty() || is_marker_prefix(body.trim(), CLOSE)) =>
        {
            CallParse::Partial(vec![ToolCall {
                name,
                ..ToolCall::default()
            }])
        }
        Err(None) => CallParse::Invalid,
    }
}

pub(crate) fn parse(text: &str, partial: bool, out: &mut ParsedMessage) {
    interleaved(
        text,
        partial,
        &[OPEN, PYTHON_TAG],
        out,
        |m, after, partial| {
            if m == PYTHON_TAG {
                python_call(after, partial)
            } else {
                function(after, partial)
            }
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama_cpp_example_and_python() {
        let mut m = ParsedMessage::default();
        parse(
            "<function=special_function>{\"arg1\": 1}</function>",
            false,
            &mut m,
        );
        assert_eq!(m.content, "");
        assert_eq!(m.tool_calls[0].name, "special_function");
        assert_eq!(m.tool_calls[0].arguments, r#"{"arg1":1}"#);
        let mut p = ParsedMessage::default();
        parse("<|python_tag|>print('hey')", false, &mut p);
        assert_eq!(p.tool_calls[0].name, "python");
        assert_eq!(p.tool_calls[0].arguments, r#"{"code":"print('hey')"}"#);
        let mut s = ParsedMessage::default();
        parse("<|python_tag|>print('h", true, &mut s);
        assert!(p.tool_calls[0]
            .arguments
            .starts_with(&s.tool_calls[0].arguments));
    }
}
