//! Errors of converting a JSON schema to a grammar.

/// Why a JSON schema could not be turned into a grammar. Every error names
/// the place in the schema (a JSON pointer such as `#/properties/age`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    /// A keyword the converter cannot honour: leaving it out would let the
    /// model write values the schema forbids.
    #[error("JSON schema at {path}: keyword '{keyword}' is not supported{}", detail(.why))]
    Unsupported {
        /// Where the keyword is.
        path: String,
        /// The keyword.
        keyword: String,
        /// Why, when there is more to say.
        why: String,
    },
    /// A keyword whose value is malformed (a count that is not an integer,
    /// properties that are not an object, ...).
    #[error("JSON schema at {path}: '{keyword}' {why}")]
    Invalid {
        /// Where the keyword is.
        path: String,
        /// The keyword.
        keyword: String,
        /// What is wrong with it.
        why: String,
    },
    /// A `$ref` that points outside the document or to nothing.
    #[error("JSON schema at {path}: $ref '{reference}' {why}")]
    Ref {
        /// Where the `$ref` is.
        path: String,
        /// The reference.
        reference: String,
        /// What is wrong with it.
        why: String,
    },
    /// A schema that is not an object (or `true`).
    #[error("JSON schema at {path}: a schema must be an object, found {found}")]
    NotAnObject {
        /// Where the value is.
        path: String,
        /// What kind of JSON value was found.
        found: &'static str,
    },
    /// A `pattern` the regular-expression translation cannot express.
    #[error("JSON schema at {path}: pattern {pattern:?} is not supported: {why}")]
    Pattern {
        /// Where the pattern is.
        path: String,
        /// The pattern.
        pattern: String,
        /// What part of it cannot be translated.
        why: String,
    },
    /// Schemas nested deeper than the converter follows.
    #[error("JSON schema at {path}: nested more than {limit} levels deep")]
    TooDeep {
        /// Where the limit was reached.
        path: String,
        /// The limit.
        limit: usize,
    },
}

fn detail(why: &str) -> String {
    if why.is_empty() {
        String::new()
    } else {
        format!(": {why}")
    }
}

impl SchemaError {
    /// The keyword at fault, when the error is about one.
    pub fn keyword(&self) -> Option<&str> {
        match self {
            SchemaError::Unsupported { keyword, .. } | SchemaError::Invalid { keyword, .. } => {
                Some(keyword)
            }
            SchemaError::Ref { .. } => Some("$ref"),
            SchemaError::Pattern { .. } => Some("pattern"),
            SchemaError::NotAnObject { .. } | SchemaError::TooDeep { .. } => None,
        }
    }

    pub(crate) fn unsupported(path: &str, keyword: &str, why: impl Into<String>) -> Self {
        SchemaError::Unsupported {
            path: path.to_string(),
            keyword: keyword.to_string(),
            why: why.into(),
        }
    }

    pub(crate) fn invalid(path: &str, keyword: &str, why: impl Into<String>) -> Self {
        SchemaError::Invalid {
            path: path.to_string(),
            keyword: keyword.to_string(),
            why: why.into(),
        }
    }
}
