//! The linear allocator: tensors placed one after another at aligned offsets
//! (ggml_tallocr), and a set of tensors spread over as few buffers of a
//! buffer type as its `max_size` allows
//! (ggml_backend_alloc_ctx_tensors_from_buft).

use std::fmt;
use std::sync::Arc;

use super::align_up;
use crate::backend::{Buffer, BufferType, BufferUsage, Placement};
use crate::tensor::TensorDesc;
use crate::{Error, Result};

/// Places tensors one after another in one buffer, each at an offset aligned
/// to the buffer type's alignment and taking `alloc_size` bytes.
pub struct LinearAlloc {
    buffer: Arc<dyn Buffer>,
    alignment: usize,
    offset: usize,
}

impl fmt::Debug for LinearAlloc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LinearAlloc")
            .field("buffer", &self.buffer.buffer_type().name())
            .field("size", &self.buffer.size())
            .field("offset", &self.offset)
            .finish()
    }
}

/// Where one tensor goes in a [`LinearPlan`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinearSlot {
    /// Index of the buffer.
    pub buffer: usize,
    /// Byte offset in the buffer.
    pub offset: usize,
    /// Bytes the tensor takes (`alloc_size`).
    pub size: usize,
}

/// The buffers a set of tensors needs and where each tensor goes, computed
/// without allocating (for dry runs and memory estimates).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LinearPlan {
    /// Size of each buffer, in bytes.
    pub buffer_sizes: Vec<usize>,
    /// One slot per tensor, in the order given.
    pub slots: Vec<LinearSlot>,
}

impl LinearPlan {
    /// Sum of the buffer sizes.
    pub fn total_size(&self) -> usize {
        self.buffer_sizes.iter().sum()
    }
}

/// The buffers allocated for a set of tensors and each tensor's placement.
#[derive(Clone)]
pub struct LinearAllocation {
    /// The buffers, in order.
    pub buffers: Vec<Arc<dyn Buffer>>,
    /// One placement per tensor, in the order given.
    pub placements: Vec<Placement>,
}

impl fmt::Debug for LinearAllocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LinearAllocation")
            .field(
                "buffers",
                &self.buffers.iter().map(|b| b.size()).collect::<Vec<_>>(),
            )
            .field("placements", &self.placements)
            .finish()
    }
}

impl LinearAlloc {
    /// An allocator that fills `buffer` from its start.
    pub fn new(buffer: Arc<dyn Buffer>) -> LinearAlloc {
        let alignment = super::sane_alignment(buffer.buffer_type().alignment());
        LinearAlloc {
            buffer,
            alignment,
            offset: 0,
        }
    }

    /// The buffer being filled.
    pub fn buffer(&self) -> &Arc<dyn Buffer> {
        &self.buffer
    }

    /// Bytes used so far (the end of the last tensor).
    pub fn used(&self) -> usize {
        self.offset
    }

    /// Places `desc` after the previous tensor and prepares it in the buffer.
    pub fn alloc(&mut self, desc: &TensorDesc) -> Result<Placement> {
        let buft = self.buffer.buffer_type();
        let size = buft.alloc_size(desc);
        let offset = align_up(self.offset, self.alignment);
        let end = offset.and_then(|o| o.checked_add(size));
        let (Some(offset), Some(end)) = (offset, end) else {
            return Err(too_large(desc, size, self.buffer.size(), buft.name()));
        };
        if end > self.buffer.size() {
            return Err(Error::Alloc {
                name: buft.name().to_string(),
                size,
                reason: format!(
                    "tensor '{}' does not fit: {} of {} bytes used",
                    desc.name,
                    self.offset,
                    self.buffer.size()
                ),
            });
        }
        self.buffer.init_tensor(desc, offset)?;
        self.offset = end;
        Ok(Placement {
            buffer: self.buffer.clone(),
            offset,
        })
    }

