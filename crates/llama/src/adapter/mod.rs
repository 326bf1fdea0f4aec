//! Adapters applied at run time over a model's weights: LoRA adapters
//! (`lora.rs`) and control vectors (`control_vector.rs`), placed next to
//! the weights they change (`buffers.rs`), the set a context applies
//! (`set.rs`) and the tools' flags (`args.rs`). The graph builder reads
//! the set: every matrix product of a weight with pairs becomes
//! `W x + sum(s * B (A x))`, and each layer's output in the control
//! vector's range gets its direction added.

pub mod args;
mod buffers;
mod control_vector;
mod lora;
mod set;

pub use args::{AdapterArgs, LoadedAdapters};
pub use control_vector::{ControlVector, Directions};
pub use lora::{LoraAdapter, LoraWeight};
pub use set::{AdapterSet, AppliedCvec};
