//! The crate's error type.

/// Errors of loading, placing and running a model.
#[derive(Debug, thiserror::Error)]
pub enum LlamaError {
    /// The GGUF file could not be read.
    #[error(transparent)]
    Gguf(#[from] gguf::Error),
    /// A graph, buffer or backend error.
    #[error(transparent)]
    Ggml(#[from] ggml_core::Error),
    /// The vocabulary could not be built.
    #[error(transparent)]
    Vocab(#[from] crate::vocab::VocabError),
    /// An I/O error with the file named.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// `general.architecture` names an architecture we do not know.
    #[error("unknown model architecture: '{0}'")]
    UnknownArch(String),
    /// A required metadata key is missing or has the wrong type.
    #[error("model metadata: {0}")]
    Metadata(String),
    /// The hyperparameters are inconsistent.
    #[error("invalid hyperparameters: {0}")]
    HParams(String),
    /// A tensor is missing, has the wrong shape or type.
    #[error("{0}")]
    Tensor(String),
    /// A tensor's data is invalid (NaN/Inf), found by check_tensors.
    #[error("tensor '{name}' has invalid data: {why}")]
    TensorData {
        /// The tensor.
        name: String,
        /// What is wrong.
        why: String,
    },
    /// A grammar that does not parse, or a token it cannot take.
    #[error(transparent)]
    Grammar(#[from] crate::grammar::GrammarError),
    /// A parameter has an invalid value.
    #[error("{0}")]
    InvalidParam(String),
    /// A mode exists in llama.cpp but is not implemented here yet.
    #[error("{0} is not supported yet")]
    NotSupported(String),
    /// The model and context do not fit the memory of the devices, even
    /// with the parameters `--fit` may change at their smallest.
    #[error("the model does not fit: {0}")]
    DoesNotFit(String),
    /// Loading was cancelled by the progress callback.
    #[error("model loading was cancelled")]
    Cancelled,
    /// A batch is invalid for the context.
    #[error("invalid batch: {0}")]
    Batch(String),
    /// Decoding failed (no room in the KV cache, backend failure).
    #[error("decode: {0}")]
    Decode(String),
    /// A LoRA adapter or control vector that cannot be used with the model.
    #[error("adapter '{path}': {why}")]
    Adapter {
        /// The adapter file.
        path: String,
        /// What is wrong.
        why: String,
    },
    /// A saved sequence state that cannot be read into this context
    /// (another model, another memory layout, a damaged file).
    #[error("sequence state: {0}")]
    State(String),
}

/// The crate's result type.
pub type Result<T> = std::result::Result<T, LlamaError>;
