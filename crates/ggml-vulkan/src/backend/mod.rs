//! The execution stream of a device: records transfers and dispatches into
//! a command buffer, with barriers only between dependent commands, and
//! submits it on the device queue with a timeline semaphore.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use ash::vk;
use ggml_core::graph::Revision;
use ggml_core::{Backend, Buffer, Device, Event, Graph, Placement, TensorId};

use crate::buffer::VkBuffer;
use crate::device::VulkanDevice;
use crate::error::{Error, Result, VkContext};
use crate::event::{Timeline, VkEvent};
use crate::logical::{DeviceShared, RawBuffer};
use crate::ops::fused::{self, Plan, Step};
use crate::pipeline::N_BINDINGS;
use crate::transfer::{begin_barrier, end_barrier};

mod dispatch;
mod perf;

use perf::{PerfLog, Queries, Stamp};

/// Bytes of a pooled staging chunk of asynchronous uploads.
const STAGING_CHUNK: usize = 4 << 20;
/// Uploads larger than this wait for the queue and go synchronously
/// instead of taking staging memory.
const ASYNC_UPLOAD_MAX: usize = 64 << 20;
/// Staging chunks kept for reuse.
const STAGING_POOL: usize = 4;
/// Smallest size of the activation scratch.
const SCRATCH_MIN: usize = 1 << 20;
/// Nodes recorded into one command buffer before it is submitted: the GPU
/// starts on a graph while the host records the rest (a submission costs
/// the host tens of microseconds, recording a node a few).
const SUBMIT_NODES: usize = 64;
/// Descriptor sets per descriptor pool.
const SETS_PER_POOL: u32 = 256;
/// Most descriptor sets kept for reuse across recordings.
const SETS_KEPT: usize = 16384;
/// Plans of graphs kept (the graphs of a model's few ubatch shapes).
const PLANS_KEPT: usize = 8;

/// The bindings of a descriptor set: (buffer, offset, range) per slot.
pub(crate) type SetKey = [(vk::Buffer, u64, u64); N_BINDINGS as usize];

/// Descriptor sets kept across recordings, by their bindings.
#[derive(Default)]
struct KeptSets {
    map: HashMap<SetKey, vk::DescriptorSet>,
    pools: Vec<vk::DescriptorPool>,
    /// Counts the times the sets were dropped.
    epoch: u64,
    /// `DeviceShared::buffers_destroyed` when the sets were made.
    generation: u64,
}

/// The plan of a graph's nodes, for as long as the graph is unchanged,
/// and its recorded command buffers.
struct KeptPlan {
    revision: Revision,
    nodes: Vec<TensorId>,
    plan: Arc<Plan>,
    replay: Option<Replay>,
}

/// The command buffers a graph was recorded into, submitted again when the
/// same graph comes back (same nodes and placements: the same commands),
/// while every descriptor set and buffer they use lives: no buffer was
/// destroyed since (the graph being computed holds its buffers, and a
/// replay completes before `graph_compute` returns).
struct Replay {
    /// The command buffers and their timestamps (with the perf logger).
    cmds: Vec<(vk::CommandBuffer, Option<Queries>)>,
    /// `DeviceShared::buffers_destroyed` and the kept descriptor sets'
    /// epoch when recorded.
    generation: u64,
    sets_epoch: u64,
    dispatches: u64,
}

/// A graph being recorded for replay.
struct Capture {
    cmds: Vec<(vk::CommandBuffer, Option<Queries>)>,
    ok: bool,
}

/// A byte range of a buffer, for dependency tracking.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Span {
    buffer: vk::Buffer,
    start: u64,
    end: u64,
}

impl Span {
    fn overlaps(&self, o: &Span) -> bool {
        self.buffer == o.buffer && self.start < o.end && o.start < self.end
    }
}

/// A tensor bound for a dispatch: the storage-buffer window that holds it,
/// its first element inside the window (in units of its element or block
/// size) and the bytes it spans.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bound {
    buffer: vk::Buffer,
    offset: u64,
    range: u64,
    /// First element (or block) of the tensor in the window.
    pub(crate) off: u32,
    span: Span,
}

