//! The crate's error type.

use std::path::PathBuf;

/// Everything that can go wrong while reading, validating or writing GGUF.
///
/// Format errors name the field and the absolute byte offset where the
/// problem was found, so that a broken file can be inspected with a hex
/// viewer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An I/O operation failed.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),

    /// A file could not be opened or created.
    #[error("cannot open '{}': {source}", path.display())]
    Open {
        /// The path that failed.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// The first four bytes are not `GGUF`.
    #[error("invalid magic '{}' at offset 0, expected 'GGUF'", String::from_utf8_lossy(.found).escape_debug())]
    BadMagic {
        /// The bytes found.
        found: Vec<u8>,
    },

    /// The version field holds a version this crate does not read, in
    /// either byte order.
    #[error("unsupported GGUF version {version} (0x{version:08x}) at offset 4: versions 1 to 3 are supported, in either byte order")]
    UnsupportedVersion {
        /// The version as read little-endian.
        version: u32,
    },

    /// The file ends before a field it declares.
    #[error("file truncated: {field} at offset {offset} needs {needed} bytes but only {available} remain")]
    Truncated {
        /// What was being read.
        field: String,
        /// Absolute byte offset of the field.
        offset: u64,
        /// Bytes the field needs.
        needed: u64,
        /// Bytes left in the file.
        available: u64,
    },

    /// A field holds a value the format does not allow.
    #[error("invalid {field} at offset {offset}: {reason}")]
    Invalid {
        /// The field.
        field: String,
        /// Absolute byte offset of the field.
        offset: u64,
        /// Why the value is rejected.
        reason: String,
    },

    /// A metadata key occurs twice.
    #[error("duplicate key '{key}' at offset {offset}")]
    DuplicateKey {
        /// The key.
        key: String,
        /// Absolute byte offset of the second occurrence.
        offset: u64,
    },

    /// A tensor name occurs twice.
    #[error("duplicate tensor name '{name}' at offset {offset}")]
    DuplicateTensor {
        /// The tensor name.
        name: String,
        /// Absolute byte offset of the second occurrence.
        offset: u64,
    },

    /// A tensor uses a type id that ggml once had and removed.
    #[error("tensor '{tensor}' at offset {offset} has type {id} ({type_name}), which ggml removed and can no longer load")]
    RemovedType {
        /// The tensor name.
        tensor: String,
        /// The type id.
        id: u32,
        /// ggml's former name for the type.
        type_name: &'static str,
        /// Absolute byte offset of the type field.
        offset: u64,
    },

    /// A tensor's bytes lie (partly) past the end of the file.
    #[error("tensor '{name}' data is not within the file bounds: the file may be truncated")]
    DataOutOfBounds {
        /// The tensor name.
        name: String,
    },

    /// A metadata key is absent. Callers treat this as "optional key unset".
    #[error("key not found: '{0}'")]
    KeyNotFound(String),

    /// A metadata value has another type than the one asked for.
    #[error("key '{key}' has type {found}, expected {expected}")]
    TypeMismatch {
        /// The key.
        key: String,
        /// The type asked for.
        expected: String,
        /// The type stored.
        found: String,
    },

    /// An integer value does not fit the type asked for.
    #[error("key '{key}' holds {value}, which does not fit in {target}")]
    OutOfRange {
        /// The key.
        key: String,
        /// The stored value.
        value: String,
        /// The type asked for.
        target: &'static str,
    },

    /// A string value is not valid UTF-8.
    #[error("key '{key}' holds a string that is not valid UTF-8{}", .index.map(|i| format!(" (element {i})")).unwrap_or_default())]
    InvalidUtf8 {
        /// The key.
        key: String,
        /// The array element, for string arrays.
        index: Option<usize>,
    },

    /// No tensor has this name.
    #[error("tensor not found: '{0}'")]
    TensorNotFound(String),

    /// Zero-copy tensor access on a file that was read without a mapping.
    #[error("the file is not memory-mapped: read tensor data through a reader instead")]
    NotMapped,

    /// A split model is inconsistent or incomplete.
    #[error("split model: {0}")]
    Split(String),

    /// The bytes given for a tensor do not match its declared size.
    #[error("tensor '{name}' expects {expected} bytes of data, got {got}")]
    TensorSize {
        /// The tensor name.
        name: String,
        /// Declared size in bytes.
        expected: u64,
        /// Bytes given.
        got: u64,
    },

    /// The writer was given something it cannot write or was used out of order.
    #[error("cannot write GGUF: {0}")]
    Writer(String),
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
