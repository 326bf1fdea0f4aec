//! DeepSeek V3.1: R1's call section, each call
//! `<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{ARGS}<｜tool▁call▁end｜>`.

use super::deepseek_r1::{args_then, section, CALLS_BEGIN, CALL_BEGIN, CALL_END, SEP};
use super::parser::{interleaved, CallParse};
use super::{ParsedMessage, ToolCall};

fn one(body: &str, partial: bool) -> CallParse {
    let Some(sep) = body.find(SEP) else {
        return if partial {
            CallParse::Partial(Vec::new())
        } else {
            CallParse::Invalid
        };
    };
    let name = body[..sep].trim().to_string();
    let base = sep + SEP.len();
    match args_then(&body[base..], CALL_END, partial) {
        Ok((arguments, used)) => CallParse::Done(
            vec![ToolCall {
                name,
                arguments,
                id: String::new(),
            }],
            base + used,
        ),
        Err(Some(arguments)) => CallParse::Partial(vec![ToolCall {
            name,
            arguments,
            id: String::new(),
        }]),
        Err(None) if partial && body[base..].trim().is_empty() => {
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
        &[CALLS_BEGIN, CALL_BEGIN],
        out,
        |m, after, partial| section(m, after, partial, &one),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama_cpp_examples() {
        let mut m = ParsedMessage::default();
        parse(
            "CONTENT<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{\"city\": \"Paris\"}<｜tool▁call▁end｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Paris\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
            false,
            &mut m,
        );
        assert_eq!(m.content, "CONTENT");
        let calls: Vec<_> = m
            .tool_calls
            .iter()
            .map(|c| (c.name.as_str(), c.arguments.as_str()))
            .collect();
        assert_eq!(
            calls,
            [
                ("get_time", r#"{"city":"Paris"}"#),
                ("get_weather", r#"{"city":"Paris"}"#)
            ]
        );
    }
}
