//! Tool calls and reasoning in a model's reply: which tool-call format a
//! chat template speaks ([`detect`]), and parsers that split a reply, whole
//! or still streaming, into content, `reasoning_content` and `tool_calls`
//! ([`ChatParser`]), with the deltas a stream sends ([`StreamState`]).

mod deepseek_r1;
mod deepseek_v3_1;
pub mod detect;
mod functionary_v3_1;
mod functionary_v3_2;
mod generic;
mod gpt_oss;
mod grammar;
mod hermes;
mod json_array;
mod json_scan;
mod llama3;
mod parser;
mod pythonic;
mod qwen_xml;
mod reasoning;
mod scan;
mod stream;

pub use detect::{detect, TemplateCaps, ToolFormat};
pub use generic::{generic_messages, GENERIC_SYSTEM_INTRO};
pub use grammar::{call_grammar, CallChoice, CallGrammar};
pub use parser::ChatParser;
pub use reasoning::{prompt_opens_thinking, ReasoningFormat, ThinkTags};
pub use stream::{MessageDiff, StreamState, ToolCallDelta};

/// One call of a function the model asked for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ToolCall {
    /// The function's name.
    pub name: String,
    /// Its arguments: JSON text (a prefix of it while a reply streams).
    pub arguments: String,
    /// The call's id (empty when the model gave none).
    pub id: String,
}

/// A reply split into its parts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ParsedMessage {
    /// What the user is meant to read.
    pub content: String,
    /// The model's reasoning (`<think>` blocks, gpt-oss's analysis channel).
    pub reasoning_content: String,
    /// The calls asked for, in order.
    pub tool_calls: Vec<ToolCall>,
}

#[cfg(test)]
mod grammar_tests;
#[cfg(test)]
mod tests;

/// Errors of the tool-call side of chat.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// A reasoning format name that is not one of llama.cpp's.
    #[error("unknown reasoning format '{0}': expected auto, deepseek or none")]
    UnknownReasoningFormat(String),
    /// A reasoning format of llama.cpp's that is not supported here.
    #[error("reasoning format '{0}' is not supported: use auto, deepseek or none")]
    UnsupportedReasoningFormat(String),
    /// A tool's parameters could not be made a grammar.
    #[error("tool parameters: {0}")]
    Schema(#[from] crate::json_schema::SchemaError),
}
