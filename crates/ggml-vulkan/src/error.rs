//! The crate's error type.

use ash::vk;

/// Errors of the Vulkan backend.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The Vulkan loader library could not be opened.
    #[error("no Vulkan loader: {0}")]
    Loader(String),
    /// A Vulkan call failed.
    #[error("{what}: {result}")]
    Vk {
        /// The call or the object being made.
        what: String,
        /// The Vulkan result code.
        result: vk::Result,
    },
    /// Device memory could not be allocated.
    #[error("{device}: failed to allocate {size} bytes: {reason}")]
    Alloc {
        /// The device (or buffer type) name.
        device: String,
        /// Bytes asked for.
        size: usize,
        /// Why it failed.
        reason: String,
    },
    /// A shader module is missing from the shaders crate.
    #[error("no SPIR-V module named '{0}'")]
    MissingShader(String),
    /// Anything else the backend cannot do.
    #[error("{0}")]
    Other(String),
}

/// The crate's result type.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// An error of a Vulkan call.
    pub(crate) fn vk(what: impl Into<String>, result: vk::Result) -> Error {
        Error::Vk {
            what: what.into(),
            result,
        }
    }
}

/// Maps a Vulkan result into [`Error::Vk`] naming the call.
pub(crate) trait VkContext<T> {
    fn ctx(self, what: &str) -> Result<T>;
}

impl<T> VkContext<T> for std::result::Result<T, vk::Result> {
    fn ctx(self, what: &str) -> Result<T> {
        self.map_err(|r| Error::vk(what, r))
    }
}

impl From<Error> for ggml_core::Error {
    fn from(e: Error) -> ggml_core::Error {
        match e {
            Error::Alloc {
                device,
                size,
                reason,
            } => ggml_core::Error::Alloc {
                name: device,
                size,
                reason,
            },
            other => ggml_core::Error::Backend(other.to_string()),
        }
    }
}
