//! Binding tensors to storage-buffer windows and recording compute
//! dispatches (descriptor sets, push constants, the workgroup grid).

use std::sync::atomic::Ordering;

use ash::vk;
use ggml_core::{Graph, TensorId};

use super::{
    Bound, Queries, Rounded, SetKey, Span, VulkanBackend, SCRATCH_MIN, SETS_KEPT, SETS_PER_POOL,
};
use crate::buffer::VkBuffer;
use crate::error::{Error, Result, VkContext};
use crate::pipeline::{N_BINDINGS, PUSH_CONSTANT_BYTES};

impl VulkanBackend {
    /// Binds tensor `id` of `graph` whose elements (or blocks) are `unit`
    /// bytes: a storage-buffer window aligned for the device that holds the
    /// whole tensor and starts a whole number of units before it.
    pub(crate) fn bind(&mut self, graph: &Graph, id: TensorId, unit: usize) -> Result<Bound> {
        self.bind_part(graph, id, unit, 0, graph.desc(id).nbytes())
    }

    /// Like [`VulkanBackend::bind`] for the `nbytes` bytes of the tensor
    /// that start `skip` bytes into it (a multiple of `unit`): a part of a
    /// tensor too large for one binding.
    pub(crate) fn bind_part(
        &mut self,
        graph: &Graph,
        id: TensorId,
        unit: usize,
        skip: usize,
        nbytes: usize,
    ) -> Result<Bound> {
        let desc = graph.desc(id);
        let mut p = graph
            .placement(id)
            .ok_or_else(|| Error::Other(format!("tensor '{}' has no memory", desc.name)))?;
        p.offset += skip;
        let vb = VkBuffer::of(&p, &self.shared).ok_or_else(|| {
            Error::Other(format!(
                "tensor '{}' is in a {} buffer, not one of {}",
                desc.name,
                p.buffer.buffer_type().name(),
                self.shared.name
            ))
        })?;
        let raw = vb.raw();
        let align = self.shared.limits.storage_align;
        let mut start = p.offset - p.offset % align;
        while (p.offset - start) % unit != 0 {
            if start < align || p.offset - start > unit * align {
                return Err(Error::Other(format!(
                    "tensor '{}' at offset {} cannot be bound in units of {unit} bytes",
                    desc.name, p.offset
                )));
            }
            start -= align;
        }
        let range = (raw.size - start).min(self.shared.limits.max_storage_range);
        if p.offset + nbytes > start + range {
            return Err(Error::Other(format!(
                "tensor '{}' ({nbytes} bytes) is larger than the device's largest binding ({} bytes)",
                desc.name, self.shared.limits.max_storage_range
            )));
        }
        let off = u32::try_from((p.offset - start) / unit)
            .map_err(|_| Error::Other(format!("tensor '{}': offset too large", desc.name)))?;
        let bound = Bound {
            buffer: raw.buffer,
            offset: start as u64,
            range: range as u64,
            off,
            span: Span {
                buffer: raw.buffer,
                start: p.offset as u64,
                end: (p.offset + nbytes) as u64,
            },
        };
        self.keep(&p.buffer)?;
        Ok(bound)
    }

