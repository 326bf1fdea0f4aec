//! Loading weight data into the buffers the placement chose, as the load
//! mode says (`auto`/`mmap`: from the file mapping; `none`: plain reads;
//! `dio`: direct reads, see `read.rs`; `mlock` variants lock the memory).
//! The buffers of every buffer type group are made first (`alloc.rs`),
//! then the data moves by one of three paths (`fill.rs`):
//!
//! * **Mapped**: with a mapping load mode, tensors whose buffer type is the CPU's own
//!   are used in place: the range of the file mapping they span is wrapped
//!   as a buffer (`buffer_from_host_mem`) without copying. The kernel is
//!   asked to read that range ahead (`MADV_WILLNEED`), except on machines
//!   with several NUMA nodes (see below). The `mlock` modes lock the range.
//! * **Host**: other host buffers (mmap off, or a host buffer type that
//!   cannot wrap the mapping) are filled in place, with plain reads from
//!   the file or copies from the mapping. The `mlock` modes lock them.
//! * **Device**: tensors in device memory are uploaded. When the device has
//!   asynchronous transfers, events and a pinned host buffer type, the data
//!   goes through a ring of pinned staging buffers: a piece is read (or
//!   copied from the mapping) into the next free staging buffer and an
//!   asynchronous copy to the tensor is queued on a backend of the device,
//!   so that reading the next piece overlaps the transfer; an event per
//!   staging buffer says when it may be refilled. Direct reads (which have
//!   no read-ahead) fill half the ring at once, several reads in flight,
//!   while the copies out of the other half run. Otherwise `set_tensor`
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
use std::path::Path;
use std::ptr::NonNull;
use std::sync::Arc;

use ggml_core::alloc::{LinearAlloc, PlannedBuffer};
use ggml_core::{
    registry, Backend, Buffer, BufferUsage, Device, DeviceKind, Event, HostMem, Placement,
    TensorDesc,
};
use gguf::GgufModel;
use rayon::prelude::*;

use crate::arch::TensorKind;
use crate::error::{LlamaError, Result};
use crate::model::Weight;
use crate::params::ModelParams;
use crate::placement::BuftEntry;

mod alloc;
mod check;
mod direct;
mod fill;
mod os;
mod read;
mod staging;

use check::*;
use fill::Fill;
pub use os::MemLock;
use os::*;
use read::Reader;
use staging::*;

/// Bytes of one pinned staging buffer of asynchronous uploads.
pub const STAGING_SIZE: usize = 1 << 20;
/// Pinned staging buffers in the ring.
pub const STAGING_COUNT: usize = 4;
/// Bytes of one piece of plain reads, host copies and synchronous uploads.
pub const PIECE_SIZE: usize = 16 << 20;
/// Bytes of direct reads into host memory read in one pass (at least): the
/// pieces of consecutive tensors up to this size are read by several
/// threads at once, which wait for each other at its end.
pub const DIRECT_PIECE_SIZE: usize = 64 << 20;
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

impl WeightRequest {
    /// One request per tensor of `files`, every one into `dev`'s own
    /// buffer type, in file order (the order the loader reads in): the
    /// whole files through one route, for loader tests and benches. The
    /// kind is a placeholder: the loader does not look at it.
    pub fn all_to(dev: &Arc<dyn Device>, files: &GgufModel) -> Vec<WeightRequest> {
        let mut reqs: Vec<WeightRequest> = files
            .tensors()
            .map(|(fi, info)| {
                let ne: Vec<usize> = info.dims.iter().map(|&d| d as usize).collect();
                WeightRequest {
                    kind: TensorKind::AttnQ,
                    layer: None,
                    desc: TensorDesc::new(info.name.clone(), info.ty, &ne),
                    file: fi,
                    file_offset: files.files()[fi].tensor_file_offset(info),
                    size: info.size as usize,
                    entry: BuftEntry {
                        buft: dev.buffer_type(),
                        dev: dev.clone(),
                    },
                }
            })
            .collect();
        reqs.sort_by_key(|r| (r.file, r.file_offset));
        reqs
    }
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
    /// Of the bytes read with direct I/O, those copied out of a bounce
    /// buffer rather than read straight into place (the partial blocks at
    /// the ends of a tensor; more when a destination is aligned unlike its
    /// file offset).
    pub bytes_bounced: u64,
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
    /// Act as a file system that refuses direct I/O, so that
    /// `LoadMode::Dio` takes its fall-back to buffered reads.
    pub refuse_direct_io: bool,
}

