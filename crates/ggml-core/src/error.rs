//! The crate's error type.

/// Errors of graph building, allocation and computation.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An op was given operands whose shapes or types it cannot take.
    #[error("{op}: {msg}")]
    Shape {
        /// The op being built.
        op: &'static str,
        /// What is wrong, with the shapes involved.
        msg: String,
    },
    /// A buffer could not be allocated.
    #[error("{name}: failed to allocate buffer of {size} bytes: {reason}")]
    Alloc {
        /// The buffer type or device.
        name: String,
        /// Bytes asked for.
        size: usize,
        /// Why it failed.
        reason: String,
    },
    /// A tensor was used before it had memory.
    #[error("tensor '{0}' has no data: it was neither placed nor allocated")]
    NoData(String),
    /// An access outside a buffer.
    #[error("{what}: range {offset}..{end} is outside a buffer of {size} bytes")]
    OutOfBounds {
        /// What was being accessed.
        what: String,
        /// First byte.
        offset: usize,
        /// One past the last byte.
        end: usize,
        /// Buffer size.
        size: usize,
    },
    /// A backend cannot run an op.
    #[error("{backend}: op {op} on tensor '{tensor}' is not supported")]
    Unsupported {
        /// The backend.
        backend: String,
        /// The op name.
        op: String,
        /// The node's name.
        tensor: String,
    },
    /// A device or backend failure.
    #[error("{0}")]
    Backend(String),
    /// Invalid quantized data or a length that is not a whole number of blocks.
    #[error("{0}")]
    Quant(String),
    /// The computation was stopped by an abort or eval callback.
    #[error("computation aborted")]
    Aborted,
    /// An allocator or scheduler was used against its contract.
    #[error("{0}")]
    Invalid(String),
}

/// The crate's result type.
pub type Result<T> = std::result::Result<T, Error>;
