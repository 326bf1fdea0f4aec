//! Which keywords a schema node may carry: those the converter honours for
//! the node's kind, annotations, and keywords that cannot constrain the
//! values the node produces. Every other known keyword is refused, so that
//! nothing a schema asks for is dropped without a word.

use serde_json::{Map, Value};

use super::error::SchemaError;

/// The JSON types a node can produce, as bits.
pub type Types = u8;
/// `null`.
pub const NULL: Types = 1;
/// `true` / `false`.
pub const BOOL: Types = 2;
/// Numbers, integers included.
pub const NUM: Types = 4;
/// Strings.
pub const STR: Types = 8;
/// Arrays.
pub const ARR: Types = 16;
/// Objects.
pub const OBJ: Types = 32;
/// Any JSON value.
pub const ALL: Types = NULL | BOOL | NUM | STR | ARR | OBJ;

/// Keywords that describe and never constrain.
const ANNOTATIONS: &[&str] = &[
    "title",
    "description",
    "$schema",
    "$id",
    "$anchor",
    "$dynamicAnchor",
    "$recursiveAnchor",
    "$vocabulary",
    "$comment",
    "$defs",
    "definitions",
    "examples",
    "default",
    "deprecated",
    "readOnly",
    "writeOnly",
    "discriminator",
];

/// Keywords that constrain one type of value, by type.
const BY_TYPE: &[(Types, &[&str])] = &[
    (
        NUM,
        &[
            "minimum",
            "maximum",
            "exclusiveMinimum",
            "exclusiveMaximum",
            "multipleOf",
        ],
    ),
    (
        STR,
        &[
            "minLength",
            "maxLength",
            "pattern",
            "format",
            "contentEncoding",
            "contentMediaType",
            "contentSchema",
        ],
    ),
    (
        ARR,
        &[
            "items",
            "prefixItems",
            "additionalItems",
            "unevaluatedItems",
            "minItems",
            "maxItems",
            "uniqueItems",
            "contains",
            "minContains",
            "maxContains",
        ],
    ),
    (
        OBJ,
        &[
            "properties",
            "required",
            "additionalProperties",
            "patternProperties",
            "unevaluatedProperties",
            "propertyNames",
            "minProperties",
            "maxProperties",
            "dependentRequired",
            "dependentSchemas",
            "dependencies",
        ],
    ),
];

/// Keywords the converter never honours.
const NEVER: &[&str] = &["$dynamicRef", "$recursiveRef", "not", "if", "then", "else"];

/// Keywords that constrain any value, honoured where they choose the kind.
const GENERAL: &[&str] = &["$ref", "anyOf", "oneOf", "allOf", "const", "enum", "type"];

/// Refuses the first keyword of `schema` that is neither an annotation, nor
/// in `honoured`, nor a keyword of a type the node cannot produce. Unknown
/// keywords are annotations, as JSON Schema reads them.
pub fn check(
    schema: &Map<String, Value>,
    path: &str,
    honoured: &[&str],
    produces: Types,
    kind: &str,
) -> Result<(), SchemaError> {
    for (key, value) in schema {
        let key = key.as_str();
        if honoured.contains(&key) || ANNOTATIONS.contains(&key) {
            continue;
        }
        // Keywords that are spelled out but ask for nothing.
        let no_constraint = match key {
            "additionalProperties" | "items" | "unevaluatedProperties" | "unevaluatedItems" => {
                *value == Value::Bool(true)
            }
            "required" => value.as_array().is_some_and(Vec::is_empty),
            "minLength" | "minItems" | "minProperties" => value.as_u64() == Some(0),
            "uniqueItems" => *value == Value::Bool(false),
            _ => false,
        };
        if no_constraint {
            continue;
        }
        if NEVER.contains(&key) {
            return Err(SchemaError::unsupported(path, key, ""));
        }
        if GENERAL.contains(&key) {
            return Err(SchemaError::unsupported(
                path,
                key,
                format!("alongside the keywords that make this schema {kind}"),
            ));
        }
        for (types, words) in BY_TYPE {
            if words.contains(&key) && types & produces != 0 {
                return Err(SchemaError::unsupported(path, key, format!("for {kind}")));
            }
        }
    }
    Ok(())
}
