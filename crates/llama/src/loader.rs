//! Loading weight data into the buffers the placement chose: memory-mapped
//! zero-copy for the CPU, plain reads into host buffers when mmap is off, and
//! uploads to device buffers.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::sync::Arc;

use ggml_core::alloc::LinearAlloc;
use ggml_core::{Buffer, BufferUsage, HostMem, Placement, TensorDesc};
use gguf::GgufModel;
use rayon::prelude::*;

use crate::arch::TensorKind;
use crate::error::{LlamaError, Result};
use crate::model::Weight;
use crate::params::ModelParams;
use crate::placement::BuftEntry;

/// One weight to load: what it is, where it is in the files, where it goes.
#[derive(Clone)]
pub struct WeightRequest {
    /// Role.
    pub kind: TensorKind,
    /// Layer, for per-layer tensors.
    pub layer: Option<usize>,
    /// Name, type and shape.
    pub desc: TensorDesc,
    /// Index of the split file holding it.
    pub file: usize,
    /// Absolute byte offset in that file.
    pub file_offset: u64,
    /// Bytes.
    pub size: usize,
    /// Buffer type chosen for it.
    pub entry: BuftEntry,
}

/// What the loader did.
#[derive(Clone, Debug, Default)]
pub struct LoadStats {
    /// Bytes used in place from the file mapping.
    pub bytes_mapped: u64,
    /// Bytes read with plain reads into host buffers.
    pub bytes_read: u64,
    /// Bytes copied to device buffers.
    pub bytes_uploaded: u64,
    /// Buffers created.
    pub n_buffers: usize,
}

/// The result of [`load_weights`].
pub struct LoadedWeights {
    /// Every buffer holding weights.
    pub buffers: Vec<Arc<dyn Buffer>>,
    /// One weight per request, in request order.
    pub placements: Vec<Weight>,
    /// Bytes per buffer type.
    pub sizes: BTreeMap<String, usize>,
    /// Statistics.
    pub stats: LoadStats,
}

struct Progress<'a> {
    cb: Option<&'a (dyn Fn(f32) -> bool + Send + Sync)>,
    done: u64,
    total: u64,
}

impl Progress<'_> {
    fn advance(&mut self, bytes: u64) -> Result<()> {
        self.done += bytes;
        if let Some(cb) = self.cb {
            if !cb(self.done as f32 / self.total.max(1) as f32) {
                return Err(LlamaError::Cancelled);
            }
        }
        Ok(())
    }
}

fn validate(desc: &TensorDesc, data: &[u8]) -> Result<()> {
    ggml_core::quants::validate_row_data(desc.ty, data).map_err(|e| LlamaError::TensorData {
        name: desc.name.clone(),
        why: e.to_string(),
    })
}

fn bounds_err(name: &str) -> LlamaError {
    LlamaError::Tensor(format!(
        "tensor '{name}' data is not within the file bounds: the file may be truncated"
    ))
}

