//! Which tool-call format a chat template speaks. As llama.cpp 0c1e570
//! does, the template is rendered with probe conversations (a reply in
//! text, the same reply as a call of a probe function) and the text where
//! the call lands is read; when the template cannot render them, markers
//! in its source decide.

use serde_json::{json, Value};

use super::ToolCall;
use crate::chat::jinja::JinjaTemplate;
use crate::chat::Message;

/// A tool-call format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ToolFormat {
    /// No tools: the reply is content (and reasoning).
    #[default]
    ContentOnly,
    /// llama.cpp's generic JSON answer, for templates without tool support.
    Generic,
    /// `<tool_call>{json}</tool_call>`: Hermes 2 Pro, Qwen 2.5 / 3, Granite 4.
    Hermes,
    /// `<tool_call><function=NAME><parameter=K>...`: Qwen 3.5, Qwen3-Coder.
    QwenXml,
    /// A JSON object `{"name", "parameters"}`; `<|python_tag|>` for
    /// built-in tools when the template has them: Llama 3.x.
    Llama3 {
        /// The template knows `<|python_tag|>`.
        python_tag: bool,
    },
    /// `[TOOL_CALLS][...]`: Mistral Nemo.
    MistralNemo,
    /// `<|tool_call|>[...]`: Granite 3.x.
    Granite,
    /// DeepSeek R1's call section with ```json fences.
    DeepseekR1,
    /// DeepSeek V3.1's call section.
    DeepseekV31,
    /// `<function=NAME>{...}</function>`: Functionary v3.1.
    FunctionaryV31,
    /// `>>>NAME\n{...}`: Functionary v3.2.
    FunctionaryV32,
    /// Harmony channels: gpt-oss.
    GptOss,
    /// `<|tool_call_start|>[name(key=value)]<|tool_call_end|>`: LFM2.
    Lfm2,
}

impl ToolFormat {
    /// A name for logs and `/props`.
    pub fn name(self) -> &'static str {
        match self {
            Self::ContentOnly => "content-only",
            Self::Generic => "generic",
            Self::Hermes => "hermes-2-pro",
            Self::QwenXml => "qwen3-coder-xml",
            Self::Llama3 { python_tag: true } => "llama-3.x-with-builtin-tools",
            Self::Llama3 { python_tag: false } => "llama-3.x",
            Self::MistralNemo => "mistral-nemo",
            Self::Granite => "granite",
            Self::DeepseekR1 => "deepseek-r1",
            Self::DeepseekV31 => "deepseek-v3.1",
            Self::FunctionaryV31 => "functionary-v3.1-llama-3.1",
            Self::FunctionaryV32 => "functionary-v3.2",
            Self::GptOss => "gpt-oss",
            Self::Lfm2 => "lfm2",
        }
    }

    /// How long generated call ids are (Mistral's templates check for 9).
    pub fn id_len(self) -> usize {
        if self == Self::MistralNemo {
            9
        } else {
            32
        }
    }
}

/// What a template does with tools.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TemplateCaps {
    /// The format its calls are written in.
    pub format: ToolFormat,
    /// Call arguments are given to it as objects (else as JSON text).
    pub object_arguments: bool,
    /// It writes the `tools` it is given into the prompt.
    pub renders_tools: bool,
    /// It reads a `tool` message's `tool_call_id`.
    pub reads_tool_call_id: bool,
}

impl Default for TemplateCaps {
    fn default() -> Self {
        Self {
            format: ToolFormat::Generic,
            object_arguments: true,
            renders_tools: false,
            reads_tool_call_id: false,
        }
    }
}

const FN: &str = "probe_fn_q7";
const ARG: &str = "probe_arg";
const VAL: &str = "probe_val_c41";
const REPLY: &str = "Probe reply 93x.";

fn probe_tools() -> Value {
    json!([{
        "type": "function",
        "function": {
            "name": FN,
            "description": "A probe.",
            "parameters": {
                "type": "object",
                "properties": { ARG: { "type": "string", "description": "A value." } },
                "required": [ARG],
            },
        },
    }])
}

fn call_message() -> Message {
    let mut m = Message::new("assistant", "");
    m.tool_calls.push(ToolCall {
        name: FN.into(),
        arguments: json!({ ARG: VAL }).to_string(),
        id: "call00001".into(),
    });
    m
}

/// `b` without the prefix and suffix it shares with `a`.
fn difference<'b>(a: &str, b: &'b str) -> &'b str {
    let pre = a
        .char_indices()
        .zip(b.chars())
        .find(|((_, x), y)| x != y)
        .map_or(a.len().min(b.len()), |((i, _), _)| i);
    let (a2, b2) = (&a[pre..], &b[pre..]);
    let suf = a2
        .chars()
        .rev()
        .zip(b2.chars().rev())
        .take_while(|(x, y)| x == y)
        .map(|(x, _)| x.len_utf8())
        .sum::<usize>();
    &b2[..b2.len() - suf]
}

