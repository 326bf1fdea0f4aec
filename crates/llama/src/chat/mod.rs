//! Chat templates: turning a list of messages into the prompt a model was
//! trained on. A model's own Jinja template (`tokenizer.chat_template`) is
//! rendered with minijinja; templates known by name are rendered in code,
//! and without Jinja a model's template is recognised by its text, as
//! llama.cpp does.

mod builtin;
pub mod conversation;
mod harmony;
mod jinja;
mod limits;
mod tojson;
pub mod tools;

pub use builtin::{Builtin, Detected, NAMES};
pub use jinja::{JinjaTemplate, Kwargs};
pub use limits::{JinjaLimits, DEFAULT_FUEL, DEFAULT_MAX_DEPTH, DEFAULT_MAX_OUTPUT};

use crate::vocab::Vocab;

/// The metadata key of a model's chat template.
pub const METADATA_KEY: &str = "tokenizer.chat_template";

/// One message of a conversation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Message {
    /// `system`, `user`, `assistant`, `tool`, ...
    pub role: String,
    /// The text.
    pub content: String,
    /// An assistant's reasoning, given back to templates that show it.
    pub reasoning_content: Option<String>,
    /// The calls an assistant message asked for.
    pub tool_calls: Vec<tools::ToolCall>,
    /// The call a `tool` message answers.
    pub tool_call_id: Option<String>,
    /// The function a `tool` message comes from.
    pub name: Option<String>,
}

impl Message {
    /// A message of `role` with `content`.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
            ..Self::default()
        }
    }

    /// The message as a template sees it (OpenAI's shape). Call arguments
    /// are objects when `object_arguments` (what most templates expect,
    /// `tool_call.arguments | tojson`), else their JSON text.
    pub fn to_template_json(&self, object_arguments: bool) -> serde_json::Value {
        let mut m = serde_json::json!({ "role": self.role, "content": self.content });
        if let Some(r) = &self.reasoning_content {
            m["reasoning_content"] = r.clone().into();
        }
        if let Some(n) = &self.name {
            m["name"] = n.clone().into();
        }
        if let Some(id) = &self.tool_call_id {
            m["tool_call_id"] = id.clone().into();
        }
        if !self.tool_calls.is_empty() {
            let calls: Vec<serde_json::Value> = self
                .tool_calls
                .iter()
                .map(|c| {
                    let args = match serde_json::from_str::<serde_json::Value>(&c.arguments) {
                        Ok(v) if object_arguments && v.is_object() => v,
                        _ => c.arguments.clone().into(),
                    };
                    let mut v = serde_json::json!({
                        "type": "function",
                        "function": { "name": c.name, "arguments": args },
                    });
                    if !c.id.is_empty() {
                        v["id"] = c.id.clone().into();
                    }
                    v
                })
                .collect();
            m["tool_calls"] = calls.into();
        }
        m
    }
}

/// Errors of chat templates.
#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    /// The template does not compile.
    #[error("chat template does not compile: {0}")]
    Template(String),
    /// Rendering failed (including `raise_exception` from the template).
    #[error("chat template failed to render: {0}")]
    Render(String),
    /// `--chat-template` named neither a built-in template nor a file.
    #[error("unknown chat template '{0}': give a file or one of {1}")]
    UnknownName(String, String),
    /// The file of `--chat-template` could not be read.
    #[error("cannot read chat template file '{0}': {1}")]
    File(String, String),
    /// Without Jinja, the model's template was recognised as a family this
    /// engine does not render in code.
    #[error("chat template '{0}' is only supported with --jinja")]
    NotBuiltIn(&'static str),
    /// Without Jinja, the model's template was not recognised.
    #[error("the model's chat template is not one of the known ones; use --jinja or --chat-template NAME")]
    Unrecognised,
}

/// How prompts are rendered.
#[derive(Debug)]
enum Kind {
    Builtin(Builtin),
    Jinja(Box<JinjaTemplate>),
}

/// A chat template ready to render, with the vocabulary's BOS/EOS handling.
#[derive(Debug)]
pub struct ChatTemplate {
    kind: Kind,
    add_bos: bool,
    add_eos: bool,
    /// The template's source text (the name for a built-in one).
    pub source: String,
}

