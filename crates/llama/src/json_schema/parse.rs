//! Reading a JSON schema into [`Node`]s. The keyword that decides a node's
//! kind is the one llama.cpp's reader picks (`$ref`, then `oneOf`/`anyOf`, a
//! `type` array, `const`, `enum`, then `type` and the structural keywords);
//! the other keywords of the node are checked by [`keywords::check`].

use std::collections::{BTreeMap, HashMap};

use serde_json::{Map, Value};

use super::error::SchemaError;
use super::keywords::{self, Types, ALL, ARR, BOOL, NULL, NUM, OBJ, STR};
use super::schema::{Document, Node, Property, StringFormat};

/// Deepest nesting of schemas (through `$ref`s too) that is read.
pub const MAX_DEPTH: usize = 100;

/// Reads `root` as a schema document. `registered` holds `$ref` targets
/// collected beforehand (see `GrammarBuilder::resolve_refs`); other local
/// references are resolved against `root`.
pub fn parse(root: &Value, registered: &HashMap<String, Value>) -> Result<Document, SchemaError> {
    let mut p = Parser {
        root,
        registered,
        refs: BTreeMap::new(),
        depth: 0,
    };
    let node = p.node(root, "#")?;
    let refs = p
        .refs
        .into_iter()
        .map(|(k, v)| (k, v.unwrap_or(Node::Any)))
        .collect();
    Ok(Document { root: node, refs })
}

struct Parser<'a> {
    root: &'a Value,
    registered: &'a HashMap<String, Value>,
    /// Targets by reference; `None` while the target is being read.
    refs: BTreeMap<String, Option<Node>>,
    depth: usize,
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Looks up a JSON pointer fragment (`/a/b/0`) in `root`.
pub fn resolve_pointer<'v>(
    root: &'v Value,
    reference: &str,
    path: &str,
) -> Result<&'v Value, SchemaError> {
    let bad = |why: String| SchemaError::Ref {
        path: path.to_string(),
        reference: reference.to_string(),
        why,
    };
    let fragment = &reference[1..];
    let mut target = root;
    for token in fragment.split('/').skip(1) {
        let token = token.replace("~1", "/").replace("~0", "~");
        target = match target {
            Value::Object(m) if m.contains_key(&token) => &m[&token],
            Value::Array(a) => match token.parse::<usize>() {
                Ok(i) if i < a.len() => &a[i],
                _ => return Err(bad(format!("cannot be resolved: {token} is out of range"))),
            },
            _ => return Err(bad(format!("cannot be resolved: {token} not found"))),
        };
    }
    Ok(target)
}

/// Whether `reference` points into the same document.
pub fn is_local(reference: &str) -> bool {
    reference == "#" || reference.starts_with("#/")
}

