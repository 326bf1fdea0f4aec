//! gpt-oss (OpenAI's harmony format): the reply is a run of messages, each
//! a header (`<|channel|>NAME`, perhaps ` to=functions.X` and
//! `<|constrain|>json`) then `<|message|>` and a body ended by `<|end|>`,
//! `<|call|>` or `<|return|>`; later ones open with `<|start|>assistant`.
//! The analysis channel is reasoning, final (and commentary) content, and
//! a message addressed to `functions.X` a call of X. As llama.cpp's
//! parser: a header may carry a stray `<|channel|>commentary to=assistant`
//! before its real channel (the last one counts), and a message addressed
//! to anything else (a built-in tool such as `python` or
//! `container.exec`, or a function while calls are not parsed) is
//! consumed without content.

use super::json_scan::{compact, minify};
use super::parser::ChatParser;
use super::scan::{find_any, is_marker_prefix, stable_len};
use super::{ParsedMessage, ToolCall};

const START: &str = "<|start|>assistant";
const MESSAGE: &str = "<|message|>";
const CHANNEL: &str = "<|channel|>";
const ENDS: &[&str] = &["<|end|>", "<|call|>", "<|return|>", "<|start|>"];

/// What a header addresses (`to=functions.NAME`, `to=python`), other
/// than the assistant itself (the stray `to=assistant` some replies put
/// before their channel).
fn recipient(header: &str) -> Option<&str> {
    let mut rest = header;
    while let Some(i) = rest.find("to=") {
        let r = &rest[i + "to=".len()..];
        let end = r
            .find(|c: char| c.is_whitespace() || c == '<')
            .unwrap_or(r.len());
        if &r[..end] != "assistant" {
            return Some(&r[..end]);
        }
        rest = &r[end..];
    }
    None
}

/// The header's channel: the last `<|channel|>` in it.
fn channel(header: &str) -> &str {
    header.rfind(CHANNEL).map_or("", |i| {
        let rest = &header[i + CHANNEL.len()..];
        let end = rest
            .find(|c: char| c.is_whitespace() || c == '<')
            .unwrap_or(rest.len());
        &rest[..end]
    })
}

