//! LFM2's pythonic call lists (`[f(a=1, b='x'), g()]` between its call
//! tokens): fuzzed lists, whole and cut anywhere while streaming.

#![no_main]

use libfuzzer_sys::fuzz_target;
use llama::chat::tools::{ChatParser, ReasoningFormat, ToolFormat};

fuzz_target!(|data: &[u8]| {
    let Ok(list) = std::str::from_utf8(data) else {
        return;
    };
    let parser = ChatParser::new(ToolFormat::Lfm2, ReasoningFormat::Auto);
    let text = format!("<|tool_call_start|>{list}<|tool_call_end|>");
    let whole = parser.parse(&text, false);
    for c in &whole.tool_calls {
        // Arguments are given as JSON text.
        if !c.arguments.is_empty() {
            assert!(
                serde_json::from_str::<serde_json::Value>(&c.arguments).is_ok(),
                "arguments of '{}' are not JSON: {}",
                c.name,
                c.arguments
            );
        }
    }
    // Every prefix of a streamed reply parses.
    for (i, _) in text.char_indices().step_by(5) {
        let _ = parser.parse(&text[..i], true);
    }
});
