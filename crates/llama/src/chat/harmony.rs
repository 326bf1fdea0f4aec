//! What llama.cpp does around gpt-oss's harmony template (a template
//! that writes `<|channel|>`), beyond rendering it: an assistant's
//! reasoning is given to the template as `thinking` (the field the
//! template reads for the analysis channel), and such a message with
//! calls loses its content, which the template would otherwise render as
//! a second analysis message (or refuse next to `thinking`); a prompt that
//! ends with a closed assistant message ends it with `<|end|>`, not with
//! the `<|return|>` the template writes for training.

/// Whether `source` is a harmony template.
pub(crate) fn is_harmony(source: &str) -> bool {
    source.contains("<|channel|>")
}

/// A message (as the template sees it) given llama.cpp's harmony fields.
pub(crate) fn adjust_message(m: &mut serde_json::Value) {
    let Some(obj) = m.as_object_mut() else { return };
    let Some(reasoning) = obj
        .get("reasoning_content")
        .filter(|r| r.is_string())
        .cloned()
    else {
        return;
    };
    obj.insert("thinking".into(), reasoning);
    let calls = obj
        .get("tool_calls")
        .and_then(|c| c.as_array())
        .is_some_and(|c| !c.is_empty());
    if calls {
        obj.remove("content");
    }
}