impl Bound {
    /// The bytes of the tensor.
    pub(crate) fn span(&self) -> Span {
        self.span
    }
}

/// Commands being recorded and the resources they use.
struct Recording {
    cmd: vk::CommandBuffer,
    pools: Vec<vk::DescriptorPool>,
    staging: Vec<(RawBuffer, usize)>,
    keep: Vec<Arc<dyn Buffer>>,
    kept: HashSet<usize>,
    reads: Vec<Span>,
    writes: Vec<Span>,
    /// Buffers replaced during the recording, destroyed after it completes.
    retired: Vec<RawBuffer>,
    /// What the activation scratch holds, while neither it nor its source
    /// was written since.
    rounded: Option<Rounded>,
    /// The dispatches' timestamps, with the perf logger.
    queries: Option<Queries>,
}

/// The source and the dispatch (shader and push constants) that wrote the
/// activation scratch.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Rounded {
    pub(crate) src: Span,
    pub(crate) shader: String,
    pub(crate) push: Vec<u32>,
}

/// Submitted commands and what must live until they complete.
struct Submitted {
    value: u64,
    cmd: Option<vk::CommandBuffer>,
    pools: Vec<vk::DescriptorPool>,
    staging: Vec<RawBuffer>,
    retired: Vec<RawBuffer>,
    _keep: Vec<Arc<dyn Buffer>>,
    _waits: Vec<(Arc<Timeline>, u64)>,
    queries: Option<Queries>,
}

/// An execution stream of a [`VulkanDevice`].
pub struct VulkanBackend {
    device: Arc<VulkanDevice>,
    shared: Arc<DeviceShared>,
    pool: vk::CommandPool,
    timeline: vk::Semaphore,
    signaled: u64,
    rec: Option<Recording>,
    in_flight: VecDeque<Submitted>,
    free_cmds: Vec<vk::CommandBuffer>,
    free_pools: Vec<vk::DescriptorPool>,
    free_staging: Vec<RawBuffer>,
    waits: Vec<(Arc<Timeline>, u64)>,
    /// Scratch of MUL_MAT's rounded activations, grown on demand.
    act: Option<RawBuffer>,
    /// GPU time per shader, with `GGML_VK_PERF_LOGGER`.
    perf: Option<PerfLog>,
    /// Descriptor sets kept across recordings.
    sets: KeptSets,
    /// Dispatches recorded so far.
    dispatches: u64,
    /// Plans of the latest graphs, newest first.
    plans: Vec<KeptPlan>,
    /// The graph being recorded for replay.
    capture: Option<Capture>,
}

impl VulkanBackend {
    pub(crate) fn new(device: Arc<VulkanDevice>) -> Result<VulkanBackend> {
        let shared = device.shared().clone();
        let dev = &shared.device;
        // SAFETY: a live device; both objects are destroyed in Drop, or here
        // when the second cannot be made.
        let (pool, timeline) = unsafe {
            let pool = shared.create_command_pool()?;
            let mut ti = vk::SemaphoreTypeCreateInfo::default()
                .semaphore_type(vk::SemaphoreType::TIMELINE)
                .initial_value(0);
            match dev.create_semaphore(&vk::SemaphoreCreateInfo::default().push_next(&mut ti), None)
            {
                Ok(s) => (pool, s),
                Err(e) => {
                    dev.destroy_command_pool(pool, None);
                    return Err(Error::vk("vkCreateSemaphore", e));
                }
            }
        };
        let perf = match (shared.opts.perf_logger, shared.limits.timestamps) {
            (false, _) => None,
            (true, Some((period, bits))) => Some(PerfLog::new(period, bits)),
            (true, None) => {
                eprintln!(
                    "ggml_vulkan: {}: GGML_VK_PERF_LOGGER: the compute queue writes no timestamps; no GPU times",
                    shared.name
                );
                Some(PerfLog::untimed())
            }
        };
        Ok(VulkanBackend {
            device,
            shared,
            pool,
            timeline,
            signaled: 0,
            rec: None,
            in_flight: VecDeque::new(),
            free_cmds: Vec::new(),
            free_pools: Vec::new(),
            free_staging: Vec::new(),
            waits: Vec::new(),
            act: None,
            perf,
            sets: KeptSets::default(),
            dispatches: 0,
            plans: Vec::new(),
            capture: None,
        })
    }

