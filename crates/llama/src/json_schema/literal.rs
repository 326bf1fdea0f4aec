//! GBNF string literals, escape lengths and the compact JSON text that
//! `const` and `enum` values are written as.

use serde_json::Value;

/// `s` as a GBNF string literal: quoted, with `\r`, `\n`, `"` and `\`
/// escaped.
pub fn format_literal(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '\r' => out.push_str("\\r"),
            '\n' => out.push_str("\\n"),
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The length of the GBNF escape at `pos` in `p` (`\xHH`, `\uHHHH`,
/// `\UHHHHHHHH`, or one of the single-character escapes the grammar parser
/// reads), or 0 when there is none.
pub fn escape_length(p: &[u8], pos: usize) -> usize {
    if pos + 1 >= p.len() || p[pos] != b'\\' {
        return 0;
    }
    let n_hex = match p[pos + 1] {
        b'x' => 2,
        b'u' => 4,
        b'U' => 8,
        b't' | b'r' | b'n' | b'\\' | b'"' | b'[' | b']' | b'-' => return 2,
        _ => return 0,
    };
    if pos + 2 + n_hex > p.len() {
        return 0;
    }
    if p[pos + 2..pos + 2 + n_hex]
        .iter()
        .all(u8::is_ascii_hexdigit)
    {
        2 + n_hex
    } else {
        0
    }
}

/// `v` as compact JSON text, written as llama.cpp's JSON library writes it:
/// no spaces, keys in document order, floats in their shortest form with
/// `e+XX` exponents outside `1e-5 .. 1e15`.
pub fn json_dump(v: &Value) -> String {
    let mut out = String::new();
    dump_into(v, &mut out);
    out
}

fn dump_into(v: &Value, out: &mut String) {
    match v {
        Value::Number(n) if n.is_f64() => out.push_str(&dump_float(n.as_f64().unwrap_or(0.0))),
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                dump_into(x, out);
            }
            out.push(']');
        }
        Value::Object(m) => {
            out.push('{');
            for (i, (k, x)) in m.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                dump_into(x, out);
            }
            out.push('}');
        }
        // Strings, integers, booleans and null are written alike.
        other => out.push_str(&other.to_string()),
    }
}

/// A finite double as the shortest digits that read back to it, placed as
/// llama.cpp's JSON library places them.
fn dump_float(x: f64) -> String {
    if !x.is_finite() {
        return "null".into();
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0.0" } else { "0.0" }.into();
    }
    // `{:e}` gives the shortest round-trip digits: "d.ddde±x".
    let sci = format!("{:e}", x.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let exp: i32 = exp.parse().unwrap_or(0);
    let k = digits.len() as i32;
    // The value is 0.digits * 10^n.
    let n = exp + 1;
    let mut s = String::new();
    if x < 0.0 {
        s.push('-');
    }
    if k <= n && n <= 15 {
        s.push_str(&digits);
        s.extend(std::iter::repeat_n('0', (n - k) as usize));
        s.push_str(".0");
    } else if 0 < n && n <= 15 {
        s.push_str(&digits[..n as usize]);
        s.push('.');
        s.push_str(&digits[n as usize..]);
    } else if -4 < n && n <= 0 {
        s.push_str("0.");
        s.extend(std::iter::repeat_n('0', (-n) as usize));
        s.push_str(&digits);
    } else {
        s.push_str(&digits[..1]);
        if k > 1 {
            s.push('.');
            s.push_str(&digits[1..]);
        }
        let e = n - 1;
        s.push('e');
        s.push(if e < 0 { '-' } else { '+' });
        let e = e.unsigned_abs();
        if e < 10 {
            s.push('0');
        }
        s.push_str(&e.to_string());
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_escape_quotes_backslashes_and_line_ends() {
        assert_eq!(format_literal("a\"b\\c\r\n"), r#""a\"b\\c\r\n""#);
    }

    #[test]
    fn floats_are_written_as_the_reference_json_library_writes_them() {
        for (x, s) in [
            (1.5, "1.5"),
            (1.0, "1.0"),
            (-2.25, "-2.25"),
            (0.001, "0.001"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1e15, "1e+15"),
            (1e14, "100000000000000.0"),
            (1e16, "1e+16"),
            (100.0, "100.0"),
            (0.1, "0.1"),
            (5e-324, "5e-324"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (1.25e100, "1.25e+100"),
            (123456.789, "123456.789"),
        ] {
            assert_eq!(dump_float(x), s, "{x}");
        }
    }

    #[test]
    fn escapes_are_measured_as_the_grammar_parser_reads_them() {
        assert_eq!(escape_length(br"\x41", 0), 4);
        assert_eq!(escape_length(br"\u00e9", 0), 6);
        assert_eq!(escape_length(br"\n", 0), 2);
        assert_eq!(escape_length(br"\d", 0), 0);
        assert_eq!(escape_length(br"\x4", 0), 0);
    }
}
