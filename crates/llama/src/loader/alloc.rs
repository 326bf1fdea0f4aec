//! The first phase of loading: the buffers of every buffer type group
//! (mapped ranges, allocations, staging rings), before any data moves.
//!
//! With direct I/O, the tensors of the CPU's own buffer type are laid out
//! as the file lays them out (the layout a mapping would give them, which
//! the CPU uses in place): each buffer holds a run of consecutive tensors
//! of one file, at their distance from the run's first byte, and starts
//! [`DIO_MIRROR_ALIGN`]-congruent with that byte's file offset. Every
//! address of a tensor is then congruent with its file offset modulo the
//! memory alignment direct reads ask for, so that the whole blocks of each
//! tensor are read straight into place: only the partial blocks at either
//! end of a tensor go through a bounce buffer. A GGUF file aligns tensor
//! data to 32 bytes only, which a layout of its own (the linear
//! allocator's) never matches modulo a block.

use super::*;

/// The modulus of the congruence between the addresses of a mirrored
/// buffer and the file offsets of its bytes: the block size of direct reads
/// on common file systems, and a multiple of any smaller memory alignment
/// they ask for. A file system that asks for more alignment gets correct
/// but bounced reads. (Buffers from 4 MiB up start on a huge page, so
/// their base is aligned to it; a smaller buffer's may not be.)
pub(super) const DIO_MIRROR_ALIGN: usize = 4096;
/// A gap of file bytes between two tensors of a group larger than this
/// (tensors of other buffer types in between) starts a new mirrored buffer
/// rather than leave the gap unused in memory.
pub(super) const DIO_MIRROR_GAP: u64 = 64 << 10;

/// Every buffer of the weights, where each request lands and how its
/// bytes get there. Fields drop in order: the staging rings first (they
/// wait for queued copies into the buffers), the locks before the memory
/// they lock, the buffers last.
pub(super) struct Allocated {
    pub(super) uploaders: Vec<Uploader>,
    pub(super) placements: Vec<Option<Placement>>,
    pub(super) routes: Vec<Option<Route>>,
    pub(super) sizes: BTreeMap<String, usize>,
    pub(super) locks: Vec<MemLock>,
    pub(super) buffers: Vec<Arc<dyn Buffer>>,
}

/// Allocates the buffers of `reqs`, grouped by buffer type; `slack` is
/// the extra room each staging buffer needs for direct reads. With
/// `planning`, the buffers are planned ones that hold no memory (nothing
/// is mapped, locked or allocated) and no uploader is made.
pub(super) fn allocate(
    files: &GgufModel,
    reqs: &[WeightRequest],
    params: &ModelParams,
    opts: &LoadOptions,
    slack: usize,
    planning: bool,
    stats: &mut LoadStats,
) -> Result<Allocated> {
    let mut a = Allocated {
        uploaders: Vec::new(),
        placements: vec![None; reqs.len()],
        routes: vec![None; reqs.len()],
        sizes: BTreeMap::new(),
        locks: Vec::new(),
        buffers: Vec::new(),
    };
    let mmap = params.load_mode.use_mmap();
    let dio = params.load_mode.use_direct_io();
    let mlock = params.load_mode.use_mlock() && !planning;
    let all_mapped = files.files().iter().all(|f| f.mmap().is_some());
    // Group by buffer type, keeping request order inside each group.
    let mut groups: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, r) in reqs.iter().enumerate() {
        groups
            .entry(r.entry.buft.name().to_string())
            .or_default()
            .push(i);
    }
    let mut host_bufs: Vec<Arc<dyn Buffer>> = Vec::new();
    for (buft_name, idxs) in &groups {
        let entry = &reqs[idxs[0]].entry;
        let dev = &entry.dev;
        let is_default_cpu = dev.kind() == DeviceKind::Cpu
            && dev.buffer_type().name() == entry.buft.name()
            && dev.props().caps.buffer_from_host_ptr;
        // The file's layout holds a tensor only where its bytes in the
        // buffer type are its bytes in the file.
        let file_layout = idxs
            .iter()
            .all(|&i| entry.buft.alloc_size(&reqs[i].desc) == reqs[i].size);
        if mmap && is_default_cpu && all_mapped {
            a.map_group(files, reqs, idxs, buft_name, mlock, planning, stats)?;
        } else if dio && is_default_cpu && file_layout {
            a.mirror_group(reqs, idxs, buft_name, planning, &mut host_bufs)?;
        } else if planning {
            a.plan_group(reqs, idxs, buft_name)?;
        } else {
            a.alloc_group(reqs, idxs, buft_name, opts, slack, &mut host_bufs)?;
        }
    }
    if mlock {
        let ranges: Vec<(usize, usize)> = host_bufs
            .iter()
            .filter_map(|b| b.base().map(|p| (p.as_ptr() as usize, b.size())))
            .collect();
        lock_ranges("model buffers", &ranges, stats, &mut a.locks);
    }
    Ok(a)
}

