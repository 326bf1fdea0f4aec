//! Backend interfaces: registrations, devices, buffer types, buffers,
//! backends (execution streams) and events, as object-safe traits.

use std::any::Any;
use std::fmt;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use crate::graph::{Graph, TensorId};
use crate::tensor::TensorDesc;
use crate::Result;

/// Memory owned elsewhere that a buffer may wrap without copying (a file
/// mapping, a vector). Holding the `Arc` keeps the memory alive.
pub type HostMem = Arc<dyn AsRef<[u8]> + Send + Sync>;

/// Where a tensor's bytes live: a buffer and a byte offset in it.
#[derive(Clone)]
pub struct Placement {
    /// The buffer.
    pub buffer: Arc<dyn Buffer>,
    /// Byte offset in the buffer.
    pub offset: usize,
}

impl Placement {
    /// Byte `offset` of `buffer`.
    pub fn new(buffer: Arc<dyn Buffer>, offset: usize) -> Placement {
        Placement { buffer, offset }
    }
}

impl fmt::Debug for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}+{}", self.buffer.buffer_type().name(), self.offset)
    }
}

/// What a buffer holds; weights buffers tell the scheduler that ops using
/// them should run on the buffer's device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BufferUsage {
    /// Anything.
    Any,
    /// Model weights.
    Weights,
    /// Intermediate results of a graph.
    Compute,
}

/// A buffer's [`BufferUsage`], read and changed through a shared reference
/// (buffers are shared as `Arc<dyn Buffer>`).
#[derive(Debug)]
struct UsageCell(AtomicU8);

impl UsageCell {
    /// A cell holding `usage`.
    fn new(usage: BufferUsage) -> UsageCell {
        UsageCell(AtomicU8::new(usage as u8))
    }

    /// The usage held.
    fn get(&self) -> BufferUsage {
        match self.0.load(Ordering::Relaxed) {
            x if x == BufferUsage::Weights as u8 => BufferUsage::Weights,
            x if x == BufferUsage::Compute as u8 => BufferUsage::Compute,
            _ => BufferUsage::Any,
        }
    }

    /// Changes the usage held.
    fn set(&self, usage: BufferUsage) {
        self.0.store(usage as u8, Ordering::Relaxed);
    }
}

/// What every buffer keeps about itself: the type it was allocated from,
/// its size and what it holds. A buffer hands it out through
/// [`Buffer::common`], which gives it [`Buffer::buffer_type`],
/// [`Buffer::size`], [`Buffer::usage`] and [`Buffer::set_usage`].
pub struct BufferCommon {
    buft: Arc<dyn BufferType>,
    size: usize,
    usage: UsageCell,
}

impl BufferCommon {
    /// A buffer of `size` bytes of `buft`, holding `usage`.
    pub fn new(buft: Arc<dyn BufferType>, size: usize, usage: BufferUsage) -> BufferCommon {
        BufferCommon {
            buft,
            size,
            usage: UsageCell::new(usage),
        }
    }

    /// The type the buffer was allocated from.
    pub fn buft(&self) -> &Arc<dyn BufferType> {
        &self.buft
    }

    /// Size in bytes.
    pub fn size(&self) -> usize {
        self.size
    }

    /// `Ok` when the `len` bytes at `offset` lie inside the buffer; else an
    /// error naming the buffer type and `what` was being done.
    pub fn check_range(&self, what: &str, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.size => Ok(()),
            _ => Err(crate::Error::OutOfBounds {
                what: format!("{}: {what}", self.buft.name()),
                offset,
                end: offset.saturating_add(len),
                size: self.size,
            }),
        }
    }
}

/// Kind of device, in ggml's terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeviceKind {
    /// The host CPU.
    Cpu,
    /// A discrete GPU.
    Gpu,
    /// An integrated GPU sharing host memory.
    IGpu,
    /// An accelerator that works alongside the CPU (e.g. BLAS).
    Accel,
}

/// Device capabilities.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceCaps {
    /// Asynchronous transfers and compute.
    pub async_: bool,
    /// Has a pinned host buffer type.
    pub host_buffer: bool,
    /// Can wrap host memory (a file mapping) as a buffer.
    pub buffer_from_host_ptr: bool,
    /// Supports events.
    pub events: bool,
}

/// Properties of a device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceProps {
    /// Short name (`CPU`, `Vulkan0`).
    pub name: String,
    /// Human description (the CPU model, the GPU name).
    pub description: String,
    /// Kind.
    pub kind: DeviceKind,
    /// Free memory in bytes.
    pub memory_free: usize,
    /// Total memory in bytes.
    pub memory_total: usize,
    /// Capabilities.
    pub caps: DeviceCaps,
}

