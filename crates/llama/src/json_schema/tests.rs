//! Unit tests of the converter: refused keywords, bad references, limits
//! and the grammar builder.

use serde_json::{json, Value};

use super::*;

fn err(schema: Value) -> SchemaError {
    match json_schema_to_grammar(&schema) {
        Ok(g) => panic!("{schema} converted to\n{g}"),
        Err(e) => e,
    }
}

#[test]
fn keywords_that_cannot_be_honoured_are_refused_by_name_and_path() {
    for (schema, keyword, path) in [
        (
            json!({"type": "number", "multipleOf": 5}),
            "multipleOf",
            "#",
        ),
        (
            json!({"type": "integer", "multipleOf": 2}),
            "multipleOf",
            "#",
        ),
        (json!({"type": "number", "minimum": 0}), "minimum", "#"),
        (
            json!({"type": "number", "exclusiveMaximum": 1.5}),
            "exclusiveMaximum",
            "#",
        ),
        (
            json!({"type": "array", "uniqueItems": true}),
            "uniqueItems",
            "#",
        ),
        (
            json!({"type": "array", "contains": {"type": "integer"}}),
            "contains",
            "#",
        ),
        (json!({"not": {"type": "string"}}), "not", "#"),
        (
            json!({"type": "string", "if": {"maxLength": 2}, "then": {}}),
            "if",
            "#",
        ),
        (
            json!({"type": "object", "patternProperties": {"^x": {}}}),
            "patternProperties",
            "#",
        ),
        (
            json!({"type": "object", "minProperties": 1}),
            "minProperties",
            "#",
        ),
        (
            json!({"type": "object", "propertyNames": {"maxLength": 3}}),
            "propertyNames",
            "#",
        ),
        (json!({"type": "string", "format": "email"}), "format", "#"),
        (json!({"format": "hostname"}), "format", "#"),
        (json!({"minimum": 3}), "minimum", "#"),
        (
            json!({"type": "object", "properties": {"a": {"type": "string", "pattern": "^a$", "maxLength": 3}}}),
            "maxLength",
            "#/properties/a",
        ),
        (
            json!({"type": "string", "pattern": "^a$", "format": "date"}),
            "format",
            "#",
        ),
        (
            json!({"type": "string", "format": "date", "minLength": 3}),
            "minLength",
            "#",
        ),
        (
            json!({"$ref": "#/$defs/A", "maxLength": 2, "$defs": {"A": {}}}),
            "maxLength",
            "#",
        ),
        (
            json!({"anyOf": [{"type": "string"}], "oneOf": [{"type": "null"}]}),
            "anyOf",
            "#",
        ),
        (json!({"const": "a", "enum": ["a", "b"]}), "enum", "#"),
        (json!({"enum": ["abc"], "maxLength": 2}), "maxLength", "#"),
        (
            json!({"type": "object", "properties": {"a": {}}, "required": ["a", "b"]}),
            "required",
            "#",
        ),
        (
            json!({"type": "array", "prefixItems": [{}, {}], "minItems": 3}),
            "minItems",
            "#",
        ),
        (
            json!({"type": "array", "prefixItems": [{}], "items": {"type": "string"}}),
            "prefixItems",
            "#",
        ),
        (
            json!({"type": "object", "properties": {"a": {}}, "allOf": [{}]}),
            "allOf",
            "#",
        ),
        (
            json!({"type": ["integer", "null"], "multipleOf": 3}),
            "multipleOf",
            "#/type/0",
        ),
        (
            json!({"allOf": [{"type": "string"}, {"type": "object", "properties": {}}]}),
            "allOf",
            "#/allOf/0",
        ),
        (
            json!({"allOf": [{"enum": ["a"]}, {"enum": ["b"]}]}),
            "allOf",
            "#/allOf",
        ),
    ] {
        let e = err(schema.clone());
        assert_eq!(e.keyword(), Some(keyword), "{schema}: {e}");
        let msg = e.to_string();
        assert!(msg.contains(&format!("at {path}:")), "{schema}: {msg}");
        assert!(msg.contains(keyword), "{schema}: {msg}");
    }
}

#[test]
fn annotations_and_unknown_keywords_are_ignored() {
    let plain = json_schema_to_grammar(&json!({"type": "integer", "minimum": 1})).unwrap();
    let annotated = json_schema_to_grammar(&json!({
        "type": "integer", "minimum": 1, "title": "T", "description": "d",
        "default": 3, "examples": [4], "$comment": "c", "deprecated": false,
        "x-vendor": {"anything": true}
    }))
    .unwrap();
    assert_eq!(plain, annotated);
    // Keywords of another type do not constrain a string.
    let s = json_schema_to_grammar(&json!({"type": "string"})).unwrap();
    let with_number_keyword =
        json_schema_to_grammar(&json!({"type": "string", "minimum": 2, "uniqueItems": true}))
            .unwrap();
    assert_eq!(s, with_number_keyword);
}

