//! Reasoning blocks (`<think>...</think>`) taken out of a reply as
//! `reasoning_content`, as llama.cpp's `--reasoning-format` does.

use super::scan::{is_marker_prefix, stable_len};
use super::ToolError;

/// Where a reply's reasoning goes (`--reasoning-format`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReasoningFormat {
    /// Left in `content` as the model wrote it.
    None,
    /// In `reasoning_content` (llama.cpp's default, the same as deepseek
    /// for the formats here).
    #[default]
    Auto,
    /// In `reasoning_content`.
    Deepseek,
}

impl ReasoningFormat {
    /// Parses llama.cpp's names.
    pub fn from_name(s: &str) -> Result<Self, ToolError> {
        match s {
            "none" => Ok(Self::None),
            "auto" => Ok(Self::Auto),
            "deepseek" => Ok(Self::Deepseek),
            "deepseek-legacy" => Err(ToolError::UnsupportedReasoningFormat(s.to_string())),
            o => Err(ToolError::UnknownReasoningFormat(o.to_string())),
        }
    }

    /// llama.cpp's name.
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Auto => "auto",
            Self::Deepseek => "deepseek",
        }
    }

    /// Whether reasoning is taken out of the content.
    pub fn extracts(self) -> bool {
        self != Self::None
    }
}

/// The tags of a reasoning block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThinkTags {
    /// Opening tag.
    pub start: String,
    /// Closing tag.
    pub end: String,
}

impl Default for ThinkTags {
    fn default() -> Self {
        Self {
            start: "<think>".into(),
            end: "</think>".into(),
        }
    }
}

/// A reply with its reasoning block taken out.
pub(crate) struct Split<'a> {
    pub reasoning: String,
    /// The rest of the reply, to be parsed for content and calls; `None`
    /// while the reply is still inside the block (or may be opening one).
    pub rest: Option<&'a str>,
}

/// Takes the leading reasoning block out of `text`. `forced_open`: the
/// prompt already opened the block, so the reply starts inside it.
pub(crate) fn split<'a>(
    text: &'a str,
    tags: &ThinkTags,
    forced_open: bool,
    partial: bool,
) -> Split<'a> {
    let body = if forced_open {
        text
    } else {
        let t = text.trim_start();
        if let Some(b) = t.strip_prefix(tags.start.as_str()) {
            b
        } else if partial && (t.is_empty() || is_marker_prefix(t, &tags.start)) {
            return Split {
                reasoning: String::new(),
                rest: None,
            };
        } else {
            return Split {
                reasoning: String::new(),
                rest: Some(text),
            };
        }
    };
    match body.find(tags.end.as_str()) {
        Some(i) => Split {
            reasoning: body[..i].trim().to_string(),
            rest: Some(body[i + tags.end.len()..].trim_start()),
        },
        None => {
            let r = body.trim_start();
            let r = if partial {
                &r[..stable_len(r, &[tags.end.as_str()])]
            } else {
                r.trim_end()
            };
            Split {
                reasoning: r.to_string(),
                rest: None,
            }
        }
    }
}

/// Whether a rendered generation prompt leaves a reasoning block open
/// (it ends with the opening tag, as DeepSeek R1's and Qwen 3's do).
pub fn prompt_opens_thinking(prompt: &str, tags: &ThinkTags) -> bool {
    prompt.trim_end().ends_with(tags.start.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn think_blocks_split_whole_and_streaming() {
        let t = ThinkTags::default();
        let s = split("<think>I'm\nthinking</think>Hello", &t, false, false);
        assert_eq!(
            (s.reasoning.as_str(), s.rest),
            ("I'm\nthinking", Some("Hello"))
        );
        let s = split("I'm\nthinking</think>\nHello", &t, true, false);
        assert_eq!(
            (s.reasoning.as_str(), s.rest),
            ("I'm\nthinking", Some("Hello"))
        );
        let s = split("<think>I'm</th", &t, false, true);
        assert_eq!((s.reasoning.as_str(), s.rest), ("I'm", None));
        let s = split("<thi", &t, false, true);
        assert_eq!(s.rest, None);
        let s = split("Hello", &t, false, true);
        assert_eq!(s.rest, Some("Hello"));
        assert!(prompt_opens_thinking(
            "<|im_start|>assistant\n<think>\n",
            &t
        ));
    }
}
