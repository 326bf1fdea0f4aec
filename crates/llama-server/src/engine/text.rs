//! Generated text of a slot: bytes of tokens joined into UTF-8, stop strings
//! found across token boundaries, and text held back while it could still
//! be the start of a stop string.

/// Text of one generation.
#[derive(Debug, Default)]
pub struct TextState {
    text: String,
    pending: Vec<u8>,
    sent: usize,
    stop: Vec<String>,
}

impl TextState {
    /// A state that ends at any of `stop`.
    pub fn new(stop: Vec<String>) -> Self {
        Self {
            stop: stop.into_iter().filter(|s| !s.is_empty()).collect(),
            ..Self::default()
        }
    }

    /// Appends a token's bytes. Returns the stop string if one now appears
    /// (the text is cut before it).
    pub fn push(&mut self, piece: &[u8]) -> Option<String> {
        self.pending.extend_from_slice(piece);
        let keep = incomplete_tail(&self.pending);
        let done = self.pending.len() - keep;
        self.text
            .push_str(&String::from_utf8_lossy(&self.pending[..done]));
        self.pending.drain(..done);
        let longest = self.stop.iter().map(String::len).max().unwrap_or(0);
        let from = floor_char(&self.text, self.sent.saturating_sub(longest));
        let found = self
            .stop
            .iter()
            .filter_map(|s| self.text[from..].find(s.as_str()).map(|i| (from + i, s)))
            .min_by_key(|(i, _)| *i);
        if let Some((at, word)) = found {
            let word = word.clone();
            self.text.truncate(at);
            self.pending.clear();
            return Some(word);
        }
        None
    }

    /// Text that can be sent now: everything not sent, except a tail that
    /// may begin a stop string (or all of it when `final_`).
    pub fn take(&mut self, final_: bool) -> String {
        if final_ && !self.pending.is_empty() {
            self.text.push_str(&String::from_utf8_lossy(&self.pending));
            self.pending.clear();
        }
        let mut end = self.text.len();
        if !final_ {
            let tail = &self.text[self.sent..];
            let hold = self
                .stop
                .iter()
                .map(|s| partial_overlap(tail, s))
                .max()
                .unwrap_or(0);
            end = floor_char(&self.text, end - hold);
        }
        let out = self.text[self.sent..end].to_string();
        self.sent = end;
        out
    }

    /// All text so far (without any stop string).
    pub fn text(&self) -> &str {
        &self.text
    }
}

/// Length of the longest suffix of `text` that is a proper prefix of `stop`.
fn partial_overlap(text: &str, stop: &str) -> usize {
    let max = text.len().min(stop.len().saturating_sub(1));
    (1..=max)
        .rev()
        .find(|&n| {
            text.is_char_boundary(text.len() - n)
                && stop
                    .as_bytes()
                    .starts_with(&text.as_bytes()[text.len() - n..])
        })
        .unwrap_or(0)
}

/// Bytes at the end of `b` that start a UTF-8 character not yet complete.
fn incomplete_tail(b: &[u8]) -> usize {
    for back in 1..=b.len().min(3) {
        let c = b[b.len() - back];
        if c & 0xC0 == 0x80 {
            continue;
        }
        let need = match c {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => return 0,
        };
        return if need > back { back } else { 0 };
    }
    0
}

fn floor_char(s: &str, mut i: usize) -> usize {
    i = i.min(s.len());
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_strings_across_tokens_are_cut_and_held_back() {
        let mut t = TextState::new(vec!["END".into()]);
        assert_eq!(t.push(b"hello E"), None);
        assert_eq!(t.take(false), "hello ");
        assert_eq!(t.push(b"N"), None);
        assert_eq!(t.take(false), "");
        assert_eq!(t.push(b"D more"), Some("END".into()));
        assert_eq!(t.take(true), "");
        assert_eq!(t.text(), "hello ");
    }

    #[test]
    fn a_false_start_of_a_stop_string_is_released() {
        let mut t = TextState::new(vec!["END".into()]);
        t.push(b"a EN");
        assert_eq!(t.take(false), "a ");
        t.push(b"x");
        assert_eq!(t.take(false), "ENx");
    }

    #[test]
    fn split_characters_wait_for_their_bytes() {
        let mut t = TextState::new(vec![]);
        let e = "é".as_bytes();
        t.push(&e[..1]);
        assert_eq!(t.take(false), "");
        t.push(&e[1..]);
        assert_eq!(t.take(false), "é");
        t.push(&[0xE2, 0x82]);
        assert_eq!(t.take(true), "\u{FFFD}");
    }
}
