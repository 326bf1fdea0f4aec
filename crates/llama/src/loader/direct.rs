//! Direct reads (`O_DIRECT`) of one span of a file, split into chunks that
//! a few threads read at the same time.
//!
//! Direct I/O has no read-ahead: one synchronous read at a time leaves the
//! disk idle between reads, and a read of a few MiB is served by one
//! request at a time. A sequential buffered read, by contrast, keeps the
//! kernel's read-ahead window in flight. Several direct reads on disjoint
//! ranges in flight at once keep the disk's queue full the same way,
//! without the page cache.
//!
//! A span of tensor data is cut into chunks at whole blocks of the file
//! system (`DioAlign::offset`). A chunk whose file range is whole blocks
//! and whose destination is aligned as direct reads ask
//! (`DioAlign::memory`) is read straight into the destination; the others
//! (the partial blocks at either end of the span, or every chunk when the
//! destination is aligned unlike the file offset) are read whole blocks at
//! a time into a bounce buffer of their reader and copied from there.

use super::read::{read_at_most, AlignedBuf, DioAlign};
use super::*;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

/// Bytes of one chunk (a multiple of any block size a file system uses).
pub(super) const CHUNK: usize = 4 << 20;
/// Readers in flight at once.
pub(super) const READERS: usize = 4;

/// One read of a chunk.
struct Job<'d> {
    /// File offset of the first byte read (a multiple of the block size).
    at: u64,
    /// Bytes of the read's first block to skip before `dst` starts (0 for
    /// a read straight into `dst`).
    skip: usize,
    /// Where the bytes go.
    dst: &'d mut [u8],
    /// Bytes of `dst` that must be read: all of them, but for a read into
    /// whole blocks of a staging buffer that the file's end may cut short.
    need: usize,
    /// The read goes straight into `dst` (aligned, whole blocks).
    direct: bool,
    /// The span the chunk belongs to.
    tag: usize,
}

/// The bounce buffers of the readers of one file, made when first needed,
/// and the bytes copied out of them.
pub(super) struct Bounces {
    bufs: Vec<Option<AlignedBuf>>,
    copied: AtomicU64,
}

impl Bounces {
    pub(super) fn new() -> Bounces {
        Bounces {
            bufs: (0..READERS).map(|_| None).collect(),
            copied: AtomicU64::new(0),
        }
    }

    /// Bytes of destinations filled by a copy out of a bounce buffer
    /// rather than read straight into place.
    pub(super) fn copied(&self) -> u64 {
        self.copied.load(Ordering::Relaxed)
    }
}

fn short() -> std::io::Error {
    std::io::Error::from(std::io::ErrorKind::UnexpectedEof)
}

/// A failed read: the tag of its span, and the error.
pub(super) type SpanError = (usize, std::io::Error);

/// Reads `dst.len()` bytes at file offset `at` with direct I/O, the chunks
/// on up to [`READERS`] threads. A read ending inside the file's last,
/// partial block is fine; one past the end of the file is an end-of-file
/// error.
pub(super) fn direct_read(
    file: &File,
    a: DioAlign,
    bounces: &mut Bounces,
    at: u64,
    dst: &mut [u8],
) -> std::io::Result<()> {
    direct_read_many(file, a, bounces, vec![(at, dst)]).map_err(|(_, e)| e)
}

/// Reads each span `(at, dst)` of `spans` as [`direct_read`] does, the
/// chunks of all of them in one pass over up to [`READERS`] threads, so
/// that small tensors in a row keep as many reads in flight as one large
/// one. An error carries the index of its span in `spans`.
pub(super) fn direct_read_many(
    file: &File,
    a: DioAlign,
    bounces: &mut Bounces,
    spans: Vec<(u64, &mut [u8])>,
) -> std::result::Result<(), SpanError> {
    let mut jobs = Vec::new();
    for (tag, (at, dst)) in spans.into_iter().enumerate() {
        cut(a, at, dst, tag, &mut jobs);
    }
    run(file, a, bounces, jobs)
}

/// Cuts the span of `dst.len()` bytes at `at` into jobs.
fn cut<'d>(a: DioAlign, at: u64, dst: &'d mut [u8], tag: usize, jobs: &mut Vec<Job<'d>>) {
    let b = a.offset as u64;
    let end = at + dst.len() as u64;
    // Straight into `dst` when its addresses agree with the file offsets
    // modulo the memory alignment (the same for every chunk).
    let congruent =
        (dst.as_ptr() as usize).wrapping_sub(at as usize) % a.memory == 0 && a.memory <= a.offset;
    let mut cuts = vec![at];
    let head_end = at.next_multiple_of(b).min(end);
    if head_end > at {
        cuts.push(head_end);
    }
    let mut c = at.next_multiple_of(CHUNK as u64);
    while c < end {
        cuts.push(c);
        c += CHUNK as u64;
    }
    let tail_lo = end & !(b - 1);
    if tail_lo > at {
        cuts.push(tail_lo);
    }
    cuts.push(end);
    cuts.sort_unstable();
    cuts.dedup();
    let mut rest = dst;
    for w in cuts.windows(2) {
        let (lo, hi) = (w[0], w[1]);
        let (d, r) = rest.split_at_mut((hi - lo) as usize);
        rest = r;
        let whole = lo % b == 0 && hi % b == 0;
        let blk = lo & !(b - 1);
        // A bounced chunk spans at most CHUNK bytes (a cut every CHUNK) and
        // the blocks at its ends: the bounce buffers hold CHUNK + 2 blocks.
        jobs.push(Job {
            at: blk,
            skip: (lo - blk) as usize,
            need: d.len(),
            dst: d,
            direct: congruent && whole,
            tag,
        });
    }
}

