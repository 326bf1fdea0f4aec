//! Errors of grammar parsing, checking and matching.

use thiserror::Error;

/// What went wrong with a grammar: text that does not parse (with the line
/// and column where it stopped), a grammar that cannot be used, or a token
/// the grammar cannot take.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum GrammarError {
    /// The GBNF text does not parse. `line` and `column` count from 1;
    /// the column counts characters.
    #[error("grammar parse error at line {line}, column {column}: {message}")]
    Parse {
        /// The line of the offending text (1-based).
        line: usize,
        /// The column of the offending text (1-based, in characters).
        column: usize,
        /// What was expected, or what is wrong.
        message: String,
    },
    /// The grammar has no `root` rule.
    #[error("grammar has no '{0}' rule")]
    NoRoot(String),
    /// A rule can start with itself without consuming anything.
    #[error(
        "grammar is left-recursive at rule '{rule}' (line {line}, column {column}; not supported)"
    )]
    LeftRecursion {
        /// The rule (a generated rule is named after the rule it is in).
        rule: String,
        /// Where that rule is defined (or, for a generated rule, written).
        line: usize,
        /// The column there.
        column: usize,
    },
    /// A lazy grammar with a trigger pattern that is not a valid regular
    /// expression.
    #[error("grammar trigger pattern '{pattern}' is not a valid regular expression: {message}")]
    BadTrigger {
        /// The pattern as given.
        pattern: String,
        /// The regular expression parser's message.
        message: String,
    },
    /// A lazy grammar without any trigger.
    #[error("lazy grammar without any trigger")]
    NoTriggers,
    /// A token references a grammar could not take where it stood.
    #[error("token {token} ({piece:?}) does not fit the grammar")]
    Rejected {
        /// The token id.
        token: i32,
        /// The token's text, lossily decoded.
        piece: String,
    },
    /// A token would leave the grammar with more parse stacks alive than
    /// the matcher keeps (a deeply nested, ambiguous repetition).
    #[error(
        "token {token} leaves the grammar with more than {limit} parse stacks: the grammar is too ambiguous (nested repetitions such as x++)"
    )]
    TooAmbiguous {
        /// The token id.
        token: i32,
        /// The most stacks kept alive.
        limit: usize,
    },
    /// An end-of-generation token came where the grammar cannot end.
    #[error("end-of-generation token {0} came where the grammar cannot end")]
    EarlyEnd(i32),
}
