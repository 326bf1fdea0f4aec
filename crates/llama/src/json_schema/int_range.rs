//! Integer bounds as grammar: the decimal numbers between a minimum and a
//! maximum (either may be absent), digit by digit, as llama.cpp writes them.

use std::fmt::Write;

/// The rule body (without the enclosing parentheses) for the integers in
/// `min ..= max`, where `i64::MIN` is no minimum and `i64::MAX` no maximum;
/// at least one bound is given and both are above `i64::MIN`, with
/// `min <= max`.
pub fn int_range(min: i64, max: i64) -> String {
    let mut out = String::new();
    build(min, max, &mut out, 16, true);
    out
}

fn digit_range(out: &mut String, from: u8, to: u8) {
    out.push('[');
    out.push(from as char);
    if from != to {
        out.push('-');
        out.push(to as char);
    }
    out.push(']');
}

fn more_digits(out: &mut String, min: usize, max: usize) {
    out.push_str("[0-9]");
    if min == max && min == 1 {
        return;
    }
    let _ = write!(out, "{{{min}");
    if max != min {
        out.push(',');
        if max != i32::MAX as usize {
            let _ = write!(out, "{max}");
        }
    }
    out.push('}');
}

/// The numbers from `from` to `to`, two digit strings of the same length.
fn uniform_range(out: &mut String, from: &[u8], to: &[u8]) {
    let mut i = 0;
    while i < from.len() && i < to.len() && from[i] == to[i] {
        i += 1;
    }
    if i > 0 {
        out.push('"');
        out.push_str(std::str::from_utf8(&from[..i]).unwrap_or_default());
        out.push('"');
    }
    if i < from.len() && i < to.len() {
        if i > 0 {
            out.push(' ');
        }
        let sub_len = from.len() - i - 1;
        if sub_len > 0 {
            let from_sub = &from[i + 1..];
            let to_sub = &to[i + 1..];
            let zeros = vec![b'0'; sub_len];
            let nines = vec![b'9'; sub_len];
            let mut to_reached = false;
            out.push('(');
            if from_sub == zeros.as_slice() {
                digit_range(out, from[i], to[i] - 1);
                out.push(' ');
                more_digits(out, sub_len, sub_len);
            } else {
                let _ = write!(out, "[{}] (", from[i] as char);
                uniform_range(out, from_sub, &nines);
                out.push(')');
                if from[i] < to[i] - 1 {
                    out.push_str(" | ");
                    if to_sub == nines.as_slice() {
                        digit_range(out, from[i] + 1, to[i]);
                        to_reached = true;
                    } else {
                        digit_range(out, from[i] + 1, to[i] - 1);
                    }
                    out.push(' ');
                    more_digits(out, sub_len, sub_len);
                }
            }
            if !to_reached {
                out.push_str(" | ");
                digit_range(out, to[i], to[i]);
                out.push(' ');
                uniform_range(out, &zeros, to_sub);
            }
            out.push(')');
        } else {
            let _ = write!(out, "[{}-{}]", from[i] as char, to[i] as char);
        }
    }
}

fn build(mut min: i64, max: i64, out: &mut String, decimals_left: usize, top_level: bool) {
    let has_min = min != i64::MIN;
    let has_max = max != i64::MAX;

    if has_min && has_max {
        if min < 0 && max < 0 {
            out.push_str("\"-\" (");
            build(-max, -min, out, decimals_left, true);
            out.push(')');
            return;
        }
        if min < 0 {
            out.push_str("\"-\" (");
            build(0, -min, out, decimals_left, true);
            out.push_str(") | ");
            min = 0;
        }
        let mut min_s = min.to_string().into_bytes();
        let max_s = max.to_string().into_bytes();
        for digits in min_s.len()..max_s.len() {
            uniform_range(out, &min_s, &vec![b'9'; digits]);
            min_s = std::iter::once(b'1')
                .chain(std::iter::repeat_n(b'0', digits))
                .collect();
            out.push_str(" | ");
        }
        uniform_range(out, &min_s, &max_s);
        return;
    }

    let less_decimals = decimals_left.saturating_sub(1).max(1);

    if has_min {
        if min < 0 {
            out.push_str("\"-\" (");
            build(i64::MIN, -min, out, decimals_left, false);
            out.push_str(") | [0] | [1-9] ");
            more_digits(out, 0, decimals_left - 1);
        } else if min == 0 {
            if top_level {
                out.push_str("[0] | [1-9] ");
                more_digits(out, 0, less_decimals);
            } else {
                more_digits(out, 1, decimals_left);
            }
        } else if min <= 9 {
            let c = b'0' + min as u8;
            let range_start = if top_level { b'1' } else { b'0' };
            if c > range_start {
                digit_range(out, range_start, c - 1);
                out.push(' ');
                more_digits(out, 1, less_decimals);
                out.push_str(" | ");
            }
            digit_range(out, c, b'9');
            out.push(' ');
            more_digits(out, 0, less_decimals);
        } else {
            let min_s = min.to_string().into_bytes();
            let len = min_s.len();
            let c = min_s[0];
            if c > b'1' {
                digit_range(out, if top_level { b'1' } else { b'0' }, c - 1);
                out.push(' ');
                more_digits(out, len, less_decimals);
                out.push_str(" | ");
            }
            digit_range(out, c, c);
            out.push_str(" (");
            let rest: i64 = std::str::from_utf8(&min_s[1..])
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            build(rest, i64::MAX, out, less_decimals, false);
            out.push(')');
            if c < b'9' {
                out.push_str(" | ");
                digit_range(out, c + 1, b'9');
                out.push(' ');
                more_digits(out, len - 1, less_decimals);
            }
        }
        return;
    }

    if has_max {
        if max >= 0 {
            if top_level {
                out.push_str("\"-\" [1-9] ");
                more_digits(out, 0, less_decimals);
                out.push_str(" | ");
            }
            build(0, max, out, decimals_left, true);
        } else {
            out.push_str("\"-\" (");
            build(-max, i64::MAX, out, decimals_left, false);
            out.push(')');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::int_range;

    #[test]
    fn a_closed_range_is_written_digit_by_digit() {
        assert_eq!(int_range(1, 5), "[1-5]");
        assert_eq!(int_range(0, 0), "\"0\"");
        assert_eq!(int_range(5, 30), "[5-9] | ([1-2] [0-9] | [3] \"0\")");
    }

    #[test]
    fn negative_bounds_take_a_minus_sign_before_the_digits() {
        assert_eq!(int_range(-5, -1), "\"-\" ([1-5])");
    }
}
