//! A dynamic allocator over virtual chunks: best-fit free-block tracking per
//! chunk, merging of neighbouring free blocks, a maximum size per chunk and at
//! most [`VBUFFER_MAX_CHUNKS`] chunks (ggml_dyn_tallocr).
//!
//! It only plans: it hands out `(chunk, offset)` addresses and records how
//! large each chunk grows (its high-water mark). A [`super::VBuffer`] then
//! allocates one real buffer per chunk.

use super::{align_up, sane_alignment, VBUFFER_MAX_CHUNKS};
use crate::{Error, Result};

/// An address handed out by [`DynAlloc`]: a chunk and a byte offset in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Addr {
    /// Chunk index (`< VBUFFER_MAX_CHUNKS`).
    pub chunk: usize,
    /// Byte offset in the chunk, a multiple of the alignment.
    pub offset: usize,
}

#[derive(Clone, Copy, Debug)]
struct Block {
    offset: usize,
    size: usize,
}

impl Block {
    fn end(&self) -> usize {
        self.offset + self.size
    }
}

/// One chunk: free blocks below `tail` (sorted by offset, never adjacent to
/// each other or to `tail`) and everything from `tail` up to the chunk
/// capacity free. `high` is the high-water mark; `reserved` the size of a
/// buffer that already exists for the chunk (0 when none).
#[derive(Clone, Debug, Default)]
struct Chunk {
    free: Vec<Block>,
    tail: usize,
    high: usize,
    reserved: usize,
}

/// Best-fit allocator over up to [`VBUFFER_MAX_CHUNKS`] virtual chunks of at
/// most `max_chunk_size` bytes each.
///
/// Allocation first looks for the smallest free block inside any chunk that
/// fits; failing that it extends a chunk at its end, preferring the chunk
/// where the request fits below the chunk's current size (best fit), else the
/// one that grows least; failing that it opens a new chunk. Every size is
/// rounded up to the alignment, so every offset is aligned.
#[derive(Clone, Debug)]
pub struct DynAlloc {
    alignment: usize,
    max_chunk_size: usize,
    chunks: Vec<Chunk>,
}

impl DynAlloc {
    /// An empty allocator. `alignment` is rounded up to a power of two;
    /// `max_chunk_size` (a buffer type's `max_size`) bounds each chunk.
    pub fn new(alignment: usize, max_chunk_size: usize) -> DynAlloc {
        let alignment = sane_alignment(alignment);
        DynAlloc {
            alignment,
            max_chunk_size: max_chunk_size & !(alignment - 1),
            chunks: Vec::new(),
        }
    }

    /// Alignment of every offset and size.
    pub fn alignment(&self) -> usize {
        self.alignment
    }

    /// Largest chunk (rounded down to the alignment).
    pub fn max_chunk_size(&self) -> usize {
        self.max_chunk_size
    }

    /// Forgets every allocation and every chunk.
    pub fn reset(&mut self) {
        self.chunks.clear();
    }

    /// Forgets every allocation and starts over with chunks backed by
    /// buffers of the given sizes (a [`super::VBuffer`] already allocated):
    /// allocations then prefer room inside those buffers to growing past
    /// them, so that a plan for a smaller graph fits buffers sized for a
    /// larger one. At most [`VBUFFER_MAX_CHUNKS`] are taken.
    pub fn reset_with_capacities(&mut self, capacities: &[usize]) {
        self.chunks.clear();
        self.chunks.extend(
            capacities
                .iter()
                .take(VBUFFER_MAX_CHUNKS)
                .map(|&reserved| Chunk {
                    reserved,
                    ..Chunk::default()
                }),
        );
    }

    /// Number of chunks opened so far.
    pub fn n_chunks(&self) -> usize {
        self.chunks.len()
    }

    /// The high-water mark of each chunk: the bytes a real buffer for it needs.
    pub fn chunk_sizes(&self) -> Vec<usize> {
        self.chunks.iter().map(|c| c.high).collect()
    }

    /// Sum of the chunk sizes.
    pub fn total_size(&self) -> usize {
        self.chunks.iter().map(|c| c.high).sum()
    }

