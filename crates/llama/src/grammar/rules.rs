//! The compiled form of a grammar: rules as flat lists of elements, as
//! llama.cpp's `llama_grammar_element` lists.

/// The kind of one grammar element.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ElementKind {
    /// The end of a rule.
    End,
    /// The start of another alternative of the rule.
    Alt,
    /// A reference to the rule whose id is the value.
    RuleRef,
    /// A code point (or the first of a class's items).
    Char,
    /// The first item of a negated class (`[^...]`).
    CharNot,
    /// Turns the previous item into the range previous..=value.
    CharRngUpper,
    /// Another item of the same class.
    CharAlt,
    /// Any code point (`.`).
    CharAny,
    /// The token whose id is the value (`<[id]>`, `<text>`).
    Token,
    /// Any token but the one whose id is the value (`!<...>`).
    TokenNot,
}

/// One element of a rule: a kind and its value (code point, rule id or
/// token id).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Element {
    /// What the element is.
    pub kind: ElementKind,
    /// Its code point, rule id or token id.
    pub value: u32,
}

impl Element {
    /// An element of `kind` with `value`.
    pub const fn new(kind: ElementKind, value: u32) -> Self {
        Self { kind, value }
    }

    /// Whether this element ends an alternative (`End` or `Alt`).
    pub fn ends_sequence(self) -> bool {
        matches!(self.kind, ElementKind::End | ElementKind::Alt)
    }

    /// Whether this element starts a character item (a terminal matched
    /// against code points).
    pub fn starts_char(self) -> bool {
        matches!(
            self.kind,
            ElementKind::Char | ElementKind::CharNot | ElementKind::CharAny
        )
    }

    /// Whether this element is a token reference.
    pub fn is_token(self) -> bool {
        matches!(self.kind, ElementKind::Token | ElementKind::TokenNot)
    }
}

/// A parsed and checked grammar: every rule's elements, stored one after the
/// other in one list (each rule ends with an `End`), the rules' names and
/// the start rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grammar {
    pub(crate) elements: Vec<Element>,
    pub(crate) rule_starts: Vec<u32>,
    pub(crate) names: Vec<String>,
    pub(crate) root: u32,
}

impl Grammar {
    /// The number of rules (those written and those the parser made for
    /// groups and repetitions).
    pub fn n_rules(&self) -> usize {
        self.rule_starts.len()
    }

    /// The name of rule `id` (generated rules are named `parent_N`).
    pub fn rule_name(&self, id: usize) -> Option<&str> {
        self.names.get(id).map(String::as_str)
    }

    /// The id of the rule named `name`.
    pub fn rule_id(&self, name: &str) -> Option<usize> {
        self.names.iter().position(|n| n == name)
    }

    /// The elements of rule `id`, its final `End` included.
    pub fn rule(&self, id: usize) -> Option<&[Element]> {
        let start = *self.rule_starts.get(id)? as usize;
        let end = self
            .rule_starts
            .get(id + 1)
            .map_or(self.elements.len(), |&e| e as usize);
        Some(&self.elements[start..end])
    }

    /// The start rule's id.
    pub fn root(&self) -> usize {
        self.root as usize
    }

    /// The grammar written back in GBNF, one rule a line, as llama.cpp's
    /// grammar printer writes it (generated rules included).
    pub fn to_gbnf(&self) -> String {
        let mut out = String::new();
        for id in 0..self.n_rules() {
            let rule = self.rule(id).unwrap_or(&[]);
            out.push_str(&self.names[id]);
            out.push_str(" ::= ");
            for (i, e) in rule.iter().enumerate() {
                match e.kind {
                    ElementKind::End => break,
                    ElementKind::Alt => out.push_str("| "),
                    ElementKind::RuleRef => {
                        out.push_str(&self.names[e.value as usize]);
                        out.push(' ');
                    }
                    ElementKind::Char => {
                        out.push('[');
                        push_char(&mut out, e.value);
                    }
                    ElementKind::CharNot => {
                        out.push_str("[^");
                        push_char(&mut out, e.value);
                    }
                    ElementKind::CharRngUpper => {
                        out.push('-');
                        push_char(&mut out, e.value);
                    }
                    ElementKind::CharAlt => push_char(&mut out, e.value),
                    ElementKind::CharAny => out.push('.'),
                    ElementKind::Token => out.push_str(&format!("<[{}]> ", e.value)),
                    ElementKind::TokenNot => out.push_str(&format!("!<[{}]> ", e.value)),
                }
                let in_class = matches!(
                    e.kind,
                    ElementKind::Char
                        | ElementKind::CharNot
                        | ElementKind::CharAlt
                        | ElementKind::CharRngUpper
                        | ElementKind::CharAny
                );
                if in_class {
                    let next = rule.get(i + 1).map(|n| n.kind);
                    if !matches!(
                        next,
                        Some(
                            ElementKind::CharAlt | ElementKind::CharRngUpper | ElementKind::CharAny
                        )
                    ) {
                        out.push_str("] ");
                    }
                }
            }
            out.push('\n');
        }
        out
    }
}

/// Writes a code point as llama.cpp's printer does: printable ASCII as is,
/// anything else as `<U+XXXX>`.
fn push_char(out: &mut String, c: u32) {
    if (0x20..=0x7f).contains(&c) {
        out.push(char::from(c as u8));
    } else {
        out.push_str(&format!("<U+{c:04X}>"));
    }
}