    /// Binds tensors `ids` of one device buffer through one window whose
    /// start is a whole number of `unit` bytes before each of them: the
    /// window and each tensor's first unit in it, or `None` when they are
    /// in different buffers, not a whole number of units apart, or too far
    /// apart for one binding.
    pub(crate) fn bind_window(
        &mut self,
        graph: &Graph,
        ids: &[TensorId],
        unit: usize,
    ) -> Result<Option<(Bound, Vec<u32>)>> {
        let mut places = Vec::with_capacity(ids.len());
        for &id in ids {
            let Some(p) = graph.placement(id) else {
                return Ok(None);
            };
            let Some(vb) = VkBuffer::of(&p, &self.shared) else {
                return Ok(None);
            };
            places.push((
                p.offset,
                p.offset + graph.desc(id).nbytes(),
                vb.raw().buffer,
                p,
            ));
        }
        let Some(first) = places.first() else {
            return Ok(None);
        };
        let (buffer, base) = (first.2, first.0);
        if places
            .iter()
            .any(|p| p.2 != buffer || p.0.abs_diff(base) % unit != 0)
        {
            return Ok(None);
        }
        let lo = places.iter().map(|p| p.0).min().unwrap_or(base);
        let hi = places.iter().map(|p| p.1).max().unwrap_or(base);
        let align = self.shared.limits.storage_align;
        let mut start = lo - lo % align;
        while (lo - start) % unit != 0 {
            if start < align || lo - start > unit * align {
                return Ok(None);
            }
            start -= align;
        }
        let size = VkBuffer::of(&places[0].3, &self.shared)
            .map(|b| b.raw().size)
            .unwrap_or(0);
        let range = size
            .saturating_sub(start)
            .min(self.shared.limits.max_storage_range);
        if hi > start + range {
            return Ok(None);
        }
        let mut offs = Vec::with_capacity(places.len());
        for p in &places {
            match u32::try_from((p.0 - start) / unit) {
                Ok(o) => offs.push(o),
                Err(_) => return Ok(None),
            }
        }
        for p in &places {
            self.keep(&p.3.buffer)?;
        }
        Ok(Some((
            Bound {
                buffer,
                offset: start as u64,
                range: range as u64,
                off: offs[0],
                span: Span {
                    buffer,
                    start: lo as u64,
                    end: hi as u64,
                },
            },
            offs,
        )))
    }

    /// The activation scratch bound for its first `nbytes` bytes; grown
    /// (to a power of two) when smaller, the old buffer living until the
    /// work recorded so far completes.
    pub(crate) fn scratch(&mut self, nbytes: usize) -> Result<Bound> {
        if self.act.as_ref().is_none_or(|b| b.size < nbytes) {
            let size = nbytes
                .next_power_of_two()
                .max(SCRATCH_MIN)
                .min(self.shared.limits.max_alloc.max(nbytes));
            self.recording()?;
            let new = self.shared.create_buffer(size, false, "activations")?;
            let old = self.act.replace(new);
            let rec = self.rec.as_mut().expect("recording was just started");
            rec.rounded = None;
            rec.retired.extend(old);
        }
        let raw = self.act.as_ref().expect("the scratch was just ensured");
        Ok(Bound {
            buffer: raw.buffer,
            offset: 0,
            range: raw.size.min(self.shared.limits.max_storage_range) as u64,
            off: 0,
            span: Span {
                buffer: raw.buffer,
                start: 0,
                end: nbytes as u64,
            },
        })
    }

    /// What the activation scratch holds (see [`Rounded`]), if known.
    pub(crate) fn rounded(&self) -> Option<&Rounded> {
        self.rec.as_ref().and_then(|r| r.rounded.as_ref())
    }

    /// Records that the activation scratch now holds `r`.
    pub(crate) fn set_rounded(&mut self, r: Rounded) -> Result<()> {
        self.recording()?.rounded = Some(r);
        Ok(())
    }

    /// Records a dispatch of `groups` workgroups of shader `shader` with
    /// tensors in binding slots 0..=2 (read) and 3 (written) and push
    /// constants `push`. Empty slots repeat the destination.
    pub(crate) fn dispatch(
        &mut self,
        shader: &str,
        srcs: [Option<&Bound>; 3],
        dst: &Bound,
        push: &[u32],
        groups: u64,
    ) -> Result<()> {
        self.dispatch_spec(shader, &[], &srcs, dst, push, groups)
    }

    /// [`VulkanBackend::dispatch`] with specialization constants `spec` and
    /// up to seven sources, in binding slots 0, 1, 2, then 4 to 7.
    pub(crate) fn dispatch_spec(
        &mut self,
        shader: &str,
        spec: &[u32],
        srcs: &[Option<&Bound>],
        dst: &Bound,
        push: &[u32],
        groups: u64,
    ) -> Result<()> {
        let slot = |binding: usize| match binding {
            0..=2 => srcs.get(binding).copied().flatten().unwrap_or(dst),
            3 => dst,
            _ => srcs.get(binding - 1).copied().flatten().unwrap_or(dst),
        };
        let slots: [&Bound; N_BINDINGS as usize] = std::array::from_fn(slot);
        let reads: Vec<Span> = srcs.iter().flatten().map(|b| b.span).collect();
        self.dispatch_slots(shader, spec, slots, &reads, &[dst.span], push, groups)
    }