    /// Bytes currently free below the high-water marks (a measure of
    /// fragmentation; the unused space at the end of chunks is not counted).
    pub fn free_bytes(&self) -> usize {
        self.chunks
            .iter()
            .map(|c| c.free.iter().map(|b| b.size).sum::<usize>() + (c.high - c.tail))
            .sum()
    }

    /// The size a request of `size` bytes really takes (rounded up to the
    /// alignment, and at least one alignment unit so that every tensor has
    /// an address of its own).
    pub fn padded_size(&self, size: usize) -> Result<usize> {
        align_up(size.max(1), self.alignment).ok_or_else(|| Error::Alloc {
            name: "dynamic allocator".into(),
            size,
            reason: "size overflows".into(),
        })
    }

    /// Allocates `size` bytes.
    pub fn alloc(&mut self, size: usize) -> Result<Addr> {
        let size = self.padded_size(size)?;
        if size > self.max_chunk_size {
            return Err(Error::Alloc {
                name: "dynamic allocator".into(),
                size,
                reason: format!(
                    "larger than the maximum chunk size of {} bytes",
                    self.max_chunk_size
                ),
            });
        }
        // 1. best fit among the free blocks inside the chunks
        let mut best: Option<(usize, usize, usize)> = None; // (size, chunk, block)
        for (c, chunk) in self.chunks.iter().enumerate() {
            for (i, b) in chunk.free.iter().enumerate() {
                if b.size >= size && best.is_none_or(|(s, _, _)| b.size < s) {
                    best = Some((b.size, c, i));
                }
            }
        }
        if let Some((_, c, i)) = best {
            let chunk = &mut self.chunks[c];
            let block = &mut chunk.free[i];
            let offset = block.offset;
            block.offset += size;
            block.size -= size;
            if block.size == 0 {
                chunk.free.remove(i);
            }
            return Ok(Addr { chunk: c, offset });
        }
        // 2. the end of a chunk: best fit below its current size (or the
        //    size of the buffer that exists for it), else the least growth
        let mut best_end: Option<(usize, i128)> = None; // (chunk, reuse)
        for (c, chunk) in self.chunks.iter().enumerate() {
            if self.max_chunk_size - chunk.tail < size {
                continue;
            }
            // > 0: bytes left unused below the high-water mark; < 0: growth
            let reuse = chunk.high.max(chunk.reserved) as i128 - (chunk.tail + size) as i128;
            let better = match best_end {
                None => true,
                Some((_, r)) if r < 0 => reuse > r,
                Some((_, r)) => reuse >= 0 && reuse < r,
            };
            if better {
                best_end = Some((c, reuse));
            }
        }
        let c = match best_end {
            Some((c, _)) => c,
            None => {
                if self.chunks.len() >= VBUFFER_MAX_CHUNKS {
                    return Err(Error::Alloc {
                        name: "dynamic allocator".into(),
                        size,
                        reason: format!(
                            "all {VBUFFER_MAX_CHUNKS} chunks of at most {} bytes are full",
                            self.max_chunk_size
                        ),
                    });
                }
                self.chunks.push(Chunk::default());
                self.chunks.len() - 1
            }
        };
        let chunk = &mut self.chunks[c];
        let offset = chunk.tail;
        chunk.tail += size;
        chunk.high = chunk.high.max(chunk.tail);
        Ok(Addr { chunk: c, offset })
    }

