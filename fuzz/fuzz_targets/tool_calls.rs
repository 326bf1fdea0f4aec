//! The tool-call parsers of every chat format (with each reasoning mode,
//! on whole and on partial replies) over fuzzed model output, and the
//! streamed differences between growing prefixes of it.

#![no_main]

use libfuzzer_sys::fuzz_target;
use llama::chat::tools::{ChatParser, ReasoningFormat, StreamState, ToolFormat};

const FORMATS: &[ToolFormat] = &[
    ToolFormat::ContentOnly,
    ToolFormat::Generic,
    ToolFormat::Hermes,
    ToolFormat::QwenXml,
    ToolFormat::Llama3 { python_tag: true },
    ToolFormat::Llama3 { python_tag: false },
    ToolFormat::MistralNemo,
    ToolFormat::Granite,
    ToolFormat::DeepseekR1,
    ToolFormat::DeepseekV31,
    ToolFormat::FunctionaryV31,
    ToolFormat::FunctionaryV32,
    ToolFormat::GptOss,
    ToolFormat::Lfm2,
];

const REASONING: &[ReasoningFormat] = &[
    ReasoningFormat::None,
    ReasoningFormat::Auto,
    ReasoningFormat::Deepseek,
];

fuzz_target!(|data: &[u8]| {
    let Some((&sel, text)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(text) else {
        return;
    };
    let format = FORMATS[usize::from(sel & 0x0f) % FORMATS.len()];
    let reasoning = REASONING[usize::from(sel >> 4) % REASONING.len()];
    let parser = ChatParser::new(format, reasoning);
    let _ = parser.parse(text, false);
    let _ = parser.parse(text, true);
    if sel & 0x80 != 0 {
        // Streamed: the reply arrives a few characters at a time, and the
        // message it builds is the one parsed from the whole text.
        let mut state = StreamState::new(parser.clone(), format.id_len());
        let mut start = 0;
        let cuts: Vec<usize> = text
            .char_indices()
            .map(|(i, _)| i)
            .step_by(7)
            .skip(1)
            .collect();
        for &i in &cuts {
            let _ = state.push(&text[start..i], false);
            start = i;
        }
        let _ = state.push(&text[start..], true);
        assert_eq!(state.text(), text, "the streamed text is the reply");
    }
});