    /// Records a dispatch of shader `shader` with the tensors of `slots` in
    /// binding slots 0 to 7; `reads` and `writes` are the bytes it reads and
    /// writes (for the barriers).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn dispatch_slots(
        &mut self,
        shader: &str,
        spec: &[u32],
        slots: [&Bound; N_BINDINGS as usize],
        reads: &[Span],
        writes: &[Span],
        push: &[u32],
        groups: u64,
    ) -> Result<()> {
        if groups == 0 {
            return Ok(());
        }
        debug_assert!(push.len() * 4 <= PUSH_CONSTANT_BYTES as usize);
        let shared = self.shared.clone();
        let dev = &shared.device;
        let pipeline = shared.pipelines.get(dev, shader, spec)?;
        self.track(reads, writes)?;
        let key: SetKey = slots.map(|b| (b.buffer, b.offset, b.range));
        let set = self.cached_set(&key)?;
        let [gx, gy, gz] = split_groups(groups, shared.limits.max_groups)?;
        let layout = shared.pipelines.layout;
        let timed = self.perf.as_ref().is_some_and(|p| p.timed);
        self.dispatches += 1;
        let rec = self.recording()?;
        let cmd = rec.cmd;
        if timed && rec.queries.is_none() {
            // The first timestamp, before the recording's first dispatch.
            rec.queries = Some(Queries::start(dev, cmd)?);
        }
        let mut bytes = [0u8; PUSH_CONSTANT_BYTES as usize];
        for (i, w) in push.iter().enumerate() {
            bytes[4 * i..4 * i + 4].copy_from_slice(&w.to_ne_bytes());
        }
        // SAFETY: the set, pipeline and layout are live; the buffers are
        // kept alive until the work completes; the push constants fit the
        // layout's range; the group counts are within the device limits.
        unsafe {
            dev.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::COMPUTE, pipeline);
            dev.cmd_bind_descriptor_sets(
                cmd,
                vk::PipelineBindPoint::COMPUTE,
                layout,
                0,
                &[set],
                &[],
            );
            dev.cmd_push_constants(
                cmd,
                layout,
                vk::ShaderStageFlags::COMPUTE,
                0,
                &bytes[..4 * push.len()],
            );
            dev.cmd_dispatch(cmd, gx, gy, gz);
        }
        if timed {
            let bytes = reads.iter().chain(writes).map(|s| s.end - s.start).sum();
            if let Some(q) = &mut self.recording()?.queries {
                q.after(dev, cmd, shader, bytes);
            }
        }
        Ok(())
    }

    /// A descriptor set with the bindings of `key`: one kept from earlier
    /// dispatches with the same bindings (the graph of the next token binds
    /// the same windows), else a new one. Kept sets are never updated
    /// again; they are dropped when a buffer is destroyed (its handle may
    /// come back for another buffer) or when too many are kept.
    fn cached_set(&mut self, key: &SetKey) -> Result<vk::DescriptorSet> {
        let destroyed = self.shared.buffers_destroyed.load(Ordering::Relaxed);
        if destroyed != self.sets.generation || self.sets.map.len() >= SETS_KEPT {
            self.drop_kept_sets()?;
            self.sets.generation = destroyed;
        }
        if let Some(&s) = self.sets.map.get(key) {
            return Ok(s);
        }
        let set = self.new_set()?;
        let infos: [[vk::DescriptorBufferInfo; 1]; N_BINDINGS as usize] =
            std::array::from_fn(|i| {
                [vk::DescriptorBufferInfo {
                    buffer: key[i].0,
                    offset: key[i].1,
                    range: key[i].2,
                }]
            });
        let writes: Vec<_> = infos
            .iter()
            .enumerate()
            .map(|(i, info)| {
                vk::WriteDescriptorSet::default()
                    .dst_set(set)
                    .dst_binding(i as u32)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .buffer_info(info)
            })
            .collect();
        // SAFETY: the set is new and not in use; the buffers are live.
        unsafe { self.shared.device.update_descriptor_sets(&writes, &[]) };
        self.sets.map.insert(*key, set);
        Ok(set)
    }

    /// Forgets the kept descriptor sets; their pools are reset once the
    /// work recorded so far (the last that may use them) completes.
    fn drop_kept_sets(&mut self) -> Result<()> {
        self.sets.map.clear();
        self.sets.epoch += 1;
        if self.sets.pools.is_empty() {
            return Ok(());
        }
        let pools = std::mem::take(&mut self.sets.pools);
        self.recording()?.pools.extend(pools);
        Ok(())
    }

    /// A new descriptor set from the pools of kept sets.
    fn new_set(&mut self) -> Result<vk::DescriptorSet> {
        let dev = self.shared.device.clone();
        let layouts = [self.shared.pipelines.set_layout];
        if let Some(&pool) = self.sets.pools.last() {
            // SAFETY: the pool and layout are live.
            match unsafe {
                dev.allocate_descriptor_sets(
                    &vk::DescriptorSetAllocateInfo::default()
                        .descriptor_pool(pool)
                        .set_layouts(&layouts),
                )
            } {
                Ok(s) => return Ok(s[0]),
                Err(vk::Result::ERROR_OUT_OF_POOL_MEMORY | vk::Result::ERROR_FRAGMENTED_POOL) => {}
                Err(e) => return Err(Error::vk("vkAllocateDescriptorSets", e)),
            }
        }
        let pool = match self.free_pools.pop() {
            Some(p) => p,
            None => {
                let sizes = [vk::DescriptorPoolSize {
                    ty: vk::DescriptorType::STORAGE_BUFFER,
                    descriptor_count: SETS_PER_POOL * N_BINDINGS,
                }];
                // SAFETY: a live device; the pool is destroyed in Drop.
                unsafe {
                    dev.create_descriptor_pool(
                        &vk::DescriptorPoolCreateInfo::default()
                            .max_sets(SETS_PER_POOL)
                            .pool_sizes(&sizes),
                        None,
                    )
                }
                .ctx("vkCreateDescriptorPool")?
            }
        };
        self.sets.pools.push(pool);
        // SAFETY: a fresh (or reset) pool and a live layout.
        let sets = unsafe {
            dev.allocate_descriptor_sets(
                &vk::DescriptorSetAllocateInfo::default()
                    .descriptor_pool(pool)
                    .set_layouts(&layouts),
            )
        }
        .ctx("vkAllocateDescriptorSets")?;
        Ok(sets[0])
    }
}

/// Splits a linear workgroup count over x, y, z within the device limits.
pub(crate) fn split_groups(groups: u64, max: [u32; 3]) -> Result<[u32; 3]> {
    let mx = u64::from(max[0].min(65535));
    let my = u64::from(max[1].min(65535));
    let x = groups.min(mx);
    let rest = groups.div_ceil(x);
    let y = rest.min(my);
    let z = rest.div_ceil(y);
    if z > u64::from(max[2]) {
        return Err(Error::Other(format!(
            "{groups} workgroups exceed the device limits"
        )));
    }
    Ok([x as u32, y as u32, z as u32])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_are_split_within_limits() {
        let max = [65535, 65535, 65535];
        assert_eq!(split_groups(1, max).unwrap(), [1, 1, 1]);
        assert_eq!(split_groups(65535, max).unwrap(), [65535, 1, 1]);
        let [x, y, z] = split_groups(200_000, max).unwrap();
        assert!(u64::from(x) * u64::from(y) * u64::from(z) >= 200_000);
        assert!(x <= 65535 && y <= 65535);
        assert!(split_groups(u64::MAX, max).is_err());
    }
}
