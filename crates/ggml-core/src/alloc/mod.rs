//! Memory allocators, as ggml has them:
//!
//! - [`LinearAlloc`] places tensors one after another in buffers of a buffer
//!   type, opening a new buffer when the type's `max_size` would be exceeded
//!   (model weights, KV caches).
//! - [`DynAlloc`] hands out and takes back ranges of virtual chunks with
//!   best-fit free-block tracking (the planner behind the graph allocator).
//! - [`VBuffer`] is up to [`VBUFFER_MAX_CHUNKS`] real buffers backing the
//!   chunks of a [`DynAlloc`].
//! - [`GraphAlloc`] plans the lifetimes of a graph's intermediate tensors,
//!   reuses freed memory and computes in place where an op allows it.
//! - [`PlannedBuffer`] stands in for a buffer in a memory plan: each of the
//!   above can lay tensors out over planned buffers, which hold no memory.

mod dyn_alloc;
mod graph_alloc;
mod linear;
mod planned;
mod vbuffer;

pub use dyn_alloc::{Addr, DynAlloc};
pub use graph_alloc::GraphAlloc;
pub use linear::{LinearAlloc, LinearAllocation, LinearPlan, LinearSlot};
pub use planned::PlannedBuffer;
pub use vbuffer::VBuffer;

/// Most chunks (separate device buffers) one virtual buffer may have.
pub const VBUFFER_MAX_CHUNKS: usize = 16;

/// `size` rounded up to a multiple of `alignment` (a power of two), or `None`
/// on overflow.
pub(crate) fn align_up(size: usize, alignment: usize) -> Option<usize> {
    debug_assert!(alignment.is_power_of_two());
    size.checked_add(alignment - 1)
        .map(|s| s & !(alignment - 1))
}

/// A usable alignment: at least 1, rounded up to a power of two.
pub(crate) fn sane_alignment(alignment: usize) -> usize {
    alignment
        .max(1)
        .checked_next_power_of_two()
        .unwrap_or(1 << (usize::BITS - 1))
}
