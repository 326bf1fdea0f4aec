//! The tool fields of a chat request: `tools`, `tool_choice`,
//! `parallel_tool_calls`, and the `tool_calls` of assistant messages, each
//! checked so that an error names the field at fault.

use llama::chat::tools::ToolCall;
use serde_json::Value;

use crate::error::ApiError;
use crate::request::Body;

/// What `tool_choice` asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model may call tools or answer.
    Auto,
    /// The model answers in text; calls are not read.
    None,
    /// The model must call at least one tool.
    Required,
    /// The model must call this function.
    Named(String),
}

/// The tools of a request.
#[derive(Clone, Debug)]
pub struct ToolRequest {
    /// `tools`, as given (each `{"type": "function", "function": {...}}`).
    pub tools: Vec<Value>,
    /// `tool_choice` (default auto).
    pub choice: ToolChoice,
    /// `parallel_tool_calls` (default false, as llama.cpp).
    pub parallel: bool,
}

fn bad(field: &str, what: impl Into<String>) -> ApiError {
    ApiError::field(field, what)
}

/// The name of a tool: a non-empty string of letters, digits, `_`, `-`
/// and `.` (OpenAI's rule, with dots as some templates' built-in tools).
fn valid_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 64
        && n.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c))
}

/// Reads `tools`, `tool_choice` and `parallel_tool_calls`; `None` when
/// the request has no tools.
pub fn tool_request(b: &Body) -> Result<Option<ToolRequest>, ApiError> {
    let parallel = b.bool("parallel_tool_calls")?.unwrap_or(false);
    let tools = match b.get("tools") {
        None => Vec::new(),
        Some(Value::Array(a)) => a.clone(),
        Some(_) => return Err(bad("tools", "'tools' must be an array of tools")),
    };
    let mut names = Vec::with_capacity(tools.len());
    for (i, t) in tools.iter().enumerate() {
        let f = |k: &str| format!("tools[{i}]{k}");
        let Some(o) = t.as_object() else {
            return Err(bad(&f(""), format!("'{}' must be an object", f(""))));
        };
        match o.get("type").and_then(Value::as_str) {
            Some("function") => {}
            Some(other) => {
                return Err(bad(
                    &f(".type"),
                    format!("tool type '{other}' is not supported: only 'function'"),
                ))
            }
            None => {
                return Err(bad(
                    &f(".type"),
                    format!("'{}' must be \"function\"", f(".type")),
                ))
            }
        }
        let Some(func) = o.get("function").and_then(Value::as_object) else {
            return Err(bad(
                &f(".function"),
                format!("'{}' must be an object", f(".function")),
            ));
        };
        let name = match func.get("name") {
            None | Some(Value::Null) => {
                return Err(bad(
                    &f(".function.name"),
                    format!("'{}' is required", f(".function.name")),
                ))
            }
            Some(Value::String(n)) if valid_name(n) => n.clone(),
            Some(_) => {
                return Err(bad(
                    &f(".function.name"),
                    format!(
                        "'{}' must be 1 to 64 letters, digits, '_', '-' or '.'",
                        f(".function.name")
                    ),
                ))
            }
        };
        if names.contains(&name) {
            return Err(bad(
                &f(".function.name"),
                format!("tool '{name}' is listed twice"),
            ));
        }
        match func.get("parameters") {
            None | Some(Value::Null) | Some(Value::Object(_)) => {}
            Some(_) => {
                return Err(bad(
                    &f(".function.parameters"),
                    format!(
                        "'{}' must be a JSON schema object",
                        f(".function.parameters")
                    ),
                ))
            }
        }
        if func
            .get("description")
            .is_some_and(|d| !d.is_string() && !d.is_null())
        {
            return Err(bad(
                &f(".function.description"),
                format!("'{}' must be a string", f(".function.description")),
            ));
        }
        names.push(name);
    }
    let choice = match b.get("tool_choice") {
        None => ToolChoice::Auto,
        Some(Value::String(s)) => match s.as_str() {
            "auto" => ToolChoice::Auto,
            "none" => ToolChoice::None,
            "required" => ToolChoice::Required,
            o => {
                return Err(bad(
                    "tool_choice",
                    format!("unknown tool_choice '{o}': expected auto, none, required or {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}"),
                ))
            }
        },
        Some(Value::Object(o)) => {
            let name = o
                .get("function")
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .filter(|_| o.get("type").and_then(Value::as_str) == Some("function"))
                .ok_or_else(|| {
                    bad(
                        "tool_choice",
                        "'tool_choice' must be auto, none, required or {\"type\": \"function\", \"function\": {\"name\": ...}}",
                    )
                })?;
            if !names.iter().any(|n| n == name) {
                return Err(bad(
                    "tool_choice",
                    format!("tool_choice names function '{name}', which is not in 'tools'"),
                ));
            }
            ToolChoice::Named(name.to_string())
        }
        Some(_) => {
            return Err(bad(
                "tool_choice",
                "'tool_choice' must be a string or an object",
            ))
        }
    };
    if tools.is_empty() {
        return match choice {
            ToolChoice::Required | ToolChoice::Named(_) => Err(bad(
                "tool_choice",
                "tool_choice asks for a tool call, but the request lists no 'tools'",
            )),
            _ => Ok(None),
        };
    }
    Ok(Some(ToolRequest {
        tools,
        choice,
        parallel,
    }))
}

