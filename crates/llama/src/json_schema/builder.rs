//! Composed grammars: rules and schemas added one by one into one grammar,
//! as a chat format's tool-call grammar is built.

use std::collections::HashMap;

use serde_json::Value;

use super::convert::Converter;
use super::error::SchemaError;
use super::parse::{self, is_local, resolve_pointer};

/// Options of [`build_grammar_with`].
#[derive(Debug, Clone, Copy, Default)]
pub struct GrammarOptions {
    /// `.` in schema patterns also matches line ends.
    pub dotall: bool,
}

/// Adds rules and schemas to one grammar (see [`build_grammar`]).
#[derive(Debug)]
pub struct GrammarBuilder {
    conv: Converter,
    registered: HashMap<String, Value>,
    errors: Vec<SchemaError>,
}

impl GrammarBuilder {
    /// Adds `name ::= rule` and returns the rule's name: `name` with
    /// characters outside `[a-zA-Z0-9-]` made `-`, and a number appended
    /// when another rule already has it with a different body.
    pub fn add_rule(&mut self, name: &str, rule: &str) -> String {
        self.conv.add_rule(name, rule)
    }

    /// Adds the rules of a JSON schema, its own rule named after `name`
    /// (`root` for the grammar's start), and returns that rule's name.
    pub fn add_schema(&mut self, name: &str, schema: &Value) -> Result<String, SchemaError> {
        let doc = parse::parse(schema, &self.registered)?;
        let name = if name == "root" { "" } else { name };
        self.conv.visit(&doc, &doc.root, name)
    }

    /// Collects the targets of the local `$ref`s in `schema`, resolved
    /// against `schema` itself, so that a later [`add_schema`](Self::add_schema)
    /// of a schema that embeds it (a tool's parameters inside a call object)
    /// finds them. A reference that points elsewhere or to nothing makes
    /// [`build_grammar`] fail with its error.
    pub fn resolve_refs(&mut self, schema: &mut Value) {
        let root: &Value = schema;
        let mut stack = vec![(root, "#".to_string())];
        while let Some((v, path)) = stack.pop() {
            match v {
                Value::Object(m) => {
                    if let Some(Value::String(r)) = m.get("$ref") {
                        if !is_local(r) {
                            self.errors.push(SchemaError::Ref {
                                path: path.clone(),
                                reference: r.clone(),
                                why: "is not supported: only references into the same document are"
                                    .into(),
                            });
                        } else if !self.registered.contains_key(r) {
                            match resolve_pointer(root, r, &path) {
                                Ok(t) => {
                                    self.registered.insert(r.clone(), t.clone());
                                }
                                Err(e) => self.errors.push(e),
                            }
                        }
                    }
                    for (k, x) in m {
                        stack.push((x, format!("{path}/{k}")));
                    }
                }
                Value::Array(a) => {
                    for (i, x) in a.iter().enumerate() {
                        stack.push((x, format!("{path}/{i}")));
                    }
                }
                _ => {}
            }
        }
    }
}

/// Builds a grammar from rules and schemas that `f` adds; returns its text,
/// or the first error `f` returned or a [`resolve_refs`](GrammarBuilder::resolve_refs)
/// met.
pub fn build_grammar(
    f: impl FnOnce(&mut GrammarBuilder) -> Result<(), SchemaError>,
) -> Result<String, SchemaError> {
    build_grammar_with(GrammarOptions::default(), f)
}

/// [`build_grammar`] with options.
pub fn build_grammar_with(
    options: GrammarOptions,
    f: impl FnOnce(&mut GrammarBuilder) -> Result<(), SchemaError>,
) -> Result<String, SchemaError> {
    let mut b = GrammarBuilder {
        conv: Converter::new(options.dotall),
        registered: HashMap::new(),
        errors: Vec::new(),
    };
    f(&mut b)?;
    if let Some(e) = b.errors.into_iter().next() {
        return Err(e);
    }
    Ok(b.conv.format_grammar())
}
