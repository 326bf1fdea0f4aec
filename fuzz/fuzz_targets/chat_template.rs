//! Jinja chat templates: a fuzzed template compiled and rendered over
//! fuzzed messages, tools and extra variables, under limits small enough
//! for fuzzing (the crate's defaults are larger; the limits are the same
//! code). A rendering never exceeds its output limit.
//!
//! Input: the template, then after a NUL byte the messages as a JSON
//! array (`[{"role", "content", "reasoning_content", "tool_calls":
//! [{"name", "arguments"}], "tool_call_id"}]`), then after another NUL the
//! tools (any JSON), then after another the extra variables (an object).

#![no_main]

use libfuzzer_sys::fuzz_target;
use llama::chat::tools::ToolCall;
use llama::chat::{JinjaLimits, JinjaTemplate, Message};
use serde_json::Value;

const LIMITS: JinjaLimits = JinjaLimits {
    fuel: 200_000,
    max_output: 1 << 20,
    max_depth: 100,
};

fn text(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_string)
}

fn messages(v: &Value) -> Vec<Message> {
    let Some(a) = v.as_array() else {
        return vec![Message::new("user", "hi")];
    };
    a.iter()
        .map(|m| {
            let mut msg = Message::new(
                text(m, "role").unwrap_or_default(),
                text(m, "content").unwrap_or_default(),
            );
            msg.reasoning_content = text(m, "reasoning_content");
            msg.tool_call_id = text(m, "tool_call_id");
            msg.name = text(m, "name");
            if let Some(calls) = m.get("tool_calls").and_then(Value::as_array) {
                msg.tool_calls = calls
                    .iter()
                    .map(|c| ToolCall {
                        name: text(c, "name").unwrap_or_default(),
                        arguments: match c.get("arguments") {
                            Some(Value::String(s)) => s.clone(),
                            Some(v) => v.to_string(),
                            None => String::new(),
                        },
                        id: text(c, "id").unwrap_or_default(),
                    })
                    .collect();
            }
            msg
        })
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let mut parts = data.splitn(4, |&b| b == 0);
    let Ok(template) = std::str::from_utf8(parts.next().unwrap_or_default()) else {
        return;
    };
    let json = |p: Option<&[u8]>| p.and_then(|p| serde_json::from_slice::<Value>(p).ok());
    let msgs = messages(&json(parts.next()).unwrap_or(Value::Null));
    let tools = json(parts.next());
    let kwargs = json(parts.next()).and_then(|v| v.as_object().cloned());
    let Ok(t) = JinjaTemplate::with_limits(template, "<s>", "</s>", LIMITS) else {
        return;
    };
    for add_generation_prompt in [true, false] {
        if let Ok(out) = t.render(
            &msgs,
            add_generation_prompt,
            tools.as_ref(),
            kwargs.as_ref(),
        ) {
            assert!(
                out.len() <= LIMITS.max_output,
                "{} bytes rendered",
                out.len()
            );
        }
    }
});
