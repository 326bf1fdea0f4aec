//! The converter: schema nodes to named GBNF rules, with llama.cpp's rule
//! names, bodies and order (rules sorted by name), so that a schema gives
//! the same grammar text.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::Value;

use super::error::SchemaError;
use super::int_range::int_range;
use super::literal::{format_literal, json_dump};
use super::not_strings::not_strings;
use super::primitives::{self, Builtin, SPACE_RULE};
use super::repetition::build_repetition;
use super::schema::{Document, Node, StringFormat};

/// Rules being built, by name.
#[derive(Debug)]
pub struct Converter {
    /// `.` in patterns also matches line ends.
    pub(super) dotall: bool,
    rules: BTreeMap<String, String>,
    refs_being_resolved: HashSet<String>,
}

/// `name` with every run of characters outside `[a-zA-Z0-9-]` made one `-`.
fn rule_name_of(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut in_run = false;
    for c in name.chars() {
        if c.is_ascii_alphanumeric() || c == '-' {
            out.push(c);
            in_run = false;
        } else if !in_run {
            out.push('-');
            in_run = true;
        }
    }
    out
}

fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}-{name}")
    }
}

impl Converter {
    /// A converter holding only the whitespace rule.
    pub fn new(dotall: bool) -> Self {
        let mut rules = BTreeMap::new();
        rules.insert("space".to_string(), SPACE_RULE.to_string());
        Converter {
            dotall,
            rules,
            refs_being_resolved: HashSet::new(),
        }
    }

    /// Adds rule `name ::= rule` and returns the name it got: the name made
    /// safe, with a number appended when another rule has it.
    pub fn add_rule(&mut self, name: &str, rule: &str) -> String {
        let esc = rule_name_of(name);
        match self.rules.get(&esc) {
            None => {
                self.rules.insert(esc.clone(), rule.to_string());
                return esc;
            }
            Some(r) if r == rule => return esc,
            Some(_) => {}
        }
        let mut i = 0;
        loop {
            let key = format!("{esc}{i}");
            match self.rules.get(&key) {
                Some(r) if r != rule => i += 1,
                _ => {
                    self.rules.insert(key.clone(), rule.to_string());
                    return key;
                }
            }
        }
    }

    fn add_builtin(&mut self, name: &str, rule: Builtin) -> String {
        let n = self.add_rule(name, rule.content);
        for dep in rule.deps {
            let Some(dep_rule) =
                primitives::primitive(dep).or_else(|| primitives::string_format(dep))
            else {
                continue;
            };
            if !self.rules.contains_key(*dep) {
                self.add_builtin(dep, dep_rule);
            }
        }
        n
    }

    fn add_primitive(&mut self, name: &str, which: &str) -> String {
        let rule = primitives::primitive(which).expect("a built-in primitive");
        self.add_builtin(name, rule)
    }

    fn visit_primitive(&mut self, rule_name: &str, ty: &str) -> String {
        let name = if rule_name == "root" { "root" } else { ty };
        self.add_primitive(name, ty)
    }

    /// The whole grammar: one `name ::= rule` line per rule, by name.
    pub fn format_grammar(&self) -> String {
        let mut out = String::new();
        for (k, v) in &self.rules {
            out.push_str(k);
            out.push_str(" ::= ");
            out.push_str(v);
            out.push('\n');
        }
        out
    }