    /// Plans buffers of `buft` for `tensors` in order: a new buffer starts
    /// whenever the next tensor would take the current one past `max_size`.
    /// A tensor larger than `max_size` by itself is an error naming it.
    pub fn plan(buft: &dyn BufferType, tensors: &[TensorDesc]) -> Result<LinearPlan> {
        let alignment = super::sane_alignment(buft.alignment());
        let max = buft.max_size();
        let mut plan = LinearPlan::default();
        let mut cur = 0usize;
        for desc in tensors {
            let size = buft.alloc_size(desc);
            let padded = align_up(size, alignment)
                .filter(|&p| p <= max)
                .ok_or_else(|| too_large(desc, size, max, buft.name()))?;
            if plan.buffer_sizes.is_empty() || cur.checked_add(padded).is_none_or(|e| e > max) {
                if let Some(last) = plan.buffer_sizes.last_mut() {
                    *last = cur;
                }
                plan.buffer_sizes.push(0);
                cur = 0;
            }
            plan.slots.push(LinearSlot {
                buffer: plan.buffer_sizes.len() - 1,
                offset: cur,
                size,
            });
            cur += padded;
        }
        if let Some(last) = plan.buffer_sizes.last_mut() {
            *last = cur;
        }
        Ok(plan)
    }

    /// Allocates the buffers [`LinearAlloc::plan`] computes, marks them with
    /// `usage` and places every tensor.
    pub fn alloc_tensors(
        buft: &Arc<dyn BufferType>,
        tensors: &[TensorDesc],
        usage: BufferUsage,
    ) -> Result<LinearAllocation> {
        Self::place_tensors(buft, tensors, usage, false)
    }

    /// Like [`LinearAlloc::alloc_tensors`] over planned buffers that hold
    /// no memory (a memory plan).
    pub fn plan_tensors(
        buft: &Arc<dyn BufferType>,
        tensors: &[TensorDesc],
        usage: BufferUsage,
    ) -> Result<LinearAllocation> {
        Self::place_tensors(buft, tensors, usage, true)
    }

    fn place_tensors(
        buft: &Arc<dyn BufferType>,
        tensors: &[TensorDesc],
        usage: BufferUsage,
        planning: bool,
    ) -> Result<LinearAllocation> {
        let plan = LinearAlloc::plan(&**buft, tensors)?;
        let mut buffers = Vec::with_capacity(plan.buffer_sizes.len());
        for &size in &plan.buffer_sizes {
            let b = if planning {
                super::PlannedBuffer::shared(buft.clone(), size, usage)
            } else {
                buft.alloc_buffer(size)?
            };
            b.set_usage(usage);
            buffers.push(b);
        }
        let mut placements = Vec::with_capacity(tensors.len());
        for (desc, slot) in tensors.iter().zip(&plan.slots) {
            let buffer = buffers[slot.buffer].clone();
            buffer.init_tensor(desc, slot.offset)?;
            placements.push(Placement {
                buffer,
                offset: slot.offset,
            });
        }
        Ok(LinearAllocation {
            buffers,
            placements,
        })
    }
}

fn too_large(desc: &TensorDesc, size: usize, max: usize, buft: &str) -> Error {
    Error::Alloc {
        name: buft.to_string(),
        size,
        reason: format!(
            "tensor '{}' needs {size} bytes, more than the largest buffer of {max} bytes",
            desc.name
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::HostBufferType;
    use crate::Type;

    #[test]
    fn sequential_offsets() {
        let bt: Arc<dyn BufferType> = HostBufferType::new("CPU", 32, usize::MAX);
        let buf = bt.alloc_buffer(256).unwrap();
        let mut la = LinearAlloc::new(buf);
        let a = la.alloc(&TensorDesc::new("a", Type::F32, &[5])).unwrap();
        let b = la.alloc(&TensorDesc::new("b", Type::F32, &[3])).unwrap();
        assert_eq!((a.offset, b.offset, la.used()), (0, 32, 44));
        let e = la
            .alloc(&TensorDesc::new("big", Type::F32, &[100]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("'big'"), "{e}");
    }
}
