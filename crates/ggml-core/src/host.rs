//! Host memory buffers: the plain aligned host buffer type (ggml's "CPU"
//! buffer type lives in core too) and read-only buffers over memory owned
//! elsewhere, such as a file mapping.

use std::alloc::{self, Layout};
use std::any::Any;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use crate::backend::{Buffer, BufferCommon, BufferType, BufferUsage, HostMem, Placement};
use crate::{Error, Result};

/// Alignment of host buffers: a cache line, and enough for any SIMD load.
pub const HOST_ALIGNMENT: usize = 64;

/// A host memory buffer type with a name (`CPU`, or a device's pinned type).
pub struct HostBufferType {
    name: String,
    alignment: usize,
    max_size: usize,
    allocs: AtomicUsize,
    me: Weak<HostBufferType>,
}

impl HostBufferType {
    /// A host buffer type; `max_size` bounds a single buffer.
    pub fn new(name: impl Into<String>, alignment: usize, max_size: usize) -> Arc<HostBufferType> {
        Arc::new_cyclic(|me| HostBufferType {
            name: name.into(),
            alignment: alignment.max(1).next_power_of_two(),
            max_size,
            allocs: AtomicUsize::new(0),
            me: me.clone(),
        })
    }

    /// Number of buffers allocated from this type so far.
    pub fn n_allocs(&self) -> usize {
        self.allocs.load(Ordering::Relaxed)
    }

    /// Allocates a buffer and returns it with its concrete type. Memory is
    /// zeroed. Buffers of [`LARGE_BUFFER`] bytes and more are anonymous
    /// mappings that ask for transparent huge pages, so that filling one
    /// (weights read from a file, a KV cache) takes one page fault per
    /// 2 MiB instead of one per 4 KiB.
    pub fn alloc(&self, size: usize) -> Result<Arc<HostBuffer>> {
        let alloc_err = |reason: String| Error::Alloc {
            name: self.name.clone(),
            size,
            reason,
        };
        let mem = if size >= LARGE_BUFFER && self.alignment <= HUGE_PAGE {
            Mem::mapped(size).map_err(|e| alloc_err(format!("anonymous mapping failed: {e}")))?
        } else {
            let layout = Layout::from_size_align(size.max(1), self.alignment)
                .map_err(|e| alloc_err(e.to_string()))?;
            // SAFETY: the layout has a non-zero size.
            let ptr = unsafe { alloc::alloc_zeroed(layout) };
            let ptr = NonNull::new(ptr).ok_or_else(|| alloc_err("out of host memory".into()))?;
            Mem::Owned { ptr, layout }
        };
        self.allocs.fetch_add(1, Ordering::Relaxed);
        let buft = self
            .me
            .upgrade()
            .ok_or_else(|| Error::Invalid(format!("{}: buffer type dropped", self.name)))?;
        Ok(Arc::new(HostBuffer {
            common: BufferCommon::new(buft, size, BufferUsage::Any),
            mem,
        }))
    }
}

/// Size from which host buffers are anonymous mappings with huge pages.
pub const LARGE_BUFFER: usize = 4 << 20;
/// The huge page size mappings are aligned to.
const HUGE_PAGE: usize = 2 << 20;

impl BufferType for HostBufferType {
    fn name(&self) -> &str {
        &self.name
    }
    fn alignment(&self) -> usize {
        self.alignment
    }
    fn max_size(&self) -> usize {
        self.max_size
    }
    fn is_host(&self) -> bool {
        true
    }
    fn alloc_buffer(&self, size: usize) -> Result<Arc<dyn Buffer>> {
        Ok(self.alloc(size)?)
    }
}

enum Mem {
    Owned {
        ptr: NonNull<u8>,
        layout: Layout,
    },
    /// An anonymous mapping; `ptr` is its first huge-page boundary.
    Mapped {
        ptr: NonNull<u8>,
        _map: memmap2::MmapMut,
    },
    Borrowed {
        mem: HostMem,
        offset: usize,
    },
}

