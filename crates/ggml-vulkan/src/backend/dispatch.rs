//! Binding tensors to storage-buffer windows and recording compute
//! dispatches (descriptor sets, push constants, the workgroup grid).

use ash::vk;
use ggml_core::{Graph, TensorId};

use super::{Bound, Queries, Rounded, Span, VulkanBackend, SCRATCH_MIN, SETS_PER_POOL};
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

    fn descriptor_set(&mut self) -> Result<vk::DescriptorSet> {
        let dev = self.shared.device.clone();
        let layouts = [self.shared.pipelines.set_layout];
        if let Some(&pool) = self.recording()?.pools.last() {
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
        self.recording()?.pools.push(pool);
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
        if groups == 0 {
            return Ok(());
        }
        debug_assert!(push.len() * 4 <= PUSH_CONSTANT_BYTES as usize);
        let dev = self.shared.device.clone();
        let pipeline = self.shared.pipelines.get(&dev, shader, spec)?;
        let reads: Vec<Span> = srcs.iter().flatten().map(|b| b.span).collect();
        self.track(&reads, &[dst.span])?;
        let set = self.descriptor_set()?;
        let slot = |binding: usize| match binding {
            0..=2 => srcs.get(binding).copied().flatten().unwrap_or(dst),
            3 => dst,
            _ => srcs.get(binding - 1).copied().flatten().unwrap_or(dst),
        };
        let infos: Vec<[vk::DescriptorBufferInfo; 1]> = (0..N_BINDINGS as usize)
            .map(slot)
            .map(|b| {
                [vk::DescriptorBufferInfo {
                    buffer: b.buffer,
                    offset: b.offset,
                    range: b.range,
                }]
            })
            .collect();
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
        let [gx, gy, gz] = split_groups(groups, self.shared.limits.max_groups)?;
        let layout = self.shared.pipelines.layout;
        let timed = self.perf.is_some();
        let rec = self.recording()?;
        let cmd = rec.cmd;
        if timed && rec.queries.is_none() {
            // The first timestamp, before the recording's first dispatch.
            rec.queries = Some(Queries::start(&dev, cmd)?);
        }
        let bytes: Vec<u8> = push.iter().flat_map(|w| w.to_ne_bytes()).collect();
        // SAFETY: the set, pipeline and layout are live; the buffers are
        // kept alive until the work completes; the push constants fit the
        // layout's range; the group counts are within the device limits.
        unsafe {
            dev.update_descriptor_sets(&writes, &[]);
            dev.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::COMPUTE, pipeline);
            dev.cmd_bind_descriptor_sets(
                cmd,
                vk::PipelineBindPoint::COMPUTE,
                layout,
                0,
                &[set],
                &[],
            );
            dev.cmd_push_constants(cmd, layout, vk::ShaderStageFlags::COMPUTE, 0, &bytes);
            dev.cmd_dispatch(cmd, gx, gy, gz);
        }
        if self.perf.is_some() {
            let bytes = reads
                .iter()
                .chain([&dst.span])
                .map(|s| s.end - s.start)
                .sum();
            if let Some(q) = &mut self.recording()?.queries {
                q.after(&dev, cmd, shader, bytes);
            }
        }
        Ok(())
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
