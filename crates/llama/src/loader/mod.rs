//! Loading weight data into the buffers the placement chose. Three paths:
//!
//! * **Mapped**: with `use_mmap`, tensors whose buffer type is the CPU's own
//!   are used in place: the range of the file mapping they span is wrapped
//!   as a buffer (`buffer_from_host_mem`) without copying. The kernel is
//!   asked to read that range ahead (`MADV_WILLNEED`), except on machines
//!   with several NUMA nodes (see below). `use_mlock` locks the range.
//! * **Host**: other host buffers (mmap off, or a host buffer type that
//!   cannot wrap the mapping) are filled in place, with plain reads from
//!   the file or copies from the mapping. `use_mlock` locks them.
//! * **Device**: tensors in device memory are uploaded. When the device has
//!   asynchronous transfers, events and a pinned host buffer type, the data
//!   goes through a ring of pinned staging buffers: a piece is read (or
//!   copied from the mapping) into the next free staging buffer and an
//!   asynchronous copy to the tensor is queued on a backend of the device,
//!   so that reading the next piece overlaps the transfer; an event per
//!   staging buffer says when it may be refilled. Otherwise `set_tensor`
//!   copies synchronously, piece by piece. A CPU buffer type that is not a
//!   plain host type (`CPU_REPACK`, which stores weights repacked for the
//!   CPU's matrix kernels) takes each tensor in one `set_tensor`, from the
//!   mapping or read whole, and transforms it as it stores it.
//!
//! Tensors are loaded in file order, whatever their path, so that the file
//! is read sequentially. Progress is reported in bytes, per piece for large
//! tensors, so that a single huge tensor still moves the bar; a cancel from
//! the progress callback stops at the next piece and frees everything.
//!
//! `check_tensors` validates every tensor's data. Data that stays readable
//! (the mapping, host buffers) is checked in batches, in parallel; data
//! that only passes through staging memory is checked piece by piece, in
//! parallel within the piece. Either way the error names the first bad
//! tensor in file order.
//!
//! NUMA: prefetching the mapping makes the loading thread read every page,
//! and the kernel places page-cache pages on the node of the thread that
//! reads them, so every weight would end up on one node. On machines with
//! several nodes the prefetch is skipped, and the pages are read when the
//! compute threads first touch them, which spreads them over the nodes of
//! those threads (llama.cpp likewise does not prefetch with `--numa`). No
//! random-access advice is given: it would disable readahead on every
//! machine for a benefit only the first pass over the weights sees.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::ptr::NonNull;
use std::sync::Arc;

use ggml_core::alloc::LinearAlloc;
use ggml_core::{
    registry, Backend, Buffer, BufferUsage, Device, DeviceKind, Event, HostMem, Placement,
    TensorDesc,
};
use gguf::GgufModel;
use memmap2::Mmap;
use rayon::prelude::*;

use crate::arch::TensorKind;
use crate::error::{LlamaError, Result};
use crate::model::Weight;
use crate::params::ModelParams;
use crate::placement::BuftEntry;

mod check;
mod os;
mod staging;

use check::*;
pub use os::MemLock;
use os::*;
use staging::*;

/// Bytes of one pinned staging buffer of asynchronous uploads.
pub const STAGING_SIZE: usize = 1 << 20;
/// Pinned staging buffers in the ring.
pub const STAGING_COUNT: usize = 4;
/// Bytes of one piece of plain reads, host copies and synchronous uploads.
pub const PIECE_SIZE: usize = 16 << 20;
/// Smallest piece or staging buffer: larger than any block of any type, so
/// that pieces hold whole blocks and can be validated on their own.
pub const MIN_PIECE_SIZE: usize = 4096;

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
    /// Bytes read or copied into host buffers.
    pub bytes_read: u64,
    /// Bytes copied to device buffers (both ways).
    pub bytes_uploaded: u64,
    /// Bytes stored repacked in a CPU buffer type of its own layout
    /// (`CPU_REPACK`).
    pub bytes_repacked: u64,
    /// Of `bytes_uploaded`, the bytes that went through the pinned staging
    /// ring as asynchronous transfers.
    pub bytes_uploaded_async: u64,
    /// Bytes locked in memory for `use_mlock`.
    pub bytes_locked: u64,
    /// Bytes `use_mlock` asked for but could not lock (a warning was printed).
    pub bytes_lock_failed: u64,
    /// Buffers created.
    pub n_buffers: usize,
}

