//! Limits on one rendering of a Jinja chat template, so that a template
//! (a model file's, or one given with `--chat-template`) or a request's
//! messages cannot make a rendering run forever or fill the memory:
//!
//! - fuel: minijinja counts the instructions a rendering executes and stops
//!   it past [`JinjaLimits::fuel`] (loops, macros, filters called);
//! - output: the rendered text is written through a writer that refuses
//!   past [`JinjaLimits::max_output`] bytes;
//! - nesting: recursion (macros calling themselves, nested loops) stops at
//!   [`JinjaLimits::max_depth`].
//!
//! A single operation is bounded by minijinja itself (a repeated string is
//! at most 100 MB, a `range` 100,000 items), so fuel bounds the time.

use std::io;

/// The limits of one rendering.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JinjaLimits {
    /// Most instructions one rendering may execute.
    pub fuel: u64,
    /// Most bytes one rendering may produce.
    pub max_output: usize,
    /// Deepest recursion (minijinja's units: a loop or condition counts 1,
    /// a macro call about 10).
    pub max_depth: usize,
}

/// Instructions a rendering may execute by default: real templates render
/// a conversation of hundreds of messages with tools in a small part of
/// this (a few hundred instructions per message).
pub const DEFAULT_FUEL: u64 = 5_000_000;

/// Bytes a rendering may produce by default: far beyond any context a
/// model reads (a million tokens are a few MiB of text).
pub const DEFAULT_MAX_OUTPUT: usize = 16 << 20;

/// Recursion depth allowed by default.
pub const DEFAULT_MAX_DEPTH: usize = 200;

impl Default for JinjaLimits {
    fn default() -> Self {
        Self {
            fuel: DEFAULT_FUEL,
            max_output: DEFAULT_MAX_OUTPUT,
            max_depth: DEFAULT_MAX_DEPTH,
        }
    }
}

/// A `String` sink that refuses to grow past `limit` bytes.
#[derive(Debug)]
pub(crate) struct BoundedOutput {
    pub(crate) buf: Vec<u8>,
    limit: usize,
    /// Set when a write was refused.
    pub(crate) exceeded: bool,
}

impl BoundedOutput {
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            buf: Vec::new(),
            limit,
            exceeded: false,
        }
    }
}

impl io::Write for BoundedOutput {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        if self.buf.len().saturating_add(b.len()) > self.limit {
            self.exceeded = true;
            return Err(io::Error::other("output limit"));
        }
        self.buf.extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::{ChatError, JinjaTemplate, Message};

    fn render(source: &str, limits: JinjaLimits) -> Result<String, ChatError> {
        let t = JinjaTemplate::with_limits(source, "<s>", "</s>", limits)?;
        t.render(&[Message::new("user", "hi")], true, None, None)
    }

    fn small() -> JinjaLimits {
        JinjaLimits {
            fuel: 100_000,
            max_output: 1 << 20,
            max_depth: 50,
        }
    }

    #[test]
    fn a_loop_past_its_fuel_stops_with_an_error() {
        let e = render(
            "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}",
            small(),
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("limit of 100000 instructions"),
            "{e}"
        );
    }

    #[test]
    fn output_past_the_limit_is_refused() {
        let e = render(
            "{% for i in range(1000) %}{{ 'x' * 10000 }}{% endfor %}",
            small(),
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("exceeds the limit of 1048576 bytes"),
            "{e}"
        );
        // The same template under the limit renders.
        let out = render(
            "{% for i in range(10) %}{{ 'x' * 10000 }}{% endfor %}",
            small(),
        )
        .unwrap();
        assert_eq!(out.len(), 100_000);
    }

    #[test]
    fn endless_recursion_stops_with_an_error() {
        let e = render(
            "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
            small(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("recursion"), "{e}");
    }

    #[test]
    fn the_default_limits_stop_a_memory_bomb_early() {
        // 100 MB repeated 100,000 times would be 10 TB of prompt.
        let e = render(
            "{% set s = 'x' * 100000000 %}{% for i in range(100000) %}{{ s }}{% endfor %}",
            JinjaLimits::default(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("exceeds the limit of"), "{e}");
    }

    #[test]
    fn a_long_conversation_renders_within_the_default_fuel() {
        // 2,000 messages through a template with a loop, conditions and
        // filters per message.
        let t = JinjaTemplate::new(
            "{% for m in messages %}{% if m.role == 'user' %}<|user|>{{ m.content | trim }}\
             {% elif m.role == 'assistant' %}<|assistant|>{{ m.content }}{% endif %}\
             {% if not loop.last %}\n{% endif %}{% endfor %}\
             {% if add_generation_prompt %}<|assistant|>{% endif %}",
            "<s>",
            "</s>",
        )
        .unwrap();
        let msgs: Vec<Message> = (0..2000)
            .map(|i| Message::new(["user", "assistant"][i % 2], format!(" message {i} ")))
            .collect();
        let out = t.render(&msgs, true, None, None).unwrap();
        assert!(out.ends_with("<|assistant|>") && out.contains("message 1999"));
    }
}