    /// With `GGML_VK_PERF_LOGGER` (see [`crate::Options::perf_logger`]):
    /// the GPU time per shader of the work completed so far, and the host's
    /// share of each graph (the report printed when the backend is dropped).
    pub fn perf_report(&mut self) -> Option<String> {
        // Completed submissions are read in when their resources are
        // released.
        let _ = self.recycle(false);
        self.perf.as_ref().map(|l| l.report(&self.shared.name))
    }

    /// Dispatches recorded by this backend so far.
    pub fn dispatches(&self) -> u64 {
        self.dispatches
    }

    /// The plan of `nodes` of `graph`, made the first of the kept plans:
    /// kept from an earlier call with the same graph (same revision, so
    /// the same nodes and placements) and nodes, else made (checking every
    /// node).
    fn plan(&mut self, graph: &Graph, nodes: &[TensorId]) -> ggml_core::Result<Arc<Plan>> {
        let rev = graph.revision();
        if let Some(i) = self
            .plans
            .iter()
            .position(|p| p.revision == rev && p.nodes == nodes)
        {
            let kept = self.plans.remove(i);
            let plan = kept.plan.clone();
            self.plans.insert(0, kept);
            return Ok(plan);
        }
        let plan = Arc::new(fused::plan(
            &self.shared,
            graph,
            nodes,
            self.shared.opts.disable_fusion,
        )?);
        self.plans.insert(
            0,
            KeptPlan {
                revision: rev,
                nodes: nodes.to_vec(),
                plan: plan.clone(),
                replay: None,
            },
        );
        if self.plans.len() > PLANS_KEPT {
            for p in self.plans.split_off(PLANS_KEPT) {
                if let Some(r) = p.replay {
                    self.free_commands(r.cmds);
                }
            }
        }
        Ok(plan)
    }

    /// Frees command buffers (and timestamps) of a graph that no
    /// submission uses any more.
    fn free_commands(&mut self, cmds: Vec<(vk::CommandBuffer, Option<Queries>)>) {
        let dev = &self.shared.device;
        for (c, q) in cmds {
            // SAFETY: the work of `c` completed.
            if unsafe { dev.reset_command_buffer(c, vk::CommandBufferResetFlags::empty()) }.is_ok()
            {
                self.free_cmds.push(c);
            }
            if let Some(q) = q {
                q.discard(dev);
            }
        }
    }

    /// True when the first kept plan's command buffers can be submitted
    /// again: no buffer was destroyed and no kept descriptor set dropped
    /// since they were recorded.
    fn can_replay(&self) -> bool {
        self.plans
            .first()
            .and_then(|p| p.replay.as_ref())
            .is_some_and(|r| {
                r.generation == self.shared.buffers_destroyed.load(Ordering::Relaxed)
                    && r.sets_epoch == self.sets.epoch
            })
    }

    /// Submits the first kept plan's command buffers again and waits for
    /// them.
    fn replay(&mut self, t0: Stamp) -> ggml_core::Result<()> {
        let (cmds, dispatches) = {
            let r = self.plans[0]
                .replay
                .as_ref()
                .expect("checked by can_replay");
            let cmds: Vec<vk::CommandBuffer> = r.cmds.iter().map(|c| c.0).collect();
            (cmds, r.dispatches)
        };
        let submit = Stamp::now();
        self.flush_with(None, &cmds)?;
        let submitted = Stamp::now();
        self.recycle(true)?;
        self.dispatches += dispatches;
        if let Some(log) = &mut self.perf {
            if let Some(r) = &self.plans[0].replay {
                for q in r.cmds.iter().filter_map(|c| c.1.as_ref()) {
                    q.read(&self.shared.device, log);
                }
            }
            log.replayed += 1;
            log.graph(t0, submit, submitted, dispatches);
        }
        Ok(())
    }