/// Loads every requested weight. Requests should be in file order.
pub fn load_weights(
    files: &GgufModel,
    reqs: &[WeightRequest],
    params: &ModelParams,
) -> Result<LoadedWeights> {
    let total: u64 = reqs.iter().map(|r| r.size as u64).sum();
    let mut progress = Progress {
        cb: params.progress_callback.as_deref(),
        done: 0,
        total,
    };
    let mut stats = LoadStats::default();
    let mut buffers: Vec<Arc<dyn Buffer>> = Vec::new();
    let mut placements: Vec<Option<Placement>> = vec![None; reqs.len()];
    let mut sizes: BTreeMap<String, usize> = BTreeMap::new();

    // Group by buffer type, keeping request order inside each group.
    let mut groups: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, r) in reqs.iter().enumerate() {
        groups
            .entry(r.entry.buft.name().to_string())
            .or_default()
            .push(i);
    }

    // File handles for plain reads, opened lazily.
    let mut handles: Vec<Option<File>> = (0..files.files().len()).map(|_| None).collect();
    let mut staging: Vec<u8> = Vec::new();

    for (buft_name, idxs) in &groups {
        let entry = &reqs[idxs[0]].entry;
        let dev = &entry.dev;
        let is_default_cpu = dev.kind() == ggml_core::DeviceKind::Cpu
            && dev.buffer_type().name() == entry.buft.name()
            && dev.props().caps.buffer_from_host_ptr;
        let mapped =
            params.use_mmap && is_default_cpu && files.files().iter().all(|f| f.mmap().is_some());
        if mapped {
            // One buffer per file over the range its tensors span.
            let mut by_file: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
            for &i in idxs {
                by_file.entry(reqs[i].file).or_default().push(i);
            }
            for (fi, ids) in by_file {
                let file = &files.files()[fi];
                let mmap = file
                    .mmap()
                    .ok_or_else(|| bounds_err(&reqs[ids[0]].desc.name))?
                    .clone();
                let lo = ids.iter().map(|&i| reqs[i].file_offset).min().unwrap_or(0) as usize;
                let hi = ids
                    .iter()
                    .map(|&i| reqs[i].file_offset as usize + reqs[i].size)
                    .max()
                    .unwrap_or(lo);
                if hi > mmap.len() {
                    let bad = ids
                        .iter()
                        .find(|&&i| reqs[i].file_offset as usize + reqs[i].size > mmap.len());
                    return Err(bounds_err(&reqs[bad.copied().unwrap_or(ids[0])].desc.name));
                }
                if params.use_mlock {
                    if let Err(e) = mmap.lock() {
                        crate::warn!(
                            "warning: failed to mlock {} bytes of the mapping: {e} (raise the memlock limit, e.g. ulimit -l)",
                            hi - lo
                        );
                    }
                }
                #[cfg(unix)]
                if let Err(e) = mmap.advise_range(memmap2::Advice::WillNeed, lo, hi - lo) {
                    crate::debug!("madvise(WILLNEED) failed: {e}");
                }
                let max_tensor = ids.iter().map(|&i| reqs[i].size).max().unwrap_or(0);
                let mem: HostMem = mmap.clone();
                let buf = dev.buffer_from_host_mem(mem, lo, hi - lo, max_tensor)?;
                buf.set_usage(BufferUsage::Weights);
                if params.check_tensors {
                    ids.par_iter().try_for_each(|&i| {
                        let r = &reqs[i];
                        let start = r.file_offset as usize;
                        validate(&r.desc, &mmap[start..start + r.size])
                    })?;
                }
                for &i in &ids {
                    placements[i] = Some(Placement {
                        buffer: buf.clone(),
                        offset: reqs[i].file_offset as usize - lo,
                    });
                    stats.bytes_mapped += reqs[i].size as u64;
                    progress.advance(reqs[i].size as u64)?;
                }
                *sizes.entry(format!("{buft_name}_Mapped")).or_default() += hi - lo;
                buffers.push(buf);
            }
            continue;
        }

        let descs: Vec<TensorDesc> = idxs.iter().map(|&i| reqs[i].desc.clone()).collect();
        let la = LinearAlloc::alloc_tensors(&entry.buft, &descs, BufferUsage::Weights)?;
        let (bufs, places) = (la.buffers, la.placements);
        for b in &bufs {
            *sizes.entry(buft_name.clone()).or_default() += b.size();
        }
        for (&i, p) in idxs.iter().zip(places) {
            let r = &reqs[i];
            let host = p
                .buffer
                .base()
                .filter(|_| entry.buft.is_host() && !p.buffer.is_read_only());
            let file = &files.files()[r.file];
            if params.use_mmap {
                if let Some(mmap) = file.mmap() {
                    let start = r.file_offset as usize;
                    let src = mmap
                        .get(start..start + r.size)
                        .ok_or_else(|| bounds_err(&r.desc.name))?;
                    if params.check_tensors {
                        validate(&r.desc, src)?;
                    }
                    p.buffer.set_tensor(p.offset, src)?;
                    if host.is_some() {
                        stats.bytes_read += r.size as u64;
                    } else {
                        stats.bytes_uploaded += r.size as u64;
                    }
                    placements[i] = Some(p);
                    progress.advance(r.size as u64)?;
                    continue;
                }
            }
            let path_str = file
                .path()
                .map(|p| p.display().to_string())
                .unwrap_or_default();
            let fh = match &mut handles[r.file] {
                Some(f) => f,
                slot => {
                    let path = file.path().ok_or_else(|| {
                        LlamaError::InvalidParam(format!(
                            "tensor '{}': the file has no path to read from",
                            r.desc.name
                        ))
                    })?;
                    let f = File::open(path).map_err(|source| LlamaError::Io {
                        path: path.display().to_string(),
                        source,
                    })?;
                    slot.insert(f)
                }
            };
            let io_err = |source: std::io::Error| LlamaError::Io {
                path: path_str.clone(),
                source,
            };
            fh.seek(SeekFrom::Start(r.file_offset)).map_err(io_err)?;
            match host {
                Some(base) if p.offset + r.size <= p.buffer.size() => {
                    // SAFETY: the range lies inside a host buffer that was
                    // just allocated for these weights and that nothing else
                    // reads or writes while it is being filled.
                    let dst = unsafe {
                        std::slice::from_raw_parts_mut(base.as_ptr().add(p.offset), r.size)
                    };
                    fh.read_exact(dst).map_err(|e| {
                        if e.kind() == std::io::ErrorKind::UnexpectedEof {
                            bounds_err(&r.desc.name)
                        } else {
                            io_err(e)
                        }
                    })?;
                    if params.check_tensors {
                        validate(&r.desc, dst)?;
                    }
                    stats.bytes_read += r.size as u64;
                }
                _ => {
                    staging.resize(r.size, 0);
                    fh.read_exact(&mut staging).map_err(|e| {
                        if e.kind() == std::io::ErrorKind::UnexpectedEof {
                            bounds_err(&r.desc.name)
                        } else {
                            io_err(e)
                        }
                    })?;
                    if params.check_tensors {
                        validate(&r.desc, &staging)?;
                    }
                    p.buffer.set_tensor(p.offset, &staging)?;
                    stats.bytes_uploaded += r.size as u64;
                }
            }
            placements[i] = Some(p);
            progress.advance(r.size as u64)?;
        }
        buffers.extend(bufs);
    }
    stats.n_buffers = buffers.len();
    let placements = reqs
        .iter()
        .zip(placements)
        .map(|(r, p)| {
            p.map(|at| Weight {
                desc: r.desc.clone(),
                at,
            })
            .ok_or_else(|| LlamaError::Tensor(format!("tensor '{}' was not loaded", r.desc.name)))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(LoadedWeights {
        buffers,
        placements,
        sizes,
        stats,
    })
}