/// Tuning of [`load_weights_with`]; the defaults are what [`load_weights`]
/// uses. Tests shrink the staging ring to exercise tensors larger than a
/// staging buffer.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// Bytes of one pinned staging buffer (at least [`MIN_PIECE_SIZE`]).
    pub staging_size: usize,
    /// Number of pinned staging buffers (at least 1).
    pub staging_count: usize,
    /// Bytes of one piece of the other paths (at least [`MIN_PIECE_SIZE`]).
    pub piece_size: usize,
    /// Use the staging ring where the device allows it; `false` forces
    /// synchronous uploads.
    pub async_upload: bool,
}

impl Default for LoadOptions {
    fn default() -> LoadOptions {
        LoadOptions {
            staging_size: STAGING_SIZE,
            staging_count: STAGING_COUNT,
            piece_size: PIECE_SIZE,
            async_upload: true,
        }
    }
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
    /// Memory locked for `use_mlock`, unlocked when dropped; keep it no
    /// longer than `buffers`.
    pub locks: Vec<MemLock>,
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

fn bounds_err(name: &str) -> LlamaError {
    LlamaError::Tensor(format!(
        "tensor '{name}' data is not within the file bounds: the file may be truncated"
    ))
}

/// A backend or buffer error, with the tensor named.
fn tensor_err(name: &str, what: &str, e: impl std::fmt::Display) -> LlamaError {
    LlamaError::Tensor(format!("tensor '{name}': {what}: {e}"))
}

/// Reads tensor data with plain reads, one handle per file, opened when
/// first needed; seeks only when a read does not continue the last one.
struct Reader<'f> {
    files: &'f GgufModel,
    handles: Vec<Option<(File, u64)>>,
}

impl<'f> Reader<'f> {
    fn new(files: &'f GgufModel) -> Reader<'f> {
        Reader {
            files,
            handles: (0..files.files().len()).map(|_| None).collect(),
        }
    }

    /// Reads `dst.len()` bytes of request `r`'s data from byte `start` of it.
    fn read(&mut self, r: &WeightRequest, start: usize, dst: &mut [u8]) -> Result<()> {
        let file = &self.files.files()[r.file];
        let path = file.path().ok_or_else(|| {
            LlamaError::InvalidParam(format!(
                "tensor '{}': the file has no path to read from",
                r.desc.name
            ))
        })?;
        let (fh, pos) = match &mut self.handles[r.file] {
            Some(h) => h,
            slot => {
                let f = File::open(path).map_err(|source| LlamaError::Io {
                    path: path.display().to_string(),
                    source,
                })?;
                advise_sequential(&f);
                slot.insert((f, u64::MAX))
            }
        };
        let io_err = |e: std::io::Error| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                bounds_err(&r.desc.name)
            } else {
                tensor_err(&r.desc.name, &format!("reading {}", path.display()), e)
            }
        };
        let at = r.file_offset + start as u64;
        if *pos != at {
            *pos = u64::MAX;
            fh.seek(SeekFrom::Start(at)).map_err(io_err)?;
        }
        fh.read_exact(dst).map_err(io_err)?;
        *pos = at + dst.len() as u64;
        Ok(())
    }
}

