//! A logical device: queue, memory allocator, limits, pipelines, and the
//! raw buffers every higher-level object is made of.

use std::mem::ManuallyDrop;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use ash::vk;
use ggml_core::DeviceKind;
use gpu_allocator::vulkan::{
    Allocation, AllocationCreateDesc, AllocationScheme, Allocator, AllocatorCreateDesc,
};
use gpu_allocator::MemoryLocation;

use crate::error::{Error, Result, VkContext};
use crate::instance::{Instance, Physical};
use crate::options::Options;
use crate::pipeline::Pipelines;
use crate::transfer::Transfer;

/// Largest single buffer the backend makes, so that big models are held in
/// few chunks while each stays easy to allocate.
pub const MAX_BUFFER_SIZE: usize = 1 << 30;

/// Device limits the backend works with.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    /// Alignment of storage-buffer binding offsets.
    pub(crate) storage_align: usize,
    /// Largest storage-buffer binding range.
    pub(crate) max_storage_range: usize,
    /// Largest allocation and buffer: min(maxMemoryAllocationSize, maxBufferSize).
    pub(crate) max_alloc: usize,
    /// Workgroups per dispatch dimension.
    pub(crate) max_groups: [u32; 3],
    /// Bytes of shared memory of a workgroup.
    pub(crate) max_shared: usize,
    /// Subgroup size.
    pub(crate) subgroup_size: u32,
    /// Subgroup arithmetic in compute shaders.
    pub(crate) subgroup_arith: bool,
    /// Integer dot products in shaders (VK_KHR_shader_integer_dot_product,
    /// enabled at creation).
    pub(crate) integer_dot: bool,
    /// Nanoseconds per timestamp tick and the valid bits of a timestamp,
    /// when the compute queue writes timestamps.
    pub(crate) timestamps: Option<(f32, u32)>,
}

/// A device-visible buffer and its memory.
pub(crate) struct RawBuffer {
    pub(crate) buffer: vk::Buffer,
    alloc: Option<Allocation>,
    /// Size of the Vulkan buffer (at least the size asked for, never 0).
    pub(crate) size: usize,
    /// Host address of byte 0 when the memory is host-visible and coherent.
    pub(crate) mapped: Option<NonNull<u8>>,
    /// Bytes counted against the device memory in use (0 for host memory).
    device_bytes: usize,
}

// SAFETY: the mapping pointer is only dereferenced through `DeviceShared`
// methods whose callers own the byte ranges they touch, as for any device
// memory; the Vulkan handles are plain identifiers.
unsafe impl Send for RawBuffer {}
// SAFETY: see `Send`.
unsafe impl Sync for RawBuffer {}

/// What every object of one logical device shares.
pub(crate) struct DeviceShared {
    /// `Vulkan0`, `Vulkan1`, ...
    pub(crate) name: String,
    /// The GPU's name.
    pub(crate) description: String,
    /// The driver's name and version (see `Physical::driver`).
    pub(crate) driver: String,
    pub(crate) kind: DeviceKind,
    pub(crate) instance: Arc<Instance>,
    pub(crate) physical: vk::PhysicalDevice,
    pub(crate) device: ash::Device,
    pub(crate) queue: Mutex<vk::Queue>,
    pub(crate) queue_family: u32,
    allocator: ManuallyDrop<Mutex<Allocator>>,
    pub(crate) limits: Limits,
    memory_budget: bool,
    /// Bytes of device-local buffers alive, for `Options::max_memory`.
    device_used: AtomicUsize,
    /// Buffers destroyed so far: descriptor sets kept across recordings
    /// are dropped when it moves (a new buffer may reuse a handle).
    pub(crate) buffers_destroyed: AtomicU64,
    pub(crate) opts: Options,
    pub(crate) pipelines: Pipelines,
    pub(crate) transfer: Mutex<Option<Transfer>>,
}