    pub(crate) fn shared(&self) -> &Arc<DeviceShared> {
        &self.shared
    }

    fn recording(&mut self) -> Result<&mut Recording> {
        if self.rec.is_none() {
            let dev = &self.shared.device;
            let cmd = match self.free_cmds.pop() {
                Some(c) => c,
                // SAFETY: the pool belongs to this backend.
                None => unsafe {
                    dev.allocate_command_buffers(
                        &vk::CommandBufferAllocateInfo::default()
                            .command_pool(self.pool)
                            .level(vk::CommandBufferLevel::PRIMARY)
                            .command_buffer_count(1),
                    )
                }
                .ctx("vkAllocateCommandBuffers")?[0],
            };
            // A graph kept for replay is submitted more than once.
            let flags = if self.capture.is_some() {
                vk::CommandBufferUsageFlags::empty()
            } else {
                vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT
            };
            // SAFETY: `cmd` is in the initial state (new or reset on recycling).
            unsafe {
                dev.begin_command_buffer(cmd, &vk::CommandBufferBeginInfo::default().flags(flags))
            }
            .ctx("vkBeginCommandBuffer")?;
            begin_barrier(dev, cmd);
            self.rec = Some(Recording {
                cmd,
                pools: Vec::new(),
                staging: Vec::new(),
                keep: Vec::new(),
                kept: HashSet::new(),
                reads: Vec::new(),
                writes: Vec::new(),
                retired: Vec::new(),
                rounded: None,
                queries: None,
            });
        }
        Ok(self.rec.as_mut().expect("recording was just started"))
    }

    /// Submits what was recorded (or only the waits and signals when
    /// nothing was), signalling the timeline and `extra`.
    fn flush(&mut self, extra: Option<(vk::Semaphore, u64)>) -> Result<()> {
        self.flush_with(extra, &[])
    }

    /// [`VulkanBackend::flush`], submitting the recorded command buffers
    /// `replay` (of a kept graph) after what was recorded.
    fn flush_with(
        &mut self,
        extra: Option<(vk::Semaphore, u64)>,
        replay: &[vk::CommandBuffer],
    ) -> Result<()> {
        let mut rec = self.rec.take();
        if rec.is_none() && extra.is_none() && self.waits.is_empty() && replay.is_empty() {
            return Ok(());
        }
        let dev = &self.shared.device;
        let mut cmds = Vec::new();
        let mut ended = Ok(());
        if let Some(r) = &rec {
            end_barrier(dev, r.cmd);
            // SAFETY: the command buffer is in the recording state.
            ended = unsafe { dev.end_command_buffer(r.cmd) }.ctx("vkEndCommandBuffer");
            cmds.push(r.cmd);
        }
        cmds.extend_from_slice(replay);
        // A graph being captured keeps its command buffers and timestamps.
        let mut captured = None;
        if let (Some(cap), Some(r)) = (&mut self.capture, &mut rec) {
            cap.cmds.push((r.cmd, r.queries.take()));
            captured = Some(r.cmd);
        }
        let value = self.signaled + 1;
        let mut signal = vec![self.timeline];
        let mut signal_values = vec![value];
        if let Some((s, v)) = extra {
            signal.push(s);
            signal_values.push(v);
        }
        let waits = std::mem::take(&mut self.waits);
        let wait_sems: Vec<_> = waits.iter().map(|w| w.0.sem).collect();
        let wait_values: Vec<_> = waits.iter().map(|w| w.1).collect();
        let wait_stages = vec![vk::PipelineStageFlags::ALL_COMMANDS; waits.len()];
        let mut ts = vk::TimelineSemaphoreSubmitInfo::default()
            .wait_semaphore_values(&wait_values)
            .signal_semaphore_values(&signal_values);
        let submit = vk::SubmitInfo::default()
            .command_buffers(&cmds)
            .wait_semaphores(&wait_sems)
            .wait_dst_stage_mask(&wait_stages)
            .signal_semaphores(&signal)
            .push_next(&mut ts);
        let res = ended.and_then(|()| self.shared.submit(&[submit], vk::Fence::null()));
        let (cmd, pools, staging, retired, keep, queries) = match rec {
            Some(r) => (
                Some(r.cmd).filter(|c| captured != Some(*c)),
                r.pools,
                r.staging.into_iter().map(|s| s.0).collect(),
                r.retired,
                r.keep,
                r.queries,
            ),
            None => (None, Vec::new(), Vec::new(), Vec::new(), Vec::new(), None),
        };
        let sub = Submitted {
            value,
            cmd,
            pools,
            staging,
            retired,
            _keep: keep,
            _waits: waits,
            queries,
        };
        match res {
            Ok(()) => {
                self.signaled = value;
                self.in_flight.push_back(sub);
                Ok(())
            }
            Err(e) => {
                // Nothing was queued: the resources can be reused at once.
                if let Some(cap) = &mut self.capture {
                    cap.ok = false;
                }
                self.release(sub);
                Err(e)
            }
        }
    }