impl Default for LoadOptions {
    fn default() -> LoadOptions {
        LoadOptions {
            staging_size: STAGING_SIZE,
            staging_count: STAGING_COUNT,
            piece_size: PIECE_SIZE,
            async_upload: true,
            refuse_direct_io: false,
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
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
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

/// Lays every requested weight out as [`load_weights`] would, over planned
/// buffers that hold no memory: the buffers and sizes are exactly those of
/// a load, and nothing is read, mapped or allocated (a memory plan).
pub fn plan_weights(
    files: &GgufModel,
    reqs: &[WeightRequest],
    params: &ModelParams,
) -> Result<LoadedWeights> {
    let mut stats = LoadStats::default();
    let opts = LoadOptions::default();
    let mut al = alloc::allocate(files, reqs, params, &opts, 0, true, &mut stats)?;
    stats.n_buffers = al.buffers.len();
    weights_of(&mut al, reqs, stats, "planned")
}

/// The weights `al` holds for `reqs`, in request order, with the
/// buffers, sizes and memory locks (none when planning); a request that
/// got no place is an error (`what`: "planned" or "loaded").
fn weights_of(
    al: &mut alloc::Allocated,
    reqs: &[WeightRequest],
    stats: LoadStats,
    what: &str,
) -> Result<LoadedWeights> {
    let placements = reqs
        .iter()
        .zip(std::mem::take(&mut al.placements))
        .map(|(r, p)| {
            p.map(|at| Weight {
                desc: r.desc.clone(),
                at,
            })
            .ok_or_else(|| LlamaError::Tensor(format!("tensor '{}' was not {what}", r.desc.name)))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(LoadedWeights {
        buffers: std::mem::take(&mut al.buffers),
        placements,
        sizes: std::mem::take(&mut al.sizes),
        stats,
        locks: std::mem::take(&mut al.locks),
    })
}

/// [`load_weights`] with the loader's tuning given. Two phases: the
/// buffers of every group first ([`alloc::allocate`]), then the data of
/// every request in file order, by its route ([`fill::Fill`]).
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
        ..opts.clone()
    };
    let mode = params.load_mode;
    let mut reader = Reader::new(files, mode.use_direct_io(), opts.refuse_direct_io);
    // Direct reads widen each piece to whole blocks and align its start in
    // memory: a staging buffer needs an alignment of room on either side
    // and one more to align its start.
    let slack = if mode.use_direct_io() {
        let a = reader.open_all()?;
        if a.offset > 1 {
            3 * a.offset.max(a.memory)
        } else {
            0
        }
    } else {
        0
    };
    let mut stats = LoadStats::default();
    let mut al = alloc::allocate(files, reqs, params, &opts, slack, false, &mut stats)?;
    let mut fill = Fill {
        files,
        reqs,
        opts: &opts,
        mmap: mode.use_mmap(),
        progress: Progress {
            cb: params.progress_callback.as_deref(),
            done: 0,
            total: reqs.iter().map(|r| r.size as u64).sum(),
        },
        stats,
        reader,
        checks: Checks {
            on: params.check_tensors,
            items: Vec::new(),
            bytes: 0,
        },
        batch: Vec::new(),
        staged: Vec::new(),
        slack,
    };
    #[cfg(unix)]
    let release = mode.use_mmap().then(|| Release::new(reqs, &al.routes));
    for (i, r) in reqs.iter().enumerate() {
        let (Some(p), Some(route)) = (&al.placements[i], al.routes[i]) else {
            return Err(LlamaError::Tensor(format!(
                "tensor '{}' has no buffer",
                r.desc.name
            )));
        };
        fill.request(i, p, route, &mut al.uploaders)?;
        // Copied tensors give their mapped pages back once copied; with
        // `check_tensors` they are validated from the mapping later, and
        // released at the end.
        #[cfg(unix)]
        if let Some(rel) = &release {
            if !fill.checks.on && route != Route::Mapped {
                rel.tensor(files, r);
            }
        }
    }
    fill.flush_direct()?;
    fill.flush_staged(&mut al.uploaders)?;
    fill.checks.flush(reqs)?;
    for u in &mut al.uploaders {
        if let Uploader::Async(ring) = u {
            ring.finish()?;
        }
    }
    al.uploaders.clear();
    #[cfg(unix)]
    if let (Some(rel), true) = (&release, fill.checks.on) {
        for (r, route) in reqs.iter().zip(&al.routes) {
            if matches!(route, Some(Route::Host | Route::Device(_))) {
                rel.tensor(files, r);
            }
        }
    }
    let mut stats = fill.stats;
    stats.n_buffers = al.buffers.len();
    stats.bytes_bounced = fill.reader.bounced();
    weights_of(&mut al, reqs, stats, "loaded")
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