impl Allocated {
    /// Wraps the ranges of the file mappings that the group's tensors span,
    /// one buffer per file, so that they are used in place.
    fn map_group(
        &mut self,
        files: &GgufModel,
        reqs: &[WeightRequest],
        idxs: &[usize],
        buft_name: &str,
        mlock: bool,
        planning: bool,
        stats: &mut LoadStats,
    ) -> Result<()> {
        #[cfg(unix)]
        let prefetch = numa_nodes() == 1;
        let dev = &reqs[idxs[0]].entry.dev;
        let mut by_file: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for &i in idxs {
            by_file.entry(reqs[i].file).or_default().push(i);
        }
        for (fi, ids) in by_file {
            let mmap = files.files()[fi]
                .mmap()
                .ok_or_else(|| bounds_err(&reqs[ids[0]].desc.name))?
                .clone();
            if let Some(&bad) = ids
                .iter()
                .find(|&&i| reqs[i].file_offset as usize + reqs[i].size > mmap.len())
            {
                return Err(bounds_err(&reqs[bad].desc.name));
            }
            let lo = ids.iter().map(|&i| reqs[i].file_offset).min().unwrap_or(0) as usize;
            let hi = ids
                .iter()
                .map(|&i| reqs[i].file_offset as usize + reqs[i].size)
                .max()
                .unwrap_or(lo);
            if mlock {
                let addr = mmap.as_ptr() as usize + lo;
                lock_ranges(
                    "the file mapping",
                    &[(addr, hi - lo)],
                    stats,
                    &mut self.locks,
                );
            }
            if planning {
                let buf = PlannedBuffer::shared(dev.buffer_type(), hi - lo, BufferUsage::Weights);
                self.place(reqs, &ids, &buf, lo, Route::Mapped);
                *self.sizes.entry(format!("{buft_name}_Mapped")).or_default() += hi - lo;
                self.buffers.push(buf);
                continue;
            }
            #[cfg(unix)]
            if prefetch && hi > lo {
                if let Err(e) = mmap.advise_range(memmap2::Advice::WillNeed, lo, hi - lo) {
                    crate::debug!("madvise(WILLNEED) failed: {e}");
                }
            }
            let max_tensor = ids.iter().map(|&i| reqs[i].size).max().unwrap_or(0);
            let mem: HostMem = mmap.clone();
            let buf = dev.buffer_from_host_mem(mem, lo, hi - lo, max_tensor)?;
            buf.set_usage(BufferUsage::Weights);
            self.place(reqs, &ids, &buf, lo, Route::Mapped);
            *self.sizes.entry(format!("{buft_name}_Mapped")).or_default() += hi - lo;
            self.buffers.push(buf);
        }
        Ok(())
    }

    /// Places requests `ids` in `buf`, at their file offset less `lo`.
    fn place(
        &mut self,
        reqs: &[WeightRequest],
        ids: &[usize],
        buf: &Arc<dyn Buffer>,
        lo: usize,
        route: Route,
    ) {
        for &i in ids {
            self.placements[i] = Some(Placement {
                buffer: buf.clone(),
                offset: reqs[i].file_offset as usize - lo,
            });
            self.routes[i] = Some(route);
        }
    }