/// A backend registration: one per backend crate (CPU, Vulkan, ...).
pub trait BackendReg: Send + Sync {
    /// Name (`CPU`, `Vulkan`).
    fn name(&self) -> &str;
    /// Devices it exposes, in its order.
    fn devices(&self) -> Vec<Arc<dyn Device>>;
    /// Optional named features for logs (`AVX2 = 1`).
    fn features(&self) -> Vec<(String, String)> {
        Vec::new()
    }
}

/// A device: something that owns memory and can run graphs.
pub trait Device: Send + Sync {
    /// Short unique name (`CPU`, `Vulkan0`).
    fn name(&self) -> &str;
    /// Description.
    fn description(&self) -> String;
    /// Properties, with the current free memory.
    fn props(&self) -> DeviceProps;
    /// Kind.
    fn kind(&self) -> DeviceKind {
        self.props().kind
    }
    /// (free, total) memory in bytes.
    fn memory(&self) -> (usize, usize) {
        let p = self.props();
        (p.memory_free, p.memory_total)
    }
    /// The device's own buffer type.
    fn buffer_type(&self) -> Arc<dyn BufferType>;
    /// A pinned host buffer type for fast transfers, when the device has one.
    fn host_buffer_type(&self) -> Option<Arc<dyn BufferType>> {
        None
    }
    /// Extra buffer types (e.g. CPU repacked weights), tried before the plain one.
    fn extra_buffer_types(&self) -> Vec<Arc<dyn BufferType>> {
        Vec::new()
    }
    /// Wraps `size` bytes of `mem` at `offset` as a buffer without copying;
    /// `max_tensor_size` is the largest tensor that will live in it.
    fn buffer_from_host_mem(
        &self,
        mem: HostMem,
        offset: usize,
        size: usize,
        max_tensor_size: usize,
    ) -> Result<Arc<dyn Buffer>> {
        let _ = (mem, offset, size, max_tensor_size);
        Err(crate::Error::Backend(format!(
            "{}: cannot wrap host memory",
            self.name()
        )))
    }
    /// True when the device can compute node `node` of `graph`.
    fn supports_op(&self, graph: &Graph, node: TensorId) -> bool;
    /// True when the device can compute on tensors in buffers of `buft`.
    fn supports_buft(&self, buft: &dyn BufferType) -> bool;
    /// True when the device wants to run `node` even though its weight lives
    /// elsewhere (large batches amortise the copy).
    fn offload_op(&self, graph: &Graph, node: TensorId) -> bool {
        let _ = (graph, node);
        false
    }
    /// A new execution stream on the device.
    fn init_backend(&self) -> Result<Box<dyn Backend>>;
    /// A new event, when the device supports them.
    fn event_new(&self) -> Option<Arc<dyn Event>> {
        None
    }
}

/// A kind of memory a device can allocate (ggml_backend_buffer_type).
pub trait BufferType: Send + Sync {
    /// Unique name (`CPU`, `Vulkan0`, `Vulkan_Host`).
    fn name(&self) -> &str;
    /// Alignment of tensor offsets in bytes.
    fn alignment(&self) -> usize;
    /// Largest single buffer.
    fn max_size(&self) -> usize {
        usize::MAX
    }
    /// Bytes a tensor takes in a buffer of this type (may exceed nbytes, e.g. padding).
    fn alloc_size(&self, desc: &TensorDesc) -> usize {
        desc.nbytes()
    }
    /// True when the memory is host memory the CPU can address.
    fn is_host(&self) -> bool;
    /// Allocates a buffer of `size` bytes.
    fn alloc_buffer(&self, size: usize) -> Result<Arc<dyn Buffer>>;
    /// The device that owns this memory (None for plain host memory types
    /// shared by several devices).
    fn device_name(&self) -> Option<String> {
        None
    }
    /// True when `weight`, read by node `node` of `graph`, may be stored in
    /// this type. Plain memory holds anything; a type whose layout only
    /// some ops can read (repacked weights) accepts the weights of those
    /// ops alone.
    fn supports_weight(&self, graph: &Graph, node: TensorId, weight: TensorId) -> bool {
        let _ = (graph, node, weight);
        true
    }
}

