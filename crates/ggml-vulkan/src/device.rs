//! The ggml device of one Vulkan logical device.

use std::sync::{Arc, Weak};

use ggml_core::{
    Backend, BufferType, Device, DeviceCaps, DeviceKind, DeviceProps, Event, Graph, Op, TensorId,
};

use crate::backend::VulkanBackend;
use crate::buffer::VkBufferType;
use crate::event::VkEvent;
use crate::logical::DeviceShared;

/// Batch size from which running an op here pays for copying its weight
/// from another device.
const MIN_OFFLOAD_BATCH: usize = 32;

/// A Vulkan device (`Vulkan0`, ...), with its device-local and pinned host
/// buffer types.
pub struct VulkanDevice {
    shared: Arc<DeviceShared>,
    buft: Arc<VkBufferType>,
    host_buft: Arc<VkBufferType>,
    me: Weak<VulkanDevice>,
}

impl VulkanDevice {
    pub(crate) fn new(shared: Arc<DeviceShared>) -> Arc<VulkanDevice> {
        Arc::new_cyclic(|me| VulkanDevice {
            buft: VkBufferType::new(shared.clone(), false),
            host_buft: VkBufferType::new(shared.clone(), true),
            shared,
            me: me.clone(),
        })
    }

    pub(crate) fn shared(&self) -> &Arc<DeviceShared> {
        &self.shared
    }

    /// The device-local buffer type, with its concrete type.
    pub fn vk_buffer_type(&self) -> &Arc<VkBufferType> {
        &self.buft
    }

    /// The pinned host buffer type, with its concrete type.
    pub fn vk_host_buffer_type(&self) -> &Arc<VkBufferType> {
        &self.host_buft
    }

    /// A new execution stream, with its concrete type.
    pub fn new_backend(&self) -> ggml_core::Result<VulkanBackend> {
        let me = self.me.upgrade().ok_or_else(|| {
            ggml_core::Error::Invalid(format!("{}: device dropped", self.shared.name))
        })?;
        Ok(VulkanBackend::new(me)?)
    }

    /// Subgroup size, and whether the shaders use subgroup operations.
    pub fn subgroups(&self) -> (u32, bool) {
        (
            self.shared.limits.subgroup_size,
            self.shared.limits.subgroup_arith,
        )
    }

    /// Whether the shaders use integer dot products
    /// (VK_KHR_shader_integer_dot_product).
    pub fn integer_dot(&self) -> bool {
        self.shared.limits.integer_dot
    }

    /// The driver's name and version, as the driver reports them.
    pub fn driver(&self) -> &str {
        &self.shared.driver
    }

    /// Largest storage-buffer binding: a tensor must fit in one.
    pub fn max_binding_size(&self) -> usize {
        self.shared.limits.max_storage_range
    }
}

impl Device for VulkanDevice {
    fn name(&self) -> &str {
        &self.shared.name
    }

    fn description(&self) -> String {
        self.shared.description.clone()
    }

    fn props(&self) -> DeviceProps {
        let (free, total) = self.shared.memory();
        DeviceProps {
            name: self.shared.name.clone(),
            description: self.shared.description.clone(),
            kind: self.shared.kind,
            memory_free: free,
            memory_total: total,
            caps: DeviceCaps {
                async_: true,
                host_buffer: true,
                buffer_from_host_ptr: false,
                events: true,
            },
        }
    }

    fn kind(&self) -> DeviceKind {
        self.shared.kind
    }

    fn memory(&self) -> (usize, usize) {
        self.shared.memory()
    }

    fn buffer_type(&self) -> Arc<dyn BufferType> {
        self.buft.clone()
    }

    fn host_buffer_type(&self) -> Option<Arc<dyn BufferType>> {
        Some(self.host_buft.clone())
    }

    fn supports_op(&self, graph: &Graph, node: TensorId) -> bool {
        crate::ops::supports(&self.shared, graph, node)
    }

    fn supports_buft(&self, buft: &dyn BufferType) -> bool {
        !buft.is_host()
            && buft.name() == self.shared.name
            && buft.device_name().as_deref() == Some(self.shared.name.as_str())
    }

    fn offload_op(&self, graph: &Graph, node: TensorId) -> bool {
        let n = graph.node(node);
        let batch = match n.op {
            Op::GetRows => return false,
            Op::MulMat => graph.desc(n.src[1]).ne[1],
            // Tokens, as llama.cpp counts them for expert products.
            Op::MulMatId => n.desc.ne[2],
            _ => n.desc.ne[1],
        };
        batch >= MIN_OFFLOAD_BATCH
    }

    fn init_backend(&self) -> ggml_core::Result<Box<dyn Backend>> {
        Ok(Box::new(self.new_backend()?))
    }

    fn event_new(&self) -> Option<Arc<dyn Event>> {
        match VkEvent::new(self.shared.clone()) {
            Ok(e) => Some(Arc::new(e)),
            Err(e) => {
                eprintln!(
                    "ggml_vulkan: {}: cannot create an event: {e}",
                    self.shared.name
                );
                None
            }
        }
    }
}