impl Mem {
    /// A zeroed anonymous mapping of at least `size` bytes starting at a
    /// huge-page boundary, with transparent huge pages requested where the
    /// platform has them (a refusal only costs speed).
    fn mapped(size: usize) -> std::io::Result<Mem> {
        let len = size
            .checked_add(HUGE_PAGE)
            .ok_or_else(|| std::io::Error::other("size overflows"))?;
        let mut map = memmap2::MmapMut::map_anon(len)?;
        let base = map.as_mut_ptr();
        let skip = base.align_offset(HUGE_PAGE);
        if skip > HUGE_PAGE {
            return Err(std::io::Error::other("mapping cannot be aligned"));
        }
        #[cfg(target_os = "linux")]
        {
            let _ = map.advise_range(memmap2::Advice::HugePage, skip, size);
        }
        // SAFETY: `skip <= HUGE_PAGE`, so `skip + size <= len` stays inside
        // the mapping, which is never moved or unmapped before `Mem` drops.
        let ptr = unsafe { base.add(skip) };
        let ptr = NonNull::new(ptr).ok_or_else(|| std::io::Error::other("null mapping"))?;
        Ok(Mem::Mapped { ptr, _map: map })
    }
}

/// A buffer in host memory: owned and writable, or a read-only window over
/// memory owned elsewhere (kept alive by the buffer).
pub struct HostBuffer {
    common: BufferCommon,
    mem: Mem,
}

// SAFETY: the buffer owns its allocation (or holds an Arc to immutable shared
// memory); concurrent access to the same bytes is coordinated by its users
// (the graph allocator never gives two live tensors overlapping bytes), as
// for any device memory.
unsafe impl Send for HostBuffer {}
// SAFETY: see `Send`; all mutation goes through raw pointers to disjoint
// tensor regions, never through references to the whole allocation.
unsafe impl Sync for HostBuffer {}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        if let Mem::Owned { ptr, layout } = self.mem {
            // SAFETY: `ptr` was returned by `alloc_zeroed` with `layout` and is freed once.
            unsafe { alloc::dealloc(ptr.as_ptr(), layout) };
        }
    }
}

impl HostBuffer {
    /// A read-only buffer over `size` bytes of `mem` at `offset`.
    pub fn from_host_mem(
        buft: Arc<HostBufferType>,
        mem: HostMem,
        offset: usize,
        size: usize,
    ) -> Result<Arc<HostBuffer>> {
        let len = (*mem).as_ref().len();
        if offset.checked_add(size).is_none_or(|end| end > len) {
            return Err(Error::OutOfBounds {
                what: format!("{}: host memory window", buft.name),
                offset,
                end: offset.saturating_add(size),
                size: len,
            });
        }
        Ok(Arc::new(HostBuffer {
            common: BufferCommon::new(buft, size, BufferUsage::Weights),
            mem: Mem::Borrowed { mem, offset },
        }))
    }

    fn ptr(&self) -> NonNull<u8> {
        match &self.mem {
            Mem::Owned { ptr, .. } | Mem::Mapped { ptr, .. } => *ptr,
            Mem::Borrowed { mem, offset } => {
                let slice: &[u8] = (**mem).as_ref();
                // SAFETY: `offset <= slice.len()` was checked at construction.
                let p = unsafe { slice.as_ptr().add(*offset) };
                NonNull::new(p as *mut u8).unwrap_or(NonNull::dangling())
            }
        }
    }

    fn check_writable(&self) -> Result<()> {
        if matches!(self.mem, Mem::Borrowed { .. }) {
            return Err(Error::Invalid(format!(
                "{}: buffer over mapped memory is read-only",
                self.common.buft().name()
            )));
        }
        Ok(())
    }

    /// The bytes of the buffer, for reading.
    ///
    /// # Safety
    /// No other thread may write the returned range while the slice is alive.
    pub unsafe fn bytes(&self, offset: usize, len: usize) -> Result<&[u8]> {
        self.common.check_range("read", offset, len)?;
        // SAFETY: the range is inside the allocation (checked); the caller
        // guarantees no concurrent writes.
        Ok(unsafe { std::slice::from_raw_parts(self.ptr().as_ptr().add(offset), len) })
    }
}