/// Reads `jobs`, on up to [`READERS`] threads when there are several.
/// Each reader takes the next job in file order when it is free (reads
/// take unequal times); after a failure the others stop at their next job.
fn run(
    file: &File,
    a: DioAlign,
    bounces: &mut Bounces,
    jobs: Vec<Job>,
) -> std::result::Result<(), SpanError> {
    let Bounces { bufs, copied } = bounces;
    let copied = &*copied;
    let n = jobs.len().min(bufs.len()).max(1);
    if n == 1 {
        let bounce = &mut bufs[0];
        return jobs.into_iter().try_for_each(|j| {
            let tag = j.tag;
            read_job(file, a, bounce, copied, j).map_err(|e| (tag, e))
        });
    }
    let queue = Mutex::new(jobs.into_iter());
    let failed = AtomicBool::new(false);
    let reader = |bounce: &mut Option<AlignedBuf>| -> std::result::Result<(), SpanError> {
        loop {
            if failed.load(Ordering::Relaxed) {
                return Ok(());
            }
            // A poisoned lock means another reader panicked: that reader's
            // join reports it.
            let Some(j) = queue.lock().ok().and_then(|mut q| q.next()) else {
                return Ok(());
            };
            let tag = j.tag;
            if let Err(e) = read_job(file, a, bounce, copied, j) {
                failed.store(true, Ordering::Relaxed);
                return Err((tag, e));
            }
        }
    };
    let reader = &reader;
    std::thread::scope(|s| {
        let handles: Vec<_> = bufs[..n]
            .iter_mut()
            .map(|bounce| s.spawn(move || reader(bounce)))
            .collect();
        let mut first = Ok(());
        for h in handles {
            let r = h
                .join()
                .unwrap_or_else(|_| Err((0, std::io::Error::other("a direct reader panicked"))));
            if first.is_ok() {
                first = r;
            }
        }
        first
    })
}

/// One chunk: straight into its destination, or through `bounce`.
fn read_job(
    file: &File,
    a: DioAlign,
    bounce: &mut Option<AlignedBuf>,
    copied: &AtomicU64,
    j: Job,
) -> std::io::Result<()> {
    if j.direct {
        return if j.need > 0 && read_at_most(file, j.dst, j.at)? < j.need {
            Err(short())
        } else {
            Ok(())
        };
    }
    let buf = match bounce {
        Some(b) => b,
        slot => slot.insert(
            AlignedBuf::new(CHUNK + 2 * a.offset, a.memory.max(a.offset))
                .map_err(|e| std::io::Error::other(e.to_string()))?,
        ),
    }
    .as_mut_slice();
    let need = j.skip + j.need;
    let span = need.next_multiple_of(a.offset);
    if span > buf.len() {
        return Err(std::io::Error::other(format!(
            "a bounced direct read of {span} bytes exceeds its buffer of {}",
            buf.len()
        )));
    }
    if read_at_most(file, &mut buf[..span], j.at)? < need {
        return Err(short());
    }
    let len = j.dst.len();
    j.dst.copy_from_slice(&buf[j.skip..j.skip + len]);
    copied.fetch_add(len as u64, Ordering::Relaxed);
    Ok(())
}

/// Reads each span `(at, dst, need)` of `spans`: `dst` (aligned to
/// `a.memory`, a whole number of blocks) from `at` (a multiple of the block
/// size) with direct I/O; the file may end inside `dst`, but not before its
/// first `need` bytes. The chunks of all the spans are read in one pass on
/// up to [`READERS`] threads. Used for the widened spans read straight into
/// staging buffers; an error carries the index of its span.
pub(super) fn direct_read_blocks(
    file: &File,
    a: DioAlign,
    bounces: &mut Bounces,
    spans: Vec<(u64, &mut [u8], usize)>,
) -> std::result::Result<(), SpanError> {
    let mut jobs = Vec::new();
    for (tag, (at, dst, need)) in spans.into_iter().enumerate() {
        let mut off = 0usize;
        for d in dst.chunks_mut(CHUNK) {
            let n = d.len();
            jobs.push(Job {
                at: at + off as u64,
                skip: 0,
                // Chunks past the file's end read nothing: only the bytes
                // needed must be there.
                need: need.saturating_sub(off).min(n),
                dst: d,
                direct: true,
                tag,
            });
            off += n;
        }
    }
    run(file, a, bounces, jobs)
}
