//! What starts a lazy grammar: a word, a token, or a regular expression
//! over the text generated so far (llama.cpp's `common_grammar_trigger` and
//! `llama_grammar_trigger_pattern`).

use regex::bytes::Regex;

use super::error::GrammarError;

/// A trigger of a lazy grammar.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum GrammarTrigger {
    /// This text anywhere in the output; the grammar takes the text from
    /// the word on.
    Word(String),
    /// This token id; the grammar takes the token.
    Token(i32),
    /// A regular expression found anywhere in the output; the grammar takes
    /// the text from its first non-empty capture group (or from the match)
    /// on.
    Pattern(String),
    /// A regular expression that must match the whole output (anchored
    /// with `^` and `$` when not already); the grammar takes the text from
    /// its first non-empty capture group (or from the start) on.
    PatternFull(String),
}

/// A compiled trigger pattern.
#[derive(Debug, Clone)]
pub(crate) struct TriggerPattern {
    /// The pattern as llama.cpp would hold it (words escaped, full patterns
    /// anchored).
    pattern: String,
    search: Regex,
    /// For patterns shaped `^...$`: the same, matched against the whole
    /// text.
    whole: Option<Regex>,
}

/// The regular expression of a word: its special characters escaped.
fn escape_word(word: &str) -> String {
    regex::escape(word)
}

/// `pattern` anchored at both ends, as llama.cpp's full patterns are.
fn anchor(pattern: &str) -> String {
    if pattern.is_empty() {
        return "^$".into();
    }
    let mut s = String::with_capacity(pattern.len() + 2);
    if !pattern.starts_with('^') {
        s.push('^');
    }
    s.push_str(pattern);
    if !pattern.ends_with('$') {
        s.push('$');
    }
    s
}

impl TriggerPattern {
    fn compile(pattern: String) -> Result<Self, GrammarError> {
        let bad = |e: regex::Error| GrammarError::BadTrigger {
            pattern: pattern.clone(),
            message: e.to_string(),
        };
        let search = Regex::new(&pattern).map_err(bad)?;
        let whole = if pattern.len() >= 2 && pattern.starts_with('^') && pattern.ends_with('$') {
            Some(Regex::new(&format!(r"\A(?:{pattern})\z")).map_err(bad)?)
        } else {
            None
        };
        Ok(Self {
            pattern,
            search,
            whole,
        })
    }

    /// The pattern's text.
    pub(crate) fn pattern(&self) -> &str {
        &self.pattern
    }

    /// Where in `text` the grammar starts, if the pattern is found: the
    /// start of the first non-empty capture group, else of the match.
    pub(crate) fn find(&self, text: &[u8]) -> Option<usize> {
        let start_of = |caps: regex::bytes::Captures<'_>| {
            (1..caps.len())
                .filter_map(|i| caps.get(i))
                .find(|m| !m.is_empty())
                .or_else(|| caps.get(0))
                .map(|m| m.start())
        };
        if let Some(whole) = &self.whole {
            if let Some(caps) = whole.captures(text) {
                return start_of(caps);
            }
        }
        self.search.captures(text).and_then(start_of)
    }
}

/// The trigger tokens and compiled patterns of a list of triggers, as
/// llama.cpp's common sampler turns them into the grammar's.
pub(crate) fn compile(
    triggers: &[GrammarTrigger],
) -> Result<(Vec<i32>, Vec<TriggerPattern>), GrammarError> {
    let mut tokens = Vec::new();
    let mut patterns = Vec::new();
    for t in triggers {
        match t {
            GrammarTrigger::Word(w) => patterns.push(TriggerPattern::compile(escape_word(w))?),
            GrammarTrigger::Token(id) => tokens.push(*id),
            GrammarTrigger::Pattern(p) => patterns.push(TriggerPattern::compile(p.clone())?),
            GrammarTrigger::PatternFull(p) => patterns.push(TriggerPattern::compile(anchor(p))?),
        }
    }
    Ok((tokens, patterns))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(t: GrammarTrigger) -> TriggerPattern {
        compile(&[t]).unwrap().1.remove(0)
    }

    #[test]
    fn words_are_literal() {
        let p = one(GrammarTrigger::Word("a.b(".into()));
        assert_eq!(p.find(b"xx a.b( yy"), Some(3));
        assert_eq!(p.find(b"xx aXb( yy"), None);
    }

    #[test]
    fn patterns_start_at_the_first_capture() {
        let p = one(GrammarTrigger::Pattern(r"[\s\S]*?(<tool>)[\s\S]*".into()));
        assert_eq!(p.find(b"hello <tool>{"), Some(6));
        let p = one(GrammarTrigger::Pattern("x+".into()));
        assert_eq!(p.find(b"abxxc"), Some(2));
    }

    #[test]
    fn full_patterns_match_the_whole_text() {
        let p = one(GrammarTrigger::PatternFull(r"\s*(\{)[\s\S]*".into()));
        assert_eq!(p.pattern(), r"^\s*(\{)[\s\S]*$");
        assert_eq!(p.find(b"  {\"a\""), Some(2));
        assert_eq!(p.find(b"x {"), None);
        assert_eq!(
            one(GrammarTrigger::PatternFull(String::new())).find(b""),
            Some(0)
        );
    }

    #[test]
    fn bad_pattern_is_an_error() {
        let e = compile(&[GrammarTrigger::Pattern("(".into())]).unwrap_err();
        assert!(matches!(e, GrammarError::BadTrigger { .. }), "{e}");
    }
}