impl ChatTemplate {
    /// Chooses the template as llama.cpp's server does: `override_` (a
    /// built-in name, a file, or Jinja text) over the model's own; without
    /// any, chatml. With `use_jinja` a Jinja source is rendered as such;
    /// without, it is recognised by its text and rendered in code.
    pub fn new(
        model_template: Option<&str>,
        override_: Option<&str>,
        use_jinja: bool,
        vocab: &Vocab,
    ) -> Result<Self, ChatError> {
        let source = match override_ {
            Some(o) => {
                if let Some(b) = Builtin::from_name(o) {
                    return Ok(Self::builtin(b, vocab));
                }
                if std::path::Path::new(o).is_file() {
                    std::fs::read_to_string(o)
                        .map_err(|e| ChatError::File(o.into(), e.to_string()))?
                } else if o.contains("{%") || o.contains("{{") {
                    o.to_string()
                } else {
                    let names: Vec<&str> = NAMES.iter().map(|(n, _)| *n).collect();
                    return Err(ChatError::UnknownName(o.into(), names.join(", ")));
                }
            }
            None => match model_template {
                Some(t) if !t.is_empty() => t.to_string(),
                _ => return Ok(Self::builtin(Builtin::ChatMl, vocab)),
            },
        };
        let kind = if use_jinja {
            let piece = |t: Option<i32>| {
                t.map(|t| String::from_utf8_lossy(&vocab.token_to_piece(t, true)).into_owned())
                    .unwrap_or_default()
            };
            Kind::Jinja(Box::new(JinjaTemplate::new(
                &source,
                &piece(vocab.bos()),
                &piece(vocab.eos()),
            )?))
        } else {
            match Builtin::detect(&source) {
                Detected::Builtin(b) => Kind::Builtin(b),
                Detected::Other(name) => return Err(ChatError::NotBuiltIn(name)),
                Detected::Unknown => return Err(ChatError::Unrecognised),
            }
        };
        Ok(Self {
            kind,
            add_bos: vocab.add_bos(),
            add_eos: vocab.add_eos(),
            source,
        })
    }

    fn builtin(b: Builtin, vocab: &Vocab) -> Self {
        Self {
            kind: Kind::Builtin(b),
            add_bos: vocab.add_bos(),
            add_eos: vocab.add_eos(),
            source: b.name().to_string(),
        }
    }

    /// What the template does with tools (`None` for a built-in template,
    /// which renders no tools).
    pub fn tool_caps(&self) -> Option<tools::TemplateCaps> {
        match &self.kind {
            Kind::Builtin(_) => None,
            Kind::Jinja(j) => Some(j.tool_caps),
        }
    }

    /// Whether the template switches reasoning with `enable_thinking`.
    pub fn supports_thinking(&self) -> bool {
        matches!(&self.kind, Kind::Jinja(j) if j.supports_thinking)
    }

    /// The built-in template in use, if any.
    pub fn builtin_kind(&self) -> Option<Builtin> {
        match self.kind {
            Kind::Builtin(b) => Some(b),
            Kind::Jinja(_) => None,
        }
    }

    /// Renders `messages`, opening the assistant's turn when
    /// `add_generation_prompt`. A Jinja rendering loses a leading BOS and a
    /// trailing EOS text when the vocabulary adds them while tokenizing, so
    /// that they are not doubled.
    pub fn apply(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
        tools: Option<&serde_json::Value>,
    ) -> Result<String, ChatError> {
        self.apply_with(messages, add_generation_prompt, tools, None)
    }

    /// [`ChatTemplate::apply`] with extra template variables (a request's
    /// `chat_template_kwargs`, such as `enable_thinking`), which a built-in
    /// template has no use for.
    pub fn apply_with(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
        tools: Option<&serde_json::Value>,
        kwargs: Option<&Kwargs>,
    ) -> Result<String, ChatError> {
        match &self.kind {
            Kind::Builtin(b) => Ok(b.apply(messages, add_generation_prompt)),
            Kind::Jinja(j) => {
                let mut out = j.render(messages, add_generation_prompt, tools, kwargs)?;
                if self.add_bos && !j.bos_token.is_empty() && out.starts_with(&j.bos_token) {
                    out.drain(..j.bos_token.len());
                }
                if self.add_eos && !j.eos_token.is_empty() && out.ends_with(&j.eos_token) {
                    out.truncate(out.len() - j.eos_token.len());
                }
                Ok(out)
            }
        }
    }
}

#[cfg(test)]
mod tests;
