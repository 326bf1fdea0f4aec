//! Grammars that make a model write tool calls in its template's format:
//! from the first token for `tool_choice` `required` or a named function,
//! and lazily, from the format's opening marker on, for `auto`. The
//! arguments follow each tool's parameter schema (built with
//! [`crate::json_schema::build_grammar`]).

use serde_json::{json, Value};

use super::detect::ToolFormat;
use super::generic::answer_schema;
use super::pythonic;
use crate::grammar::GrammarTrigger;
use crate::json_schema::{build_grammar, gbnf_format_literal as lit, GrammarBuilder, SchemaError};

/// What the calls must be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallChoice<'a> {
    /// Calls may come, after the format's opening marker.
    Auto,
    /// The reply is one or more calls of any tool.
    Required,
    /// The reply is calls of this tool.
    Named(&'a str),
}

/// A grammar for a request's calls, with how it starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallGrammar {
    /// GBNF text.
    pub grammar: String,
    /// It starts at one of `triggers` rather than at the first token.
    pub lazy: bool,
    /// What starts a lazy grammar.
    pub triggers: Vec<GrammarTrigger>,
}

/// A tool's name and parameter schema.
fn functions<'a>(tools: &'a [Value], choice: CallChoice<'_>) -> Vec<(&'a str, Value)> {
    tools
        .iter()
        .filter_map(|t| {
            let f = t.get("function")?;
            let name = f.get("name")?.as_str()?;
            if let CallChoice::Named(n) = choice {
                if n != name {
                    return None;
                }
            }
            let params = match f.get("parameters") {
                Some(p @ Value::Object(o)) if !o.is_empty() => p.clone(),
                _ => json!({"type": "object", "properties": {}}),
            };
            Some((name, params))
        })
        .collect()
}

