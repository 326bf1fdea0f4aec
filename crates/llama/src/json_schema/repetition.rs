//! Repetition of a rule between bounds, with an optional separator, written
//! with GBNF's `?`, `*`, `+` and `{m,n}`.

/// `max == None` is unbounded.
pub fn build_repetition(item: &str, min: u32, max: Option<u32>, separator: &str) -> String {
    if max == Some(0) {
        return String::new();
    }
    if min == 0 && max == Some(1) {
        return format!("{item}?");
    }
    if separator.is_empty() {
        return match (min, max) {
            (1, None) => format!("{item}+"),
            (0, None) => format!("{item}*"),
            (m, None) => format!("{item}{{{m},}}"),
            (m, Some(n)) => format!("{item}{{{m},{n}}}"),
        };
    }
    let rest = build_repetition(
        &format!("({separator} {item})"),
        min.saturating_sub(1),
        max.map(|n| n - 1),
        "",
    );
    let result = format!("{item} {rest}");
    if min == 0 {
        format!("({result})?")
    } else {
        result
    }
}

#[cfg(test)]
mod tests {
    use super::build_repetition;

    #[test]
    fn bounds_pick_the_shortest_operator() {
        assert_eq!(build_repetition("x", 0, Some(1), ""), "x?");
        assert_eq!(build_repetition("x", 0, None, ""), "x*");
        assert_eq!(build_repetition("x", 1, None, ""), "x+");
        assert_eq!(build_repetition("x", 2, None, ""), "x{2,}");
        assert_eq!(build_repetition("x", 2, Some(5), ""), "x{2,5}");
        assert_eq!(build_repetition("x", 3, Some(0), ""), "");
    }

    #[test]
    fn separators_repeat_after_the_first_item() {
        assert_eq!(
            build_repetition("x", 0, None, "\",\" space"),
            "(x (\",\" space x)*)?"
        );
        assert_eq!(
            build_repetition("x", 2, Some(3), "\",\" space"),
            "x (\",\" space x){1,2}"
        );
    }
}
