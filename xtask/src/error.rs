//! The error type of the developer tasks.

use std::path::PathBuf;

/// Everything a task can fail with. Messages name the flag, file or command
/// involved so that a failed run says what to change.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading or writing a GGUF file failed.
    #[error(transparent)]
    Gguf(#[from] gguf::Error),

    /// A quantizer or row-size computation of ggml-core failed.
    #[error("ggml-core: {0}")]
    Core(#[from] ggml_core::Error),

    /// Loading a model or decoding through the llama crate failed.
    #[error("llama: {0}")]
    Llama(#[from] llama::LlamaError),

    /// An I/O operation on a named path failed.
    #[error("'{}': {source}", path.display())]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// An I/O operation without a path (a stream or a thread) failed.
    #[error("I/O error: {0}")]
    Stream(#[from] std::io::Error),

    /// Flags or their combination make no sense.
    #[error("{0}")]
    Usage(String),

    /// A requested feature does not exist yet.
    #[error("not available yet: {0}")]
    Unavailable(String),

    /// An external command failed or could not be started.
    #[error("`{command}` {reason}")]
    Command {
        /// The command line.
        command: String,
        /// What went wrong.
        reason: String,
    },

    /// Assembling the GPU bundle failed (a missing build output, the size
    /// limit).
    #[error("bundle: {0}")]
    Bundle(String),

    /// Encoding a JSON report failed.
    #[error("JSON: {0}")]
    Json(#[from] serde_json::Error),
}

impl Error {
    /// An I/O error on `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Error {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    /// The command `line` could not be started.
    pub fn not_started(line: &str, source: std::io::Error) -> Error {
        Error::Command {
            command: line.to_string(),
            reason: format!("could not start: {source}"),
        }
    }
}

/// Result with the task error.
pub type Result<T> = std::result::Result<T, Error>;