    fn release(&mut self, s: Submitted) {
        let dev = &self.shared.device;
        if let Some(c) = s.cmd {
            // SAFETY: the work of `c` completed (or was never submitted).
            if unsafe { dev.reset_command_buffer(c, vk::CommandBufferResetFlags::empty()) }.is_ok()
            {
                self.free_cmds.push(c);
            }
        }
        for p in s.pools {
            // SAFETY: no set of `p` is in use any more.
            if unsafe { dev.reset_descriptor_pool(p, vk::DescriptorPoolResetFlags::empty()) }
                .is_ok()
            {
                self.free_pools.push(p);
            }
        }
        for b in s.staging {
            if b.size == STAGING_CHUNK && self.free_staging.len() < STAGING_POOL {
                self.free_staging.push(b);
            } else {
                self.shared.destroy_buffer(b);
            }
        }
        for b in s.retired {
            self.shared.destroy_buffer(b);
        }
        if let Some(q) = s.queries {
            match &mut self.perf {
                Some(log) => q.collect(dev, log),
                None => q.discard(dev),
            }
        }
    }

    /// Releases the resources of completed submissions; with `wait`, waits
    /// for all of them first.
    fn recycle(&mut self, wait: bool) -> Result<()> {
        let dev = &self.shared.device;
        let done = if wait {
            let sems = [self.timeline];
            let values = [self.signaled];
            // SAFETY: the semaphore belongs to this backend.
            unsafe {
                dev.wait_semaphores(
                    &vk::SemaphoreWaitInfo::default()
                        .semaphores(&sems)
                        .values(&values),
                    u64::MAX,
                )
            }
            .ctx("vkWaitSemaphores")?;
            self.signaled
        } else {
            // SAFETY: as above.
            unsafe { dev.get_semaphore_counter_value(self.timeline) }
                .ctx("vkGetSemaphoreCounterValue")?
        };
        while self.in_flight.front().is_some_and(|s| s.value <= done) {
            let s = self.in_flight.pop_front().expect("front was checked");
            self.release(s);
        }
        Ok(())
    }

    /// Records a barrier first when the command reading `reads` and writing
    /// `writes` depends on (or overwrites) earlier commands of the recording.
    fn track(&mut self, reads: &[Span], writes: &[Span]) -> Result<()> {
        let shared = self.shared.clone();
        let dev = &shared.device;
        let act = self.act.as_ref().map(|b| b.buffer);
        let rec = self.recording()?;
        let hazard = reads
            .iter()
            .any(|r| rec.writes.iter().any(|w| w.overlaps(r)))
            || writes
                .iter()
                .any(|w| rec.writes.iter().chain(&rec.reads).any(|x| x.overlaps(w)));
        if hazard {
            begin_barrier(dev, rec.cmd);
            rec.reads.clear();
            rec.writes.clear();
        }
        if let Some(r) = &rec.rounded {
            if writes
                .iter()
                .any(|w| w.overlaps(&r.src) || Some(w.buffer) == act)
            {
                rec.rounded = None;
            }
        }
        rec.reads.extend_from_slice(reads);
        rec.writes.extend_from_slice(writes);
        Ok(())
    }

