//! The GBNF parser: llama.cpp's grammar language (`llama_grammar_parser`),
//! with its rewriting of groups and repetitions into generated rules, the
//! same rule ids, and errors that give line and column.

use std::collections::HashMap;

use super::error::GrammarError;
use super::rules::{Element, ElementKind as K, Grammar};

/// The most rules a repetition may produce, and the largest repetition
/// count (llama.cpp's `MAX_REPETITION_THRESHOLD`).
pub const MAX_REPETITION: u64 = 2000;

/// Turns the text of a token reference (`<text>`, angle brackets included)
/// into token ids.
pub type Tokenize<'a> = &'a dyn Fn(&str) -> Vec<i32>;

/// Parses GBNF text into a checked grammar whose start rule is `root`.
/// `tokenize` resolves `<text>` token references (which must give exactly
/// one token); without it only `<[id]>` references are allowed.
pub fn parse(
    text: &str,
    root: &str,
    tokenize: Option<Tokenize<'_>>,
) -> Result<Grammar, GrammarError> {
    let mut p = Parser {
        text,
        src: text.as_bytes(),
        tokenize,
        symbol_ids: HashMap::new(),
        rules: Vec::new(),
        first_use: HashMap::new(),
        defined_at: HashMap::new(),
    };
    let mut pos = p.space(0, true);
    while pos < p.src.len() {
        pos = p.rule(pos)?;
    }
    p.finish(root)
}

/// A snippet of the text at `pos`, for error messages.
fn found(src: &str, pos: usize) -> String {
    let rest = src.get(pos..).unwrap_or("");
    if rest.is_empty() {
        return "end of input".into();
    }
    let line = rest.split(['\n', '\r']).next().unwrap_or("");
    if line.is_empty() {
        return "end of line".into();
    }
    let mut s: String = line.chars().take(24).collect();
    if s.len() < line.len() {
        s.push_str("...");
    }
    format!("'{s}'")
}

