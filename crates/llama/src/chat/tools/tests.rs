//! Format detection on the public templates of real models in the
//! fixtures (`templates/`), and each format's parse of a reply written in
//! it, through the template's own detected format.

use super::*;
use crate::chat::jinja::JinjaTemplate;

fn template(name: &str) -> Option<JinjaTemplate> {
    let dir = test_support::fixtures_with("templates")?;
    let src = std::fs::read_to_string(dir.join("templates").join(name)).unwrap();
    Some(JinjaTemplate::new(&src, "<s>", "</s>").unwrap_or_else(|e| panic!("{name}: {e}")))
}

/// Every template of the fixtures and the format it must be found to use.
const EXPECTED: &[(&str, ToolFormat)] = &[
    ("Qwen-Qwen3-0.6B.jinja", ToolFormat::Hermes),
    ("Qwen3.5-4B.jinja", ToolFormat::QwenXml),
    (
        "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja",
        ToolFormat::Hermes,
    ),
    (
        "meta-llama-Llama-3.1-8B-Instruct.jinja",
        ToolFormat::Llama3 { python_tag: true },
    ),
    (
        "mistralai-Mistral-Nemo-Instruct-2407.jinja",
        ToolFormat::MistralNemo,
    ),
    (
        "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
        ToolFormat::DeepseekR1,
    ),
    ("deepseek-ai-DeepSeek-V3.1.jinja", ToolFormat::DeepseekV31),
    (
        "meetkai-functionary-medium-v3.1.jinja",
        ToolFormat::FunctionaryV31,
    ),
    (
        "meetkai-functionary-medium-v3.2.jinja",
        ToolFormat::FunctionaryV32,
    ),
    ("openai-gpt-oss-120b.jinja", ToolFormat::GptOss),
    (
        "ibm-granite-granite-3.3-2B-Instruct.jinja",
        ToolFormat::Granite,
    ),
    ("ibm-granite-granite-4.0.jinja", ToolFormat::Hermes),
    ("LFM2-8B-A1B.jinja", ToolFormat::Lfm2),
    ("google-gemma-2-2b-it.jinja", ToolFormat::Generic),
    ("microsoft-Phi-3.5-mini-instruct.jinja", ToolFormat::Generic),
    ("llama-cpp-rwkv-world.jinja", ToolFormat::Generic),
];