/// A prompt rendered without a generation prompt: its last `<|return|>`
/// becomes `<|end|>`, so that the model continues after a closed message.
pub(crate) fn end_instead_of_return(prompt: &mut String) {
    const RETURN: &str = "<|return|>";
    if let Some(i) = prompt.rfind(RETURN) {
        prompt.replace_range(i..i + RETURN.len(), "<|end|>");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasoning_becomes_thinking_and_calls_drop_content() {
        let mut m = serde_json::json!({"role": "assistant", "content": "", "reasoning_content": "r",
            "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {}}}]});
        adjust_message(&mut m);
        assert_eq!(m["thinking"], "r");
        assert!(m.get("content").is_none());
        let mut m =
            serde_json::json!({"role": "assistant", "content": "c", "reasoning_content": "r"});
        adjust_message(&mut m);
        assert_eq!(
            (m["thinking"].as_str(), m["content"].as_str()),
            (Some("r"), Some("c"))
        );
        let mut m = serde_json::json!({"role": "user", "content": "c"});
        adjust_message(&mut m);
        assert!(m.get("thinking").is_none());
    }

    #[test]
    fn only_the_last_return_becomes_end() {
        let mut p = "a<|return|>b<|return|>".to_string();
        end_instead_of_return(&mut p);
        assert_eq!(p, "a<|return|>b<|end|>");
        let mut p = "no marker".to_string();
        end_instead_of_return(&mut p);
        assert_eq!(p, "no marker");
    }

    use crate::chat::tools::ToolCall;
    use crate::chat::{JinjaTemplate, Kwargs, Message};

    fn template() -> Option<JinjaTemplate> {
        let dir = test_support::fixtures_with("templates")?;
        let src = std::fs::read_to_string(dir.join("templates/openai-gpt-oss-120b.jinja")).unwrap();
        Some(JinjaTemplate::new(&src, "<|startoftext|>", "<|return|>").unwrap())
    }

    fn call_message(reasoning: &str) -> Message {
        Message {
            role: "assistant".into(),
            reasoning_content: Some(reasoning.into()),
            tool_calls: vec![ToolCall {
                name: "get_weather".into(),
                arguments: r#"{"city": "Paris"}"#.into(),
                id: String::new(),
            }],
            ..Message::default()
        }
    }

    fn tool_message() -> Message {
        Message {
            name: Some("get_weather".into()),
            ..Message::new("tool", r#"{"temp": 20}"#)
        }
    }

    /// The system message of the template for `effort`, with the date the
    /// rendering `out` holds (`strftime_now("%Y-%m-%d")`).
    fn system(out: &str, effort: &str, tools: bool) -> String {
        let at = out.find("Current date: ").expect("a date") + "Current date: ".len();
        let date = &out[at..at + 10];
        assert!(
            date.bytes().enumerate().all(|(i, b)| if i == 4 || i == 7 {
                b == b'-'
            } else {
                b.is_ascii_digit()
            }),
            "{date}"
        );
        format!(
            "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n\
             Knowledge cutoff: 2024-06\nCurrent date: {date}\n\nReasoning: {effort}\n\n\
             # Valid channels: analysis, commentary, final. Channel must be included for every message.{}<|end|>",
            if tools {
                "\nCalls to these tools must go to the commentary channel: 'functions'."
            } else {
                ""
            }
        )
    }

    /// The fixture's gpt-oss template with system, user, assistant (a call
    /// and a final answer), tool messages and a tool list, a reasoning
    /// effort, and the text llama.cpp's gpt-oss handler renders from them:
    /// the system message as the developer's instructions, the tools as a
    /// TypeScript namespace, the call on the commentary channel addressed
    /// to `functions.get_weather` with its arguments as JSON, the tool's
    /// reply as a JSON string, earlier reasoning dropped once a final
    /// answer follows.
    #[test]
    fn harmony_template_renders_as_llama_cpp() {
        let Some(t) = template() else { return };
        let tools = serde_json::json!([{"type": "function", "function": {
            "name": "get_weather", "description": "Get the weather",
            "parameters": {"type": "object", "properties": {
                "city": {"type": "string", "description": "City name"},
                "unit": {"type": "string", "enum": ["c", "f"]}},
                "required": ["city"]}}}]);
        let msgs = [
            Message::new("system", "You are terse."),
            Message::new("user", "What is the weather in Paris?"),
            call_message("Need the weather tool."),
            tool_message(),
            Message {
                reasoning_content: Some("Report it.".into()),
                ..Message::new("assistant", "It is 20 degrees.")
            },
            Message::new("user", "Thanks"),
        ];
        let mut kw = Kwargs::new();
        kw.insert("reasoning_effort".into(), "high".into());
        let out = t.render(&msgs, true, Some(&tools), Some(&kw)).unwrap();
        let want = system(&out, "high", true)
            + "<|start|>developer<|message|># Instructions\n\nYou are terse.\n\n# Tools\n\n\
               ## functions\n\nnamespace functions {\n\n// Get the weather\n\
               type get_weather = (_: {\n// City name\ncity: string,\nunit?: \"c\" | \"f\",\n\
               }) => any;\n\n} // namespace functions<|end|>"
            + "<|start|>user<|message|>What is the weather in Paris?<|end|>"
            + "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Paris\"}<|call|>"
            + "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>\"{\\\"temp\\\": 20}\"<|end|>"
            + "<|start|>assistant<|channel|>final<|message|>It is 20 degrees.<|end|>"
            + "<|start|>user<|message|>Thanks<|end|>"
            + "<|start|>assistant";
        assert_eq!(out, want);
    }

    /// The reasoning of a call not yet answered is shown as the analysis
    /// channel (llama.cpp gives it as `thinking`); without a generation
    /// prompt a closed final message ends with `<|end|>`, its reasoning
    /// shown; the effort defaults to medium and no developer message
    /// appears without instructions or tools.
    #[test]
    fn harmony_reasoning_and_endings_as_llama_cpp() {
        let Some(t) = template() else { return };
        let msgs = [
            Message::new("user", "What is the weather in Paris?"),
            call_message("Need the weather tool."),
            tool_message(),
        ];
        let out = t.render(&msgs, true, None, None).unwrap();
        let want = system(&out, "medium", false)
            + "<|start|>user<|message|>What is the weather in Paris?<|end|>"
            + "<|start|>assistant<|channel|>analysis<|message|>Need the weather tool.<|end|>"
            + "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Paris\"}<|call|>"
            + "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>\"{\\\"temp\\\": 20}\"<|end|>"
            + "<|start|>assistant";
        assert_eq!(out, want);
        let msgs = [
            Message::new("user", "Hi"),
            Message {
                reasoning_content: Some("Greet back.".into()),
                ..Message::new("assistant", "Hello!")
            },
        ];
        let out = t.render(&msgs, false, None, None).unwrap();
        let want = system(&out, "medium", false)
            + "<|start|>user<|message|>Hi<|end|>"
            + "<|start|>assistant<|channel|>analysis<|message|>Greet back.<|end|>"
            + "<|start|>assistant<|channel|>final<|message|>Hello!<|end|>";
        assert_eq!(out, want);
    }
}