#[test]
fn references_outside_the_document_or_to_nothing_are_errors() {
    let e = err(json!({"$ref": "https://example.com/schema.json"}));
    assert!(matches!(e, SchemaError::Ref { .. }), "{e}");
    assert!(e.to_string().contains("https://example.com/schema.json"));
    let e = err(json!({"$ref": "other.json#/$defs/A"}));
    assert!(e.to_string().contains("same document"), "{e}");
    let e = err(json!({"type": "object", "properties": {"a": {"$ref": "#/$defs/Missing"}}}));
    assert!(
        e.to_string().contains("#/properties/a") && e.to_string().contains("not found"),
        "{e}"
    );
    let e = err(json!({"$ref": "#/$defs/list/5", "$defs": {"list": [1]}}));
    assert!(e.to_string().contains("out of range"), "{e}");
    let e = err(json!({"$ref": 3}));
    assert_eq!(e.keyword(), Some("$ref"));
}

#[test]
fn a_schema_that_is_not_an_object_is_an_error() {
    for v in [
        json!(3),
        json!("string"),
        json!([{"type": "string"}]),
        json!(null),
        json!(false),
    ] {
        let e = err(v.clone());
        assert!(matches!(e, SchemaError::NotAnObject { .. }), "{v}: {e}");
    }
    let e = err(json!({"type": "object", "properties": {"a": 5}}));
    assert!(e.to_string().contains("#/properties/a"), "{e}");
    // `true` is the schema of any value.
    let any = json_schema_to_grammar(&json!({})).unwrap();
    assert_eq!(json_schema_to_grammar(&json!(true)).unwrap(), any);
}

#[test]
fn malformed_keyword_values_are_errors() {
    for (schema, keyword) in [
        (json!({"type": "array", "minItems": -1}), "minItems"),
        (json!({"type": "string", "maxLength": 2.5}), "maxLength"),
        (
            json!({"type": "string", "minLength": 5, "maxLength": 2}),
            "minLength",
        ),
        (json!({"type": "integer", "minimum": "3"}), "minimum"),
        (
            json!({"type": "integer", "minimum": 5, "maximum": 2}),
            "minimum",
        ),
        (json!({"type": "object", "properties": []}), "properties"),
        (
            json!({"type": "object", "properties": {}, "required": "a"}),
            "required",
        ),
        (
            json!({"type": "object", "additionalProperties": 1}),
            "additionalProperties",
        ),
        (json!({"type": "strin"}), "type"),
        (json!({"type": []}), "type"),
        (json!({"type": 5}), "type"),
        (json!({"enum": []}), "enum"),
        (json!({"anyOf": []}), "anyOf"),
        (
            json!({"type": "string", "maxLength": 1_000_000}),
            "maxLength",
        ),
        (json!({"type": "array", "minItems": 2001}), "minItems"),
        (json!({"anyOf": {"type": "string"}}), "anyOf"),
    ] {
        let e = err(schema.clone());
        assert_eq!(e.keyword(), Some(keyword), "{schema}: {e}");
    }
}

#[test]
fn patterns_without_a_grammar_are_errors() {
    for (p, why) in [
        ("abc", "anchored"),
        ("^\\d+$", "escape"),
        ("^(?=a)b$", "group"),
        ("^a^b$", "anchor"),
        ("^[a-z$", "character class"),
        ("^(ab$", "parentheses"),
        ("^ab)$", "parentheses"),
        ("^*a$", "nothing to repeat"),
        ("^a{2$", "curly"),
        ("^a{x}$", "number"),
        ("^a{3,1}$", "bounds"),
        ("^a{0,5000}$", "limit"),
        ("^[a-z];-0[]+9{2,4}$", "empty character class []"),
        ("^x[^]$", "empty character class [^]"),
    ] {
        let e = err(json!({"type": "string", "pattern": p}));
        assert!(matches!(e, SchemaError::Pattern { .. }), "{p}: {e}");
        assert!(e.to_string().contains(why), "{p}: {e}");
    }
    let mut deep = String::from("^");
    deep.push_str(&"(".repeat(150));
    deep.push('a');
    deep.push_str(&")".repeat(150));
    deep.push('$');
    let e = err(json!({"type": "string", "pattern": deep}));
    assert!(e.to_string().contains("nested too deeply"), "{e}");
}

