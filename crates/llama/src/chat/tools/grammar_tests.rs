//! Call grammars accept the replies their formats' parsers read, and hold
//! a model to a call when one is required.

use std::sync::Arc;

use serde_json::json;

use super::*;
use crate::grammar::{Grammar, GrammarSampler, GrammarTrigger, TokenPieces};

/// One token per byte, and token 256 the end of generation.
fn byte_tokens() -> Arc<TokenPieces> {
    let mut pieces: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
    pieces.push(b"<eos>".to_vec());
    Arc::new(TokenPieces::new(pieces, &[256]))
}

fn sampler(g: &CallGrammar) -> GrammarSampler {
    let grammar = Grammar::parse(&g.grammar).unwrap_or_else(|e| panic!("{e}\n{}", g.grammar));
    GrammarSampler::with_tokens(Arc::new(grammar), byte_tokens(), g.lazy, &g.triggers).unwrap()
}

/// Whether the grammar takes all of `text` and may end after it.
fn accepts(g: &CallGrammar, text: &str) -> bool {
    let mut s = sampler(g);
    text.bytes().all(|b| s.try_accept(i32::from(b)).is_ok()) && s.can_end()
}

fn tools() -> Vec<serde_json::Value> {
    vec![
        json!({"type": "function", "function": {"name": "special_function", "parameters": {
            "type": "object", "properties": {"arg1": {"type": "integer"}}, "required": ["arg1"]}}}),
        json!({"type": "function", "function": {"name": "get_weather", "parameters": {
            "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}),
    ]
}

/// A call of `special_function` with `{"arg1": 1}` in each format, as the
/// grammar writes it.
const CALLS: &[(ToolFormat, &str)] = &[
    (ToolFormat::Hermes, "<tool_call>\n{\"name\": \"special_function\", \"arguments\": {\"arg1\": 1}}\n</tool_call>"),
    (ToolFormat::QwenXml, "<tool_call>\n<function=special_function>\n<parameter=arg1>\n1\n</parameter>\n</function>\n</tool_call>"),
    (ToolFormat::Llama3 { python_tag: false }, "{\"name\": \"special_function\", \"parameters\": {\"arg1\": 1}}"),
    (ToolFormat::MistralNemo, "[TOOL_CALLS][{\"name\": \"special_function\", \"arguments\": {\"arg1\": 1}, \"id\": \"abcDEF123\"}]"),
    (ToolFormat::Granite, "<|tool_call|>[{\"name\": \"special_function\", \"arguments\": {\"arg1\": 1}}]"),
    (ToolFormat::DeepseekR1, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>special_function\n```json\n{\"arg1\": 1}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"),
    (ToolFormat::DeepseekV31, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>special_function<｜tool▁sep｜>{\"arg1\": 1}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"),
    (ToolFormat::FunctionaryV31, "<function=special_function>{\"arg1\": 1}</function>"),
    (ToolFormat::FunctionaryV32, "special_function\n{\"arg1\": 1}"),
    (ToolFormat::GptOss, "<|channel|>commentary to=functions.special_function <|constrain|>json<|message|>{\"arg1\": 1}"),
    (ToolFormat::Generic, "{\"tool_call\": {\"name\": \"special_function\", \"arguments\": {\"arg1\": 1}}}"),
    (ToolFormat::Lfm2, "<|tool_call_start|>[special_function(arg1=1)]<|tool_call_end|>"),
];

#[test]
fn required_grammars_take_a_call_and_nothing_else() {
    for (f, call) in CALLS {
        let g = call_grammar(*f, &tools(), CallChoice::Required, false, false)
            .unwrap()
            .unwrap();
        assert!(!g.lazy, "{f:?}");
        assert!(accepts(&g, call), "{f:?} refuses {call:?}:\n{}", g.grammar);
        assert!(!accepts(&g, "Hello, world!"), "{f:?} takes text");
        // What the grammar took, the format's parser reads as the call.
        let mut p = ChatParser::new(*f, ReasoningFormat::Auto);
        p.tools = tools();
        let m = p.parse(call, false);
        assert_eq!(m.tool_calls.len(), 1, "{f:?}");
        assert_eq!(m.tool_calls[0].name, "special_function");
        assert_eq!(m.tool_calls[0].arguments, r#"{"arg1":1}"#, "{f:?}");
        // Arguments that break the schema are refused.
        let wrong = call
            .replace("1", "\"one\"")
            .replace("abcDEF\"one\"23", "abcDEF123");
        if *f != ToolFormat::QwenXml {
            assert!(!accepts(&g, &wrong), "{f:?} takes {wrong:?}");
        }
    }
}

#[test]
fn a_named_function_excludes_the_others() {
    let g = call_grammar(
        ToolFormat::Hermes,
        &tools(),
        CallChoice::Named("get_weather"),
        false,
        false,
    )
    .unwrap()
    .unwrap();
    assert!(!accepts(&g, CALLS[0].1));
    assert!(accepts(
        &g,
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"
    ));
}

#[test]
fn auto_grammars_wait_for_the_opening_marker() {
    let g = call_grammar(ToolFormat::Hermes, &tools(), CallChoice::Auto, false, false)
        .unwrap()
        .unwrap();
    assert!(g.lazy);
    assert_eq!(g.triggers, vec![GrammarTrigger::Word("<tool_call>".into())]);
    let mut s = sampler(&g);
    for b in format!("Let me check. {}", CALLS[0].1).bytes() {
        s.try_accept(i32::from(b)).unwrap();
    }
    assert!(!s.awaiting_trigger());
    assert!(s.can_end());
}

#[test]
fn parallel_calls_and_an_open_think_block() {
    let two = format!("{}\n{}", CALLS[0].1, CALLS[0].1);
    let one = call_grammar(
        ToolFormat::Hermes,
        &tools(),
        CallChoice::Required,
        false,
        false,
    )
    .unwrap()
    .unwrap();
    let many = call_grammar(
        ToolFormat::Hermes,
        &tools(),
        CallChoice::Required,
        true,
        false,
    )
    .unwrap()
    .unwrap();
    assert!(!accepts(&one, &two));
    assert!(accepts(&many, &two));
    let think = call_grammar(
        ToolFormat::Hermes,
        &tools(),
        CallChoice::Required,
        false,
        true,
    )
    .unwrap()
    .unwrap();
    assert!(accepts(
        &think,
        &format!("Let me see: a < b.\n</think>\n\n{}", CALLS[0].1)
    ));
}

#[test]
fn content_only_has_no_grammar_and_bad_schemas_are_errors() {
    assert!(call_grammar(
        ToolFormat::ContentOnly,
        &tools(),
        CallChoice::Required,
        false,
        false
    )
    .unwrap()
    .is_none());
    let bad = vec![
        json!({"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"x": {"type": "string", "format": "no-such-format"}}}}}),
    ];
    assert!(call_grammar(ToolFormat::Hermes, &bad, CallChoice::Required, false, false).is_err());
}