impl Buffer for HostBuffer {
    fn common(&self) -> &BufferCommon {
        &self.common
    }
    fn base(&self) -> Option<NonNull<u8>> {
        Some(self.ptr())
    }
    fn is_read_only(&self) -> bool {
        matches!(self.mem, Mem::Borrowed { .. })
    }
    fn set_tensor(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.check_writable()?;
        self.common.check_range("write", offset, data.len())?;
        // SAFETY: the range is inside the owned allocation (checked) and does
        // not overlap `data`, which is a separate borrow.
        unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr(),
                self.ptr().as_ptr().add(offset),
                data.len(),
            )
        };
        Ok(())
    }
    fn get_tensor(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        self.common.check_range("read", offset, out.len())?;
        // SAFETY: the range is inside the memory (checked); `out` is a distinct borrow.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.ptr().as_ptr().add(offset),
                out.as_mut_ptr(),
                out.len(),
            )
        };
        Ok(())
    }
    fn memset_tensor(&self, offset: usize, value: u8, size: usize) -> Result<()> {
        self.check_writable()?;
        self.common.check_range("memset", offset, size)?;
        // SAFETY: the range is inside the owned allocation (checked).
        unsafe { std::ptr::write_bytes(self.ptr().as_ptr().add(offset), value, size) };
        Ok(())
    }
    fn cpy_tensor(&self, src: &Placement, dst_offset: usize, size: usize) -> Result<bool> {
        let Some(sp) = src.buffer.base() else {
            return Ok(false);
        };
        if !src.buffer.buffer_type().is_host() {
            return Ok(false);
        }
        self.check_writable()?;
        self.common.check_range("copy", dst_offset, size)?;
        if src
            .offset
            .checked_add(size)
            .is_none_or(|e| e > src.buffer.size())
        {
            return Err(Error::OutOfBounds {
                what: "copy source".into(),
                offset: src.offset,
                end: src.offset.saturating_add(size),
                size: src.buffer.size(),
            });
        }
        // SAFETY: both ranges are inside their buffers (checked); `copy`
        // tolerates overlap.
        unsafe {
            std::ptr::copy(
                sp.as_ptr().add(src.offset),
                self.ptr().as_ptr().add(dst_offset),
                size,
            )
        };
        Ok(true)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alloc_write_read() {
        let bt = HostBufferType::new("CPU", HOST_ALIGNMENT, usize::MAX);
        let b = bt.alloc(100).unwrap();
        assert_eq!(b.base().unwrap().as_ptr() as usize % 64, 0);
        b.set_tensor(10, &[1, 2, 3]).unwrap();
        let mut out = [0u8; 3];
        b.get_tensor(10, &mut out).unwrap();
        assert_eq!(out, [1, 2, 3]);
        assert!(b.set_tensor(99, &[1, 2]).is_err());
        assert_eq!(bt.n_allocs(), 1);
        let mem: HostMem = Arc::new(vec![5u8; 16]);
        let hb = HostBuffer::from_host_mem(bt.clone(), mem, 4, 8).unwrap();
        assert!(hb.set_tensor(0, &[1]).is_err());
        let mut o = [0u8; 2];
        hb.get_tensor(6, &mut o).unwrap();
        assert_eq!(o, [5, 5]);
        assert!(HostBuffer::from_host_mem(bt, Arc::new(vec![0u8; 4]), 2, 8).is_err());
    }

    #[test]
    fn large_buffers_are_zeroed_aligned_and_bounded() {
        let bt = HostBufferType::new("CPU", HOST_ALIGNMENT, usize::MAX);
        let size = LARGE_BUFFER + 12_345;
        let b = bt.alloc(size).unwrap();
        assert_eq!(b.size(), size);
        assert_eq!(b.base().unwrap().as_ptr() as usize % HUGE_PAGE, 0);
        let mut all = vec![1u8; size];
        b.get_tensor(0, &mut all).unwrap();
        assert!(all.iter().all(|&v| v == 0));
        b.set_tensor(size - 3, &[7, 8, 9]).unwrap();
        b.memset_tensor(0, 4, 2).unwrap();
        let mut out = [0u8; 3];
        b.get_tensor(size - 3, &mut out).unwrap();
        assert_eq!(out, [7, 8, 9]);
        b.get_tensor(0, &mut out).unwrap();
        assert_eq!(out, [4, 4, 0]);
        assert!(b.set_tensor(size - 2, &[1, 2, 3]).is_err());
        assert!(bt.alloc(usize::MAX - 8).is_err());
        assert_eq!(bt.n_allocs(), 1);
    }
}
