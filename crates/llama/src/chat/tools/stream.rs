//! A reply parsed as it streams: the text so far is parsed again after
//! each piece, and the difference from the last parse is what is sent
//! (content, reasoning and tool-call deltas, as llama.cpp's server sends
//! them). Calls get ids here when the model wrote none.

use std::hash::{BuildHasher, Hasher};

use super::parser::ChatParser;
use super::{ParsedMessage, ToolCall};

/// What a piece of a call adds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ToolCallDelta {
    /// The call's position in `tool_calls`.
    pub index: usize,
    /// Set on the first delta of a call.
    pub id: String,
    /// Set on the first delta of a call.
    pub name: String,
    /// More of the arguments' text.
    pub arguments: String,
}

/// What a piece of the reply adds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MessageDiff {
    /// More reasoning.
    pub reasoning_content: String,
    /// More content.
    pub content: String,
    /// More of a call.
    pub tool_call: Option<ToolCallDelta>,
}

/// A random id of `len` letters and digits (llama.cpp's call ids are 32
/// long; Mistral's templates want 9).
pub fn random_id(len: usize) -> String {
    const CHARS: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    h.write_u128(nanos);
    let mut x = h.finish() | 1;
    (0..len)
        .map(|_| {
            // xorshift64*
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            let r = x.wrapping_mul(0x2545_f491_4f6c_dd1d);
            CHARS[(r >> 32) as usize % CHARS.len()] as char
        })
        .collect()
}

/// The added text when `new` extends `old`, else nothing (a parse never
/// takes back what it showed; anything else is not sent).
fn added<'a>(old: &str, new: &'a str) -> &'a str {
    new.strip_prefix(old).unwrap_or("")
}

/// The deltas from `prev` to `next`.
pub fn diffs(prev: &ParsedMessage, next: &ParsedMessage) -> Vec<MessageDiff> {
    let mut out = Vec::new();
    let r = added(&prev.reasoning_content, &next.reasoning_content);
    if !r.is_empty() {
        out.push(MessageDiff {
            reasoning_content: r.to_string(),
            ..MessageDiff::default()
        });
    }
    let c = added(&prev.content, &next.content);
    if !c.is_empty() {
        out.push(MessageDiff {
            content: c.to_string(),
            ..MessageDiff::default()
        });
    }
    if next.tool_calls.len() < prev.tool_calls.len() {
        return out;
    }
    if let Some(last) = prev.tool_calls.len().checked_sub(1) {
        let (p, n) = (&prev.tool_calls[last], &next.tool_calls[last]);
        let a = added(&p.arguments, &n.arguments);
        if !a.is_empty() {
            out.push(MessageDiff {
                tool_call: Some(ToolCallDelta {
                    index: last,
                    arguments: a.to_string(),
                    ..ToolCallDelta::default()
                }),
                ..MessageDiff::default()
            });
        }
    }
    for (index, c) in next
        .tool_calls
        .iter()
        .enumerate()
        .skip(prev.tool_calls.len())
    {
        out.push(MessageDiff {
            tool_call: Some(ToolCallDelta {
                index,
                id: c.id.clone(),
                name: c.name.clone(),
                arguments: c.arguments.clone(),
            }),
            ..MessageDiff::default()
        });
    }
    out
}

/// The state of one streaming reply.
#[derive(Clone, Debug)]
pub struct StreamState {
    parser: ChatParser,
    text: String,
    msg: ParsedMessage,
    ids: Vec<String>,
    id_len: usize,
}

impl StreamState {
    /// A reply read by `parser`; generated call ids are `id_len` long.
    pub fn new(parser: ChatParser, id_len: usize) -> Self {
        Self {
            parser,
            text: String::new(),
            msg: ParsedMessage::default(),
            ids: Vec::new(),
            id_len,
        }
    }

    /// Adds `piece` to the reply; `last` when the reply is complete. The
    /// deltas to send.
    pub fn push(&mut self, piece: &str, last: bool) -> Vec<MessageDiff> {
        self.text.push_str(piece);
        let mut next = self.parser.parse(&self.text, !last);
        self.set_ids(&mut next.tool_calls);
        let d = diffs(&self.msg, &next);
        self.msg = next;
        d
    }

    fn set_ids(&mut self, calls: &mut [ToolCall]) {
        for (i, c) in calls.iter_mut().enumerate() {
            if self.ids.len() <= i {
                let id = if c.id.is_empty() {
                    random_id(self.id_len)
                } else {
                    c.id.clone()
                };
                self.ids.push(id);
            }
            c.id = self.ids[i].clone();
        }
    }

    /// The reply as parsed so far.
    pub fn message(&self) -> &ParsedMessage {
        &self.msg
    }

    /// The raw text so far.
    pub fn text(&self) -> &str {
        &self.text
    }
}

#[cfg(test)]
mod tests {
    use super::super::{ReasoningFormat, ToolFormat};
    use super::*;

