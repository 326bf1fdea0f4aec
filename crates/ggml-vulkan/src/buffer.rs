//! Buffer types and buffers: device-local memory (named after the device)
//! and pinned host memory (`Vulkan_Host`), both usable by shaders.

use std::any::Any;
use std::ptr::NonNull;
use std::sync::{Arc, Weak};

use ggml_core::{Buffer, BufferCommon, BufferType, BufferUsage, Placement};

use crate::logical::{DeviceShared, RawBuffer};

/// Alignment of tensors in pinned host buffers: the CPU backend computes in
/// them, so at least a cache line.
const HOST_MIN_ALIGNMENT: usize = 64;

/// A buffer type of one device: device-local or pinned host memory.
pub struct VkBufferType {
    pub(crate) shared: Arc<DeviceShared>,
    name: String,
    host: bool,
    me: Weak<VkBufferType>,
}

impl VkBufferType {
    pub(crate) fn new(shared: Arc<DeviceShared>, host: bool) -> Arc<VkBufferType> {
        let name = if host {
            "Vulkan_Host".to_string()
        } else {
            shared.name.clone()
        };
        Arc::new_cyclic(|me| VkBufferType {
            shared,
            name,
            host,
            me: me.clone(),
        })
    }

    /// True for the pinned host type.
    pub fn is_pinned_host(&self) -> bool {
        self.host
    }

    /// Allocates a buffer and returns it with its concrete type.
    pub fn alloc(&self, size: usize) -> ggml_core::Result<Arc<VkBuffer>> {
        if size > self.max_size() {
            return Err(ggml_core::Error::Alloc {
                name: self.shared.name.clone(),
                size,
                reason: format!(
                    "larger than the largest {} buffer ({} bytes)",
                    self.name,
                    self.max_size()
                ),
            });
        }
        let raw = self.shared.create_buffer(
            size,
            self.host,
            if self.host { "host" } else { "device" },
        )?;
        let buft = self.me.upgrade().ok_or_else(|| {
            ggml_core::Error::Invalid(format!("{}: buffer type dropped", self.name))
        })?;
        Ok(Arc::new(VkBuffer {
            common: BufferCommon::new(buft.clone(), size, BufferUsage::Any),
            buft,
            raw: Some(raw),
        }))
    }
}

impl BufferType for VkBufferType {
    fn name(&self) -> &str {
        &self.name
    }
    fn alignment(&self) -> usize {
        let a = self.shared.limits.storage_align;
        if self.host {
            a.max(HOST_MIN_ALIGNMENT)
        } else {
            a
        }
    }
    fn max_size(&self) -> usize {
        self.shared.max_buffer_size()
    }
    fn is_host(&self) -> bool {
        self.host
    }
    fn alloc_buffer(&self, size: usize) -> ggml_core::Result<Arc<dyn Buffer>> {
        Ok(self.alloc(size)?)
    }
    fn device_name(&self) -> Option<String> {
        Some(self.shared.name.clone())
    }
}

/// A Vulkan buffer of a [`VkBufferType`].
pub struct VkBuffer {
    common: BufferCommon,
    buft: Arc<VkBufferType>,
    raw: Option<RawBuffer>,
}

impl Drop for VkBuffer {
    fn drop(&mut self) {
        if let Some(raw) = self.raw.take() {
            // Queued work holds an Arc to every buffer it uses, so none is
            // pending here.
            self.buft.shared.destroy_buffer(raw);
        }
    }
}

impl VkBuffer {
    pub(crate) fn raw(&self) -> &RawBuffer {
        self.raw.as_ref().expect("a live buffer has its memory")
    }

    pub(crate) fn shared(&self) -> &Arc<DeviceShared> {
        &self.buft.shared
    }

    /// True for pinned host memory.
    pub fn is_pinned_host(&self) -> bool {
        self.buft.host
    }

    /// The buffer behind a placement when it is a Vulkan buffer of `shared`'s device.
    pub(crate) fn of<'a>(p: &'a Placement, shared: &Arc<DeviceShared>) -> Option<&'a VkBuffer> {
        p.buffer
            .as_any()
            .downcast_ref::<VkBuffer>()
            .filter(|b| Arc::ptr_eq(b.shared(), shared))
    }
}

impl Buffer for VkBuffer {
    fn common(&self) -> &BufferCommon {
        &self.common
    }
    fn base(&self) -> Option<NonNull<u8>> {
        if self.buft.host {
            self.raw().mapped
        } else {
            None
        }
    }
    fn set_tensor(&self, offset: usize, data: &[u8]) -> ggml_core::Result<()> {
        self.common.check_range("write", offset, data.len())?;
        Ok(self
            .shared()
            .write(self.raw(), self.buft.host, offset, data)?)
    }
    fn get_tensor(&self, offset: usize, out: &mut [u8]) -> ggml_core::Result<()> {
        self.common.check_range("read", offset, out.len())?;
        Ok(self
            .shared()
            .read(self.raw(), self.buft.host, offset, out)?)
    }
    fn memset_tensor(&self, offset: usize, value: u8, size: usize) -> ggml_core::Result<()> {
        self.common.check_range("memset", offset, size)?;
        Ok(self
            .shared()
            .fill(self.raw(), self.buft.host, offset, size, value)?)
    }
    fn cpy_tensor(
        &self,
        src: &Placement,
        dst_offset: usize,
        size: usize,
    ) -> ggml_core::Result<bool> {
        self.common.check_range("copy", dst_offset, size)?;
        if src
            .offset
            .checked_add(size)
            .is_none_or(|e| e > src.buffer.size())
        {
            return Err(ggml_core::Error::OutOfBounds {
                what: "copy source".into(),
                offset: src.offset,
                end: src.offset.saturating_add(size),
                size: src.buffer.size(),
            });
        }
        if let Some(sb) = VkBuffer::of(src, self.shared()) {
            let same = std::ptr::eq(sb, self);
            let overlap = same && src.offset < dst_offset + size && dst_offset < src.offset + size;
            if !overlap {
                self.shared()
                    .copy(sb.raw(), src.offset, self.raw(), dst_offset, size)?;
                return Ok(true);
            }
        }
        if src.buffer.buffer_type().is_host() {
            if let Some(base) = src.buffer.base() {
                // SAFETY: the range is inside the source buffer (checked
                // above); host buffers are not written while they are the
                // source of a copy (the caller's contract).
                let bytes =
                    unsafe { std::slice::from_raw_parts(base.as_ptr().add(src.offset), size) };
                if std::ptr::addr_eq(Arc::as_ptr(&src.buffer), self as *const VkBuffer) {
                    // A copy inside this (mapped) buffer may overlap.
                    let tmp: Vec<u8> = bytes.to_vec();
                    self.set_tensor(dst_offset, &tmp)?;
                } else {
                    self.set_tensor(dst_offset, bytes)?;
                }
                return Ok(true);
            }
        }
        Ok(false)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}
