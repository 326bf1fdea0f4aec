//! [`ChatParser`]: a reply, whole or as far as it has streamed, split into
//! reasoning, content and tool calls by the template's format.

use super::detect::ToolFormat;
use super::reasoning::{self, ReasoningFormat, ThinkTags};
use super::scan::{find_any, shown};
use super::{
    deepseek_r1, deepseek_v3_1, functionary_v3_1, functionary_v3_2, generic, gpt_oss, hermes,
    json_array, llama3, pythonic, qwen_xml, ParsedMessage, ToolCall,
};

/// How a reply is read.
#[derive(Clone, Debug, Default)]
pub struct ChatParser {
    /// The template's tool-call format.
    pub format: ToolFormat,
    /// Where reasoning goes.
    pub reasoning: ReasoningFormat,
    /// The reasoning block's tags.
    pub think_tags: ThinkTags,
    /// The prompt opened a reasoning block, so the reply starts inside it.
    pub thinking_forced_open: bool,
    /// Read tool calls (off for `tool_choice: none` or a request without
    /// tools: the reply is then content and reasoning only).
    pub parse_tool_calls: bool,
    /// The request's tools (`[{"type": "function", "function": ...}]`),
    /// whose parameter types tell how XML-style arguments are read.
    pub tools: Vec<serde_json::Value>,
}

/// What one call's parser found after an opening marker.
pub(crate) enum CallParse {
    /// Whole calls, and the bytes they took after the marker.
    Done(Vec<ToolCall>, usize),
    /// The text ends inside a call: what is known of it so far.
    Partial(Vec<ToolCall>),
    /// Not a call: the marker is content.
    Invalid,
}

/// Content interleaved with calls that each begin with one of `open`:
/// the shape of most formats. Whitespace between calls is dropped.
pub(crate) fn interleaved(
    text: &str,
    partial: bool,
    open: &[&str],
    out: &mut ParsedMessage,
    mut call: impl FnMut(&str, &str, bool) -> CallParse,
) {
    let mut rest = text;
    loop {
        let Some((at, marker)) = find_any(rest, open) else {
            let tail = if out.tool_calls.is_empty() {
                rest
            } else {
                rest.trim_start()
            };
            out.content.push_str(shown(tail, open, partial));
            return;
        };
        let before = &rest[..at];
        if out.tool_calls.is_empty() {
            out.content.push_str(before.trim_end());
        } else if !before.trim().is_empty() {
            out.content.push_str(before.trim());
        }
        let after = &rest[at + marker.len()..];
        match call(marker, after, partial) {
            CallParse::Done(calls, used) => {
                out.tool_calls.extend(calls);
                rest = &after[used..];
            }
            CallParse::Partial(calls) => {
                out.tool_calls.extend(calls);
                return;
            }
            CallParse::Invalid => {
                out.content.push_str(marker);
                rest = after;
            }
        }
    }
}

impl ChatParser {
    /// A parser for `format` with reasoning taken out as `reasoning` says.
    pub fn new(format: ToolFormat, reasoning: ReasoningFormat) -> Self {
        Self {
            format,
            reasoning,
            parse_tool_calls: true,
            ..Self::default()
        }
    }

    /// Splits `text`. With `partial`, the reply is still streaming: only
    /// what will not be taken back is returned (a marker being written is
    /// held back, a call shows once its name is known, its arguments as
    /// far as they go).
    pub fn parse(&self, text: &str, partial: bool) -> ParsedMessage {
        let mut out = ParsedMessage::default();
        if self.format == ToolFormat::GptOss {
            // Reasoning is a channel of its own there.
            gpt_oss::parse(text, partial, self, &mut out);
            return out;
        }
        let rest = if self.reasoning.extracts() {
            let s = reasoning::split(text, &self.think_tags, self.thinking_forced_open, partial);
            out.reasoning_content = s.reasoning;
            match s.rest {
                Some(r) => r,
                None => return out,
            }
        } else {
            text
        };
        if !self.parse_tool_calls {
            out.content.push_str(shown(rest, &[], partial));
            return out;
        }
        match self.format {
            ToolFormat::ContentOnly => out.content.push_str(shown(rest, &[], partial)),
            ToolFormat::Generic => generic::parse(rest, partial, &mut out),
            ToolFormat::Hermes => hermes::parse(rest, partial, &mut out),
            ToolFormat::QwenXml => qwen_xml::parse(rest, partial, &self.tools, &mut out),
            ToolFormat::Llama3 { python_tag } => llama3::parse(rest, partial, python_tag, &mut out),
            ToolFormat::MistralNemo => json_array::parse(rest, partial, "[TOOL_CALLS]", &mut out),
            ToolFormat::Granite => json_array::parse(rest, partial, "<|tool_call|>", &mut out),
            ToolFormat::DeepseekR1 => deepseek_r1::parse(rest, partial, &mut out),
            ToolFormat::DeepseekV31 => deepseek_v3_1::parse(rest, partial, &mut out),
            ToolFormat::FunctionaryV31 => functionary_v3_1::parse(rest, partial, &mut out),
            ToolFormat::FunctionaryV32 => functionary_v3_2::parse(rest, partial, &mut out),
            ToolFormat::Lfm2 => pythonic::parse(rest, partial, &mut out),
            ToolFormat::GptOss => {}
        }
        out
    }
}

/// One call written as a JSON object right after its opening marker and
/// closed by `close` (when the format has one): Hermes's `<tool_call>`.
pub(crate) fn json_call(
    after: &str,
    partial: bool,
    close: Option<&str>,
    name_keys: &[&str],
    args_keys: &[&str],
) -> CallParse {
    let Some(obj) = super::json_scan::call_object(after, name_keys, args_keys) else {
        return CallParse::Invalid;
    };
    let call = |o: &super::json_scan::CallObject| {
        o.name.as_ref().map(|n| ToolCall {
            name: n.clone(),
            arguments: o.arguments.clone().unwrap_or_default(),
            id: o.id.clone().unwrap_or_default(),
        })
    };
    let Some(end) = obj.end else {
        return if partial {
            CallParse::Partial(call(&obj).into_iter().collect())
        } else {
            CallParse::Invalid
        };
    };
    let Some(c) = call(&obj) else {
        return CallParse::Invalid;
    };
    if c.arguments.is_empty() && !partial {
        // A call needs its arguments; `{}` when the object had none.
        return CallParse::Done(
            vec![ToolCall {
                arguments: "{}".into(),
                ..c
            }],
            end,
        );
    }
    let tail = &after[end..];
    let Some(close) = close else {
        return CallParse::Done(vec![c], end);
    };
    let t = tail.trim_start();
    let ws = tail.len() - t.len();
    if t.starts_with(close) {
        CallParse::Done(vec![c], end + ws + close.len())
    } else if partial && (t.is_empty() || super::scan::is_marker_prefix(t, close)) {
        CallParse::Partial(vec![c])
    } else {
        CallParse::Done(vec![c], end)
    }
}