/// The 1-based line and column (in characters) of byte offset `pos`.
pub(crate) fn line_col(src: &str, pos: usize) -> (usize, usize) {
    let pos = pos.min(src.len());
    let mut line = 1;
    let mut line_start = 0;
    let bytes = src.as_bytes();
    let mut i = 0;
    while i < pos {
        match bytes[i] {
            b'\n' => {
                line += 1;
                line_start = i + 1;
            }
            b'\r' if bytes.get(i + 1) != Some(&b'\n') => {
                line += 1;
                line_start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    let col = src
        .get(line_start..pos)
        .map_or(pos - line_start, |s| s.chars().count());
    (line, col + 1)
}

fn is_word(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'-'
}

struct Parser<'a> {
    text: &'a str,
    src: &'a [u8],
    tokenize: Option<Tokenize<'a>>,
    symbol_ids: HashMap<String, u32>,
    rules: Vec<Vec<Element>>,
    /// Where each symbol was first written, for errors about it.
    first_use: HashMap<u32, usize>,
    /// Where each written rule is defined.
    defined_at: HashMap<u32, usize>,
}

impl Parser<'_> {
    /// The byte at `i`, 0 past the end (the parser reads like llama.cpp's,
    /// over a NUL-terminated string).
    fn at(&self, i: usize) -> u8 {
        self.src.get(i).copied().unwrap_or(0)
    }

    fn err(&self, pos: usize, message: impl Into<String>) -> GrammarError {
        let (line, column) = line_col(self.text, pos);
        GrammarError::Parse {
            line,
            column,
            message: message.into(),
        }
    }

    fn expecting(&self, pos: usize, what: &str) -> GrammarError {
        self.err(
            pos,
            format!("expecting {what}, found {}", found(self.text, pos)),
        )
    }

    /// Skips blanks and comments, and line breaks when `newline_ok`.
    fn space(&self, mut pos: usize, newline_ok: bool) -> usize {
        loop {
            match self.at(pos) {
                b' ' | b'\t' => pos += 1,
                b'\r' | b'\n' if newline_ok => pos += 1,
                b'#' => {
                    while !matches!(self.at(pos), 0 | b'\r' | b'\n') {
                        pos += 1;
                    }
                }
                _ => return pos,
            }
        }
    }

    fn name_end(&self, pos: usize) -> Result<usize, GrammarError> {
        let mut end = pos;
        while is_word(self.at(end)) {
            end += 1;
        }
        if end == pos {
            return Err(self.expecting(pos, "a rule name"));
        }
        Ok(end)
    }

    fn int_end(&self, pos: usize) -> Result<usize, GrammarError> {
        let mut end = pos;
        while self.at(end).is_ascii_digit() {
            end += 1;
        }
        if end == pos {
            return Err(self.expecting(pos, "an integer"));
        }
        Ok(end)
    }

    fn int(&self, pos: usize, end: usize) -> Result<u64, GrammarError> {
        self.text[pos..end]
            .parse::<u64>()
            .map_err(|_| self.err(pos, "integer too large"))
    }

    /// The id of the symbol `name`, made on first use.
    fn symbol_id(&mut self, name: &str, pos: usize) -> u32 {
        let next = self.symbol_ids.len() as u32;
        let id = *self.symbol_ids.entry(name.to_string()).or_insert(next);
        self.first_use.entry(id).or_insert(pos);
        id
    }

    /// A new symbol for a rule generated inside rule `base`, named
    /// `base_N` (N: its id), as llama.cpp names them.
    fn generate_symbol_id(&mut self, base: &str, pos: usize) -> u32 {
        let next = self.symbol_ids.len() as u32;
        self.symbol_ids.insert(format!("{base}_{next}"), next);
        self.first_use.entry(next).or_insert(pos);
        next
    }

    fn add_rule(&mut self, id: u32, rule: Vec<Element>) {
        let id = id as usize;
        if self.rules.len() <= id {
            self.rules.resize(id + 1, Vec::new());
        }
        self.rules[id] = rule;
    }

    /// One character of a literal or class: an escape or a UTF-8 code point.
    fn char(&self, pos: usize) -> Result<(u32, usize), GrammarError> {
        match self.at(pos) {
            b'\\' => {
                let hex = |n: usize| -> Result<(u32, usize), GrammarError> {
                    let start = pos + 2;
                    let digits = self.src.get(start..start + n);
                    let value = digits
                        .filter(|d| d.iter().all(u8::is_ascii_hexdigit))
                        .and_then(|d| u32::from_str_radix(std::str::from_utf8(d).ok()?, 16).ok());
                    match value {
                        Some(v) => Ok((v, start + n)),
                        None => Err(self.expecting(start, &format!("{n} hex digits"))),
                    }
                };
                match self.at(pos + 1) {
                    b'x' => hex(2),
                    b'u' => hex(4),
                    b'U' => hex(8),
                    b't' => Ok((u32::from('\t'), pos + 2)),
                    b'r' => Ok((u32::from('\r'), pos + 2)),
                    b'n' => Ok((u32::from('\n'), pos + 2)),
                    c @ (b'\\' | b'"' | b'[' | b']' | b'-') => Ok((u32::from(c), pos + 2)),
                    0 => Err(self.err(pos, "unexpected end of input after '\\'")),
                    _ => Err(self.err(
                        pos,
                        format!(
                            "unknown escape {} (known: \\x \\u \\U \\t \\r \\n \\\\ \\\" \\[ \\] \\-)",
                            found(self.text, pos)
                        ),
                    )),
                }
            }
            0 => Err(self.err(pos, "unexpected end of input")),
            _ => {
                // The source is a str, so `pos` starts a whole code point.
                let c = self.text[pos..]
                    .chars()
                    .next()
                    .ok_or_else(|| self.err(pos, "unexpected end of input"))?;
                Ok((u32::from(c), pos + c.len_utf8()))
            }
        }
    }

    /// A token reference at `pos` (which holds `<`): `<[id]>` or `<text>`.
    fn token(&self, pos: usize) -> Result<(u32, usize), GrammarError> {
        if self.at(pos) != b'<' {
            return Err(self.expecting(pos, "'<'"));
        }
        let mut p = pos + 1;
        if self.at(p) == b'[' {
            p += 1;
            let end = self.int_end(p)?;
            let id = self.int(p, end)?;
            let id = u32::try_from(id).map_err(|_| self.err(p, "token id too large"))?;
            p = end;
            if self.at(p) != b']' {
                return Err(self.expecting(p, "']'"));
            }
            p += 1;
            if self.at(p) != b'>' {
                return Err(self.expecting(p, "'>'"));
            }
            return Ok((id, p + 1));
        }
        let Some(tokenize) = self.tokenize else {
            return Err(self.err(
                pos,
                "a token reference by text needs a vocabulary (use <[id]>)",
            ));
        };
        while !matches!(self.at(p), 0 | b'>') {
            p += 1;
        }
        if self.at(p) != b'>' {
            return Err(self.expecting(p, "'>'"));
        }
        p += 1;
        let text = &self.text[pos..p];
        let ids = tokenize(text);
        match ids.as_slice() {
            &[id] => Ok((id as u32, p)),
            _ => Err(self.err(
                pos,
                format!(
                    "token reference {text} is not exactly one token (it is {})",
                    ids.len()
                ),
            )),
        }
    }

    fn rule(&mut self, pos: usize) -> Result<usize, GrammarError> {
        let name_end = self.name_end(pos)?;
        let name = self.text[pos..name_end].to_string();
        let mut p = self.space(name_end, false);
        let id = self.symbol_id(&name, pos);
        self.defined_at.entry(id).or_insert(pos);
        if !self.src[p..].starts_with(b"::=") {
            return Err(self.expecting(p, "::="));
        }
        p = self.space(p + 3, true);
        p = self.alternates(p, &name, id, false)?;
        match self.at(p) {
            b'\r' => p += if self.at(p + 1) == b'\n' { 2 } else { 1 },
            b'\n' => p += 1,
            0 if p >= self.src.len() => {}
            _ => return Err(self.expecting(p, "a newline or the end of the rule")),
        }
        Ok(self.space(p, true))
    }

    fn alternates(
        &mut self,
        pos: usize,
        rule_name: &str,
        rule_id: u32,
        nested: bool,
    ) -> Result<usize, GrammarError> {
        let mut rule = Vec::new();
        let mut p = self.sequence(pos, rule_name, &mut rule, nested)?;
        while self.at(p) == b'|' {
            rule.push(Element::new(K::Alt, 0));
            p = self.space(p + 1, true);
            p = self.sequence(p, rule_name, &mut rule, nested)?;
        }
        rule.push(Element::new(K::End, 0));
        self.add_rule(rule_id, rule);
        Ok(p)
    }

    fn sequence(
        &mut self,
        pos: usize,
        rule_name: &str,
        rule: &mut Vec<Element>,
        nested: bool,
    ) -> Result<usize, GrammarError> {
        let mut last_sym_start = rule.len();
        let mut n_prev_rules: u64 = 1;
        let mut p = pos;
        loop {
            let c = self.at(p);
            match c {
                b'"' => {
                    let open = p;
                    p += 1;
                    last_sym_start = rule.len();
                    n_prev_rules = 1;
                    while self.at(p) != b'"' {
                        if p >= self.src.len() {
                            return Err(
                                self.err(open, "unterminated string literal (expecting '\"')")
                            );
                        }
                        let (ch, next) = self.char(p)?;
                        p = next;
                        rule.push(Element::new(K::Char, ch));
                    }
                    p = self.space(p + 1, nested);
                }
                b'[' => {
                    let open = p;
                    p += 1;
                    let mut start = K::Char;
                    if self.at(p) == b'^' {
                        p += 1;
                        start = K::CharNot;
                    }
                    last_sym_start = rule.len();
                    n_prev_rules = 1;
                    while self.at(p) != b']' {
                        if p >= self.src.len() {
                            return Err(
                                self.err(open, "unterminated character class (expecting ']')")
                            );
                        }
                        let (ch, next) = self.char(p)?;
                        p = next;
                        let kind = if last_sym_start < rule.len() {
                            K::CharAlt
                        } else {
                            start
                        };
                        rule.push(Element::new(kind, ch));
                        if self.at(p) == b'-' && self.at(p + 1) != b']' {
                            if p + 1 >= self.src.len() {
                                return Err(
                                    self.err(open, "unterminated character class (expecting ']')")
                                );
                            }
                            let (end, next) = self.char(p + 1)?;
                            p = next;
                            rule.push(Element::new(K::CharRngUpper, end));
                        }
                    }
                    p = self.space(p + 1, nested);
                }
                b'<' | b'!' => {
                    let mut kind = K::Token;
                    if c == b'!' {
                        kind = K::TokenNot;
                        p += 1;
                    }
                    let (id, end) = self.token(p)?;
                    last_sym_start = rule.len();
                    n_prev_rules = 1;
                    rule.push(Element::new(kind, id));
                    p = self.space(end, nested);
                }
                c if is_word(c) => {
                    let end = self.name_end(p)?;
                    let name = self.text[p..end].to_string();
                    let id = self.symbol_id(&name, p);
                    p = self.space(end, nested);
                    last_sym_start = rule.len();
                    n_prev_rules = 1;
                    rule.push(Element::new(K::RuleRef, id));
                }
                b'(' => {
                    let open = p;
                    p = self.space(p + 1, true);
                    let n_before = self.symbol_ids.len() as u64;
                    let sub = self.generate_symbol_id(rule_name, open);
                    p = self.alternates(p, rule_name, sub, true)?;
                    n_prev_rules = (self.symbol_ids.len() as u64)
                        .saturating_sub(n_before)
                        .max(1);
                    last_sym_start = rule.len();
                    rule.push(Element::new(K::RuleRef, sub));
                    if self.at(p) != b')' {
                        return Err(self.expecting(p, "')'"));
                    }
                    p = self.space(p + 1, nested);
                }
                b'.' => {
                    last_sym_start = rule.len();
                    n_prev_rules = 1;
                    rule.push(Element::new(K::CharAny, 0));
                    p = self.space(p + 1, nested);
                }
                b'*' | b'+' | b'?' => {
                    let op = p;
                    p = self.space(p + 1, nested);
                    let (min, max) = match c {
                        b'*' => (0, None),
                        b'+' => (1, None),
                        _ => (0, Some(1)),
                    };
                    self.repeat(
                        op,
                        rule_name,
                        rule,
                        last_sym_start,
                        &mut n_prev_rules,
                        min,
                        max,
                    )?;
                }
                b'{' => {
                    let op = p;
                    p = self.space(p + 1, nested);
                    if !self.at(p).is_ascii_digit() {
                        return Err(self.expecting(p, "an integer"));
                    }
                    let end = self.int_end(p)?;
                    let min = self.int(p, end)?;
                    p = self.space(end, nested);
                    let mut max = None;
                    match self.at(p) {
                        b'}' => {
                            max = Some(min);
                            p = self.space(p + 1, nested);
                        }
                        b',' => {
                            p = self.space(p + 1, nested);
                            if self.at(p).is_ascii_digit() {
                                let end = self.int_end(p)?;
                                max = Some(self.int(p, end)?);
                                p = self.space(end, nested);
                            }
                            if self.at(p) != b'}' {
                                return Err(self.expecting(p, "'}'"));
                            }
                            p = self.space(p + 1, nested);
                        }
                        _ => return Err(self.expecting(p, "',' or '}'")),
                    }
                    if min > MAX_REPETITION {
                        return Err(self.err(
                            op,
                            format!("repetition count {min} exceeds the limit of {MAX_REPETITION}"),
                        ));
                    }
                    if let Some(m) = max {
                        if m < min {
                            return Err(self.err(
                                op,
                                format!("repetition maximum {m} is less than its minimum {min}"),
                            ));
                        }
                    }
                    // As llama.cpp: a maximum over the limit means no maximum.
                    let max = max.filter(|&m| m <= MAX_REPETITION);
                    self.repeat(
                        op,
                        rule_name,
                        rule,
                        last_sym_start,
                        &mut n_prev_rules,
                        min,
                        max,
                    )?;
                }
                _ => break,
            }
        }
        Ok(p)
    }

    /// Rewrites the item at `rule[last_sym_start..]` repeated `min..=max`
    /// times (no maximum: `None`), as llama.cpp does:
    /// `S{m,n}` becomes m copies of S then `S'(n-m)` with
    /// `S'(x) ::= S S'(x-1) |` ... `S'(1) ::= S |`; `S{m,}` becomes m copies
    /// then `S' ::= S S' |`.
    #[allow(clippy::too_many_arguments)]
    fn repeat(
        &mut self,
        op: usize,
        rule_name: &str,
        rule: &mut Vec<Element>,
        last_sym_start: usize,
        n_prev_rules: &mut u64,
        min: u64,
        max: Option<u64>,
    ) -> Result<(), GrammarError> {
        if last_sym_start == rule.len() {
            return Err(self.err(op, "expecting an item before */+/?/{"));
        }
        let prev: Vec<Element> = rule[last_sym_start..].to_vec();
        let total = match max {
            Some(m) if m > 0 => m,
            _ if min > 0 => min,
            _ => 1,
        };
        if n_prev_rules.saturating_mul(total) > MAX_REPETITION {
            return Err(self.err(
                op,
                format!(
                    "this repetition would make more than {MAX_REPETITION} rules; use fewer repetitions or a simpler item"
                ),
            ));
        }
        if min == 0 {
            rule.truncate(last_sym_start);
        } else {
            for _ in 1..min {
                rule.extend_from_slice(&prev);
            }
        }
        let n_opt = match max {
            None => 1,
            Some(m) => m - min,
        };
        let mut last_rec = 0u32;
        for i in 0..n_opt {
            let mut rec = prev.clone();
            let id = self.generate_symbol_id(rule_name, op);
            if i > 0 || max.is_none() {
                rec.push(Element::new(
                    K::RuleRef,
                    if max.is_none() { id } else { last_rec },
                ));
            }
            rec.push(Element::new(K::Alt, 0));
            rec.push(Element::new(K::End, 0));
            self.add_rule(id, rec);
            last_rec = id;
        }
        if n_opt > 0 {
            rule.push(Element::new(K::RuleRef, last_rec));
        }
        *n_prev_rules = n_prev_rules.saturating_mul(total);
        Ok(())
    }

    /// The name of symbol `id`.
    fn name_of(&self, id: u32) -> String {
        self.symbol_ids
            .iter()
            .find(|(_, &v)| v == id)
            .map_or_else(|| format!("#{id}"), |(k, _)| k.clone())
    }

    /// An error about symbol `id`, placed where it was first written.
    fn undefined(&self, id: u32) -> GrammarError {
        let pos = self.first_use.get(&id).copied().unwrap_or(0);
        self.err(pos, format!("undefined rule '{}'", self.name_of(id)))
    }

    /// Checks that every referenced rule is defined, that `root` exists and
    /// that no rule is left-recursive; flattens the rules.
    fn finish(self, root: &str) -> Result<Grammar, GrammarError> {
        // Symbols used but never defined (beyond the last rule, or holes).
        let n_symbols = self.symbol_ids.len();
        let mut order: Vec<u32> = (0..n_symbols as u32).collect();
        order.sort_by_key(|id| self.first_use.get(id).copied().unwrap_or(usize::MAX));
        for id in order {
            if self.rules.get(id as usize).is_none_or(Vec::is_empty) {
                return Err(self.undefined(id));
            }
        }
        let Some(&root_id) = self.symbol_ids.get(root) else {
            return Err(GrammarError::NoRoot(root.to_string()));
        };
        let mut names = vec![String::new(); self.rules.len()];
        for (name, &id) in &self.symbol_ids {
            if let Some(slot) = names.get_mut(id as usize) {
                slot.clone_from(name);
            }
        }
        if let Some(bad) = left_recursion(&self.rules) {
            let at = self
                .defined_at
                .get(&(bad as u32))
                .or_else(|| self.first_use.get(&(bad as u32)))
                .copied()
                .unwrap_or(0);
            let (line, column) = line_col(self.text, at);
            return Err(GrammarError::LeftRecursion {
                rule: names[bad].clone(),
                line,
                column,
            });
        }
        let mut elements = Vec::new();
        let mut rule_starts = Vec::with_capacity(self.rules.len());
        for rule in &self.rules {
            rule_starts.push(elements.len() as u32);
            elements.extend_from_slice(rule);
        }
        Ok(Grammar {
            elements,
            rule_starts,
            names,
            root: root_id,
        })
    }
}

/// The first rule found to be left-recursive (a rule that can reach itself
/// through leftmost references without consuming anything). A depth-first
/// search as llama.cpp's, kept on a heap stack so that long chains of
/// rules cannot overflow the thread's stack; rules already cleared are not
/// searched again.
fn left_recursion(rules: &[Vec<Element>]) -> Option<usize> {
    let n = rules.len();
    let mut visited = vec![false; n];
    let mut in_progress = vec![false; n];
    let mut may_be_empty = vec![false; n];
    // Frames: (rule, next element to look at, whether it is leftmost).
    let mut frames: Vec<(usize, usize, bool)> = Vec::new();
    for start in 0..n {
        if visited[start] {
            continue;
        }
        in_progress[start] = true;
        may_be_empty[start] = has_empty_alternative(&rules[start]);
        frames.push((start, 0, true));
        while let Some(frame) = frames.last_mut() {
            let (i, j, leftmost) = *frame;
            let rule = &rules[i];
            if j == rule.len() {
                in_progress[i] = false;
                visited[i] = true;
                frames.pop();
                // The parent goes on past its reference to `i`.
                if let Some(parent) = frames.last_mut() {
                    if !may_be_empty[i] {
                        parent.2 = false;
                    }
                    parent.1 += 1;
                }
                continue;
            }
            let e = rule[j];
            if e.kind == K::RuleRef && leftmost {
                let r = e.value as usize;
                if in_progress[r] {
                    return Some(r);
                }
                if visited[r] {
                    if !may_be_empty[r] {
                        frame.2 = false;
                    }
                    frame.1 += 1;
                } else {
                    in_progress[r] = true;
                    may_be_empty[r] = has_empty_alternative(&rules[r]);
                    frames.push((r, 0, true));
                }
            } else {
                frame.2 = e.ends_sequence();
                frame.1 += 1;
            }
        }
    }
    None
}

/// Whether one of the rule's alternatives is empty.
fn has_empty_alternative(rule: &[Element]) -> bool {
    let mut at_start = true;
    for e in rule {
        if e.ends_sequence() {
            if at_start {
                return true;
            }
            at_start = true;
        } else {
            at_start = false;
        }
    }
    false
}