impl Parser<'_> {
    fn node(&mut self, schema: &Value, path: &str) -> Result<Node, SchemaError> {
        if self.depth >= MAX_DEPTH {
            return Err(SchemaError::TooDeep {
                path: path.to_string(),
                limit: MAX_DEPTH,
            });
        }
        self.depth += 1;
        let r = self.node_inner(schema, path);
        self.depth -= 1;
        r
    }

    fn node_inner(&mut self, schema: &Value, path: &str) -> Result<Node, SchemaError> {
        let s = match schema {
            Value::Object(s) => s,
            Value::Bool(true) => return Ok(Node::Any),
            other => {
                return Err(SchemaError::NotAnObject {
                    path: path.to_string(),
                    found: if other.is_boolean() {
                        "false (a schema no value fits)"
                    } else {
                        type_name(other)
                    },
                })
            }
        };
        if let Some(r) = s.get("$ref") {
            keywords::check(s, path, &["$ref"], ALL, "a $ref")?;
            return self.reference(r, path);
        }
        if s.contains_key("oneOf") || s.contains_key("anyOf") {
            let key = if s.contains_key("oneOf") {
                "oneOf"
            } else {
                "anyOf"
            };
            keywords::check(s, path, &[key], ALL, &format!("an {key}"))?;
            let alts = self.list(&s[key], &format!("{path}/{key}"), key)?;
            return Ok(Node::AnyOf(alts));
        }
        let ty = s.get("type").cloned().unwrap_or(Value::Null);
        if let Value::Array(types) = &ty {
            if types.is_empty() {
                return Err(SchemaError::invalid(path, "type", "must not be empty"));
            }
            let mut alts = Vec::with_capacity(types.len());
            for (i, t) in types.iter().enumerate() {
                let mut alt = s.clone();
                alt.insert("type".into(), t.clone());
                alts.push(self.node(&Value::Object(alt), &format!("{path}/type/{i}"))?);
            }
            return Ok(Node::AnyOf(alts));
        }
        if let Some(c) = s.get("const") {
            keywords::check(s, path, &["const", "type"], ALL, "a const")?;
            return Ok(Node::Const(c.clone()));
        }
        if let Some(e) = s.get("enum") {
            keywords::check(s, path, &["enum", "type"], ALL, "an enum")?;
            return match e {
                Value::Array(values) if !values.is_empty() => Ok(Node::Enum(values.clone())),
                _ => Err(SchemaError::invalid(
                    path,
                    "enum",
                    "must be a non-empty array",
                )),
            };
        }
        let type_name = match &ty {
            Value::Null => "",
            Value::String(t) => t.as_str(),
            _ => {
                return Err(SchemaError::invalid(
                    path,
                    "type",
                    "must be a string or an array of strings",
                ))
            }
        };
        let has_properties = s.contains_key("properties")
            || s.get("additionalProperties")
                .is_some_and(|a| *a != Value::Bool(true));
        match type_name {
            "" => {
                if has_properties {
                    self.object(s, path)
                } else if s.contains_key("allOf") {
                    self.all_of(s, path)
                } else if s.contains_key("items") || s.contains_key("prefixItems") {
                    self.array(s, path)
                } else if s.contains_key("pattern")
                    || s.contains_key("minLength")
                    || s.contains_key("maxLength")
                    || known_format(s)
                {
                    self.string(s, path)
                } else {
                    keywords::check(s, path, &[], ALL, "any value")?;
                    Ok(Node::Any)
                }
            }
            "object" if !has_properties && s.contains_key("allOf") => self.all_of(s, path),
            "object" => self.object(s, path),
            "string" if s.contains_key("allOf") => {
                Err(SchemaError::unsupported(path, "allOf", "for a string"))
            }
            "string" => self.string(s, path),
            "array" => self.array(s, path),
            "integer" => self.integer(s, path),
            "number" => self.simple(s, path, Node::Number, NUM, "a number"),
            "boolean" => self.simple(s, path, Node::Boolean, BOOL, "a boolean"),
            "null" => self.simple(s, path, Node::Null, NULL, "null"),
            other => Err(SchemaError::invalid(
                path,
                "type",
                format!("names an unknown type '{other}'"),
            )),
        }
    }

    fn simple(
        &mut self,
        s: &Map<String, Value>,
        path: &str,
        node: Node,
        produces: Types,
        kind: &str,
    ) -> Result<Node, SchemaError> {
        keywords::check(s, path, &["type"], produces, kind)?;
        Ok(node)
    }

    fn list(&mut self, v: &Value, path: &str, key: &str) -> Result<Vec<Node>, SchemaError> {
        match v {
            Value::Array(a) if !a.is_empty() => a
                .iter()
                .enumerate()
                .map(|(i, x)| self.node(x, &format!("{path}/{i}")))
                .collect(),
            Value::Array(_) => Err(SchemaError::invalid(path, key, "must not be empty")),
            _ => Err(SchemaError::invalid(
                path,
                key,
                "must be an array of schemas",
            )),
        }
    }

    fn reference(&mut self, r: &Value, path: &str) -> Result<Node, SchemaError> {
        let Value::String(r) = r else {
            return Err(SchemaError::invalid(path, "$ref", "must be a string"));
        };
        if !is_local(r) {
            return Err(SchemaError::Ref {
                path: path.to_string(),
                reference: r.clone(),
                why: "is not supported: only references into the same document are".into(),
            });
        }
        if !self.refs.contains_key(r) {
            // Reserved first, so that a cycle back to this reference stops.
            self.refs.insert(r.clone(), None);
            let target = match self.registered.get(r) {
                Some(t) => t.clone(),
                None => resolve_pointer(self.root, r, path)?.clone(),
            };
            let node = self.node(&target, r)?;
            self.refs.insert(r.clone(), Some(node));
        }
        Ok(Node::Ref(r.clone()))
    }

    fn all_of(&mut self, s: &Map<String, Value>, path: &str) -> Result<Node, SchemaError> {
        keywords::check(s, path, &["allOf", "type"], ALL, "an allOf")?;
        let children = self.list(&s["allOf"], &format!("{path}/allOf"), "allOf")?;
        Ok(Node::AllOf {
            children,
            path: format!("{path}/allOf"),
        })
    }

    fn object(&mut self, s: &Map<String, Value>, path: &str) -> Result<Node, SchemaError> {
        keywords::check(
            s,
            path,
            &["type", "properties", "required", "additionalProperties"],
            OBJ,
            "an object",
        )?;
        let mut required: Vec<&str> = Vec::new();
        match s.get("required") {
            None => {}
            Some(Value::Array(a)) => {
                for name in a {
                    match name.as_str() {
                        Some(n) => required.push(n),
                        None => {
                            return Err(SchemaError::invalid(
                                path,
                                "required",
                                "must be an array of strings",
                            ))
                        }
                    }
                }
            }
            Some(_) => {
                return Err(SchemaError::invalid(
                    path,
                    "required",
                    "must be an array of strings",
                ))
            }
        }
        let mut properties = Vec::new();
        match s.get("properties") {
            None => {}
            Some(Value::Object(props)) => {
                for (name, prop) in props {
                    let schema = self.node(prop, &format!("{path}/properties/{name}"))?;
                    properties.push(Property {
                        name: name.clone(),
                        schema,
                        required: required.contains(&name.as_str()),
                    });
                }
            }
            Some(_) => {
                return Err(SchemaError::invalid(
                    path,
                    "properties",
                    "must be an object",
                ))
            }
        }
        if let Some(missing) = required
            .iter()
            .find(|r| !properties.iter().any(|p| p.name == **r))
        {
            return Err(SchemaError::unsupported(
                path,
                "required",
                format!("it names '{missing}', which 'properties' does not define"),
            ));
        }
        let additional = match s.get("additionalProperties") {
            Some(Value::Bool(true)) => Some(Box::new(Node::Any)),
            Some(Value::Bool(false)) => None,
            Some(a @ Value::Object(_)) => Some(Box::new(
                self.node(a, &format!("{path}/additionalProperties"))?,
            )),
            Some(_) => {
                return Err(SchemaError::invalid(
                    path,
                    "additionalProperties",
                    "must be a boolean or a schema",
                ))
            }
            // A bare {"type": "object"} is any object; with properties, the
            // object has those alone.
            None if !s.contains_key("properties") => Some(Box::new(Node::Any)),
            None => None,
        };
        Ok(Node::Object {
            properties,
            additional,
        })
    }

    fn array(&mut self, s: &Map<String, Value>, path: &str) -> Result<Node, SchemaError> {
        let min_items = count(s, "minItems", path)?;
        let max_items = count(s, "maxItems", path)?;
        // A tuple: `items` as an array (older drafts), or `prefixItems`
        // (with no `items`, or `items: false` closing it).
        let tuple_key = match (s.get("items"), s.get("prefixItems")) {
            (Some(Value::Array(_)), _) => Some("items"),
            (None | Some(Value::Bool(false)), Some(_)) => Some("prefixItems"),
            _ => None,
        };
        if let Some(key) = tuple_key {
            let mut honoured = vec!["type", key, "minItems", "maxItems"];
            if key == "prefixItems" && s.contains_key("items") {
                honoured.push("items");
            }
            if s.get("additionalItems") == Some(&Value::Bool(false)) {
                honoured.push("additionalItems");
            }
            keywords::check(s, path, &honoured, ARR, "a tuple")?;
            let Value::Array(items) = &s[key] else {
                return Err(SchemaError::invalid(
                    path,
                    key,
                    "must be an array of schemas",
                ));
            };
            let n = items.len() as u32;
            if min_items.unwrap_or(0) > n {
                return Err(SchemaError::unsupported(
                    path,
                    "minItems",
                    format!("more items than the {n} of the tuple"),
                ));
            }
            if max_items.is_some_and(|m| m < n) {
                return Err(SchemaError::unsupported(
                    path,
                    "maxItems",
                    format!("fewer items than the {n} of the tuple"),
                ));
            }
            let nodes = items
                .iter()
                .enumerate()
                .map(|(i, x)| self.node(x, &format!("{path}/{key}/{i}")))
                .collect::<Result<_, _>>()?;
            return Ok(Node::Tuple(nodes));
        }
        keywords::check(
            s,
            path,
            &["type", "items", "minItems", "maxItems"],
            ARR,
            "an array",
        )?;
        let items = match s.get("items") {
            Some(items) => self.node(items, &format!("{path}/items"))?,
            None => Node::Any,
        };
        if let (Some(lo), Some(hi)) = (min_items, max_items) {
            if lo > hi {
                return Err(SchemaError::invalid(
                    path,
                    "minItems",
                    "is greater than maxItems",
                ));
            }
        }
        Ok(Node::Array {
            items: Box::new(items),
            min_items: min_items.unwrap_or(0),
            max_items: max_items.filter(|&m| m != i32::MAX as u32),
        })
    }

    fn string(&mut self, s: &Map<String, Value>, path: &str) -> Result<Node, SchemaError> {
        keywords::check(
            s,
            path,
            &["type", "pattern", "format", "minLength", "maxLength"],
            STR,
            "a string",
        )?;
        let pattern = match s.get("pattern") {
            None => None,
            Some(Value::String(p)) => Some(p.clone()),
            Some(_) => return Err(SchemaError::invalid(path, "pattern", "must be a string")),
        };
        let format = match s.get("format") {
            None => None,
            Some(Value::String(f)) => match format_of(f) {
                Some(f) => Some(f),
                None => {
                    return Err(SchemaError::unsupported(
                        path,
                        "format",
                        format!("'{f}' has no grammar (date, time, date-time and uuid have)"),
                    ))
                }
            },
            Some(_) => return Err(SchemaError::invalid(path, "format", "must be a string")),
        };
        let min_length = count(s, "minLength", path)?;
        let max_length = count(s, "maxLength", path)?;
        let lengths = min_length.is_some_and(|m| m > 0) || max_length.is_some();
        let length_key = if min_length.is_some_and(|m| m > 0) {
            "minLength"
        } else {
            "maxLength"
        };
        if pattern.is_some() {
            if format.is_some() {
                return Err(SchemaError::unsupported(
                    path,
                    "format",
                    "together with 'pattern'",
                ));
            }
            if lengths {
                return Err(SchemaError::unsupported(
                    path,
                    length_key,
                    "together with 'pattern'",
                ));
            }
        } else if format.is_some() && lengths {
            return Err(SchemaError::unsupported(
                path,
                length_key,
                "together with 'format'",
            ));
        }
        if let (Some(lo), Some(hi)) = (min_length, max_length) {
            if lo > hi {
                return Err(SchemaError::invalid(
                    path,
                    "minLength",
                    "is greater than maxLength",
                ));
            }
        }
        if let Some(p) = &pattern {
            // Translated once here so that an error names the schema path.
            super::convert::Converter::new(false).visit_pattern(p, "pattern", path)?;
        }
        Ok(Node::String {
            pattern,
            format,
            min_length: min_length.unwrap_or(0),
            max_length: max_length.filter(|&m| m != i32::MAX as u32),
        })
    }

    fn integer(&mut self, s: &Map<String, Value>, path: &str) -> Result<Node, SchemaError> {
        keywords::check(
            s,
            path,
            &[
                "type",
                "minimum",
                "maximum",
                "exclusiveMinimum",
                "exclusiveMaximum",
            ],
            NUM,
            "an integer",
        )?;
        let mut minimum = i64::MIN;
        let mut maximum = i64::MAX;
        if s.contains_key("minimum") {
            minimum = minimum.max(bound(s, "minimum", path, true)?);
        }
        if s.contains_key("exclusiveMinimum") {
            let b = bound(s, "exclusiveMinimum", path, false)?;
            minimum = minimum.max(b.checked_add(1).ok_or_else(|| {
                SchemaError::invalid(path, "exclusiveMinimum", "is out of range")
            })?);
        }
        if s.contains_key("maximum") {
            maximum = maximum.min(bound(s, "maximum", path, false)?);
        }
        if s.contains_key("exclusiveMaximum") {
            let b = bound(s, "exclusiveMaximum", path, true)?;
            maximum = maximum.min(b.checked_sub(1).ok_or_else(|| {
                SchemaError::invalid(path, "exclusiveMaximum", "is out of range")
            })?);
        }
        if maximum == i64::MIN {
            return Err(SchemaError::invalid(path, "maximum", "is out of range"));
        }
        if minimum > maximum {
            return Err(SchemaError::invalid(
                path,
                "minimum",
                "is greater than the maximum: no integer fits",
            ));
        }
        Ok(Node::Integer { minimum, maximum })
    }
}