/// An allocated block of memory of one buffer type.
pub trait Buffer: Send + Sync {
    /// Its type, size and usage.
    fn common(&self) -> &BufferCommon;
    /// The type it was allocated from.
    fn buffer_type(&self) -> Arc<dyn BufferType> {
        self.common().buft.clone()
    }
    /// Size in bytes.
    fn size(&self) -> usize {
        self.common().size
    }
    /// Host address of byte 0, for host buffers (none for device memory):
    /// the same for the buffer's whole life, so that what a backend derives
    /// from a graph's placements holds while the graph is unchanged.
    fn base(&self) -> Option<NonNull<u8>> {
        None
    }
    /// True when the memory must not be written (a read-only file mapping);
    /// the same for the buffer's whole life.
    fn is_read_only(&self) -> bool {
        false
    }
    /// What it holds.
    fn usage(&self) -> BufferUsage {
        self.common().usage.get()
    }
    /// Sets what it holds.
    fn set_usage(&self, usage: BufferUsage) {
        self.common().usage.set(usage);
    }
    /// Prepares a tensor placed at `offset` (most buffers need nothing).
    fn init_tensor(&self, desc: &TensorDesc, offset: usize) -> Result<()> {
        let _ = (desc, offset);
        Ok(())
    }
    /// Writes `data` at `offset`.
    fn set_tensor(&self, offset: usize, data: &[u8]) -> Result<()>;
    /// Reads `out.len()` bytes at `offset`.
    fn get_tensor(&self, offset: usize, out: &mut [u8]) -> Result<()>;
    /// Fills `size` bytes at `offset` with `value`.
    fn memset_tensor(&self, offset: usize, value: u8, size: usize) -> Result<()>;
    /// Fills the whole buffer with `value`.
    fn clear(&self, value: u8) -> Result<()> {
        self.memset_tensor(0, value, self.size())
    }
    /// Copies `size` bytes from `src` to `dst_offset` in this buffer when the
    /// two buffers allow a direct copy; `Ok(false)` when they do not.
    fn cpy_tensor(&self, src: &Placement, dst_offset: usize, size: usize) -> Result<bool> {
        let _ = (src, dst_offset, size);
        Ok(false)
    }
    /// For backends that need their own buffer type back.
    fn as_any(&self) -> &dyn Any;
}

/// An execution stream on a device (ggml_backend).
pub trait Backend: Send {
    /// Name (usually the device's).
    fn name(&self) -> &str;
    /// Its device.
    fn device(&self) -> Arc<dyn Device>;
    /// Writes `data` to `dst`, possibly asynchronously (complete at `synchronize`).
    fn set_tensor_async(&mut self, dst: &Placement, data: &[u8]) -> Result<()> {
        dst.buffer.set_tensor(dst.offset, data)
    }
    /// Reads `src` into `out`; synchronous unless documented otherwise.
    fn get_tensor_async(&mut self, src: &Placement, out: &mut [u8]) -> Result<()> {
        src.buffer.get_tensor(src.offset, out)
    }
    /// Copies between buffers asynchronously when possible; `Ok(false)` when not.
    fn cpy_tensor_async(&mut self, src: &Placement, dst: &Placement, size: usize) -> Result<bool> {
        let _ = (src, dst, size);
        Ok(false)
    }
    /// Waits for all queued work.
    fn synchronize(&mut self) -> Result<()> {
        Ok(())
    }
    /// Computes `nodes` of `graph`, in order. Sources must have memory the
    /// backend can read; results are written to the nodes' placements.
    fn graph_compute(&mut self, graph: &Graph, nodes: &[TensorId]) -> Result<()>;
    /// Threads for compute (CPU); ignored by backends without the notion.
    fn set_n_threads(&mut self, n_threads: usize) {
        let _ = n_threads;
    }
    /// Records `event` after the queued work.
    fn event_record(&mut self, event: &dyn Event) -> Result<()> {
        let _ = event;
        Ok(())
    }
    /// Makes queued work wait for `event`.
    fn event_wait(&mut self, event: &dyn Event) -> Result<()> {
        event.synchronize()
    }
}

/// A point in a backend's queue that others can wait for.
pub trait Event: Send + Sync {
    /// Blocks until the event has happened.
    fn synchronize(&self) -> Result<()>;
    /// For backends that need their own event type back.
    fn as_any(&self) -> &dyn Any;
}

/// Copies `size` bytes between two placements through the cheapest path:
/// a direct buffer copy, else host memory.
pub fn copy_placement(src: &Placement, dst: &Placement, size: usize) -> Result<()> {
    if dst.buffer.cpy_tensor(src, dst.offset, size)? {
        return Ok(());
    }
    let mut tmp = vec![0u8; size];
    src.buffer.get_tensor(src.offset, &mut tmp)?;
    dst.buffer.set_tensor(dst.offset, &tmp)
}