    /// Gives back `size` bytes at `addr` (the size passed to
    /// [`DynAlloc::alloc`]); merges the range with free neighbours. Freeing a
    /// range that is not allocated is an error.
    pub fn free(&mut self, addr: Addr, size: usize) -> Result<()> {
        let size = self.padded_size(size)?;
        let invalid = |why: &str| {
            Err(Error::Invalid(format!(
                "dynamic allocator: cannot free {size} bytes at chunk {} offset {}: {why}",
                addr.chunk, addr.offset
            )))
        };
        let Some(chunk) = self.chunks.get_mut(addr.chunk) else {
            return invalid("no such chunk");
        };
        let (offset, end) = (addr.offset, addr.offset.saturating_add(size));
        if end > chunk.tail || offset % self.alignment != 0 {
            return invalid("the range was never allocated");
        }
        // first free block after the range
        let i = chunk.free.partition_point(|b| b.offset < offset);
        if i > 0 && chunk.free[i - 1].end() > offset
            || chunk.free.get(i).is_some_and(|b| b.offset < end)
        {
            return invalid("the range is already free");
        }
        let merge_prev = i > 0 && chunk.free[i - 1].end() == offset;
        if end == chunk.tail {
            // back into the tail, taking a free block just below along
            chunk.tail = offset;
            if merge_prev {
                chunk.tail = chunk.free[i - 1].offset;
                chunk.free.remove(i - 1);
            }
            return Ok(());
        }
        let merge_next = chunk.free.get(i).is_some_and(|b| b.offset == end);
        match (merge_prev, merge_next) {
            (true, true) => {
                let next = chunk.free.remove(i);
                chunk.free[i - 1].size += size + next.size;
            }
            (true, false) => chunk.free[i - 1].size += size,
            (false, true) => {
                chunk.free[i].offset = offset;
                chunk.free[i].size += size;
            }
            (false, false) => chunk.free.insert(i, Block { offset, size }),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn best_fit_and_merge() {
        let mut a = DynAlloc::new(16, usize::MAX);
        let x = a.alloc(100).unwrap(); // 112
        let y = a.alloc(32).unwrap();
        let z = a.alloc(64).unwrap();
        let w = a.alloc(16).unwrap();
        assert_eq!((x.offset, y.offset, z.offset, w.offset), (0, 112, 144, 208));
        a.free(x, 100).unwrap();
        a.free(z, 64).unwrap();
        // best fit: the 64-byte hole, not the 112-byte one
        let v = a.alloc(48).unwrap();
        assert_eq!(v.offset, 144);
        assert!(a.free(v, 48).is_ok());
        assert!(a.free(v, 48).is_err(), "double free is reported");
        a.free(y, 32).unwrap(); // merges 0..112, 112..144, 144..208
        assert_eq!(a.chunks[0].free.len(), 1);
        assert_eq!(a.chunks[0].free[0].size, 208);
        a.free(w, 16).unwrap(); // merges everything back into the tail
        assert!(a.chunks[0].free.is_empty());
        assert_eq!(a.chunks[0].tail, 0);
        assert_eq!(a.chunk_sizes(), vec![224]);
    }

    #[test]
    fn existing_buffers_are_preferred() {
        let mut a = DynAlloc::new(8, 100);
        a.reset_with_capacities(&[40, 96]);
        // fits the second buffer without growing the first
        let p = a.alloc(64).unwrap();
        assert_eq!((p.chunk, p.offset), (1, 0));
        let q = a.alloc(40).unwrap();
        assert_eq!((q.chunk, q.offset), (0, 0));
        // still room in the second buffer
        let r = a.alloc(16).unwrap();
        assert_eq!((r.chunk, r.offset), (1, 64));
        assert_eq!(a.chunk_sizes(), vec![40, 80]);
    }

    #[test]
    fn chunks_and_limits() {
        let mut a = DynAlloc::new(8, 64);
        let p = a.alloc(40).unwrap();
        let q = a.alloc(40).unwrap();
        assert_eq!((p.chunk, q.chunk), (0, 1));
        let r = a.alloc(24).unwrap();
        assert_eq!((r.chunk, r.offset), (0, 40));
        assert!(a.alloc(65).is_err());
        for _ in 2..VBUFFER_MAX_CHUNKS {
            a.alloc(64).unwrap();
        }
        assert_eq!(a.n_chunks(), VBUFFER_MAX_CHUNKS);
        let e = a.alloc(64).unwrap_err().to_string();
        assert!(e.contains("chunks"), "{e}");
        assert!(a
            .free(
                Addr {
                    chunk: 99,
                    offset: 0
                },
                8
            )
            .is_err());
    }
}
