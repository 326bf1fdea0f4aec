//! The crate's error type.

/// Errors of the RPC client and server.
#[derive(Debug, thiserror::Error)]
pub enum RpcError {
    /// A socket operation failed (connection refused, reset, timed out).
    #[error("RPC {endpoint}: {what}: {source}")]
    Io {
        /// `host:port` of the peer.
        endpoint: String,
        /// What was being done.
        what: String,
        /// The cause.
        source: std::io::Error,
    },
    /// A message that does not follow the protocol.
    #[error("malformed RPC message: {0}")]
    Malformed(String),
    /// A well-formed request the server refuses (unknown buffer, bad bounds).
    #[error("RPC request rejected: {0}")]
    Rejected(String),
    /// An op or type that has no equivalent on the other side.
    #[error("RPC: {0}")]
    Unsupported(String),
    /// The peer speaks another protocol version.
    #[error("RPC {endpoint}: server speaks protocol {major}.{minor}.{patch}, this client 7.0.x")]
    Version {
        /// `host:port` of the peer.
        endpoint: String,
        /// Major version.
        major: u8,
        /// Minor version.
        minor: u8,
        /// Patch version.
        patch: u8,
    },
    /// An error of the local backend.
    #[error(transparent)]
    Core(#[from] ggml_core::Error),
}

impl From<RpcError> for ggml_core::Error {
    fn from(e: RpcError) -> ggml_core::Error {
        match e {
            RpcError::Core(c) => c,
            other => ggml_core::Error::Backend(other.to_string()),
        }
    }
}

/// The crate's result type.
pub type Result<T> = std::result::Result<T, RpcError>;