pub(crate) fn parse(text: &str, partial: bool, p: &ChatParser, out: &mut ParsedMessage) {
    let mut rest = text;
    let mut first = true;
    loop {
        if !first {
            let t = rest.trim_start();
            match t.strip_prefix(START) {
                Some(r) => rest = r,
                None if t.is_empty() || partial && is_marker_prefix(t, START) => return,
                None => {
                    // Text after the last message: content as it is.
                    let s = if partial {
                        &t[..stable_len(t, &[START])]
                    } else {
                        t
                    };
                    out.content.push_str(s);
                    return;
                }
            }
        }
        first = false;
        let Some(m) = rest.find(MESSAGE) else {
            if !partial {
                out.content.push_str(rest);
            }
            return;
        };
        let header = &rest[..m];
        let body_all = &rest[m + MESSAGE.len()..];
        let (body, end) = match find_any(body_all, ENDS) {
            Some((i, marker)) => (&body_all[..i], Some((i, marker))),
            None => (body_all, None),
        };
        let open = end.is_none() && partial;
        let body_shown = if open {
            &body[..stable_len(body, ENDS)]
        } else {
            body
        };
        let to = recipient(header);
        let function = to.and_then(|r| r.strip_prefix("functions."));
        if to.is_some() && function.filter(|_| p.parse_tool_calls).is_none() {
            // Addressed to a tool we do not run: consumed, no content.
        } else if let Some(name) = function {
            let arguments = if open {
                minify(body_shown)
            } else {
                compact(body).unwrap_or_else(|| minify(body))
            };
            out.tool_calls.push(ToolCall {
                name: name.to_string(),
                arguments,
                id: String::new(),
            });
        } else if channel(header) == "analysis" {
            if p.reasoning.extracts() {
                out.reasoning_content.push_str(body_shown);
            } else {
                out.content.push_str(header);
                out.content.push_str(MESSAGE);
                out.content.push_str(body_shown);
                if let Some((_, marker)) = end.filter(|(_, m)| *m != "<|start|>") {
                    out.content.push_str(marker);
                }
            }
        } else {
            out.content.push_str(body_shown);
        }
        match end {
            Some((i, "<|start|>")) => rest = &body_all[i..],
            Some((i, marker)) => rest = &body_all[i + marker.len()..],
            None => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::detect::ToolFormat;
    use super::super::ReasoningFormat;
    use super::*;

    fn run(text: &str, r: ReasoningFormat, partial: bool) -> ParsedMessage {
        let p = ChatParser::new(ToolFormat::GptOss, r);
        p.parse(text, partial)
    }

    #[test]
    fn llama_cpp_examples() {
        let both = "<|channel|>analysis<|message|>I'm\nthinking<|end|><|start|>assistant<|channel|>final<|message|>Hello, world!\nWhat's up?";
        let m = run(both, ReasoningFormat::Auto, false);
        assert_eq!(
            (m.reasoning_content.as_str(), m.content.as_str()),
            ("I'm\nthinking", "Hello, world!\nWhat's up?")
        );
        let n = run(both, ReasoningFormat::None, false);
        assert_eq!(
            n.content,
            "<|channel|>analysis<|message|>I'm\nthinking<|end|>Hello, world!\nWhat's up?"
        );
        for call in [
            " to=functions.special_function<|channel|>analysis<|message|>{\"arg1\": 1}",
            "<|channel|>analysis to=functions.special_function<|message|>{\"arg1\": 1}",
            " to=functions.special_function<|channel|>analysis <|constrain|>json<|message|>{\"arg1\": 1}",
            "<|channel|>commentary to=functions.special_function<|message|>{\"arg1\": 1}",
        ] {
            let c = run(call, ReasoningFormat::Auto, false);
            assert_eq!(c.content, "", "{call}");
            assert_eq!(c.tool_calls.len(), 1, "{call}");
            assert_eq!(c.tool_calls[0].name, "special_function");
            assert_eq!(c.tool_calls[0].arguments, r#"{"arg1":1}"#);
        }
        let t = run(
            "<|channel|>analysis<|message|>I'm\nthinking<|end|><|start|>assistant to=functions.special_function<|channel|>analysis<|message|>{\"arg1\": 1}",
            ReasoningFormat::Auto,
            false,
        );
        assert_eq!(t.reasoning_content, "I'm\nthinking");
        assert_eq!(t.tool_calls[0].name, "special_function");
        let p = run(
            "<|channel|>analysis<|message|>I'm\nthinking",
            ReasoningFormat::Auto,
            true,
        );
        assert_eq!(p.reasoning_content, "I'm\nthinking");
    }

    /// The rest of llama.cpp's gpt-oss parser cases (tests/test-chat.cpp):
    /// the commentary channel as content, a call with a constraint among
    /// arguments holding braces, a constrained final message, built-in
    /// tools consumed without content, and the stray `to=assistant`.
    #[test]
    fn llama_cpp_channel_and_recipient_cases() {
        let c = run(
            "<|channel|>commentary<|message|>Hello, world!\nWhat's up?",
            ReasoningFormat::Auto,
            false,
        );
        assert_eq!(
            (c.content.as_str(), c.tool_calls.len()),
            ("Hello, world!\nWhat's up?", 0)
        );
        let edit = run(
            "<|channel|>analysis<|message|>Thinking about edit...<|end|><|start|>assistant<|channel|>commentary to=functions.edit <|constrain|>json<|message|>{\"oldString\": \"if (part < railCount - 1) {\", \"newString\": \"if (part < 4) {\", \"replaceAll\": false}",
            ReasoningFormat::Auto,
            false,
        );
        assert_eq!(edit.reasoning_content, "Thinking about edit...");
        assert_eq!(edit.content, "");
        assert_eq!(edit.tool_calls.len(), 1);
        assert_eq!(edit.tool_calls[0].name, "edit");
        let args: serde_json::Value = serde_json::from_str(&edit.tool_calls[0].arguments).unwrap();
        assert_eq!(
            args,
            serde_json::json!({"oldString": "if (part < railCount - 1) {", "newString": "if (part < 4) {", "replaceAll": false})
        );
        let json = run(
            "<|channel|>analysis<|message|>I need to output the invoice details in JSON<|end|><|start|>assistant<|channel|>final <|constrain|>json<|message|>{\"amount\": 123.45, \"date\": \"2025-12-03\"}",
            ReasoningFormat::Auto,
            false,
        );
        assert_eq!(
            json.reasoning_content,
            "I need to output the invoice details in JSON"
        );
        assert_eq!(json.content, r#"{"amount": 123.45, "date": "2025-12-03"}"#);
        for builtin in [
            "<|channel|>analysis<|message|>I will execute python to say hello<|end|><|start|>assistant to=container.exec<|channel|>commentary<|message|>python3 -c 'print(\"hello\")'",
            "<|channel|>analysis<|message|>I will execute python to say hello<|end|><|start|>assistant<|channel|>commentary to=python <|constrain|>code<|message|>print(\"hello\")",
        ] {
            let b = run(builtin, ReasoningFormat::Auto, false);
            assert_eq!(b.reasoning_content, "I will execute python to say hello", "{builtin}");
            assert_eq!((b.content.as_str(), b.tool_calls.len()), ("", 0), "{builtin}");
        }
        for stray in [
            "<|channel|>commentary to=assistant<|channel|>analysis<|message|>I'm\nthinking<|end|><|start|>assistant<|channel|>final<|message|>Hello, world!\nWhat's up?",
            "<|channel|>analysis<|message|>I'm\nthinking<|end|><|start|>assistant<|channel|>commentary to=assistant<|channel|>final<|message|>Hello, world!\nWhat's up?",
        ] {
            let m = run(stray, ReasoningFormat::Auto, false);
            assert_eq!(
                (m.reasoning_content.as_str(), m.content.as_str()),
                ("I'm\nthinking", "Hello, world!\nWhat's up?"),
                "{stray}"
            );
        }
    }
}
