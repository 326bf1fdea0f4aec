//! Prints a GGUF file's header, key/values and tensor table.
//!
//! ```text
//! gguf-dump [--json] [--full] FILE
//! ```
//!
//! The text form abbreviates long arrays (`[1, 2, 3, ... 512 items]`) and
//! long strings unless `--full` is given; `--json` prints everything as one
//! JSON object for machines.

use std::fmt::Write as _;
use std::io::Write as _;
use std::process::ExitCode;

use gguf::{Array, GgufFile, Value};

/// Arrays up to this length are printed whole in the text form.
const ARRAY_SHOWN_MAX: usize = 8;
/// Elements shown of a longer array.
const ARRAY_HEAD: usize = 3;
/// Characters shown of a long string.
const STRING_SHOWN_MAX: usize = 80;

const USAGE: &str = "usage: gguf-dump [--json] [--full] FILE";

fn main() -> ExitCode {
    let mut json = false;
    let mut full = false;
    let mut path = None;
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--json" => json = true,
            "--full" => full = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            a if a.starts_with('-') => {
                eprintln!("gguf-dump: unknown option {a}\n{USAGE}");
                return ExitCode::from(2);
            }
            _ if path.is_some() => {
                eprintln!("gguf-dump: one file at a time\n{USAGE}");
                return ExitCode::from(2);
            }
            a => path = Some(a.to_string()),
        }
    }
    let Some(path) = path else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let file = match GgufFile::open(&path) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("gguf-dump: {path}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let text = if json {
        to_json(&path, &file)
    } else {
        to_text(&file, full)
    };
    let mut out = std::io::stdout().lock();
    // A closed pipe (`gguf-dump x | head`) is not an error worth reporting.
    let _ = out.write_all(text.as_bytes()).and_then(|_| out.flush());
    ExitCode::SUCCESS
}

fn type_label(v: &Value) -> String {
    match v {
        Value::Array(a) => format!("[{}]", a.element_type().name()),
        v => v.value_type().name().to_string(),
    }
}

fn quoted(s: &[u8], limit: Option<usize>) -> String {
    let s = String::from_utf8_lossy(s);
    let mut out = String::from("\"");
    let n = s.chars().count();
    match limit {
        Some(max) if n > max => {
            json_escape_into(&mut out, &s.chars().take(max).collect::<String>());
            let _ = write!(out, "\"... ({n} chars)");
            return out;
        }
        _ => json_escape_into(&mut out, &s),
    }
    out.push('"');
    out
}

fn text_value(v: &Value, full: bool) -> String {
    let limit = (!full).then_some(STRING_SHOWN_MAX);
    match v {
        Value::String(s) => quoted(s, limit),
        Value::Array(a) => text_array(a, full),
        v => scalar(v),
    }
}

fn scalar(v: &Value) -> String {
    match v {
        Value::U8(x) => x.to_string(),
        Value::I8(x) => x.to_string(),
        Value::U16(x) => x.to_string(),
        Value::I16(x) => x.to_string(),
        Value::U32(x) => x.to_string(),
        Value::I32(x) => x.to_string(),
        Value::F32(x) => x.to_string(),
        Value::Bool(x) => x.to_string(),
        Value::U64(x) => x.to_string(),
        Value::I64(x) => x.to_string(),
        Value::F64(x) => x.to_string(),
        Value::String(_) | Value::Array(_) => String::new(),
    }
}

/// Element `i` of an array as a value (cheap for the few elements shown).
fn element(a: &Array, i: usize) -> Option<Value> {
    Some(match a {
        Array::U8(v) => Value::U8(*v.get(i)?),
        Array::I8(v) => Value::I8(*v.get(i)?),
        Array::U16(v) => Value::U16(*v.get(i)?),
        Array::I16(v) => Value::I16(*v.get(i)?),
        Array::U32(v) => Value::U32(*v.get(i)?),
        Array::I32(v) => Value::I32(*v.get(i)?),
        Array::F32(v) => Value::F32(*v.get(i)?),
        Array::Bool(v) => Value::Bool(*v.get(i)?),
        Array::String(v) => Value::String(v.get(i)?.to_vec()),
        Array::Array(v) => Value::Array(v.get(i)?.clone()),
        Array::U64(v) => Value::U64(*v.get(i)?),
        Array::I64(v) => Value::I64(*v.get(i)?),
        Array::F64(v) => Value::F64(*v.get(i)?),
    })
}

fn text_array(a: &Array, full: bool) -> String {
    let n = a.len();
    let shown = if full || n <= ARRAY_SHOWN_MAX {
        n
    } else {
        ARRAY_HEAD
    };
    let items: Vec<String> = (0..shown)
        .filter_map(|i| element(a, i))
        .map(|v| text_value(&v, full))
        .collect();
    if shown < n {
        format!("[{}, ... {n} items]", items.join(", "))
    } else {
        format!("[{}]", items.join(", "))
    }
}