fn format_of(f: &str) -> Option<StringFormat> {
    match f {
        "date" => Some(StringFormat::Date),
        "time" => Some(StringFormat::Time),
        "date-time" => Some(StringFormat::DateTime),
        "uuid" | "uuid1" | "uuid2" | "uuid3" | "uuid4" | "uuid5" => Some(StringFormat::Uuid),
        _ => None,
    }
}

fn known_format(s: &Map<String, Value>) -> bool {
    s.get("format")
        .and_then(Value::as_str)
        .is_some_and(|f| format_of(f).is_some())
}

/// A non-negative integer keyword (`minItems`, `maxLength`, ...).
fn count(s: &Map<String, Value>, key: &str, path: &str) -> Result<Option<u32>, SchemaError> {
    match s.get(key) {
        None => Ok(None),
        Some(v) => match v.as_u64() {
            Some(n) if n <= i32::MAX as u64 => Ok(Some(n as u32)),
            Some(_) => Err(SchemaError::invalid(path, key, "is too large")),
            None => Err(SchemaError::invalid(
                path,
                key,
                "must be a non-negative integer",
            )),
        },
    }
}

/// An integer bound; a fractional one is rounded towards the integers it
/// admits (`round_up` for lower bounds).
fn bound(
    s: &Map<String, Value>,
    key: &str,
    path: &str,
    round_up: bool,
) -> Result<i64, SchemaError> {
    let v = &s[key];
    if let Some(i) = v.as_i64() {
        return Ok(i);
    }
    if v.as_u64().is_some() {
        // Above every i64: no bound below it, or no integer above it.
        return if round_up {
            Err(SchemaError::invalid(path, key, "is out of range"))
        } else {
            Ok(i64::MAX)
        };
    }
    let Some(d) = v.as_f64() else {
        return Err(SchemaError::invalid(path, key, "must be a number"));
    };
    let r = if round_up { d.ceil() } else { d.floor() };
    if !(-9.2e18..=9.2e18).contains(&r) {
        return Err(SchemaError::invalid(path, key, "is out of range"));
    }
    Ok(r as i64)
}