    /// Streams `text` one character at a time, and checks that the deltas
    /// add up to the whole parse.
    fn stream_adds_up(format: ToolFormat, forced_open: bool, text: &str) -> ParsedMessage {
        let mut p = ChatParser::new(format, ReasoningFormat::Auto);
        p.thinking_forced_open = forced_open;
        let mut s = StreamState::new(p.clone(), 32);
        let mut all = Vec::new();
        for ch in text.chars() {
            all.extend(s.push(&ch.to_string(), false));
        }
        all.extend(s.push("", true));
        let whole = s.message().clone();
        let mut got = ParsedMessage::default();
        for d in all {
            got.reasoning_content += &d.reasoning_content;
            got.content += &d.content;
            if let Some(t) = d.tool_call {
                if t.index == got.tool_calls.len() {
                    got.tool_calls.push(ToolCall::default());
                }
                let c = &mut got.tool_calls[t.index];
                c.name += &t.name;
                c.id += &t.id;
                c.arguments += &t.arguments;
            }
        }
        assert_eq!(got, whole, "{format:?}: {text:?}");
        let mut expect = p.parse(text, false);
        for (e, w) in expect.tool_calls.iter_mut().zip(&whole.tool_calls) {
            e.id = w.id.clone();
        }
        assert_eq!(whole, expect);
        whole
    }

    #[test]
    fn streamed_deltas_add_up_to_the_whole_parse() {
        let cases: &[(ToolFormat, bool, &str)] = &[
            (ToolFormat::Hermes, false, "<think>Let me see.</think>Sure.<tool_call>\n{\"name\": \"get\", \"arguments\": {\"city\": \"Paris\", \"n\": [1, 2]}}\n</tool_call>\n<tool_call>\n{\"name\": \"put\", \"arguments\": {}}\n</tool_call>"),
            (ToolFormat::ContentOnly, false, "Hello <b>world</b> and <think"),
            (ToolFormat::DeepseekR1, true, "I'm\nthinking</think>\n\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>special_function\n```json\n{\"arg1\": 1}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"),
            (ToolFormat::DeepseekV31, false, "A<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{\"city\": \"Tokyo\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"),
            (ToolFormat::MistralNemo, false, "[TOOL_CALLS][{\"name\": \"special_function\", \"arguments\": {\"arg1\": 1}, \"id\": \"123456789\"}, {\"name\": \"b\", \"arguments\": {\"q\": \"x y\"}}]"),
            (ToolFormat::FunctionaryV31, false, "Hi <function=special_function>{\"arg1\": 1}</function><|python_tag|>print('hey')"),
            (ToolFormat::FunctionaryV32, false, "all\nLet me check.>>>special_function\n{\"arg1\": 1}"),
            (ToolFormat::Llama3 { python_tag: true }, false, "{\"name\": \"special_function\", \"parameters\": {\"arg1\": 1}}"),
            (ToolFormat::GptOss, false, "<|channel|>analysis<|message|>I'm\nthinking<|end|><|start|>assistant<|channel|>commentary to=functions.special_function <|constrain|>json<|message|>{\"arg1\": 1}<|call|>"),
            (ToolFormat::GptOss, false, "<|channel|>analysis<|message|>Check.<|end|><|start|>assistant<|channel|>commentary<|message|>Looking it up.<|end|><|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Paris\"}<|call|>"),
            (ToolFormat::GptOss, false, "<|channel|>commentary to=assistant<|channel|>analysis<|message|>I'm\nthinking<|end|><|start|>assistant<|channel|>final<|message|>Hello, world!"),
            (ToolFormat::GptOss, false, "<|channel|>analysis<|message|>Run it.<|end|><|start|>assistant to=container.exec<|channel|>commentary<|message|>ls -l<|call|><|start|>assistant<|channel|>final<|message|>Done."),
            (ToolFormat::Generic, false, "{\"tool_calls\": [{\"name\": \"a\", \"arguments\": {\"x\": \"\\u00e9\"}}]}"),
            (ToolFormat::Generic, false, "{\"response\": \"Hello\\n \\\"you\\\"\"}"),
            (ToolFormat::Lfm2, false, "Sure.<|tool_call_start|>[get(city=\"Paris\", n=[1, 2]), put()]<|tool_call_end|>"),
        ];
        for (f, open, text) in cases {
            let m = stream_adds_up(*f, *open, text);
            assert!(!m.content.is_empty() || !m.tool_calls.is_empty(), "{f:?}");
        }
    }

    #[test]
    fn ids_are_kept_or_made() {
        let mut s = StreamState::new(
            ChatParser::new(ToolFormat::MistralNemo, ReasoningFormat::Auto),
            9,
        );
        s.push("[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}}]", true);
        assert_eq!(s.message().tool_calls[0].id.len(), 9);
        assert!(s.message().tool_calls[0]
            .id
            .chars()
            .all(|c| c.is_ascii_alphanumeric()));
        assert_ne!(random_id(32), random_id(32));
    }
}
