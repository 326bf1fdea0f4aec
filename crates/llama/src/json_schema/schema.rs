//! A JSON schema read into the shapes the converter knows: one node per
//! schema, each of one kind, chosen from the keywords as llama.cpp chooses.

use std::collections::BTreeMap;

use serde_json::Value;

/// String formats with a grammar of their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StringFormat {
    /// `date`: `YYYY-MM-DD`.
    Date,
    /// `time`: `hh:mm:ss[.sss](Z|±hh:mm)`.
    Time,
    /// `date-time`: a date, `T`, a time.
    DateTime,
    /// `uuid` (and `uuid1` .. `uuid5`).
    Uuid,
}

/// One object property.
#[derive(Debug, Clone)]
pub struct Property {
    /// Its name.
    pub name: String,
    /// Its schema.
    pub schema: Node,
    /// Whether `required` names it.
    pub required: bool,
}

/// A schema node.
#[derive(Debug, Clone)]
pub enum Node {
    /// Any JSON value.
    Any,
    /// `$ref` into the same document; the target is in [`Document::refs`].
    Ref(String),
    /// `anyOf` / `oneOf`, or a `type` array, one alternative each.
    AnyOf(Vec<Node>),
    /// `allOf`: objects merged, enums intersected.
    AllOf {
        /// The schemas all of which apply.
        children: Vec<Node>,
        /// Where the `allOf` is, for errors found when merging.
        path: String,
    },
    /// `const`.
    Const(Value),
    /// `enum`.
    Enum(Vec<Value>),
    /// `null`.
    Null,
    /// `boolean`.
    Boolean,
    /// `number`.
    Number,
    /// `integer` with inclusive bounds (`i64::MIN` / `i64::MAX`: none).
    Integer {
        /// Smallest value.
        minimum: i64,
        /// Largest value.
        maximum: i64,
    },
    /// `string`.
    String {
        /// `pattern`, when given.
        pattern: Option<String>,
        /// `format`, when one with a grammar is given.
        format: Option<StringFormat>,
        /// `minLength`.
        min_length: u32,
        /// `maxLength` (`None`: unbounded).
        max_length: Option<u32>,
    },
    /// `array` of one item schema.
    Array {
        /// The item schema.
        items: Box<Node>,
        /// `minItems`.
        min_items: u32,
        /// `maxItems` (`None`: unbounded).
        max_items: Option<u32>,
    },
    /// An array of fixed length, one schema per position.
    Tuple(Vec<Node>),
    /// `object`.
    Object {
        /// Properties in schema order.
        properties: Vec<Property>,
        /// The schema of other keys' values (`None`: no other keys).
        additional: Option<Box<Node>>,
    },
}

/// A whole schema: its root and the targets of its `$ref`s.
#[derive(Debug, Clone)]
pub struct Document {
    /// The root node.
    pub root: Node,
    /// Every `$ref` met, by its text, with the node it points to.
    pub refs: BTreeMap<String, Node>,
}