fn to_text(f: &GgufFile, full: bool) -> String {
    let md = f.metadata();
    let mut s = String::new();
    let _ = writeln!(
        s,
        "GGUF v{} {}, {} key/values, {} tensors, alignment {}, data offset {}, {} bytes",
        f.version(),
        f.endian().name(),
        md.len(),
        f.tensors().len(),
        f.alignment(),
        f.data_offset(),
        f.file_size()
    );
    let kw = md.keys().map(str::len).max().unwrap_or(3).max(3);
    let _ = writeln!(
        s,
        "\nkey/values:\n  {:>4}  {:kw$}  {:8}  value",
        "#", "key", "type"
    );
    for (i, (k, v)) in md.iter().enumerate() {
        let _ = writeln!(
            s,
            "  {:>4}  {k:kw$}  {:8}  {}",
            i + 1,
            type_label(v),
            text_value(v, full)
        );
    }
    let nw = f
        .tensors()
        .iter()
        .map(|t| t.name.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let _ = writeln!(
        s,
        "\ntensors:\n  {:>4}  {:nw$}  {:8}  {:24}  {:>12}  {:>12}",
        "#", "name", "type", "shape", "offset", "bytes"
    );
    for (i, t) in f.tensors().iter().enumerate() {
        let shape = format!("{:?}", t.dims);
        let _ = writeln!(
            s,
            "  {:>4}  {:nw$}  {:8}  {:24}  {:>12}  {:>12}",
            i,
            t.name,
            t.ty.to_string(),
            shape,
            t.offset,
            t.size
        );
    }
    s
}

fn json_escape_into(out: &mut String, s: &str) {
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
}

fn json_str(out: &mut String, s: &[u8]) {
    out.push('"');
    json_escape_into(out, &String::from_utf8_lossy(s));
    out.push('"');
}

fn json_float(out: &mut String, x: f64, text: String) {
    if x.is_finite() {
        out.push_str(&text);
    } else {
        out.push_str("null");
    }
}

fn json_value(out: &mut String, v: &Value) {
    match v {
        Value::F32(x) => json_float(out, f64::from(*x), x.to_string()),
        Value::F64(x) => json_float(out, *x, x.to_string()),
        Value::String(b) => json_str(out, b),
        Value::Array(a) => json_array(out, a),
        v => out.push_str(&scalar(v)),
    }
}

fn json_list<T>(
    out: &mut String,
    items: impl Iterator<Item = T>,
    mut each: impl FnMut(&mut String, T),
) {
    out.push('[');
    for (i, x) in items.enumerate() {
        if i > 0 {
            out.push(',');
        }
        each(out, x);
    }
    out.push(']');
}

fn json_array(out: &mut String, a: &Array) {
    fn num<T: ToString>(out: &mut String, x: &T) {
        out.push_str(&x.to_string());
    }
    match a {
        Array::U8(v) => json_list(out, v.iter(), num),
        Array::I8(v) => json_list(out, v.iter(), num),
        Array::U16(v) => json_list(out, v.iter(), num),
        Array::I16(v) => json_list(out, v.iter(), num),
        Array::U32(v) => json_list(out, v.iter(), num),
        Array::I32(v) => json_list(out, v.iter(), num),
        Array::F32(v) => json_list(out, v.iter(), |o, x| {
            json_float(o, f64::from(*x), x.to_string())
        }),
        Array::Bool(v) => json_list(out, v.iter(), num),
        Array::String(v) => json_list(out, v.iter(), json_str),
        Array::Array(v) => json_list(out, v.iter(), json_array),
        Array::U64(v) => json_list(out, v.iter(), num),
        Array::I64(v) => json_list(out, v.iter(), num),
        Array::F64(v) => json_list(out, v.iter(), |o, x| json_float(o, *x, x.to_string())),
    }
}

fn to_json(path: &str, f: &GgufFile) -> String {
    let mut s = String::from("{\"path\":");
    json_str(&mut s, path.as_bytes());
    let _ = write!(
        s,
        ",\"version\":{},\"endian\":\"{}\",\"alignment\":{},\"data_offset\":{},\"file_size\":{},\"metadata\":",
        f.version(),
        if f.endian() == gguf::Endian::Big { "big" } else { "little" },
        f.alignment(),
        f.data_offset(),
        f.file_size()
    );
    json_list(&mut s, f.metadata().iter(), |o, (k, v)| {
        o.push_str("{\"key\":");
        json_str(o, k.as_bytes());
        let _ = write!(o, ",\"type\":\"{}\"", v.value_type().name());
        if let Value::Array(a) = v {
            let _ = write!(
                o,
                ",\"element_type\":\"{}\",\"len\":{}",
                a.element_type().name(),
                a.len()
            );
        }
        o.push_str(",\"value\":");
        json_value(o, v);
        o.push('}');
    });
    s.push_str(",\"tensors\":");
    json_list(&mut s, f.tensors().iter().enumerate(), |o, (i, t)| {
        let _ = write!(o, "{{\"index\":{i},\"name\":");
        json_str(o, t.name.as_bytes());
        let _ = write!(
            o,
            ",\"type\":\"{}\",\"shape\":{:?},\"offset\":{},\"file_offset\":{},\"bytes\":{}}}",
            t.ty,
            t.dims,
            t.offset,
            f.tensor_file_offset(t),
            t.size
        );
    });
    s.push_str("}\n");
    s
}