    fn keep(&mut self, b: &Arc<dyn Buffer>) -> Result<()> {
        let rec = self.recording()?;
        let key = Arc::as_ptr(b) as *const () as usize;
        if rec.kept.insert(key) {
            rec.keep.push(b.clone());
        }
        Ok(())
    }

    /// Copies `data` into staging memory of the recording: (buffer, offset).
    fn stage(&mut self, data: &[u8]) -> Result<(vk::Buffer, u64)> {
        let need = data.len().next_multiple_of(16);
        let fits = self
            .rec
            .as_ref()
            .and_then(|r| r.staging.last())
            .is_some_and(|(b, used)| used + need <= b.size);
        if !fits {
            let buf = if need <= STAGING_CHUNK {
                match self.free_staging.pop() {
                    Some(b) => b,
                    None => self.shared.create_buffer(STAGING_CHUNK, true, "staging")?,
                }
            } else {
                self.shared.create_buffer(need, true, "staging")?
            };
            let rec = match self.recording() {
                Ok(r) => r,
                Err(e) => {
                    self.shared.destroy_buffer(buf);
                    return Err(e);
                }
            };
            rec.staging.push((buf, 0));
        }
        let rec = self.recording()?;
        let (b, used) = rec
            .staging
            .last_mut()
            .expect("a staging chunk was just ensured");
        let p = b.mapped.expect("staging memory is mapped");
        let off = *used;
        // SAFETY: the chunk has room for `data` at `off` (checked above) and
        // no queued work uses this part of it.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p.as_ptr().add(off), data.len()) };
        *used += need;
        Ok((b.buffer, off as u64))
    }

    fn record_copy(
        &mut self,
        src: vk::Buffer,
        src_off: u64,
        dst: vk::Buffer,
        dst_off: u64,
        size: u64,
    ) -> Result<()> {
        let dev = self.shared.device.clone();
        let rec = self.recording()?;
        let region = vk::BufferCopy {
            src_offset: src_off,
            dst_offset: dst_off,
            size,
        };
        // SAFETY: both buffers are live (kept until completion) and the
        // regions are inside them (checked by the callers).
        unsafe { dev.cmd_copy_buffer(rec.cmd, src, dst, &[region]) };
        Ok(())
    }

    fn upload(&mut self, dst: &Placement, vb_buffer: vk::Buffer, data: &[u8]) -> Result<()> {
        let (sb, soff) = self.stage(data)?;
        let span = Span {
            buffer: vb_buffer,
            start: dst.offset as u64,
            end: (dst.offset + data.len()) as u64,
        };
        self.track(&[], &[span])?;
        self.keep(&dst.buffer)?;
        self.record_copy(sb, soff, vb_buffer, dst.offset as u64, data.len() as u64)
    }

    fn check_range(p: &Placement, len: usize, what: &str) -> ggml_core::Result<()> {
        if p.offset
            .checked_add(len)
            .is_none_or(|e| e > p.buffer.size())
        {
            return Err(ggml_core::Error::OutOfBounds {
                what: what.to_string(),
                offset: p.offset,
                end: p.offset.saturating_add(len),
                size: p.buffer.size(),
            });
        }
        Ok(())
    }
}

