//! Vulkan compute backend: devices, buffers, transfers and the ops of the
//! llama and qwen2 graphs as compute shaders (from the `shaders` crate).
//!
//! [`register`] adds the backend ("Vulkan") to ggml-core's registry with one
//! device per physical device (`Vulkan0`, `Vulkan1`, ...). Discrete GPUs are
//! [`ggml_core::DeviceKind::Gpu`], integrated and software ones
//! [`ggml_core::DeviceKind::IGpu`]. The environment tunes it (see
//! [`Options::from_env`]):
//!
//! * `GGML_VK_ALLOW_CPU_DEVICES=1`: also expose software devices (lavapipe);
//! * `GGML_VK_VISIBLE_DEVICES=1,0`: pick and order devices (repeats allowed);
//! * `GGML_VK_VALIDATE=1`: enable the Khronos validation layer;
//! * `GGML_VK_MAX_BUFFER_SIZE`, `GGML_VK_MAX_BINDING_SIZE`,
//!   `GGML_VK_FORCE_STAGING`, `GGML_VK_DISABLE_SUBGROUPS`: testing knobs;
//! * `GGML_VK_DISABLE_FUSION=1` (or `rms_norm,multi,add,glu`): record the
//!   graph's nodes one dispatch each instead of fusing them;
//! * `GGML_VK_DISABLE_REPLAY=1`: record an unchanged graph again instead of
//!   submitting its command buffers again;
//! * `GGML_VK_DISABLE_INTEGER_DOT=1`: no integer dot products even where
//!   the device has them;
//! * `GGML_VK_PERF_LOGGER=1`: GPU time per shader, dispatches and host
//!   time per graph.
//!
//! Without a Vulkan loader or driver, nothing is registered and the reason
//! is logged once (and kept in [`VulkanReg::unavailable_reason`]).

mod backend;
mod buffer;
mod device;
mod error;
mod event;
mod instance;
mod logical;
mod ops;
mod options;
mod pipeline;
mod registry;
mod transfer;

pub use backend::VulkanBackend;
pub use buffer::{VkBuffer, VkBufferType};
pub use device::VulkanDevice;
pub use error::{Error, Result};
pub use event::VkEvent;
pub use instance::take_validation_errors;
pub use logical::MAX_BUFFER_SIZE;
pub use options::{Fusions, Options};
pub use registry::{backend, register, VulkanReg};