#[test]
fn deep_nesting_stops_at_the_limit() {
    let mut v = json!({"type": "string"});
    for _ in 0..parse::MAX_DEPTH + 5 {
        v = json!({"type": "array", "items": v});
    }
    let e = err(v);
    assert!(matches!(e, SchemaError::TooDeep { .. }), "{e}");
    // A chain of references counts too, and a cycle is no chain.
    let mut defs = serde_json::Map::new();
    for i in 0..parse::MAX_DEPTH + 5 {
        defs.insert(
            format!("D{i}"),
            json!({"$ref": format!("#/$defs/D{}", i + 1)}),
        );
    }
    defs.insert(
        format!("D{}", parse::MAX_DEPTH + 5),
        json!({"type": "null"}),
    );
    let e = err(json!({"$ref": "#/$defs/D0", "$defs": defs}));
    assert!(matches!(e, SchemaError::TooDeep { .. }), "{e}");
    let cycle = json!({"$ref": "#/$defs/A", "$defs": {"A": {"$ref": "#/$defs/B"}, "B": {"$ref": "#/$defs/A"}}});
    assert!(json_schema_to_grammar(&cycle).is_ok());
}

#[test]
fn the_builder_composes_rules_and_schemas_into_one_grammar() {
    let g = build_grammar(|b| {
        let args = b.add_schema(
            "get-weather-args",
            &json!({
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"]
            }),
        )?;
        assert_eq!(args, "get-weather-args");
        let call = b.add_rule(
            "tool call",
            &format!("\"<tool_call>\" space {args} \"</tool_call>\""),
        );
        assert_eq!(call, "tool-call");
        // The same body keeps the name; another body gets a number.
        assert_eq!(
            b.add_rule(
                "tool call",
                &format!("\"<tool_call>\" space {args} \"</tool_call>\"")
            ),
            "tool-call"
        );
        assert_eq!(b.add_rule("tool call", "\"x\""), "tool-call0");
        b.add_rule("root", &call);
        Ok(())
    })
    .unwrap();
    assert!(g.contains("root ::= tool-call\n"), "{g}");
    assert!(
        g.contains("get-weather-args ::= \"{\" space get-weather-args-city-kv space \"}\"\n"),
        "{g}"
    );
    assert!(g.contains("tool-call0 ::= \"x\"\n"), "{g}");
    assert!(g.contains("space ::= "), "{g}");
    // A schema added as `root` is the grammar's root, as the converter's.
    let schema = json!({"type": "array", "items": {"type": "integer"}});
    let g = build_grammar(|b| b.add_schema("root", &schema).map(drop)).unwrap();
    assert_eq!(g, json_schema_to_grammar(&schema).unwrap());
}

#[test]
fn resolved_references_follow_a_schema_into_a_wrapper() {
    let mut params = json!({
        "type": "object",
        "properties": {"p": {"$ref": "#/$defs/P"}},
        "required": ["p"],
        "$defs": {"P": {"type": "integer", "minimum": 0}}
    });
    // Embedded in another object, `#/$defs/P` no longer resolves...
    let wrapper = |params: &Value| {
        json!({
            "type": "object",
            "properties": {"name": {"const": "f"}, "arguments": params},
            "required": ["name", "arguments"]
        })
    };
    let e = build_grammar(|b| b.add_schema("call", &wrapper(&params)).map(drop)).unwrap_err();
    assert!(matches!(e, SchemaError::Ref { .. }), "{e}");
    // ... unless resolved against the parameters first.
    let g = build_grammar(|b| {
        b.resolve_refs(&mut params);
        b.add_schema("call", &wrapper(&params)).map(drop)
    })
    .unwrap();
    assert!(
        g.contains("ref-defs-P ::= ([0] | [1-9] [0-9]{0,15})\n"),
        "{g}"
    );
    // A remote reference found there fails the build.
    let mut remote = json!({"properties": {"a": {"$ref": "https://example.com/a.json"}}});
    let e = build_grammar(|b| {
        b.resolve_refs(&mut remote);
        Ok(())
    })
    .unwrap_err();
    assert!(e.to_string().contains("https://example.com/a.json"), "{e}");
}

#[test]
fn dotall_lets_dot_match_line_ends() {
    let schema = json!({"type": "string", "pattern": "^a.b$"});
    let plain = build_grammar(|b| b.add_schema("root", &schema).map(drop)).unwrap();
    assert!(plain.contains("dot ::= [^\\x0A\\x0D]"), "{plain}");
    let all = build_grammar_with(GrammarOptions { dotall: true }, |b| {
        b.add_schema("root", &schema).map(drop)
    })
    .unwrap();
    assert!(all.contains("dot ::= [\\U00000000-\\U0010FFFF]"), "{all}");
}