#[test]
fn every_fixture_template_is_detected() {
    let Some(dir) = test_support::fixtures_with("templates") else {
        return;
    };
    let mut listed: Vec<String> = std::fs::read_dir(dir.join("templates"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".jinja"))
        .collect();
    listed.sort();
    let mut failures = Vec::new();
    for name in &listed {
        let Some(&(_, want)) = EXPECTED.iter().find(|(n, _)| n == name) else {
            failures.push(format!("{name}: no expected format in this test"));
            continue;
        };
        let t = template(name).unwrap();
        if t.tool_caps.format != want {
            failures.push(format!(
                "{name}: detected {:?}, want {want:?}",
                t.tool_caps.format
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn templates_that_render_tools_say_so() {
    for (name, renders) in [
        ("Qwen-Qwen3-0.6B.jinja", true),
        ("mistralai-Mistral-Nemo-Instruct-2407.jinja", true),
        ("google-gemma-2-2b-it.jinja", false),
    ] {
        let Some(t) = template(name) else { return };
        assert_eq!(t.tool_caps.renders_tools, renders, "{name}");
    }
    let Some(m) = template("mistralai-Mistral-Nemo-Instruct-2407.jinja") else {
        return;
    };
    assert!(m.tool_caps.reads_tool_call_id);
}

/// A call rendered back through a template shows up in the model's own
/// format, and parses back to the same call.
#[test]
fn rendered_calls_parse_back() {
    for (name, _) in EXPECTED {
        let Some(t) = template(name) else { return };
        let f = t.tool_caps.format;
        if f == ToolFormat::Generic {
            continue;
        }
        let tools = serde_json::json!([{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]);
        let mut a = crate::chat::Message::new("assistant", "");
        a.tool_calls.push(ToolCall {
            name: "get_weather".into(),
            arguments: r#"{"city":"Paris"}"#.into(),
            id: "abcdefghi".into(),
        });
        let u = crate::chat::Message::new("user", "Weather?");
        let with = t
            .render(&[u.clone(), a], false, Some(&tools), None)
            .unwrap();
        let without = t
            .render(std::slice::from_ref(&u), true, Some(&tools), None)
            .unwrap();
        // The reply is what the call added after the generation prompt.
        let common = without
            .char_indices()
            .zip(with.chars())
            .find(|((_, x), y)| x != y)
            .map_or(without.len(), |((i, _), _)| i);
        // Not inside a tag the prompt and the reply both start with.
        let common = match with[..common].rfind('<') {
            Some(lt) if !with[lt..common].contains('>') => lt,
            _ => common,
        };
        // What the model writes stops at its end-of-turn token, which the
        // server does not put in the text.
        let mut reply = with[common..].trim_end();
        for eot in [
            "<|eot_id|>",
            "<|eom_id|>",
            "<|im_end|>",
            "</s>",
            "<|end_of_text|>",
            "<|end_of_text|>",
            "<｜end▁of▁sentence｜>",
        ] {
            reply = reply.strip_suffix(eot).unwrap_or(reply).trim_end();
        }
        if !reply.contains("get_weather") {
            // The template does not write calls back (Granite 3.3).
            continue;
        }
        let mut p = ChatParser::new(f, ReasoningFormat::None);
        p.tools = tools.as_array().unwrap().clone();
        let m = p.parse(reply, false);
        assert!(
            m.tool_calls.iter().any(|c| c.name == "get_weather"
                && serde_json::from_str::<serde_json::Value>(&c.arguments).ok()
                    == Some(serde_json::json!({"city": "Paris"}))),
            "{name} ({f:?}): {reply:?} parsed as {m:?}"
        );
    }
}

/// llama.cpp's own examples (tests/test-chat.cpp) with reasoning, through
/// the whole parser: the same content, reasoning and calls.
#[test]
fn llama_cpp_reasoning_examples() {
    let run = |f: ToolFormat, open: bool, r: ReasoningFormat, text: &str| {
        let mut p = ChatParser::new(f, r);
        p.thinking_forced_open = open;
        p.parse(text, false)
    };
    // DeepSeek R1 distill: the prompt opened the block.
    let m = run(
        ToolFormat::DeepseekR1,
        true,
        ReasoningFormat::Deepseek,
        "I'm\nthinking</think>Hello, world!\nWhat's up?",
    );
    assert_eq!(
        (m.reasoning_content.as_str(), m.content.as_str()),
        ("I'm\nthinking", "Hello, world!\nWhat's up?")
    );
    let m = run(
        ToolFormat::DeepseekR1,
        true,
        ReasoningFormat::Deepseek,
        "</think>Hello, world!\nWhat's up?",
    );
    assert_eq!(
        (m.reasoning_content.as_str(), m.content.as_str()),
        ("", "Hello, world!\nWhat's up?")
    );
    // DeepSeek V3.1: reasoning, content and two calls.
    let m = run(
        ToolFormat::DeepseekV31,
        true,
        ReasoningFormat::Deepseek,
        "REASONING</think>CONTENT<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{\"city\": \"Paris\"}<｜tool▁call▁end｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Paris\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
    );
    assert_eq!(
        (m.reasoning_content.as_str(), m.content.as_str()),
        ("REASONING", "CONTENT")
    );
    let calls: Vec<_> = m
        .tool_calls
        .iter()
        .map(|c| (c.name.as_str(), c.arguments.as_str()))
        .collect();
    assert_eq!(
        calls,
        [
            ("get_time", r#"{"city":"Paris"}"#),
            ("get_weather", r#"{"city":"Paris"}"#)
        ]
    );
    // A reply that opens its own block; with `none` it stays in content.
    let text = "<think>I'm\nthinking</think>Hello, world!\nWhat's up?";
    let m = run(ToolFormat::Hermes, false, ReasoningFormat::Auto, text);
    assert_eq!(
        (m.reasoning_content.as_str(), m.content.as_str()),
        ("I'm\nthinking", "Hello, world!\nWhat's up?")
    );
    let m = run(ToolFormat::Hermes, false, ReasoningFormat::None, text);
    assert_eq!(
        (m.reasoning_content.as_str(), m.content.as_str()),
        ("", text)
    );
    // QwQ: "</think>" alone ends an empty block opened by the prompt.
    let m = run(
        ToolFormat::Hermes,
        true,
        ReasoningFormat::Auto,
        "Let me think about this...\n</think>\nThe answer is 42.",
    );
    assert_eq!(
        (m.reasoning_content.as_str(), m.content.as_str()),
        ("Let me think about this...", "The answer is 42.")
    );
    // Streaming inside the block: reasoning only, nothing taken back.
    let mut p = ChatParser::new(ToolFormat::Hermes, ReasoningFormat::Auto);
    p.thinking_forced_open = true;
    let m = p.parse("I'm\nthinking</thi", true);
    assert_eq!(
        (m.reasoning_content.as_str(), m.content.as_str()),
        ("I'm\nthinking", "")
    );
}