    /// Allocates the group as the file lays it out (see the module's
    /// documentation): one buffer per run of tensors of one file with no
    /// gap over [`DIO_MIRROR_GAP`] and no overlap, within the buffer
    /// type's largest buffer; planned buffers when `planning`.
    fn mirror_group(
        &mut self,
        reqs: &[WeightRequest],
        idxs: &[usize],
        buft_name: &str,
        planning: bool,
        host_bufs: &mut Vec<Arc<dyn Buffer>>,
    ) -> Result<()> {
        let buft = reqs[idxs[0]].entry.buft.clone();
        let max = buft.max_size();
        let mut order = idxs.to_vec();
        order.sort_by_key(|&i| (reqs[i].file, reqs[i].file_offset));
        let mut runs: Vec<Vec<usize>> = Vec::new();
        let (mut lo, mut hi) = (0u64, 0u64);
        for i in order {
            let r = &reqs[i];
            let (start, end) = (r.file_offset, r.file_offset + r.size as u64);
            let lead = (start % DIO_MIRROR_ALIGN as u64) as usize;
            if lead + r.size > max {
                return Err(LlamaError::Tensor(format!(
                    "tensor '{}' of {} bytes does not fit in a {buft_name} buffer of at most \
                     {max} bytes",
                    r.desc.name, r.size
                )));
            }
            let joins = runs.last().is_some_and(|run| {
                let first = &reqs[run[0]];
                first.file == r.file
                    && start >= hi
                    && start - hi <= DIO_MIRROR_GAP
                    && (lo % DIO_MIRROR_ALIGN as u64 + (end - lo)) as usize <= max
            });
            if joins {
                hi = hi.max(end);
                runs.last_mut().expect("a run").push(i);
            } else {
                (lo, hi) = (start, end);
                runs.push(vec![i]);
            }
        }
        for run in runs {
            let lo = reqs[run[0]].file_offset;
            let hi = run
                .iter()
                .map(|&i| reqs[i].file_offset + reqs[i].size as u64)
                .max()
                .unwrap_or(lo);
            let lead = (lo % DIO_MIRROR_ALIGN as u64) as usize;
            let size = lead + (hi - lo) as usize;
            let buf = if planning {
                PlannedBuffer::shared(buft.clone(), size, BufferUsage::Weights)
            } else {
                buft.alloc_buffer(size)?
            };
            buf.set_usage(BufferUsage::Weights);
            if !planning && (buf.base().is_none() || buf.is_read_only()) {
                return Err(LlamaError::Tensor(format!(
                    "a {buft_name} buffer has no writable host memory to read weights into"
                )));
            }
            for &i in &run {
                let offset = lead + (reqs[i].file_offset - lo) as usize;
                buf.init_tensor(&reqs[i].desc, offset)?;
                self.placements[i] = Some(Placement {
                    buffer: buf.clone(),
                    offset,
                });
                self.routes[i] = Some(Route::Host);
            }
            *self.sizes.entry(buft_name.to_string()).or_default() += size;
            if !planning {
                host_bufs.push(buf.clone());
            }
            self.buffers.push(buf);
        }
        Ok(())
    }

    /// Lays the group out over planned buffers, exactly as
    /// [`Allocated::alloc_group`] would allocate them.
    fn plan_group(
        &mut self,
        reqs: &[WeightRequest],
        idxs: &[usize],
        buft_name: &str,
    ) -> Result<()> {
        let entry = &reqs[idxs[0]].entry;
        let descs: Vec<TensorDesc> = idxs.iter().map(|&i| reqs[i].desc.clone()).collect();
        let la = LinearAlloc::plan_tensors(&entry.buft, &descs, BufferUsage::Weights)?;
        for b in &la.buffers {
            *self.sizes.entry(buft_name.to_string()).or_default() += b.size();
        }
        for (&i, p) in idxs.iter().zip(la.placements) {
            self.placements[i] = Some(p);
            self.routes[i] = Some(Route::Host);
        }
        self.buffers.extend(la.buffers);
        Ok(())
    }

    /// Allocates the group's buffers and picks how they are filled: in
    /// place for host memory, by an uploader otherwise.
    fn alloc_group(
        &mut self,
        reqs: &[WeightRequest],
        idxs: &[usize],
        buft_name: &str,
        opts: &LoadOptions,
        slack: usize,
        host_bufs: &mut Vec<Arc<dyn Buffer>>,
    ) -> Result<()> {
        let entry = &reqs[idxs[0]].entry;
        let descs: Vec<TensorDesc> = idxs.iter().map(|&i| reqs[i].desc.clone()).collect();
        let la = LinearAlloc::alloc_tensors(&entry.buft, &descs, BufferUsage::Weights)?;
        for b in &la.buffers {
            *self.sizes.entry(buft_name.to_string()).or_default() += b.size();
        }
        // Host buffers are written in place, as a plain copy: a buffer type
        // that must transform the data (a repacking one) is not a host type.
        let host = entry.buft.is_host()
            && la
                .buffers
                .iter()
                .all(|b| b.base().is_some() && !b.is_read_only());
        let route = if host {
            host_bufs.extend(la.buffers.iter().cloned());
            Route::Host
        } else {
            self.uploaders.push(Uploader::new(entry, opts, slack));
            Route::Device(self.uploaders.len() - 1)
        };
        for (&i, p) in idxs.iter().zip(la.placements) {
            self.placements[i] = Some(p);
            self.routes[i] = Some(route);
        }
        self.buffers.extend(la.buffers);
        Ok(())
    }
}