impl Drop for VulkanBackend {
    fn drop(&mut self) {
        if self.flush(None).is_err() || self.recycle(true).is_err() {
            self.shared.wait_idle();
        }
        if let Some(log) = self.perf.take().filter(|l| !l.is_empty()) {
            eprint!("{}", log.report(&self.shared.name));
        }
        for p in std::mem::take(&mut self.plans) {
            for (_, q) in p.replay.into_iter().flat_map(|r| r.cmds) {
                if let Some(q) = q {
                    q.discard(&self.shared.device);
                }
            }
        }
        let dev = &self.shared.device;
        for s in std::mem::take(&mut self.in_flight) {
            for b in s.staging.into_iter().chain(s.retired) {
                self.shared.destroy_buffer(b);
            }
            if let Some(q) = s.queries {
                q.discard(dev);
            }
            // SAFETY: the device is idle; pools are destroyed below with their sets.
            unsafe {
                for p in s.pools {
                    dev.destroy_descriptor_pool(p, None);
                }
            }
        }
        for b in std::mem::take(&mut self.free_staging)
            .into_iter()
            .chain(self.act.take())
        {
            self.shared.destroy_buffer(b);
        }
        // SAFETY: all work of this backend completed; each object is
        // destroyed once; destroying the command pool frees its buffers.
        unsafe {
            for p in self.free_pools.drain(..).chain(self.sets.pools.drain(..)) {
                dev.destroy_descriptor_pool(p, None);
            }
            dev.destroy_semaphore(self.timeline, None);
            dev.destroy_command_pool(self.pool, None);
        }
    }
}

impl Backend for VulkanBackend {
    fn name(&self) -> &str {
        &self.shared.name
    }

    fn device(&self) -> Arc<dyn Device> {
        self.device.clone()
    }

    fn set_tensor_async(&mut self, dst: &Placement, data: &[u8]) -> ggml_core::Result<()> {
        Self::check_range(dst, data.len(), "set_tensor_async")?;
        if data.is_empty() {
            return Ok(());
        }
        let target = VkBuffer::of(dst, &self.shared).map(|b| b.raw().buffer);
        match target {
            Some(buf) if data.len() <= ASYNC_UPLOAD_MAX => Ok(self.upload(dst, buf, data)?),
            _ => {
                self.synchronize()?;
                dst.buffer.set_tensor(dst.offset, data)
            }
        }
    }

    fn get_tensor_async(&mut self, src: &Placement, out: &mut [u8]) -> ggml_core::Result<()> {
        // `out` is only borrowed for this call: the read completes here.
        self.synchronize()?;
        src.buffer.get_tensor(src.offset, out)
    }

