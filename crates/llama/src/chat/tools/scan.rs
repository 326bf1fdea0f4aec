//! Text helpers shared by the parsers: where a marker starts, and how much
//! of a streaming reply may be shown without taking it back later.

/// The first position of any of `markers` in `text`, with the marker.
pub(crate) fn find_any<'m>(text: &str, markers: &[&'m str]) -> Option<(usize, &'m str)> {
    markers
        .iter()
        .filter_map(|m| text.find(m).map(|i| (i, *m)))
        .min_by_key(|(i, m)| (*i, usize::MAX - m.len()))
}

/// How much of `text` is safe to show while it streams: everything but a
/// tail that could still become one of `markers`, and trailing whitespace
/// (which a final parse may trim).
pub(crate) fn stable_len(text: &str, markers: &[&str]) -> usize {
    let mut cut = text.len();
    for (i, _) in text.char_indices() {
        let tail = &text[i..];
        if markers
            .iter()
            .any(|m| m.len() > tail.len() && m.starts_with(tail))
        {
            cut = i;
            break;
        }
    }
    text[..cut].trim_end().len()
}

/// `text` cut to what is safe to show when `partial`, else all of it.
pub(crate) fn shown<'a>(text: &'a str, markers: &[&str], partial: bool) -> &'a str {
    if partial {
        &text[..stable_len(text, markers)]
    } else {
        text
    }
}

/// Whether `text` is a proper prefix of `marker` (the start of a marker
/// still streaming).
pub(crate) fn is_marker_prefix(text: &str, marker: &str) -> bool {
    text.len() < marker.len() && marker.starts_with(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marker_in_the_making_is_held_back() {
        assert_eq!(stable_len("Hello <tool", &["<tool_call>"]), 5);
        assert_eq!(stable_len("Hello <b>", &["<tool_call>"]), 9);
        assert_eq!(stable_len("a<｜tool", &["<｜tool▁calls▁begin｜>"]), 1);
        assert_eq!(stable_len("text \n", &[]), 4);
        assert_eq!(find_any("x<a><ab>", &["<ab>", "<a>"]), Some((1, "<a>")));
    }
}