/// A string parameter written as raw text in an XML-style call: one of
/// its `enum` / `const` values, text of its `minLength` to `maxLength`
/// characters, or any text without a closing tag.
fn xml_string(b: &mut GrammarBuilder, name: &str, schema: &Value) -> String {
    let values: Vec<&str> = match (schema.get("enum"), schema.get("const")) {
        (Some(Value::Array(a)), _) => a.iter().filter_map(Value::as_str).collect(),
        (_, Some(Value::String(c))) => vec![c.as_str()],
        _ => Vec::new(),
    };
    if !values.is_empty() {
        let alts: Vec<String> = values.iter().map(|v| lit(v)).collect();
        return b.add_rule(name, &alts.join(" | "));
    }
    let min = schema.get("minLength").and_then(Value::as_u64);
    let max = schema.get("maxLength").and_then(Value::as_u64);
    match (min, max) {
        (None, None) => b.add_rule("xml-text", r#"( [^<] | "<" [^/] )*"#),
        (lo, Some(hi)) => b.add_rule(name, &format!("[^<]{{{},{hi}}}", lo.unwrap_or(0))),
        (Some(lo), None) => b.add_rule(name, &format!("[^<]{{{lo},}} ( [^<] | \"<\" [^/] )*")),
    }
}

/// One rule per tool built by `call` (given the builder, the tool's name
/// and the rule of its arguments), joined as alternatives.
fn alternatives(
    b: &mut GrammarBuilder,
    fns: &[(&str, Value)],
    call: &dyn Fn(&mut GrammarBuilder, &str, &str) -> String,
) -> Result<String, SchemaError> {
    let mut alts = Vec::new();
    for (name, params) in fns {
        let mut p = params.clone();
        b.resolve_refs(&mut p);
        let args = b.add_schema(&format!("{name}-args"), &p)?;
        let body = call(b, name, &args);
        alts.push(b.add_rule(&format!("{name}-call"), &body));
    }
    Ok(alts.join(" | "))
}

/// A call as a JSON object of `name_key` (the name as a constant) and
/// `args_key` (the parameters' schema), and extra members.
fn object_calls(
    b: &mut GrammarBuilder,
    fns: &[(&str, Value)],
    name_key: &str,
    args_key: &str,
    extra: &[(&str, Value)],
) -> Result<String, SchemaError> {
    let mut alts = Vec::new();
    for (name, params) in fns {
        let mut p = params.clone();
        b.resolve_refs(&mut p);
        let mut props = serde_json::Map::new();
        props.insert(name_key.into(), json!({"const": name}));
        props.insert(args_key.into(), p);
        let mut required = vec![name_key.to_string(), args_key.to_string()];
        for (k, v) in extra {
            props.insert((*k).into(), v.clone());
            required.push((*k).to_string());
        }
        let schema = json!({"type": "object", "properties": props, "required": required, "additionalProperties": false});
        alts.push(b.add_schema(&format!("{name}-call"), &schema)?);
    }
    Ok(alts.join(" | "))
}

/// Calls as Python function calls `name(key=value, ...)` with JSON
/// values (which LFM2's reader takes as Python literals): the required
/// parameters in the schema's order, then any of the optional ones.
fn python_calls(b: &mut GrammarBuilder, fns: &[(&str, Value)]) -> Result<String, SchemaError> {
    let mut alts = Vec::new();
    for (name, params) in fns {
        let props = params
            .get("properties")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let required: Vec<&str> = params
            .get("required")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let (mut req, mut opt) = (Vec::new(), Vec::new());
        for (k, schema) in &props {
            let mut s = schema.clone();
            b.resolve_refs(&mut s);
            let value = b.add_schema(&format!("{name}-{k}"), &s)?;
            let p = format!("{} {value}", lit(&format!("{k}=")));
            if required.contains(&k.as_str()) {
                req.push(p);
            } else {
                opt.push(p);
            }
        }
        let sep = lit(", ");
        let mut args = req.join(&format!(" {sep} "));
        if !opt.is_empty() {
            let any = format!("({})", opt.join(" | "));
            args = if req.is_empty() {
                format!("({any} ({sep} {any})*)?")
            } else {
                format!("{args} ({sep} {any})*")
            };
        }
        let body = format!("{} {args} {}", lit(&format!("{name}(")), lit(")"));
        alts.push(b.add_rule(&format!("{name}-call"), &body));
    }
    Ok(alts.join(" | "))
}

/// `one` once, or repeated with `sep` when calls may be parallel.
fn repeat(one: &str, sep: &str, parallel: bool) -> String {
    if parallel {
        format!("({one}) ({sep} ({one}))*")
    } else {
        format!("({one})")
    }
}

/// Text that does not hold `end`, then `end`: what precedes the calls
/// when the prompt left a reasoning block open.
fn until(end: &str) -> String {
    let mut alts = vec![format!(
        "[^{}]",
        escape_class(end.chars().next().unwrap_or('<'))
    )];
    let chars: Vec<char> = end.chars().collect();
    for k in 1..chars.len() {
        let prefix: String = chars[..k].iter().collect();
        alts.push(format!("{} [^{}]", lit(&prefix), escape_class(chars[k])));
    }
    format!("({})* {}", alts.join(" | "), lit(end))
}

fn escape_class(c: char) -> String {
    match c {
        '\\' | ']' | '[' | '^' | '-' => format!("\\{c}"),
        c => c.to_string(),
    }
}

/// The grammar of calls of `tools` in `format`, or `None` where the
/// format has none (content only). `thinking_open`: the prompt left a
/// reasoning block open, which a grammar from the first token lets the
/// model close first.
pub fn call_grammar(
    format: ToolFormat,
    tools: &[Value],
    choice: CallChoice<'_>,
    parallel: bool,
    thinking_open: bool,
) -> Result<Option<CallGrammar>, SchemaError> {
    let fns = functions(tools, choice);
    if fns.is_empty() || format == ToolFormat::ContentOnly {
        return Ok(None);
    }
    let lazy = choice == CallChoice::Auto && format != ToolFormat::Generic;
    let word = |w: &str| vec![GrammarTrigger::Word(w.to_string())];
    let mut triggers = Vec::new();
    let grammar = build_grammar(|b| {
        let ws = b.add_rule("tool-ws", r#"[ \t\n]{0,4}"#);
        let calls = match format {
            ToolFormat::ContentOnly => String::new(),
            ToolFormat::Generic => {
                let tools_only: Vec<Value> = fns
                    .iter()
                    .map(|(n, p)| json!({"type": "function", "function": {"name": n, "parameters": p}}))
                    .collect();
                let mut schema = answer_schema(&tools_only, parallel);
                if choice != CallChoice::Auto {
                    // Only the call branch.
                    schema = schema["anyOf"][0].clone();
                }
                b.resolve_refs(&mut schema);
                b.add_schema("generic-answer", &schema)?
            }
            ToolFormat::Hermes => {
                triggers = word("<tool_call>");
                let obj = object_calls(b, &fns, "name", "arguments", &[])?;
                let one = format!(
                    "{} {ws} ({obj}) {ws} {}",
                    lit("<tool_call>\n"),
                    lit("\n</tool_call>")
                );
                repeat(&one, &ws, parallel)
            }
            ToolFormat::QwenXml => {
                triggers = word("<tool_call>");
                let mut alts = Vec::new();
                for (name, params) in &fns {
                    let props = params
                        .get("properties")
                        .and_then(Value::as_object)
                        .cloned()
                        .unwrap_or_default();
                    let required: Vec<&str> = params
                        .get("required")
                        .and_then(Value::as_array)
                        .map(|a| a.iter().filter_map(Value::as_str).collect())
                        .unwrap_or_default();
                    let mut parts = Vec::new();
                    for (k, schema) in &props {
                        let value = if schema.get("type").and_then(Value::as_str) == Some("string")
                        {
                            xml_string(b, &format!("{name}-{k}"), schema)
                        } else {
                            let mut s = schema.clone();
                            b.resolve_refs(&mut s);
                            b.add_schema(&format!("{name}-{k}"), &s)?
                        };
                        let p = format!(
                            "{} {value} {}",
                            lit(&format!("<parameter={k}>\n")),
                            lit("\n</parameter>\n")
                        );
                        parts.push(if required.contains(&k.as_str()) {
                            p
                        } else {
                            format!("({p})?")
                        });
                    }
                    let body = format!(
                        "{} {} {}",
                        lit(&format!("<tool_call>\n<function={name}>\n")),
                        parts.join(" "),
                        lit("</function>\n</tool_call>")
                    );
                    alts.push(b.add_rule(&format!("{name}-call"), &body));
                }
                repeat(&alts.join(" | "), &ws, parallel)
            }
            ToolFormat::Llama3 { .. } => {
                triggers = vec![GrammarTrigger::PatternFull(
                    r#"\s*(\{\s*"name"[\s\S]*)"#.into(),
                )];
                object_calls(b, &fns, "name", "parameters", &[])?
            }
            ToolFormat::MistralNemo | ToolFormat::Granite => {
                let (marker, extra) = if format == ToolFormat::MistralNemo {
                    (
                        "[TOOL_CALLS]",
                        vec![(
                            "id",
                            json!({"type": "string", "pattern": "^[a-zA-Z0-9]{9}$"}),
                        )],
                    )
                } else {
                    ("<|tool_call|>", Vec::new())
                };
                triggers = word(marker);
                let obj = object_calls(b, &fns, "name", "arguments", &extra)?;
                format!(
                    "{} \"[\" {ws} {} {ws} \"]\"",
                    lit(marker),
                    repeat(&obj, &format!("{ws} \",\" {ws}"), parallel)
                )
            }
            ToolFormat::DeepseekR1 | ToolFormat::DeepseekV31 => {
                triggers = word("<｜tool▁calls▁begin｜>");
                let r1 = format == ToolFormat::DeepseekR1;
                let one = alternatives(b, &fns, &|_, name, args| {
                    if r1 {
                        format!(
                            "{} {args} {}",
                            lit(&format!(
                                "<｜tool▁call▁begin｜>function<｜tool▁sep｜>{name}\n```json\n"
                            )),
                            lit("\n```<｜tool▁call▁end｜>")
                        )
                    } else {
                        format!(
                            "{} {args} {}",
                            lit(&format!("<｜tool▁call▁begin｜>{name}<｜tool▁sep｜>")),
                            lit("<｜tool▁call▁end｜>")
                        )
                    }
                })?;
                format!(
                    "{} {} {}",
                    lit("<｜tool▁calls▁begin｜>"),
                    repeat(&one, "", parallel),
                    lit("<｜tool▁calls▁end｜>")
                )
            }
            ToolFormat::FunctionaryV31 => {
                triggers = word("<function=");
                let one = alternatives(b, &fns, &|_, name, args| {
                    format!(
                        "{} {args} {}",
                        lit(&format!("<function={name}>")),
                        lit("</function>")
                    )
                })?;
                repeat(&one, "", parallel)
            }
            ToolFormat::FunctionaryV32 => {
                let names: Vec<String> = fns.iter().map(|(n, _)| regex::escape(n)).collect();
                triggers = vec![GrammarTrigger::Pattern(format!(
                    r"(?:^|>>>)((?:{})\n)",
                    names.join("|")
                ))];
                let first = alternatives(b, &fns, &|_, name, args| {
                    format!("{} {args}", lit(&format!("{name}\n")))
                })?;
                if parallel {
                    format!("({first}) ({} ({first}))*", lit(">>>"))
                } else {
                    format!("({first})")
                }
            }
            ToolFormat::Lfm2 => {
                triggers = word(pythonic::OPEN);
                let one = python_calls(b, &fns)?;
                format!(
                    "{} {} {}",
                    lit(&format!("{}[", pythonic::OPEN)),
                    repeat(&one, "\", \"", parallel),
                    lit(&format!("]{}", pythonic::CLOSE))
                )
            }
            ToolFormat::GptOss => {
                triggers = word("<|channel|>commentary to=functions.");
                let one = alternatives(b, &fns, &|_, name, args| {
                    format!(
                        "{} ({})? {} {args}",
                        lit(&format!("<|channel|>commentary to=functions.{name}")),
                        lit(" <|constrain|>json"),
                        lit("<|message|>")
                    )
                })?;
                if choice == CallChoice::Auto {
                    format!("({one})")
                } else {
                    // The reply may reason first.
                    let analysis = format!(
                        "({} {} {})?",
                        lit("<|channel|>analysis<|message|>"),
                        until("<|end|>"),
                        lit("<|start|>assistant")
                    );
                    format!("{analysis} ({one})")
                }
            }
        };
        let root = if thinking_open && !lazy && format != ToolFormat::GptOss {
            format!("{} {ws} {calls}", until("</think>"))
        } else {
            calls
        };
        b.add_rule("root", &root);
        Ok(())
    })?;
    Ok(Some(CallGrammar {
        grammar,
        lazy,
        triggers: if lazy { triggers } else { Vec::new() },
    }))
}