/// The pieces `(start, len)` of `size` bytes in pieces of at most `max`
/// bytes that hold whole blocks of `desc`'s type.
fn pieces(desc: &TensorDesc, size: usize, max: usize) -> impl Iterator<Item = (usize, usize)> {
    let ts = desc.ty.type_size().max(1);
    let step = if ts <= max { max / ts * ts } else { max }.max(1);
    (0..size)
        .step_by(step)
        .map(move |s| (s, step.min(size - s)))
}

/// Copies `src` to `dst` (same length), in parallel for large copies: with
/// a mapping as the source, page faults are then served in parallel.
fn copy_parallel(dst: &mut [u8], src: &[u8]) {
    const PART: usize = 1 << 20;
    if dst.len() <= PART {
        dst.copy_from_slice(src);
    } else {
        dst.par_chunks_mut(PART)
            .zip(src.par_chunks(PART))
            .for_each(|(d, s)| d.copy_from_slice(s));
    }
}

/// Where a request's bytes go.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Route {
    /// Used in place from the mapping.
    Mapped,
    /// Written in place in a host buffer.
    Host,
    /// Uploaded by the uploader of this index.
    Device(usize),
}

/// Loads every requested weight. Requests should be in file order.
pub fn load_weights(
    files: &GgufModel,
    reqs: &[WeightRequest],
    params: &ModelParams,
) -> Result<LoadedWeights> {
    load_weights_with(files, reqs, params, &LoadOptions::default())
}

