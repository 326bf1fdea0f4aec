//! The built-in rules: JSON's primitive values, the whitespace rule and the
//! string formats, with the rules each one uses.

/// The whitespace allowed between tokens: nothing, a space, or one or two
/// newlines and up to 20 spaces or tabs of indentation.
pub const SPACE_RULE: &str = r#"| " " | "\n"{1,2} [ \t]{0,20}"#;

/// A built-in rule: its body and the built-in rules it refers to.
#[derive(Debug, Clone, Copy)]
pub struct Builtin {
    /// The rule's body.
    pub content: &'static str,
    /// The rules it refers to, added with it.
    pub deps: &'static [&'static str],
}

/// A primitive JSON value's rule, by name.
pub fn primitive(name: &str) -> Option<Builtin> {
    let (content, deps): (&'static str, &'static [&'static str]) = match name {
        "boolean" => (r#"("true" | "false")"#, &[]),
        "decimal-part" => ("[0-9]{1,16}", &[]),
        "integral-part" => ("[0] | [1-9] [0-9]{0,15}", &[]),
        "number" => (
            r#"("-"? integral-part) ("." decimal-part)? ([eE] [-+]? integral-part)?"#,
            &["integral-part", "decimal-part"],
        ),
        "integer" => (r#"("-"? integral-part)"#, &["integral-part"]),
        "value" => (
            "object | array | string | number | boolean | null",
            &["object", "array", "string", "number", "boolean", "null"],
        ),
        "object" => (
            r#""{" space ( string ":" space value ("," space string ":" space value)* )? space "}""#,
            &["string", "value"],
        ),
        "array" => (
            r#""[" space ( value ("," space value)* )? space "]""#,
            &["value"],
        ),
        "uuid" => (
            r#""\"" [0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12} "\"""#,
            &[],
        ),
        "char" => (
            r#"[^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4})"#,
            &[],
        ),
        "string" => (r#""\"" char* "\"""#, &["char"]),
        "null" => (r#""null""#, &[]),
        _ => return None,
    };
    Some(Builtin { content, deps })
}

/// A string format's rule, by name.
pub fn string_format(name: &str) -> Option<Builtin> {
    let (content, deps): (&'static str, &'static [&'static str]) = match name {
        "date" => (
            r#"[0-9]{4} "-" ( "0" [1-9] | "1" [0-2] ) "-" ( "0" [1-9] | [1-2] [0-9] | "3" [0-1] )"#,
            &[],
        ),
        "time" => (
            r#"([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{3} )? ( "Z" | ( "+" | "-" ) ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] )"#,
            &[],
        ),
        "date-time" => (r#"date "T" time"#, &["date", "time"]),
        "date-string" => (r#""\"" date "\"""#, &["date"]),
        "time-string" => (r#""\"" time "\"""#, &["time"]),
        "date-time-string" => (r#""\"" date-time "\"""#, &["date-time"]),
        _ => return None,
    };
    Some(Builtin { content, deps })
}

/// Names a schema's own rules may not take: `root` and the built-ins.
pub fn is_reserved(name: &str) -> bool {
    name == "root" || primitive(name).is_some() || string_format(name).is_some()
}