/// The `tool_calls` of an assistant message (`field` names them):
/// `[{"id", "type": "function", "function": {"name", "arguments"}}]`,
/// arguments as JSON text or an object.
pub fn message_tool_calls(v: &Value, field: &str) -> Result<Vec<ToolCall>, ApiError> {
    let Some(a) = v.as_array() else {
        return Err(bad(field, format!("'{field}' must be an array")));
    };
    a.iter()
        .enumerate()
        .map(|(j, c)| {
            let f = |k: &str| format!("{field}[{j}]{k}");
            let func = c
                .get("function")
                .and_then(Value::as_object)
                .ok_or_else(|| {
                    bad(
                        &f(".function"),
                        format!("'{}' must be an object", f(".function")),
                    )
                })?;
            let name = func
                .get("name")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
                .ok_or_else(|| {
                    bad(
                        &f(".function.name"),
                        format!("'{}' must be a non-empty string", f(".function.name")),
                    )
                })?;
            let arguments = match func.get("arguments") {
                None | Some(Value::Null) => "{}".to_string(),
                Some(Value::String(s)) => s.clone(),
                Some(o @ Value::Object(_)) => o.to_string(),
                Some(_) => {
                    return Err(bad(
                        &f(".function.arguments"),
                        format!(
                            "'{}' must be a JSON string or an object",
                            f(".function.arguments")
                        ),
                    ))
                }
            };
            let id = match c.get("id") {
                None | Some(Value::Null) => String::new(),
                Some(Value::String(s)) => s.clone(),
                Some(_) => return Err(bad(&f(".id"), format!("'{}' must be a string", f(".id")))),
            };
            Ok(ToolCall {
                name: name.to_string(),
                arguments,
                id,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn body(v: Value) -> Body {
        Body(v.as_object().unwrap().clone())
    }

    fn err(v: Value) -> String {
        tool_request(&body(v)).unwrap_err().param.unwrap()
    }

    #[test]
    fn tools_and_choices() {
        let tools = json!([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]);
        let r = tool_request(&body(json!({"tools": tools, "tool_choice": {"type": "function", "function": {"name": "get_weather"}}})))
            .unwrap()
            .unwrap();
        assert_eq!(r.choice, ToolChoice::Named("get_weather".into()));
        assert!(tool_request(&body(json!({}))).unwrap().is_none());
        assert_eq!(err(json!({"tools": {}})), "tools");
        assert_eq!(
            err(json!({"tools": [{"type": "function", "function": {}}]})),
            "tools[0].function.name"
        );
        assert_eq!(
            err(json!({"tools": [{"type": "function", "function": {"name": ""}}]})),
            "tools[0].function.name"
        );
        assert_eq!(
            err(json!({"tools": [{"type": "retrieval"}]})),
            "tools[0].type"
        );
        assert_eq!(
            err(
                json!({"tools": [{"type": "function", "function": {"name": "f", "parameters": 3}}]})
            ),
            "tools[0].function.parameters"
        );
        assert_eq!(
            err(
                json!({"tools": tools, "tool_choice": {"type": "function", "function": {"name": "nope"}}})
            ),
            "tool_choice"
        );
        assert_eq!(
            err(json!({"tools": tools, "tool_choice": "sometimes"})),
            "tool_choice"
        );
        assert_eq!(err(json!({"tool_choice": "required"})), "tool_choice");
        assert_eq!(
            err(json!({"tools": tools, "parallel_tool_calls": "yes"})),
            "parallel_tool_calls"
        );
    }

    #[test]
    fn message_calls_take_text_or_object_arguments() {
        let c = message_tool_calls(
            &json!([{"id": "a", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}},
                    {"type": "function", "function": {"name": "g", "arguments": "{\"y\": 2}"}}]),
            "messages[1].tool_calls",
        )
        .unwrap();
        assert_eq!(c[0].arguments, r#"{"x":1}"#);
        assert_eq!(c[1].arguments, r#"{"y": 2}"#);
        let e =
            message_tool_calls(&json!([{"function": {}}]), "messages[1].tool_calls").unwrap_err();
        assert_eq!(
            e.param.as_deref(),
            Some("messages[1].tool_calls[0].function.name")
        );
    }
}
