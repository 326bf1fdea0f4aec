//! Synchronous transfers between host memory and device buffers: a mapped
//! copy when the memory is host-visible, else through a staging buffer and
//! a one-off command buffer that is waited for.

use std::ptr::NonNull;

use ash::vk;

use crate::error::{Result, VkContext};
use crate::logical::{DeviceShared, RawBuffer};

/// Bytes of the staging buffer of synchronous transfers; larger transfers
/// go in several rounds.
pub(crate) const STAGING_SIZE: usize = 16 << 20;

/// Command pool, command buffer, fence and staging buffer of the
/// synchronous transfers of one device.
pub(crate) struct Transfer {
    pool: vk::CommandPool,
    cmd: vk::CommandBuffer,
    fence: vk::Fence,
    staging: Option<RawBuffer>,
}

/// Barrier recorded at the start of every command buffer: earlier
/// submissions on the queue (compute and transfers) complete their writes
/// before this one reads or writes.
pub(crate) fn begin_barrier(dev: &ash::Device, cmd: vk::CommandBuffer) {
    let stages = vk::PipelineStageFlags::COMPUTE_SHADER | vk::PipelineStageFlags::TRANSFER;
    let mb = vk::MemoryBarrier::default()
        .src_access_mask(vk::AccessFlags::SHADER_WRITE | vk::AccessFlags::TRANSFER_WRITE)
        .dst_access_mask(
            vk::AccessFlags::SHADER_READ
                | vk::AccessFlags::SHADER_WRITE
                | vk::AccessFlags::TRANSFER_READ
                | vk::AccessFlags::TRANSFER_WRITE,
        );
    // SAFETY: `cmd` is in the recording state.
    unsafe {
        dev.cmd_pipeline_barrier(
            cmd,
            stages,
            stages,
            vk::DependencyFlags::empty(),
            &[mb],
            &[],
            &[],
        )
    };
}

/// Barrier recorded at the end of every command buffer: its writes become
/// visible to the host once the submission is waited for.
pub(crate) fn end_barrier(dev: &ash::Device, cmd: vk::CommandBuffer) {
    let mb = vk::MemoryBarrier::default()
        .src_access_mask(vk::AccessFlags::SHADER_WRITE | vk::AccessFlags::TRANSFER_WRITE)
        .dst_access_mask(vk::AccessFlags::HOST_READ | vk::AccessFlags::HOST_WRITE);
    // SAFETY: `cmd` is in the recording state.
    unsafe {
        dev.cmd_pipeline_barrier(
            cmd,
            vk::PipelineStageFlags::COMPUTE_SHADER | vk::PipelineStageFlags::TRANSFER,
            vk::PipelineStageFlags::HOST,
            vk::DependencyFlags::empty(),
            &[mb],
            &[],
            &[],
        )
    };
}

impl Transfer {
    pub(crate) fn new(shared: &DeviceShared) -> Result<Transfer> {
        let dev = &shared.device;
        // SAFETY: a live device; objects are destroyed in `destroy`, or here
        // when a later step fails.
        unsafe {
            let pool = shared.create_command_pool()?;
            let cmd = match dev.allocate_command_buffers(
                &vk::CommandBufferAllocateInfo::default()
                    .command_pool(pool)
                    .level(vk::CommandBufferLevel::PRIMARY)
                    .command_buffer_count(1),
            ) {
                Ok(c) => c[0],
                Err(e) => {
                    dev.destroy_command_pool(pool, None);
                    return Err(crate::Error::vk("vkAllocateCommandBuffers", e));
                }
            };
            let fence = match dev.create_fence(&vk::FenceCreateInfo::default(), None) {
                Ok(f) => f,
                Err(e) => {
                    dev.destroy_command_pool(pool, None);
                    return Err(crate::Error::vk("vkCreateFence", e));
                }
            };
            Ok(Transfer {
                pool,
                cmd,
                fence,
                staging: None,
            })
        }
    }

    /// Destroys everything; the device must be idle.
    pub(crate) fn destroy(mut self, shared: &DeviceShared) {
        if let Some(s) = self.staging.take() {
            shared.destroy_buffer(s);
        }
        // SAFETY: the device is idle; each object is destroyed once.
        unsafe {
            shared.device.destroy_fence(self.fence, None);
            shared.device.destroy_command_pool(self.pool, None);
        }
    }

    fn staging(&mut self, shared: &DeviceShared) -> Result<(vk::Buffer, NonNull<u8>)> {
        if self.staging.is_none() {
            self.staging = Some(shared.create_buffer(STAGING_SIZE, true, "staging")?);
        }
        let s = self.staging.as_ref().expect("staging buffer was just made");
        let p = s.mapped.expect("host buffers are mapped");
        Ok((s.buffer, p))
    }

    /// Records commands with `f`, submits them and waits.
    fn run(
        &mut self,
        shared: &DeviceShared,
        f: impl FnOnce(&ash::Device, vk::CommandBuffer),
    ) -> Result<()> {
        let dev = &shared.device;
        // SAFETY: the command buffer and fence belong to this object, which
        // the caller holds exclusively (device mutex); the previous use was
        // waited for, so both can be reset.
        unsafe {
            dev.reset_fences(&[self.fence]).ctx("vkResetFences")?;
            dev.begin_command_buffer(
                self.cmd,
                &vk::CommandBufferBeginInfo::default()
                    .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT),
            )
            .ctx("vkBeginCommandBuffer")?;
            begin_barrier(dev, self.cmd);
            f(dev, self.cmd);
            end_barrier(dev, self.cmd);
            dev.end_command_buffer(self.cmd).ctx("vkEndCommandBuffer")?;
            let cmds = [self.cmd];
            shared.submit(
                &[vk::SubmitInfo::default().command_buffers(&cmds)],
                self.fence,
            )?;
            dev.wait_for_fences(&[self.fence], true, u64::MAX)
                .ctx("vkWaitForFences")
        }
    }
}