/// Device features the shaders need, or the first one missing.
fn check_features(
    inst: &ash::Instance,
    pd: vk::PhysicalDevice,
) -> std::result::Result<(), &'static str> {
    let mut f11 = vk::PhysicalDeviceVulkan11Features::default();
    let mut f12 = vk::PhysicalDeviceVulkan12Features::default();
    let mut f2 = vk::PhysicalDeviceFeatures2::default()
        .push_next(&mut f11)
        .push_next(&mut f12);
    // SAFETY: a query on a live physical device with a valid pNext chain.
    unsafe { inst.get_physical_device_features2(pd, &mut f2) };
    if f11.storage_buffer16_bit_access == 0 {
        return Err("storageBuffer16BitAccess");
    }
    if f12.storage_buffer8_bit_access == 0 {
        return Err("storageBuffer8BitAccess");
    }
    if f12.scalar_block_layout == 0 {
        return Err("scalarBlockLayout");
    }
    if f12.timeline_semaphore == 0 {
        return Err("timelineSemaphore");
    }
    Ok(())
}

impl DeviceShared {
    /// A command pool on the compute queue's family whose command buffers
    /// can be reset one by one.
    ///
    /// # Safety
    /// The caller destroys the pool before the device.
    pub(crate) unsafe fn create_command_pool(&self) -> Result<vk::CommandPool> {
        // SAFETY: a live device (self); the caller destroys the pool.
        unsafe {
            self.device.create_command_pool(
                &vk::CommandPoolCreateInfo::default()
                    .queue_family_index(self.queue_family)
                    .flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER),
                None,
            )
        }
        .ctx("vkCreateCommandPool")
    }

    /// Creates the logical device `name` on physical device `phys`.
    pub(crate) fn new(
        instance: Arc<Instance>,
        phys: &Physical,
        name: String,
        opts: &Options,
    ) -> Result<Arc<DeviceShared>> {
        let inst = &instance.instance;
        let pd = phys.handle;
        check_features(inst, pd)
            .map_err(|f| Error::Other(format!("{} lacks the {f} feature", phys.name())))?;
        // SAFETY: queries on a live physical device.
        let (families, exts) = unsafe {
            (
                inst.get_physical_device_queue_family_properties(pd),
                inst.enumerate_device_extension_properties(pd)
                    .ctx("vkEnumerateDeviceExtensionProperties")?,
            )
        };
        let queue_family = families
            .iter()
            .position(|f| f.queue_flags.contains(vk::QueueFlags::COMPUTE))
            .ok_or_else(|| Error::Other(format!("{} has no compute queue", phys.name())))?
            as u32;
        let has_ext = |n: &std::ffi::CStr| {
            exts.iter()
                .any(|e| e.extension_name_as_c_str().is_ok_and(|x| x == n))
        };
        let memory_budget = has_ext(ash::ext::memory_budget::NAME);
        let mut ext_names = Vec::new();
        if memory_budget {
            ext_names.push(ash::ext::memory_budget::NAME.as_ptr());
        }
        let integer_dot =
            !opts.disable_integer_dot && has_ext(ash::khr::shader_integer_dot_product::NAME) && {
                let mut fi = vk::PhysicalDeviceShaderIntegerDotProductFeatures::default();
                let mut f2 = vk::PhysicalDeviceFeatures2::default().push_next(&mut fi);
                // SAFETY: a query with a valid pNext chain; the structure is
                // known to a device with the extension.
                unsafe { inst.get_physical_device_features2(pd, &mut f2) };
                fi.shader_integer_dot_product != 0
            };
        if integer_dot {
            ext_names.push(ash::khr::shader_integer_dot_product::NAME.as_ptr());
        }

        let mut sg = vk::PhysicalDeviceSubgroupProperties::default();
        let mut p2 = vk::PhysicalDeviceProperties2::default().push_next(&mut sg);
        // SAFETY: a query with a valid pNext chain.
        unsafe { inst.get_physical_device_properties2(pd, &mut p2) };
        let l = p2.properties.limits;
        let storage_buffers = l
            .max_per_stage_descriptor_storage_buffers
            .min(l.max_descriptor_set_storage_buffers);
        if storage_buffers < crate::pipeline::N_BINDINGS {
            return Err(Error::Other(format!(
                "{name}: the shaders bind {} storage buffers, the device allows {storage_buffers}",
                crate::pipeline::N_BINDINGS
            )));
        }
        let mut m3 = vk::PhysicalDeviceMaintenance3Properties::default();
        let mut p3 = vk::PhysicalDeviceProperties2::default().push_next(&mut m3);
        // SAFETY: as above.
        unsafe { inst.get_physical_device_properties2(pd, &mut p3) };
        // maxBufferSize exists from Vulkan 1.3 (or VK_KHR_maintenance4).
        let mut max_buffer = u64::MAX;
        if phys.props.api_version >= vk::API_VERSION_1_3 || has_ext(ash::khr::maintenance4::NAME) {
            let mut m4 = vk::PhysicalDeviceMaintenance4Properties::default();
            let mut p4 = vk::PhysicalDeviceProperties2::default().push_next(&mut m4);
            // SAFETY: as above; the structure is known to this device.
            unsafe { inst.get_physical_device_properties2(pd, &mut p4) };
            max_buffer = m4.max_buffer_size;
        }
        let limits = Limits {
            storage_align: (l.min_storage_buffer_offset_alignment as usize).max(4),
            max_storage_range: opts
                .max_binding_size
                .map_or(l.max_storage_buffer_range as usize, |m| {
                    m.clamp(4096, l.max_storage_buffer_range as usize)
                }),
            max_alloc: usize::try_from(m3.max_memory_allocation_size.min(max_buffer))
                .unwrap_or(usize::MAX),
            max_groups: l.max_compute_work_group_count,
            max_shared: l.max_compute_shared_memory_size as usize,
            subgroup_size: sg.subgroup_size,
            subgroup_arith: !opts.disable_subgroups
                && sg.supported_stages.contains(vk::ShaderStageFlags::COMPUTE)
                && sg.supported_operations.contains(
                    vk::SubgroupFeatureFlags::BASIC | vk::SubgroupFeatureFlags::ARITHMETIC,
                ),
            integer_dot,
            timestamps: {
                let bits = families[queue_family as usize].timestamp_valid_bits;
                (bits > 0 && l.timestamp_period > 0.0).then_some((l.timestamp_period, bits))
            },
        };

        let priorities = [1.0f32];
        let queues = [vk::DeviceQueueCreateInfo::default()
            .queue_family_index(queue_family)
            .queue_priorities(&priorities)];
        let mut f11 =
            vk::PhysicalDeviceVulkan11Features::default().storage_buffer16_bit_access(true);
        let mut f12 = vk::PhysicalDeviceVulkan12Features::default()
            .storage_buffer8_bit_access(true)
            .scalar_block_layout(true)
            .timeline_semaphore(true);
        let mut fi = vk::PhysicalDeviceShaderIntegerDotProductFeatures::default()
            .shader_integer_dot_product(true);
        let mut info = vk::DeviceCreateInfo::default()
            .queue_create_infos(&queues)
            .enabled_extension_names(&ext_names)
            .push_next(&mut f11)
            .push_next(&mut f12);
        if integer_dot {
            info = info.push_next(&mut fi);
        }
        // SAFETY: the create info and its chain live until the call returns.
        let device = unsafe { inst.create_device(pd, &info, None) }.ctx("vkCreateDevice")?;
        // SAFETY: the queue family and index were requested at creation.
        let queue = unsafe { device.get_device_queue(queue_family, 0) };

        let destroy = |device: &ash::Device| {
            // SAFETY: nothing was made from the device yet, or it was destroyed.
            unsafe { device.destroy_device(None) }
        };
        let allocator = match Allocator::new(&AllocatorCreateDesc {
            instance: inst.clone(),
            device: device.clone(),
            physical_device: pd,
            debug_settings: Default::default(),
            buffer_device_address: false,
            allocation_sizes: Default::default(),
        }) {
            Ok(a) => a,
            Err(e) => {
                destroy(&device);
                return Err(Error::Other(format!("{name}: memory allocator: {e}")));
            }
        };
        let pipelines = match Pipelines::new(&device) {
            Ok(p) => p,
            Err(e) => {
                drop(allocator);
                destroy(&device);
                return Err(e);
            }
        };
        let kind = match phys.props.device_type {
            vk::PhysicalDeviceType::DISCRETE_GPU | vk::PhysicalDeviceType::VIRTUAL_GPU => {
                DeviceKind::Gpu
            }
            _ => DeviceKind::IGpu,
        };
        let shared = Arc::new(DeviceShared {
            name,
            description: phys.name(),
            driver: phys.driver.clone(),
            kind,
            instance,
            physical: pd,
            device,
            queue: Mutex::new(queue),
            queue_family,
            allocator: ManuallyDrop::new(Mutex::new(allocator)),
            limits,
            memory_budget,
            device_used: AtomicUsize::new(0),
            buffers_destroyed: AtomicU64::new(0),
            opts: opts.clone(),
            pipelines,
            transfer: Mutex::new(None),
        });
        let t = Transfer::new(&shared)?;
        *shared.transfer.lock().unwrap_or_else(|e| e.into_inner()) = Some(t);
        Ok(shared)
    }

    /// Largest buffer of the device's buffer types.
    pub(crate) fn max_buffer_size(&self) -> usize {
        let mut m = self.limits.max_alloc.min(MAX_BUFFER_SIZE);
        if let Some(o) = self.opts.max_buffer_size {
            m = m.min(o.max(1));
        }
        m
    }

    /// (free, total) bytes of device-local memory.
    pub(crate) fn memory(&self) -> (usize, usize) {
        let inst = &self.instance.instance;
        let mut budget = vk::PhysicalDeviceMemoryBudgetPropertiesEXT::default();
        let mut p2 = vk::PhysicalDeviceMemoryProperties2::default();
        if self.memory_budget {
            p2 = p2.push_next(&mut budget);
        }
        // SAFETY: a query with a valid pNext chain (the budget struct only
        // when the extension is enabled).
        unsafe { inst.get_physical_device_memory_properties2(self.physical, &mut p2) };
        let mp = p2.memory_properties;
        let (mut free, mut total) = (0u64, 0u64);
        for (i, heap) in mp.memory_heaps_as_slice().iter().enumerate() {
            if !heap.flags.contains(vk::MemoryHeapFlags::DEVICE_LOCAL) {
                continue;
            }
            total += heap.size;
            free += if self.memory_budget {
                budget.heap_budget[i].saturating_sub(budget.heap_usage[i])
            } else {
                heap.size
            };
        }
        let c = |x: u64| usize::try_from(x).unwrap_or(usize::MAX);
        let (mut free, mut total) = (c(free), c(total));
        if let Some(cap) = self.opts.max_memory {
            total = total.min(cap);
            free = free.min(cap.saturating_sub(self.device_used.load(Ordering::Relaxed)));
        }
        (free, total)
    }

    /// Counts `bytes` of device memory as in use, or refuses them when
    /// they would pass `Options::max_memory`.
    fn reserve_device_memory(&self, bytes: usize) -> Result<()> {
        let prev = self.device_used.fetch_add(bytes, Ordering::Relaxed);
        match self.opts.max_memory {
            Some(cap) if prev.saturating_add(bytes) > cap => {
                self.device_used.fetch_sub(bytes, Ordering::Relaxed);
                Err(Error::Alloc {
                    device: self.name.clone(),
                    size: bytes,
                    reason: format!(
                        "out of device memory: {:.2} MiB of the {:.2} MiB budget \
                         (GGML_VK_MAX_MEMORY_MIB) in use, {:.2} MiB asked for",
                        prev as f64 / 1048576.0,
                        cap as f64 / 1048576.0,
                        bytes as f64 / 1048576.0
                    ),
                })
            }
            _ => Ok(()),
        }
    }

    /// Makes a storage buffer of `size` bytes in device-local memory, or in
    /// host-visible cached memory when `host`.
    pub(crate) fn create_buffer(&self, size: usize, host: bool, what: &str) -> Result<RawBuffer> {
        let alloc_err = |reason: String| Error::Alloc {
            device: self.name.clone(),
            size,
            reason,
        };
        if size > self.limits.max_alloc {
            return Err(alloc_err(format!(
                "larger than the device's largest allocation ({} bytes)",
                self.limits.max_alloc
            )));
        }
        let vk_size = size.max(16).next_multiple_of(4);
        let device_bytes = if host { 0 } else { vk_size };
        self.reserve_device_memory(device_bytes)?;
        let release = || {
            self.device_used.fetch_sub(device_bytes, Ordering::Relaxed);
        };
        let info = vk::BufferCreateInfo::default()
            .size(vk_size as u64)
            .usage(
                vk::BufferUsageFlags::STORAGE_BUFFER
                    | vk::BufferUsageFlags::TRANSFER_SRC
                    | vk::BufferUsageFlags::TRANSFER_DST,
            )
            .sharing_mode(vk::SharingMode::EXCLUSIVE);
        let dev = &self.device;
        // SAFETY: a live device; the buffer is destroyed on every error path
        // below and otherwise owned by the returned RawBuffer.
        unsafe {
            let buffer = dev.create_buffer(&info, None).map_err(|e| {
                release();
                alloc_err(format!("vkCreateBuffer: {e}"))
            })?;
            let requirements = dev.get_buffer_memory_requirements(buffer);
            let location = if host {
                MemoryLocation::GpuToCpu
            } else {
                MemoryLocation::GpuOnly
            };
            let res = self
                .allocator
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .allocate(&AllocationCreateDesc {
                    name: what,
                    requirements,
                    location,
                    linear: true,
                    allocation_scheme: AllocationScheme::GpuAllocatorManaged,
                });
            let alloc = match res {
                Ok(a) => a,
                Err(e) => {
                    dev.destroy_buffer(buffer, None);
                    release();
                    return Err(alloc_err(e.to_string()));
                }
            };
            // Undoes the steps above when a later one fails.
            let undo = |alloc: Allocation| {
                dev.destroy_buffer(buffer, None);
                let _ = self
                    .allocator
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .free(alloc);
                release();
            };
            if let Err(e) = dev.bind_buffer_memory(buffer, alloc.memory(), alloc.offset()) {
                undo(alloc);
                return Err(alloc_err(format!("vkBindBufferMemory: {e}")));
            }
            let coherent = alloc.memory_properties().contains(
                vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT,
            );
            let mapped = if coherent {
                alloc.mapped_ptr().map(|p| p.cast::<u8>())
            } else {
                None
            };
            if host && mapped.is_none() {
                undo(alloc);
                return Err(alloc_err("no host-visible coherent memory".into()));
            }
            Ok(RawBuffer {
                buffer,
                alloc: Some(alloc),
                size: vk_size,
                mapped,
                device_bytes,
            })
        }
    }

    /// Destroys a buffer; no queued work may still use it.
    pub(crate) fn destroy_buffer(&self, mut raw: RawBuffer) {
        // SAFETY: the caller guarantees the GPU is done with the buffer.
        unsafe { self.device.destroy_buffer(raw.buffer, None) };
        self.buffers_destroyed.fetch_add(1, Ordering::Relaxed);
        self.device_used
            .fetch_sub(std::mem::take(&mut raw.device_bytes), Ordering::Relaxed);
        if let Some(a) = raw.alloc.take() {
            let _ = self
                .allocator
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .free(a);
        }
    }

    /// Submits command buffers to the queue.
    pub(crate) fn submit(&self, submits: &[vk::SubmitInfo<'_>], fence: vk::Fence) -> Result<()> {
        let q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: the queue is externally synchronised by the mutex; the
        // submit infos point to recorded command buffers and live semaphores.
        unsafe { self.device.queue_submit(*q, submits, fence) }.ctx("vkQueueSubmit")
    }

    /// Waits until the device is idle.
    pub(crate) fn wait_idle(&self) {
        let _q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: the queue mutex is held, so no submission races the wait.
        let _ = unsafe { self.device.device_wait_idle() };
    }
}

impl Drop for DeviceShared {
    fn drop(&mut self) {
        self.wait_idle();
        if let Some(t) = self
            .transfer
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            t.destroy(self);
        }
        self.pipelines.destroy(&self.device);
        // SAFETY: every buffer and allocation is gone (they hold Arcs to
        // this object), the allocator is dropped before the device it uses,
        // and each is dropped once.
        unsafe {
            ManuallyDrop::drop(&mut self.allocator);
            self.device.destroy_device(None);
        }
    }
}
