//! JSON schema to GBNF grammar, with llama.cpp's rules: the same schema
//! gives the same grammar text (rule names, bodies, order, the `space`
//! whitespace rule), so that constrained generation matches llama.cpp's.
//!
//! What the converter honours: `type` (one or a list), `properties`,
//! `required`, `additionalProperties`, `enum`, `const`, `anyOf` / `oneOf` /
//! `allOf`, local `$ref`s (`$defs`, `definitions`, any JSON pointer),
//! `items` / `prefixItems` / `minItems` / `maxItems`, `minLength` /
//! `maxLength` / `pattern` / `format` (date, time, date-time, uuid), and
//! integer bounds. Every other keyword that would constrain the value
//! (`multipleOf`, `uniqueItems`, `not`, `if`, `patternProperties`, number
//! bounds, an unknown `format`, ...) is a [`SchemaError`] naming it and
//! where it is; annotations (`title`, `description`, `default`, ...) and
//! unknown keywords are ignored, as JSON Schema reads them.

mod builder;
mod convert;
mod error;
mod int_range;
mod keywords;
mod literal;
mod not_strings;
mod parse;
mod pattern;
mod primitives;
mod repetition;
mod schema;

#[cfg(test)]
mod tests;

use std::collections::HashMap;

use serde_json::Value;

pub use builder::{build_grammar, build_grammar_with, GrammarBuilder, GrammarOptions};
pub use error::SchemaError;

/// The GBNF grammar whose `root` rule matches the JSON text of the values
/// `schema` admits.
pub fn json_schema_to_grammar(schema: &Value) -> Result<String, SchemaError> {
    let doc = parse::parse(schema, &HashMap::new())?;
    let mut conv = convert::Converter::new(false);
    conv.visit(&doc, &doc.root, "")?;
    Ok(conv.format_grammar())
}

/// `s` as a GBNF string literal (quoted, `\r \n " \` escaped).
pub fn gbnf_format_literal(s: &str) -> String {
    literal::format_literal(s)
}
