//! A chat request made ready to run: its messages and tools rendered by
//! the template (with llama.cpp's generic format for templates that know
//! no tools), and the parser its reply will be read with.

use llama::chat::tools::{
    call_grammar, generic_messages, prompt_opens_thinking, CallChoice, CallGrammar, ChatParser,
    ReasoningFormat, StreamState, ToolFormat,
};
use serde_json::Value;

use crate::app::App;
use crate::error::ApiError;
use crate::request::{self, Body};
use crate::tools::{tool_request, ToolChoice, ToolRequest};

/// A chat request's prompt and how its reply is read.
pub struct ChatSetup {
    /// The rendered prompt.
    pub prompt: String,
    /// The reply's parser.
    pub parser: ChatParser,
    /// Length of generated call ids.
    pub id_len: usize,
    /// The request's tools, when it has some.
    pub tools: Option<ToolRequest>,
    /// The grammar that keeps calls well formed (from the first token for
    /// `tool_choice` `required` or a named function, lazily for `auto`).
    pub grammar: Option<CallGrammar>,
}

impl ChatSetup {
    /// The state of a reply read with this setup.
    pub fn stream_state(&self) -> StreamState {
        StreamState::new(self.parser.clone(), self.id_len)
    }
}

/// Renders the conversation of `b` and chooses how its reply is read.
/// `has_grammar`: the request constrains its output itself, which cannot
/// go with tools.
pub fn prepare(app: &App, b: &Body, has_grammar: bool) -> Result<ChatSetup, ApiError> {
    let tmpl = app.chat_template()?;
    let mut messages = request::messages(b)?;
    let tools = tool_request(b)?;
    let kwargs = request::template_kwargs(b)?;
    let reasoning = match b.str("reasoning_format")? {
        Some(s) => ReasoningFormat::from_name(s)
            .map_err(|e| ApiError::field("reasoning_format", e.to_string()))?,
        None => app.config.reasoning_format,
    };
    let caps = tmpl.tool_caps();
    let Some(caps) = caps else {
        if tools.is_some() {
            return Err(ApiError::field(
                "tools",
                "tools need a Jinja chat template; this server renders a built-in one (--no-jinja)",
            ));
        }
        let prompt = tmpl
            .apply_with(&messages, true, None, kwargs)
            .map_err(|e| ApiError::field("messages", e.to_string()))?;
        let mut parser = ChatParser::new(ToolFormat::ContentOnly, reasoning);
        parser.parse_tool_calls = false;
        return Ok(ChatSetup {
            prompt,
            parser,
            id_len: 32,
            tools: None,
            grammar: None,
        });
    };
    if caps.reads_tool_call_id {
        for (i, m) in messages.iter().enumerate() {
            if m.role == "tool" && m.tool_call_id.is_none() {
                return Err(ApiError::field(
                    &format!("messages[{i}].tool_call_id"),
                    format!("'messages[{i}].tool_call_id' is required: the chat template reads the id of the call a tool message answers"),
                ));
            }
        }
    }
    let calls_on = tools.as_ref().is_some_and(|t| t.choice != ToolChoice::None);
    let format = if calls_on || caps.format == ToolFormat::GptOss {
        caps.format
    } else {
        ToolFormat::ContentOnly
    };
    let tools_json = tools.as_ref().map(|t| Value::Array(t.tools.clone()));
    if let (ToolFormat::Generic, Some(t)) = (format, &tools) {
        if calls_on {
            messages = generic_messages(&messages, &t.tools, t.parallel);
        }
    }
    let mut prompt = tmpl
        .apply_with(&messages, true, tools_json.as_ref(), kwargs)
        .map_err(|e| ApiError::field("messages", e.to_string()))?;
    let mut parser = ChatParser::new(format, reasoning);
    parser.parse_tool_calls = calls_on;
    parser.tools = tools.as_ref().map(|t| t.tools.clone()).unwrap_or_default();
    let opens_thinking = prompt_opens_thinking(&prompt, &parser.think_tags);
    let choice = match tools.as_ref().map(|t| &t.choice) {
        None | Some(ToolChoice::None) => None,
        Some(ToolChoice::Auto) => Some(CallChoice::Auto),
        Some(ToolChoice::Required) => Some(CallChoice::Required),
        Some(ToolChoice::Named(n)) => Some(CallChoice::Named(n)),
    };
    let forced = matches!(choice, Some(CallChoice::Required | CallChoice::Named(_)));
    if forced && opens_thinking {
        // A call is owed at once: the reasoning block the prompt opened is
        // closed, as the template does with thinking off.
        prompt.push_str(&parser.think_tags.end);
        prompt.push_str("\n\n");
    } else {
        parser.thinking_forced_open = reasoning.extracts() && opens_thinking;
    }
    let mut grammar = None;
    if let (Some(choice), Some(t)) = (choice, &tools) {
        if has_grammar {
            return Err(ApiError::field(
                "tools",
                "a request with tools cannot also give a grammar (unless tool_choice is none)",
            ));
        }
        grammar = call_grammar(format, &t.tools, choice, t.parallel, false)
            .map_err(|e| ApiError::field("tools", format!("tool parameters: {e}")))?;
    }
    Ok(ChatSetup {
        prompt,
        parser,
        id_len: format.id_len(),
        tools,
        grammar,
    })
}
