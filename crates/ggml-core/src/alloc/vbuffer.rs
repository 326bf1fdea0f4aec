//! A virtual buffer: up to [`VBUFFER_MAX_CHUNKS`] real buffers of one buffer
//! type, one per chunk of a [`super::DynAlloc`] (ggml's vbuffer).

use std::fmt;
use std::sync::Arc;

use super::{Addr, VBUFFER_MAX_CHUNKS};
use crate::backend::{Buffer, BufferType, BufferUsage, Placement};
use crate::{Error, Result};

/// Real buffers backing the chunks of a dynamic allocator.
///
/// Chunks only grow: [`VBuffer::grow`] reallocates a chunk whose buffer is
/// smaller than asked and leaves the others alone, so a virtual buffer sized
/// for a worst case serves every smaller request without allocating.
pub struct VBuffer {
    buft: Arc<dyn BufferType>,
    usage: BufferUsage,
    chunks: Vec<Arc<dyn Buffer>>,
    /// Chunks are [`super::PlannedBuffer`]s: sized, never allocated.
    planning: bool,
    n_allocs: usize,
}

impl fmt::Debug for VBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VBuffer")
            .field("buft", &self.buft.name())
            .field("chunks", &self.chunk_sizes())
            .finish()
    }
}

impl VBuffer {
    /// An empty virtual buffer of `buft`; its buffers get `usage`.
    pub fn new(buft: Arc<dyn BufferType>, usage: BufferUsage) -> VBuffer {
        VBuffer {
            buft,
            usage,
            chunks: Vec::new(),
            n_allocs: 0,
            planning: false,
        }
    }

    /// A virtual buffer with one buffer per entry of `sizes`.
    pub fn alloc(
        buft: Arc<dyn BufferType>,
        sizes: &[usize],
        usage: BufferUsage,
    ) -> Result<VBuffer> {
        let mut v = VBuffer::new(buft, usage);
        v.grow(sizes)?;
        Ok(v)
    }

    /// With `on`, chunks grow as planned buffers that hold no memory (a
    /// memory plan); the sizes reached are those of real chunks.
    pub fn set_planning(&mut self, on: bool) {
        self.planning = on;
    }

    /// The buffer type.
    pub fn buffer_type(&self) -> &Arc<dyn BufferType> {
        &self.buft
    }

    /// Number of chunks.
    pub fn n_chunks(&self) -> usize {
        self.chunks.len()
    }

    /// The buffer of chunk `i`.
    pub fn chunk(&self, i: usize) -> Option<&Arc<dyn Buffer>> {
        self.chunks.get(i)
    }

    /// Size of each chunk's buffer.
    pub fn chunk_sizes(&self) -> Vec<usize> {
        self.chunks.iter().map(|b| b.size()).collect()
    }

    /// Total bytes over all chunks.
    pub fn size(&self) -> usize {
        self.chunks.iter().map(|b| b.size()).sum()
    }

    /// Buffers allocated by this virtual buffer so far.
    pub fn n_allocs(&self) -> usize {
        self.n_allocs
    }

    /// True when every chunk `i` exists with at least `sizes[i]` bytes.
    pub fn fits(&self, sizes: &[usize]) -> bool {
        sizes.len() <= self.chunks.len()
            && sizes.iter().zip(&self.chunks).all(|(&s, b)| b.size() >= s)
    }

    /// Makes chunk `i` at least `sizes[i]` bytes, allocating only the chunks
    /// that are missing or too small. Returns the number of buffers allocated.
    pub fn grow(&mut self, sizes: &[usize]) -> Result<usize> {
        if sizes.len() > VBUFFER_MAX_CHUNKS {
            return Err(Error::Invalid(format!(
                "{}: {} chunks requested, at most {VBUFFER_MAX_CHUNKS}",
                self.buft.name(),
                sizes.len()
            )));
        }
        let max = self.buft.max_size();
        let mut n = 0;
        for (i, &size) in sizes.iter().enumerate() {
            if self.chunks.get(i).is_some_and(|b| b.size() >= size) {
                continue;
            }
            if size > max {
                return Err(Error::Alloc {
                    name: self.buft.name().to_string(),
                    size,
                    reason: format!("larger than the buffer type's max size {max}"),
                });
            }
            let buf = if self.planning {
                super::PlannedBuffer::shared(self.buft.clone(), size, self.usage)
            } else {
                self.buft.alloc_buffer(size)?
            };
            buf.set_usage(self.usage);
            self.n_allocs += 1;
            n += 1;
            if i < self.chunks.len() {
                self.chunks[i] = buf;
            } else {
                self.chunks.push(buf);
            }
        }
        Ok(n)
    }

    /// Where `addr` lies.
    pub fn placement(&self, addr: Addr) -> Result<Placement> {
        let buffer = self.chunks.get(addr.chunk).ok_or_else(|| {
            Error::Invalid(format!(
                "{}: chunk {} is not allocated ({} chunks)",
                self.buft.name(),
                addr.chunk,
                self.chunks.len()
            ))
        })?;
        Ok(Placement {
            buffer: buffer.clone(),
            offset: addr.offset,
        })
    }

    /// Fills every chunk with `value`.
    pub fn clear(&self, value: u8) -> Result<()> {
        self.chunks.iter().try_for_each(|b| b.clear(value))
    }

    /// Drops every buffer.
    pub fn release(&mut self) {
        self.chunks.clear();
    }
}
