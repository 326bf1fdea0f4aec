//! The `tojson` filter as Python's Jinja (and llama.cpp's) writes JSON:
//! `", "` and `": "` separators (`","` between items when indented),
//! members in the order they were given, non-ASCII kept unless
//! `ensure_ascii`, nothing escaped for HTML.

use minijinja::value::{Kwargs, Value};
use minijinja::{Error, ErrorKind};

fn invalid(msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidOperation, msg.into())
}

/// The filter: `value | tojson(indent=None, separators=None,
/// ensure_ascii=False)`.
pub(crate) fn tojson(value: Value, kwargs: Kwargs) -> Result<Value, Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    let ensure_ascii: Option<bool> = kwargs.get("ensure_ascii")?;
    let sort: Option<bool> = kwargs.get("sort_keys")?;
    let seps: Option<Vec<String>> = kwargs.get("separators")?;
    kwargs.assert_all_used()?;
    if sort == Some(true) {
        return Err(invalid("tojson: sort_keys is not supported"));
    }
    let item = seps
        .as_ref()
        .and_then(|s| s.first().cloned())
        .unwrap_or_else(|| {
            if indent.is_some() {
                ",".into()
            } else {
                ", ".into()
            }
        });
    let key = seps
        .as_ref()
        .and_then(|s| s.get(1).cloned())
        .unwrap_or_else(|| ": ".into());
    let json = serde_json::to_value(&value).map_err(|e| invalid(format!("tojson: {e}")))?;
    let mut out = String::new();
    write(&json, indent, &item, &key, 0, &mut out);
    if ensure_ascii == Some(true) {
        out = out
            .chars()
            .map(|c| {
                if c.is_ascii() {
                    c.to_string()
                } else {
                    let mut buf = [0u16; 2];
                    c.encode_utf16(&mut buf)
                        .iter()
                        .map(|u| format!("\\u{u:04x}"))
                        .collect()
                }
            })
            .collect();
    }
    Ok(Value::from_safe_string(out))
}

fn newline(indent: Option<usize>, level: usize, out: &mut String) {
    if let Some(n) = indent {
        out.push('\n');
        out.extend(std::iter::repeat_n(' ', n * level));
    }
}

fn write(
    v: &serde_json::Value,
    indent: Option<usize>,
    item: &str,
    key: &str,
    level: usize,
    out: &mut String,
) {
    use serde_json::Value as J;
    match v {
        J::Array(a) if !a.is_empty() => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push_str(item);
                }
                newline(indent, level + 1, out);
                write(x, indent, item, key, level + 1, out);
            }
            newline(indent, level, out);
            out.push(']');
        }
        J::Object(m) if !m.is_empty() => {
            out.push('{');
            for (i, (k, x)) in m.iter().enumerate() {
                if i > 0 {
                    out.push_str(item);
                }
                newline(indent, level + 1, out);
                out.push_str(&J::String(k.clone()).to_string());
                out.push_str(key);
                write(x, indent, item, key, level + 1, out);
            }
            newline(indent, level, out);
            out.push('}');
        }
        other => out.push_str(&other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use minijinja::Environment;

    fn render(src: &str, ctx: serde_json::Value) -> String {
        let mut env = Environment::new();
        env.add_filter("tojson", super::tojson);
        env.render_str(src, ctx).unwrap()
    }

    #[test]
    fn python_separators_order_and_no_html_escapes() {
        let ctx = serde_json::json!({"x": {"name": "f", "arguments": {"b": 1, "a": "<é>"}}});
        assert_eq!(
            render("{{ x | tojson }}", ctx.clone()),
            r#"{"name": "f", "arguments": {"b": 1, "a": "<é>"}}"#
        );
        assert_eq!(
            render("{{ x.arguments | tojson(indent=2) }}", ctx.clone()),
            "{\n  \"b\": 1,\n  \"a\": \"<é>\"\n}"
        );
        assert_eq!(
            render("{{ x.arguments | tojson(ensure_ascii=true) }}", ctx),
            r#"{"b": 1, "a": "<\u00e9>"}"#
        );
    }
}