impl DeviceShared {
    /// The host address of `raw` when transfers may use it directly.
    pub(crate) fn direct(&self, raw: &RawBuffer, host_type: bool) -> Option<NonNull<u8>> {
        if host_type || !self.opts.force_staging {
            raw.mapped
        } else {
            None
        }
    }

    fn with_transfer<T>(&self, f: impl FnOnce(&mut Transfer) -> Result<T>) -> Result<T> {
        let mut g = self.transfer.lock().unwrap_or_else(|e| e.into_inner());
        let t = g.as_mut().ok_or_else(|| {
            crate::Error::Other(format!("{}: device is shutting down", self.name))
        })?;
        f(t)
    }

    /// Writes `data` at `offset` of `dst` (bounds checked by the caller).
    pub(crate) fn write(
        &self,
        dst: &RawBuffer,
        host_type: bool,
        offset: usize,
        data: &[u8],
    ) -> Result<()> {
        if let Some(p) = self.direct(dst, host_type) {
            // SAFETY: the range is inside the mapped buffer (checked by the
            // caller) and `data` is a distinct borrow.
            unsafe {
                std::ptr::copy_nonoverlapping(data.as_ptr(), p.as_ptr().add(offset), data.len())
            };
            return Ok(());
        }
        self.with_transfer(|t| {
            for (i, chunk) in data.chunks(STAGING_SIZE).enumerate() {
                let (sbuf, sp) = t.staging(self)?;
                // SAFETY: the staging buffer holds STAGING_SIZE bytes and is
                // idle (the previous round was waited for).
                unsafe { std::ptr::copy_nonoverlapping(chunk.as_ptr(), sp.as_ptr(), chunk.len()) };
                let region = vk::BufferCopy {
                    src_offset: 0,
                    dst_offset: (offset + i * STAGING_SIZE) as u64,
                    size: chunk.len() as u64,
                };
                // SAFETY: both buffers are live and the region is inside them.
                t.run(self, |d, c| unsafe {
                    d.cmd_copy_buffer(c, sbuf, dst.buffer, &[region])
                })?;
            }
            Ok(())
        })
    }

    /// Reads `out.len()` bytes at `offset` of `src` (bounds checked by the caller).
    pub(crate) fn read(
        &self,
        src: &RawBuffer,
        host_type: bool,
        offset: usize,
        out: &mut [u8],
    ) -> Result<()> {
        if let Some(p) = self.direct(src, host_type) {
            // SAFETY: the range is inside the mapped buffer (checked by the caller).
            unsafe {
                std::ptr::copy_nonoverlapping(p.as_ptr().add(offset), out.as_mut_ptr(), out.len())
            };
            return Ok(());
        }
        self.with_transfer(|t| {
            for (i, chunk) in out.chunks_mut(STAGING_SIZE).enumerate() {
                let (sbuf, sp) = t.staging(self)?;
                let region = vk::BufferCopy {
                    src_offset: (offset + i * STAGING_SIZE) as u64,
                    dst_offset: 0,
                    size: chunk.len() as u64,
                };
                // SAFETY: both buffers are live and the region is inside them.
                t.run(self, |d, c| unsafe {
                    d.cmd_copy_buffer(c, src.buffer, sbuf, &[region])
                })?;
                // SAFETY: the copy was waited for; the staging buffer holds the chunk.
                unsafe {
                    std::ptr::copy_nonoverlapping(sp.as_ptr(), chunk.as_mut_ptr(), chunk.len())
                };
            }
            Ok(())
        })
    }

    /// Fills `size` bytes at `offset` of `dst` with `value`.
    pub(crate) fn fill(
        &self,
        dst: &RawBuffer,
        host_type: bool,
        offset: usize,
        size: usize,
        value: u8,
    ) -> Result<()> {
        if let Some(p) = self.direct(dst, host_type) {
            // SAFETY: the range is inside the mapped buffer (checked by the caller).
            unsafe { std::ptr::write_bytes(p.as_ptr().add(offset), value, size) };
            return Ok(());
        }
        // vkCmdFillBuffer needs 4-byte aligned ranges: edges go as writes.
        let start = offset.next_multiple_of(4).min(offset + size);
        let end = ((offset + size) / 4 * 4).max(start);
        if start > offset {
            self.write(dst, host_type, offset, &vec![value; start - offset])?;
        }
        if end > start {
            let word = u32::from_ne_bytes([value; 4]);
            self.with_transfer(|t| {
                // SAFETY: the buffer is live and the aligned range is inside it.
                t.run(self, |d, c| unsafe {
                    d.cmd_fill_buffer(c, dst.buffer, start as u64, (end - start) as u64, word)
                })
            })?;
        }
        if offset + size > end {
            self.write(dst, host_type, end, &vec![value; offset + size - end])?;
        }
        Ok(())
    }

    /// Copies `size` bytes between two buffers of this device.
    pub(crate) fn copy(
        &self,
        src: &RawBuffer,
        src_off: usize,
        dst: &RawBuffer,
        dst_off: usize,
        size: usize,
    ) -> Result<()> {
        if size == 0 {
            return Ok(());
        }
        let region = vk::BufferCopy {
            src_offset: src_off as u64,
            dst_offset: dst_off as u64,
            size: size as u64,
        };
        self.with_transfer(|t| {
            // SAFETY: both buffers are live and the regions are inside them
            // (checked by the caller).
            t.run(self, |d, c| unsafe {
                d.cmd_copy_buffer(c, src.buffer, dst.buffer, &[region])
            })
        })
    }
}