    fn cpy_tensor_async(
        &mut self,
        src: &Placement,
        dst: &Placement,
        size: usize,
    ) -> ggml_core::Result<bool> {
        Self::check_range(src, size, "copy source")?;
        Self::check_range(dst, size, "copy destination")?;
        if size == 0 {
            return Ok(true);
        }
        let sbuf = VkBuffer::of(src, &self.shared).map(|b| b.raw().buffer);
        let dbuf = VkBuffer::of(dst, &self.shared).map(|b| b.raw().buffer);
        match (sbuf, dbuf) {
            (Some(s), Some(d)) => {
                let rs = Span {
                    buffer: s,
                    start: src.offset as u64,
                    end: (src.offset + size) as u64,
                };
                let ws = Span {
                    buffer: d,
                    start: dst.offset as u64,
                    end: (dst.offset + size) as u64,
                };
                if rs.overlaps(&ws) {
                    return Ok(false);
                }
                self.track(&[rs], &[ws])?;
                self.keep(&src.buffer)?;
                self.keep(&dst.buffer)?;
                self.record_copy(s, src.offset as u64, d, dst.offset as u64, size as u64)?;
                Ok(true)
            }
            (None, Some(d)) if src.buffer.buffer_type().is_host() && size <= ASYNC_UPLOAD_MAX => {
                let Some(base) = src.buffer.base() else {
                    return Ok(false);
                };
                // SAFETY: the range is inside the source (checked above); a
                // host source is not written while it is being copied (the
                // caller's contract); the bytes are copied to staging now.
                let bytes =
                    unsafe { std::slice::from_raw_parts(base.as_ptr().add(src.offset), size) };
                self.upload(dst, d, bytes)?;
                Ok(true)
            }
            (Some(_), None) if dst.buffer.buffer_type().is_host() && !dst.buffer.is_read_only() => {
                let Some(base) = dst.buffer.base() else {
                    return Ok(false);
                };
                self.synchronize()?;
                // SAFETY: the range is inside the destination (checked
                // above) and nothing else uses it during the copy.
                let out =
                    unsafe { std::slice::from_raw_parts_mut(base.as_ptr().add(dst.offset), size) };
                src.buffer.get_tensor(src.offset, out)?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    fn synchronize(&mut self) -> ggml_core::Result<()> {
        self.flush(None)?;
        Ok(self.recycle(true)?)
    }

    /// Records the nodes into command buffers of [`SUBMIT_NODES`] nodes,
    /// submitting each as it is full so that the GPU works while the rest
    /// is recorded, and waits for the last, so that the results can be read
    /// through any path afterwards.
    fn graph_compute(&mut self, graph: &Graph, nodes: &[TensorId]) -> ggml_core::Result<()> {
        let t0 = Stamp::now();
        let dispatched = self.dispatches;
        let plan = self.plan(graph, nodes)?;
        if self.can_replay() {
            return self.replay(t0);
        }
        if let Some(r) = self.plans[0].replay.take() {
            self.free_commands(r.cmds);
        }
        // The graph is recorded into command buffers of its own, kept for
        // the next call with the same graph.
        let start = (
            self.shared.buffers_destroyed.load(Ordering::Relaxed),
            self.sets.epoch,
        );
        if !self.shared.opts.disable_replay {
            self.flush(None)?;
            self.capture = Some(Capture {
                cmds: Vec::new(),
                ok: true,
            });
        }
        let mut res = Ok(());
        let mut recorded = 0;
        for step in &plan.steps {
            let r = match step {
                Step::Node(id) => crate::ops::record_node(self, graph, *id),
                Step::Mmv(f) => fused::record(self, graph, f).map_err(Into::into),
                Step::NormMul(n, m) => {
                    fused::record_norm_mul(self, graph, *n, *m).map_err(Into::into)
                }
            };
            if let Err(e) = r {
                res = Err(e);
                break;
            }
            recorded += 1;
            if recorded % SUBMIT_NODES == 0 {
                if let Err(e) = self.flush(None).and_then(|()| self.recycle(false)) {
                    res = Err(e.into());
                    break;
                }
            }
        }
        let submit = Stamp::now();
        let flushed = self.flush(None);
        let submitted = Stamp::now();
        let flushed = flushed.and_then(|()| self.recycle(true));
        let dispatched = self.dispatches - dispatched;
        if let Some(cap) = self.capture.take() {
            if let Some(log) = &mut self.perf {
                for q in cap.cmds.iter().filter_map(|c| c.1.as_ref()) {
                    q.read(&self.shared.device, log);
                }
            }
            let end = (
                self.shared.buffers_destroyed.load(Ordering::Relaxed),
                self.sets.epoch,
            );
            if cap.ok && res.is_ok() && flushed.is_ok() && start == end {
                self.plans[0].replay = Some(Replay {
                    cmds: cap.cmds,
                    generation: end.0,
                    sets_epoch: end.1,
                    dispatches: dispatched,
                });
            } else {
                if flushed.is_err() {
                    self.shared.wait_idle();
                }
                self.free_commands(cap.cmds);
            }
        }
        if let Some(log) = &mut self.perf {
            log.graph(t0, submit, submitted, dispatched);
        }
        res?;
        Ok(flushed?)
    }

    fn event_record(&mut self, event: &dyn Event) -> ggml_core::Result<()> {
        match event.as_any().downcast_ref::<VkEvent>() {
            Some(e) if Arc::ptr_eq(e.shared(), &self.shared) => {
                let v = e.next_value();
                self.flush(Some((e.timeline().sem, v)))?;
                e.set_recorded(v);
                self.recycle(false)?;
                Ok(())
            }
            _ => self.synchronize(),
        }
    }

    fn event_wait(&mut self, event: &dyn Event) -> ggml_core::Result<()> {
        match event.as_any().downcast_ref::<VkEvent>() {
            Some(e) if Arc::ptr_eq(e.shared(), &self.shared) => {
                if let Some(v) = e.recorded() {
                    // Work recorded before the wait must not start after
                    // later work, so it is submitted first.
                    self.flush(None)?;
                    self.waits.push((e.timeline().clone(), v));
                }
                Ok(())
            }
            _ => event.synchronize(),
        }
    }
}
