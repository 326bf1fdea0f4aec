//! Hermes 2 Pro, Qwen 2.5 / 3, Granite 4: each call a JSON object
//! `{"name": ..., "arguments": {...}}` between `<tool_call>` and
//! `</tool_call>`, after any content.

use super::parser::{interleaved, json_call};
use super::ParsedMessage;

pub(crate) const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";

pub(crate) fn parse(text: &str, partial: bool, out: &mut ParsedMessage) {
    interleaved(text, partial, &[OPEN], out, |_, after, partial| {
        json_call(after, partial, Some(CLOSE), &["name"], &["arguments"])
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama_cpp_examples() {
        let mut m = ParsedMessage::default();
        parse(
            "Hello, world!\nWhat's up?<tool_call>\n{\"name\": \"special_function\", \"arguments\": {\"arg1\": 1}}</tool_call>",
            false,
            &mut m,
        );
        assert_eq!(m.content, "Hello, world!\nWhat's up?");
        assert_eq!(m.tool_calls.len(), 1);
        assert_eq!(m.tool_calls[0].name, "special_function");
        assert_eq!(m.tool_calls[0].arguments, r#"{"arg1":1}"#);
        let mut two = ParsedMessage::default();
        parse(
            "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", \"arguments\": {\"x\": \"y\"}}\n</tool_call>",
            false,
            &mut two,
        );
        assert_eq!(two.content, "");
        let names: Vec<_> = two.tool_calls.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
    }
}
