//! ggml-core: tensors and graphs, quant formats, backend interfaces and the
//! registry, allocators and the scheduler. The vocabulary mirrors ggml's.

pub mod alloc;
pub mod backend;
pub mod conformance;
pub mod error;
pub mod graph;
pub mod host;
pub mod op;
pub mod quants;
pub mod reference;
pub mod registry;
pub mod sched;
pub mod tensor;

pub use alloc::{DynAlloc, GraphAlloc, LinearAlloc, VBuffer};
pub use backend::{
    Backend, BackendReg, Buffer, BufferCommon, BufferType, BufferUsage, Device, DeviceCaps,
    DeviceKind, DeviceProps, Event, HostMem, Placement,
};
pub use error::{Error, Result};
pub use gguf::GgmlType as Type;
pub use graph::{Flags, Graph, Node, TensorId};
pub use op::{GluOp, Op, RopeMode, RopeParams, SortOrder, UnaryOp};
pub use quants::MATMUL_TYPES;
pub use sched::{EvalObserver, Scheduler};
pub use tensor::{TensorDesc, MAX_DIMS};
