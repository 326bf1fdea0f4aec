//! The vocabulary module's error type.

/// Why a vocabulary could not be built. Every variant names the metadata key
/// (and where it applies the token) at fault.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VocabError {
    /// `tokenizer.ggml.model` names no tokenizer we know.
    #[error("unknown tokenizer '{0}' (tokenizer.ggml.model)")]
    UnknownModel(String),

    /// `tokenizer.ggml.model` names a tokenizer this crate does not implement.
    #[error("tokenizer '{0}' (tokenizer.ggml.model) is not supported")]
    UnsupportedModel(String),

    /// An RWKV vocabulary with neither a token for some byte nor an
    /// unknown token: text with that byte could not be tokenized.
    #[error("RWKV vocabulary (tokenizer.ggml.tokens) has no token for byte 0x{0:02x} and no unknown token")]
    RwkvByteMissing(u8),

    /// `tokenizer.ggml.pre` names no pre-tokenizer we know.
    #[error("unknown pre-tokenizer type '{0}' (tokenizer.ggml.pre)")]
    UnknownPreTokenizer(String),

    /// `tokenizer.ggml.pre` names a pre-tokenizer llama.cpp has and this
    /// crate does not.
    #[error("pre-tokenizer type '{0}' (tokenizer.ggml.pre) is not supported")]
    UnsupportedPreTokenizer(String),

    /// A key the vocabulary needs is absent.
    #[error("missing key {0}")]
    MissingKey(&'static str),

    /// A per-token array does not have one entry per token.
    #[error("{key} has {got} entries but tokenizer.ggml.tokens has {expected}")]
    LengthMismatch {
        /// The array's key.
        key: &'static str,
        /// Its length.
        got: usize,
        /// The number of tokens.
        expected: usize,
    },

    /// Two tokens have the same text.
    #[error("tokenizer.ggml.tokens: token {id} {text:?} has the same text as token {first}")]
    DuplicateToken {
        /// The later token.
        id: usize,
        /// The earlier token.
        first: usize,
        /// The text, lossily decoded.
        text: String,
    },

    /// More tokens than a token id can address.
    #[error("tokenizer.ggml.tokens has {0} tokens, more than a token id can address")]
    TooManyTokens(usize),

    /// A merge rule is not two token texts separated by a space.
    #[error(
        "tokenizer.ggml.merges: merge {index} {merge:?} is not two tokens separated by a space"
    )]
    MalformedMerge {
        /// Position of the merge (its rank).
        index: usize,
        /// The rule, lossily decoded.
        merge: String,
    },

    /// A merge rule names a text that is not a token.
    #[error("tokenizer.ggml.merges: merge {index} {merge:?} references unknown token {token:?}")]
    MergeUnknownToken {
        /// Position of the merge (its rank).
        index: usize,
        /// The rule, lossily decoded.
        merge: String,
        /// The part that is not a token.
        token: String,
    },

    /// A key holds a value that cannot be used.
    #[error("{key} is invalid: {reason}")]
    InvalidValue {
        /// The key.
        key: &'static str,
        /// What is wrong.
        reason: String,
    },

    /// A pre-tokenizer regex failed to compile (a bug, not a file problem).
    #[error("pre-tokenizer regex {regex:?} does not compile: {message}")]
    Regex {
        /// The regex as written.
        regex: String,
        /// The compiler's message.
        message: String,
    },

    /// A metadata key could not be read with the type the vocabulary needs.
    #[error("{key}: {source}")]
    Gguf {
        /// The key.
        key: String,
        /// What the GGUF reader reported.
        #[source]
        source: gguf::Error,
    },
}

/// Results of this module.
pub type Result<T> = std::result::Result<T, VocabError>;