/// The format of a rendered call (`region`: what the call added to the
/// rendering; `whole`: the rendering).
fn classify(region: &str, whole: &str, source: &str) -> Option<ToolFormat> {
    if !whole.contains(FN) {
        return None;
    }
    let f = if region.contains(&format!("to=functions.{FN}")) {
        ToolFormat::GptOss
    } else if region.contains("[TOOL_CALLS]") {
        ToolFormat::MistralNemo
    } else if region.contains("<｜tool▁call▁begin｜>") || region.contains("<｜tool▁sep｜>")
    {
        if region.contains(&format!("<｜tool▁sep｜>{FN}")) {
            ToolFormat::DeepseekR1
        } else {
            ToolFormat::DeepseekV31
        }
    } else if region.contains(&format!("<function={FN}")) && region.contains("<parameter=") {
        ToolFormat::QwenXml
    } else if region.contains("<tool_call>") {
        ToolFormat::Hermes
    } else if region.contains(&format!("<function={FN}")) {
        ToolFormat::FunctionaryV31
    } else if whole.contains(&format!(">>>{FN}")) {
        ToolFormat::FunctionaryV32
    } else if region.contains("<|tool_call|>") {
        ToolFormat::Granite
    } else if region.contains("\"parameters\"") && region.contains(&format!("\"{FN}\"")) {
        ToolFormat::Llama3 {
            python_tag: source.contains("<|python_tag|>"),
        }
    } else {
        return None;
    };
    Some(f)
}

/// The format named by markers in a template's source.
pub fn from_source(source: &str) -> ToolFormat {
    let has = |s: &str| source.contains(s);
    if has("<|channel|>") && has("<|message|>") {
        ToolFormat::GptOss
    } else if has("<|tool_list_start|>") && has("<|tool_list_end|>") {
        ToolFormat::Lfm2
    } else if has("[TOOL_CALLS]") {
        ToolFormat::MistralNemo
    } else if has("<｜tool▁calls▁begin｜>") || has("<｜tool▁call▁begin｜>") {
        if has("function<｜tool▁sep｜>") || has("'function' + '<｜tool▁sep｜>'") {
            ToolFormat::DeepseekR1
        } else {
            ToolFormat::DeepseekV31
        }
    } else if has("<function=") && has("<parameter=") {
        ToolFormat::QwenXml
    } else if has("<tool_call>") {
        ToolFormat::Hermes
    } else if has(">>>all") {
        ToolFormat::FunctionaryV32
    } else if has("<function=") {
        ToolFormat::FunctionaryV31
    } else if has("<|tool_call|>") {
        ToolFormat::Granite
    } else if has("<|python_tag|>") || (has("ipython") && has("\"parameters\"")) {
        ToolFormat::Llama3 {
            python_tag: has("<|python_tag|>"),
        }
    } else {
        ToolFormat::Generic
    }
}

/// Probes `tmpl` (whose source is `source`) for its tool capabilities.
pub fn detect(tmpl: &JinjaTemplate, source: &str) -> TemplateCaps {
    let tools = probe_tools();
    let user = Message::new("user", "Probe question?");
    let render = |msgs: &[Message], tools: Option<&Value>, object: bool| {
        let mut t = JinjaProbe { tmpl, object };
        t.render(msgs, tools)
    };
    let with_call = [user.clone(), call_message()];
    let text = [user.clone(), Message::new("assistant", REPLY)];
    // Arguments as objects when the template shows them as JSON that way.
    let as_object = render(&with_call, Some(&tools), true);
    let object_arguments = match &as_object {
        Some(out) if out.contains(VAL) => out.contains(&format!("\"{ARG}\"")),
        _ => render(&with_call, Some(&tools), false).is_none_or(|o| !o.contains(VAL)),
    };
    let with = render(&with_call, Some(&tools), object_arguments);
    let plain = render(&text, Some(&tools), object_arguments);
    let format = match (&with, &plain) {
        (Some(w), Some(p)) => {
            classify(difference(p, w), w, source).unwrap_or_else(|| {
                if w.contains(FN) {
                    // The call is shown in a way not known here: the
                    // markers of the source may still tell.
                    match from_source(source) {
                        ToolFormat::Generic => ToolFormat::Generic,
                        f => f,
                    }
                } else {
                    ToolFormat::Generic
                }
            })
        }
        _ => from_source(source),
    };
    let renders_tools = match (
        render(std::slice::from_ref(&user), Some(&tools), true),
        render(&[user], None, true),
    ) {
        (Some(a), Some(b)) => a != b && a.contains(FN),
        _ => false,
    };
    TemplateCaps {
        format,
        object_arguments,
        renders_tools,
        reads_tool_call_id: source.contains("tool_call_id"),
    }
}

/// A template rendering probes with a chosen argument shape.
struct JinjaProbe<'a> {
    tmpl: &'a JinjaTemplate,
    object: bool,
}

impl JinjaProbe<'_> {
    fn render(&mut self, msgs: &[Message], tools: Option<&Value>) -> Option<String> {
        self.tmpl.render_probe(msgs, tools, self.object).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn differences_cut_shared_ends() {
        assert_eq!(difference("abcXYZdef", "abc123def"), "123");
        assert_eq!(difference("ab", "abc"), "c");
        assert_eq!(difference("é1é", "é22é"), "22");
    }
}