    /// Adds the rules of `node` (of `doc`) under `name` (empty: `root`) and
    /// returns the name of its rule.
    pub fn visit(
        &mut self,
        doc: &Document,
        node: &Node,
        name: &str,
    ) -> Result<String, SchemaError> {
        let rule_name = if primitives::is_reserved(name) {
            format!("{name}-")
        } else if name.is_empty() {
            "root".to_string()
        } else {
            name.to_string()
        };
        let sub_name = if name.is_empty() {
            String::new()
        } else {
            format!("{name}-")
        };
        Ok(match node {
            Node::Ref(r) => {
                let target = self.resolve_ref(doc, r)?;
                self.add_rule(&rule_name, &target)
            }
            Node::AnyOf(alts) => {
                let mut rules = Vec::with_capacity(alts.len());
                for (i, alt) in alts.iter().enumerate() {
                    let n = if name.is_empty() {
                        format!("alternative-{i}")
                    } else {
                        format!("{name}-{i}")
                    };
                    rules.push(self.visit(doc, alt, &n)?);
                }
                self.add_rule(&rule_name, &rules.join(" | "))
            }
            Node::AllOf { children, path } => {
                self.visit_all_of(doc, children, path, name, &rule_name)?
            }
            Node::Const(v) => self.add_rule(&rule_name, &format_literal(&json_dump(v))),
            Node::Enum(values) => {
                let alts: Vec<String> = values
                    .iter()
                    .map(|v| format_literal(&json_dump(v)))
                    .collect();
                self.add_rule(&rule_name, &format!("({})", alts.join(" | ")))
            }
            Node::Object {
                properties,
                additional,
            } => {
                if properties.is_empty() && matches!(additional.as_deref(), Some(Node::Any)) {
                    let body = self.add_primitive("object", "object");
                    return Ok(self.add_rule(&rule_name, &body));
                }
                let props: Vec<(&str, &Node)> = properties
                    .iter()
                    .map(|p| (p.name.as_str(), &p.schema))
                    .collect();
                let required: HashSet<&str> = properties
                    .iter()
                    .filter(|p| p.required)
                    .map(|p| p.name.as_str())
                    .collect();
                let body = self.object_rule(doc, &props, &required, name, additional.as_deref())?;
                self.add_rule(&rule_name, &body)
            }
            Node::Tuple(items) => {
                let mut rule = String::from("\"[\" space ");
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        rule.push_str(" \",\" space ");
                    }
                    rule.push_str(&self.visit(doc, item, &format!("{sub_name}tuple-{i}"))?);
                }
                rule.push_str(" space \"]\"");
                self.add_rule(&rule_name, &rule)
            }
            Node::Array {
                items,
                min_items,
                max_items,
            } => {
                if matches!(**items, Node::Any) && *min_items == 0 && max_items.is_none() {
                    return Ok(self.visit_primitive(&rule_name, "array"));
                }
                let item = self.visit(doc, items, &format!("{sub_name}item"))?;
                let rep = build_repetition(&item, *min_items, *max_items, "\",\" space");
                self.add_rule(&rule_name, &format!("\"[\" space {rep} space \"]\""))
            }
            Node::String {
                pattern,
                format,
                min_length,
                max_length,
            } => {
                if let Some(p) = pattern {
                    // Patterns are checked when the schema is read; an error
                    // here names the rule.
                    return self.visit_pattern(p, &rule_name, &rule_name);
                }
                match format {
                    Some(StringFormat::Uuid) => return Ok(self.visit_primitive(&rule_name, "uuid")),
                    Some(f) => {
                        let prim = match f {
                            StringFormat::Date => "date-string",
                            StringFormat::Time => "time-string",
                            _ => "date-time-string",
                        };
                        let rule = primitives::string_format(prim).expect("a built-in format");
                        let body = self.add_builtin(prim, rule);
                        return Ok(self.add_rule(&rule_name, &body));
                    }
                    None => {}
                }
                if *min_length > 0 || max_length.is_some() {
                    let ch = self.add_primitive("char", "char");
                    let rep = build_repetition(&ch, *min_length, *max_length, "");
                    return Ok(self.add_rule(&rule_name, &format!("\"\\\"\" {rep} \"\\\"\"")));
                }
                self.visit_primitive(&rule_name, "string")
            }
            Node::Integer { minimum, maximum } => {
                if *minimum == i64::MIN && *maximum == i64::MAX {
                    return Ok(self.visit_primitive(&rule_name, "integer"));
                }
                let body = format!("({})", int_range(*minimum, *maximum));
                self.add_rule(&rule_name, &body)
            }
            Node::Number => self.visit_primitive(&rule_name, "number"),
            Node::Boolean => self.visit_primitive(&rule_name, "boolean"),
            Node::Null => self.visit_primitive(&rule_name, "null"),
            Node::Any => {
                let body = self.add_primitive("value", "value");
                self.add_rule(&rule_name, &body)
            }
        })
    }

    fn resolve_ref(&mut self, doc: &Document, r: &str) -> Result<String, SchemaError> {
        let fragment = r.split_once('#').map_or(r, |(_, f)| f);
        let ref_name = format!("ref{}", rule_name_of(fragment));
        if self.rules.contains_key(&ref_name) || self.refs_being_resolved.contains(r) {
            return Ok(ref_name);
        }
        let Some(target) = doc.refs.get(r) else {
            return Err(SchemaError::Ref {
                path: "#".into(),
                reference: r.to_string(),
                why: "cannot be resolved".into(),
            });
        };
        self.refs_being_resolved.insert(r.to_string());
        let out = self.visit(doc, target, &ref_name);
        self.refs_being_resolved.remove(r);
        out
    }

    fn object_rule(
        &mut self,
        doc: &Document,
        properties: &[(&str, &Node)],
        required: &HashSet<&str>,
        name: &str,
        additional: Option<&Node>,
    ) -> Result<String, SchemaError> {
        let mut required_props: Vec<String> = Vec::new();
        let mut optional_props: Vec<String> = Vec::new();
        let mut kv_names: HashMap<String, String> = HashMap::new();
        let mut prop_names: Vec<String> = Vec::new();
        for &(prop_name, schema) in properties {
            let prop_rule = self.visit(doc, schema, &join(name, prop_name))?;
            let kv = self.add_rule(
                &join(name, &format!("{prop_name}-kv")),
                &format!(
                    "{} space \":\" space {prop_rule}",
                    format_literal(&json_dump(&Value::String(prop_name.to_string())))
                ),
            );
            kv_names.insert(prop_name.to_string(), kv);
            if required.contains(prop_name) {
                required_props.push(prop_name.to_string());
            } else {
                optional_props.push(prop_name.to_string());
            }
            prop_names.push(prop_name.to_string());
        }
        if let Some(additional) = additional {
            let sub = join(name, "additional");
            let value_rule = if matches!(additional, Node::Any) {
                self.add_primitive("value", "value")
            } else {
                self.visit(doc, additional, &format!("{sub}-value"))?
            };
            let key_rule = if prop_names.is_empty() {
                self.add_primitive("string", "string")
            } else {
                let ch = self.add_primitive("char", "char");
                let body = not_strings(&prop_names, &ch);
                self.add_rule(&format!("{sub}-k"), &body)
            };
            let kv = self.add_rule(
                &format!("{sub}-kv"),
                &format!("{key_rule} \":\" space {value_rule}"),
            );
            kv_names.insert("*".to_string(), kv);
            optional_props.push("*".to_string());
        }
        if required_props.is_empty() && optional_props.is_empty() {
            return Ok("\"{\" space \"}\"".to_string());
        }
        let mut rule = String::from("\"{\" space ");
        for (i, p) in required_props.iter().enumerate() {
            if i > 0 {
                rule.push_str(" \",\" space ");
            }
            rule.push_str(&kv_names[p]);
        }
        if !optional_props.is_empty() {
            rule.push_str(" (");
            if !required_props.is_empty() {
                rule.push_str(" \",\" space ( ");
            }
            for i in 0..optional_props.len() {
                if i > 0 {
                    rule.push_str(" | ");
                }
                let r = self.recursive_refs(&optional_props[i..], false, name, &kv_names);
                rule.push_str(&r);
            }
            if !required_props.is_empty() {
                rule.push_str(" )");
            }
            rule.push_str(" )?");
        }
        rule.push_str(" space \"}\"");
        Ok(rule)
    }

    /// The optional properties `ks` in order, each present or not, the
    /// first one given unless `first_is_optional`.
    fn recursive_refs(
        &mut self,
        ks: &[String],
        first_is_optional: bool,
        name: &str,
        kv_names: &HashMap<String, String>,
    ) -> String {
        let Some(k) = ks.first() else {
            return String::new();
        };
        let kv = &kv_names[k];
        let comma_ref = format!("( \",\" space {kv} )");
        let mut res = if first_is_optional {
            format!("{comma_ref}{}", if k == "*" { "*" } else { "?" })
        } else if k == "*" {
            format!("{kv} {comma_ref}*")
        } else {
            kv.clone()
        };
        if ks.len() > 1 {
            let rest = self.recursive_refs(&ks[1..], true, name, kv_names);
            let rest_name = self.add_rule(&join(name, &format!("{k}-rest")), &rest);
            res.push(' ');
            res.push_str(&rest_name);
        }
        res
    }

    fn visit_all_of(
        &mut self,
        doc: &Document,
        children: &[Node],
        path: &str,
        name: &str,
        rule_name: &str,
    ) -> Result<String, SchemaError> {
        let mut properties: Vec<(&str, &Node)> = Vec::new();
        let mut required: HashSet<&str> = HashSet::new();
        let mut enum_values: BTreeMap<String, usize> = BTreeMap::new();
        let mut n_enums = 0;
        for (i, child) in children.iter().enumerate() {
            let at = format!("{path}/{i}");
            // Follow references to what they name.
            let mut comp = child;
            let mut seen = HashSet::new();
            while let Node::Ref(r) = comp {
                if !seen.insert(r.as_str()) {
                    break;
                }
                comp = doc.refs.get(r).unwrap_or(&Node::Any);
            }
            match comp {
                Node::Object { properties: ps, .. } => {
                    for p in ps {
                        if properties.iter().any(|(n, _)| *n == p.name) {
                            return Err(SchemaError::unsupported(
                                &at,
                                "allOf",
                                format!("property '{}' is defined by more than one branch", p.name),
                            ));
                        }
                        properties.push((&p.name, &p.schema));
                        // Every property of a branch is asked for, as
                        // llama.cpp's merge does (a stricter object).
                        required.insert(&p.name);
                    }
                }
                Node::Enum(values) => {
                    n_enums += 1;
                    for v in values {
                        *enum_values
                            .entry(format_literal(&json_dump(v)))
                            .or_insert(0) += 1;
                    }
                }
                Node::Any => {}
                other => {
                    return Err(SchemaError::unsupported(
                        &at,
                        "allOf",
                        format!(
                            "a branch that is {} cannot be merged (objects and enums can)",
                            kind_name(other)
                        ),
                    ))
                }
            }
        }
        if n_enums > 0 {
            if !properties.is_empty() {
                return Err(SchemaError::unsupported(
                    path,
                    "allOf",
                    "enums mixed with objects",
                ));
            }
            let common: Vec<String> = enum_values
                .into_iter()
                .filter(|&(_, n)| n == n_enums)
                .map(|(k, _)| k)
                .collect();
            if common.is_empty() {
                return Err(SchemaError::unsupported(
                    path,
                    "allOf",
                    "its enums have no value in common",
                ));
            }
            return Ok(self.add_rule(rule_name, &format!("({})", common.join(" | "))));
        }
        let body = self.object_rule(doc, &properties, &required, name, None)?;
        Ok(self.add_rule(rule_name, &body))
    }
}

fn kind_name(n: &Node) -> &'static str {
    match n {
        Node::Any => "any value",
        Node::Ref(_) => "a $ref",
        Node::AnyOf(_) => "an anyOf",
        Node::AllOf { .. } => "an allOf",
        Node::Const(_) => "a const",
        Node::Enum(_) => "an enum",
        Node::Null => "null",
        Node::Boolean => "a boolean",
        Node::Number => "a number",
        Node::Integer { .. } => "an integer",
        Node::String { .. } => "a string",
        Node::Array { .. } | Node::Tuple(_) => "an array",
        Node::Object { .. } => "an object",
    }
}