/// [`load_weights`] with the loader's tuning given.
pub fn load_weights_with(
    files: &GgufModel,
    reqs: &[WeightRequest],
    params: &ModelParams,
    opts: &LoadOptions,
) -> Result<LoadedWeights> {
    let opts = LoadOptions {
        staging_size: opts.staging_size.max(MIN_PIECE_SIZE),
        staging_count: opts.staging_count.max(1),
        piece_size: opts.piece_size.max(MIN_PIECE_SIZE),
        async_upload: opts.async_upload,
    };
    let total: u64 = reqs.iter().map(|r| r.size as u64).sum();
    let mut progress = Progress {
        cb: params.progress_callback.as_deref(),
        done: 0,
        total,
    };
    let mut stats = LoadStats::default();
    // Declared before everything that borrows their memory, so dropped last.
    let mut buffers: Vec<Arc<dyn Buffer>> = Vec::new();
    let mut locks: Vec<MemLock> = Vec::new();
    let mut placements: Vec<Option<Placement>> = vec![None; reqs.len()];
    let mut routes: Vec<Option<Route>> = vec![None; reqs.len()];
    let mut sizes: BTreeMap<String, usize> = BTreeMap::new();
    let mut uploaders: Vec<Uploader> = Vec::new();
    let mut host_bufs: Vec<Arc<dyn Buffer>> = Vec::new();
    let all_mapped = files.files().iter().all(|f| f.mmap().is_some());
    let mapping = |fi: usize| -> Option<&Arc<Mmap>> {
        if params.use_mmap {
            files.files()[fi].mmap()
        } else {
            None
        }
    };

    // Group by buffer type, keeping request order inside each group.
    let mut groups: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, r) in reqs.iter().enumerate() {
        groups
            .entry(r.entry.buft.name().to_string())
            .or_default()
            .push(i);
    }

    // Buffers first: mapped ranges, allocations, staging rings.
    #[cfg(unix)]
    let prefetch = numa_nodes() == 1;
    for (buft_name, idxs) in &groups {
        let entry = &reqs[idxs[0]].entry;
        let dev = &entry.dev;
        let is_default_cpu = dev.kind() == DeviceKind::Cpu
            && dev.buffer_type().name() == entry.buft.name()
            && dev.props().caps.buffer_from_host_ptr;
        if params.use_mmap && is_default_cpu && all_mapped {
            // One buffer per file over the range its tensors span.
            let mut by_file: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
            for &i in idxs {
                by_file.entry(reqs[i].file).or_default().push(i);
            }
            for (fi, ids) in by_file {
                let mmap = mapping(fi)
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
                if params.use_mlock {
                    let addr = mmap.as_ptr() as usize + lo;
                    lock_ranges(
                        "the file mapping",
                        &[(addr, hi - lo)],
                        &mut stats,
                        &mut locks,
                    );
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
                for &i in &ids {
                    placements[i] = Some(Placement {
                        buffer: buf.clone(),
                        offset: reqs[i].file_offset as usize - lo,
                    });
                    routes[i] = Some(Route::Mapped);
                }
                *sizes.entry(format!("{buft_name}_Mapped")).or_default() += hi - lo;
                buffers.push(buf);
            }
            continue;
        }

        let descs: Vec<TensorDesc> = idxs.iter().map(|&i| reqs[i].desc.clone()).collect();
        let la = LinearAlloc::alloc_tensors(&entry.buft, &descs, BufferUsage::Weights)?;
        for b in &la.buffers {
            *sizes.entry(buft_name.clone()).or_default() += b.size();
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
            uploaders.push(Uploader::new(entry, &opts));
            Route::Device(uploaders.len() - 1)
        };
        for (&i, p) in idxs.iter().zip(la.placements) {
            placements[i] = Some(p);
            routes[i] = Some(route);
        }
        buffers.extend(la.buffers);
    }
    if params.use_mlock {
        let ranges: Vec<(usize, usize)> = host_bufs
            .iter()
            .filter_map(|b| b.base().map(|p| (p.as_ptr() as usize, b.size())))
            .collect();
        lock_ranges("model buffers", &ranges, &mut stats, &mut locks);
    }
    drop(host_bufs);

    // Data, in file order.
    let mut reader = Reader::new(files);
    let mut checks = Checks {
        on: params.check_tensors,
        items: Vec::new(),
        bytes: 0,
    };
    #[cfg(unix)]
    let release = params.use_mmap.then(|| Release::new(reqs, &routes));
    for (i, r) in reqs.iter().enumerate() {
        let (Some(p), Some(route)) = (&placements[i], routes[i]) else {
            return Err(LlamaError::Tensor(format!(
                "tensor '{}' has no buffer",
                r.desc.name
            )));
        };
        // Copied tensors give their mapped pages back once copied; with
        // `check_tensors` they are validated from the mapping later, and
        // released at the end.
        #[cfg(unix)]
        let release_now = (release.is_some() && !checks.on && route != Route::Mapped).then_some(r);
        let name = &r.desc.name;
        let start = r.file_offset as usize;
        let src: Option<&[u8]> = match mapping(r.file) {
            Some(m) => Some(
                m.get(start..start.saturating_add(r.size))
                    .ok_or_else(|| bounds_err(name))?,
            ),
            None => None,
        };
        match route {
            Route::Mapped => {
                let data = src.ok_or_else(|| bounds_err(name))?;
                checks.push(reqs, i, data)?;
                stats.bytes_mapped += r.size as u64;
                progress.advance(r.size as u64)?;
            }
            Route::Host => {
                let base = p
                    .buffer
                    .base()
                    .ok_or_else(|| tensor_err(name, "host buffer", "no host address"))?;
                if p.offset
                    .checked_add(r.size)
                    .is_none_or(|e| e > p.buffer.size())
                {
                    return Err(tensor_err(name, "host buffer", "placement out of bounds"));
                }
                // SAFETY: the range lies inside a host buffer that was just
                // allocated for these weights (checked above), that `buffers`
                // keeps alive until the end of this function, and that
                // nothing else reads or writes while it is being filled;
                // tensors of a buffer do not overlap.
                let dst: &mut [u8] =
                    unsafe { std::slice::from_raw_parts_mut(base.as_ptr().add(p.offset), r.size) };
                for (s, n) in pieces(&r.desc, r.size, opts.piece_size) {
                    match src {
                        Some(m) => copy_parallel(&mut dst[s..s + n], &m[s..s + n]),
                        None => reader.read(r, s, &mut dst[s..s + n])?,
                    }
                    progress.advance(n as u64)?;
                }
                stats.bytes_read += r.size as u64;
                checks.push(reqs, i, dst)?;
            }
            Route::Device(u) => {
                let check_pieces = checks.on && src.is_none();
                match &mut uploaders[u] {
                    Uploader::Sync { staging, whole } => {
                        let piece = if *whole {
                            r.size.max(1)
                        } else {
                            opts.piece_size
                        };
                        for (s, n) in pieces(&r.desc, r.size, piece) {
                            let data: &[u8] = match src {
                                Some(m) => &m[s..s + n],
                                None => {
                                    staging.resize(n, 0);
                                    reader.read(r, s, &mut staging[..n])?;
                                    &staging[..n]
                                }
                            };
                            if check_pieces {
                                check_piece(&mut checks, reqs, i, data, s)?;
                            }
                            p.buffer
                                .set_tensor(p.offset + s, data)
                                .map_err(|e| tensor_err(name, "upload", e))?;
                            progress.advance(n as u64)?;
                        }
                    }
                    Uploader::Async(ring) => {
                        for (s, n) in pieces(&r.desc, r.size, ring.size) {
                            let k = ring
                                .acquire()
                                .map_err(|e| tensor_err(name, "staging buffer", e))?;
                            let buf = ring.slot_mut(k, n);
                            match src {
                                Some(m) => buf.copy_from_slice(&m[s..s + n]),
                                None => reader.read(r, s, buf)?,
                            }
                            if check_pieces {
                                check_piece(&mut checks, reqs, i, buf, s)?;
                            }
                            let dst = Placement {
                                buffer: p.buffer.clone(),
                                offset: p.offset + s,
                            };
                            ring.submit(k, &dst, n)
                                .map_err(|e| tensor_err(name, "upload", e))?;
                            progress.advance(n as u64)?;
                        }
                        stats.bytes_uploaded_async += r.size as u64;
                    }
                }
                if let (true, Some(m)) = (checks.on, src) {
                    checks.push(reqs, i, m)?;
                }
                match &uploaders[u] {
                    Uploader::Sync { whole: true, .. } => stats.bytes_repacked += r.size as u64,
                    _ => stats.bytes_uploaded += r.size as u64,
                }
            }
        }
        #[cfg(unix)]
        if let (Some(rel), Some(r)) = (&release, release_now) {
            rel.tensor(files, r);
        }
    }
    checks.flush(reqs)?;
    for u in &mut uploaders {
        if let Uploader::Async(ring) = u {
            ring.finish()?;
        }
    }
    drop(uploaders);
    #[cfg(unix)]
    if let (Some(rel), true) = (&release, checks.on) {
        for (r, route) in reqs.iter().zip(&routes) {
            if matches!(route, Some(Route::Host | Route::Device(_))) {
                rel.tensor(files, r);
            }
        }
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
        locks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_lists_are_counted() {
        assert_eq!(count_nodes("0\n"), 1);
        assert_eq!(count_nodes("0-1\n"), 2);
        assert_eq!(count_nodes("0-3,6,8-9"), 7);
        assert_eq!(count_nodes(""), 0);
    }

    #[test]
    fn pieces_hold_whole_blocks() {
        let d = TensorDesc::new("t", ggml_core::Type::Q4_0, &[32 * 1000]);
        let size = d.nbytes();
        let ps: Vec<_> = pieces(&d, size, 4096).collect();
        assert!(ps.iter().all(|&(_, n)| n % 18 == 0 && n <= 4096));
        assert_eq!(ps.iter().map(|p| p.1).sum::<usize>(), size);
        assert!(ps.windows(2).all(|w| w[0].0 + w[0].1 == w[1].0));
        assert_eq!(pieces(&d, 0, 4096).count(), 0);
    }
}
