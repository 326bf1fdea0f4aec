//! Reading tensor data from the files: plain buffered reads, or direct I/O
//! (`O_DIRECT`, for `LoadMode::Dio`) that bypasses the page cache.
//!
//! Direct reads must start and end on the file system's block size (its
//! `st_blksize`) and land in memory aligned as the file system asks
//! (`statx`'s `dio_mem_align` where the kernel reports it, else the block
//! size). Tensor data starts and ends anywhere, so a read is widened to
//! whole blocks:
//!
//! * into a staging buffer of an upload ([`Reader::read_spans`]), the
//!   widened span is read straight into the aligned staging memory and the
//!   copy to the device starts past the leading padding; the pieces of
//!   several staging buffers are read at once;
//! * into a destination of its own ([`Reader::read`], CPU buffers), the
//!   whole blocks inside the tensor are read straight into the destination
//!   when its address is aligned like the file offset, and the partial
//!   blocks at either end go through a bounce buffer; otherwise all of the
//!   data goes through bounce buffers.
//!
//! Either way the span is read in chunks by a few threads at once (see
//! [`super::direct`]): direct I/O has no read-ahead to keep the disk busy.
//!
//! A file system that refuses `O_DIRECT` (at open, or with `EINVAL` on a
//! read) makes that file fall back to buffered reads, with a warning.

use std::alloc::Layout;
use std::io::{Read, Seek, SeekFrom};

use super::direct::{direct_read, direct_read_blocks, direct_read_many, Bounces};
use super::*;

/// Heap memory aligned to a power of two, for direct reads.
pub(super) struct AlignedBuf {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: the buffer owns its memory exclusively, like a Vec<u8>.
unsafe impl Send for AlignedBuf {}

impl AlignedBuf {
    /// `len` zeroed bytes (at least 1) aligned to `align` (a power of two).
    pub(super) fn new(len: usize, align: usize) -> Result<AlignedBuf> {
        let layout = Layout::from_size_align(len.max(1), align.max(1)).map_err(|e| {
            LlamaError::InvalidParam(format!("direct I/O buffer of {len} bytes: {e}"))
        })?;
        // SAFETY: the layout has a non-zero size.
        let Some(ptr) = NonNull::new(unsafe { std::alloc::alloc_zeroed(layout) }) else {
            std::alloc::handle_alloc_error(layout)
        };
        Ok(AlignedBuf { ptr, layout })
    }

    /// Bytes of the buffer.
    pub(super) fn capacity(&self) -> usize {
        self.layout.size()
    }

    pub(super) fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: the allocation holds `layout.size()` initialised bytes,
        // borrowed exclusively through `self`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.layout.size()) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

/// The alignments direct I/O on a file asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct DioAlign {
    /// File offsets and lengths: the file system's block size.
    pub(super) offset: usize,
    /// Memory addresses.
    pub(super) memory: usize,
}

/// One open file: its offset after the last buffered read, and for direct
/// I/O its alignments and bounce buffer.
struct Handle {
    file: File,
    pos: u64,
    len: u64,
    dio: Option<(DioAlign, Bounces)>,
}

/// Reads tensor data, one handle per file, opened when first needed.
pub(super) struct Reader<'f> {
    files: &'f GgufModel,
    direct: bool,
    refuse_direct: bool,
    handles: Vec<Option<Handle>>,
    /// Bytes copied out of the bounce buffers of handles since fallen
    /// back to buffered reads.
    bounced_before: u64,
}

fn is_unsupported(e: &std::io::Error) -> bool {
    #[cfg(unix)]
    {
        e.raw_os_error() == Some(libc::EINVAL)
    }
    #[cfg(not(unix))]
    {
        let _ = e;
        false
    }
}

/// Opens `path` with `O_DIRECT` and finds its alignments.
#[cfg(target_os = "linux")]
fn open_direct(path: &Path) -> std::io::Result<(File, DioAlign)> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)?;
    let block = usize::try_from(file.metadata()?.blksize())
        .ok()
        .filter(|b| b.is_power_of_two())
        .unwrap_or(4096);
    // SAFETY: statx is a plain C struct of integers, valid when zeroed.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: statx fills `stx`, a valid struct, for the open descriptor
    // (an empty path with AT_EMPTY_PATH names the descriptor itself).
    let rc = unsafe {
        libc::statx(
            file.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_DIOALIGN,
            &mut stx,
        )
    };
    let memory = if rc == 0 && stx.stx_mask & libc::STATX_DIOALIGN != 0 {
        (stx.stx_dio_mem_align as usize).clamp(1, block)
    } else {
        block
    };
    let memory = if memory.is_power_of_two() {
        memory
    } else {
        block
    };
    Ok((
        file,
        DioAlign {
            offset: block,
            memory,
        },
    ))
}

#[cfg(not(target_os = "linux"))]
fn open_direct(_path: &Path) -> std::io::Result<(File, DioAlign)> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "direct I/O is only implemented on Linux",
    ))
}

/// Reads at `at` until `buf` is full or the file ends; the bytes read.
pub(super) fn read_at_most(file: &File, buf: &mut [u8], at: u64) -> std::io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        #[cfg(unix)]
        let n = std::os::unix::fs::FileExt::read_at(file, &mut buf[done..], at + done as u64);
        #[cfg(not(unix))]
        let n = {
            let mut f = file;
            f.seek(SeekFrom::Start(at + done as u64))
                .and_then(|_| f.read(&mut buf[done..]))
        };
        match n {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

impl<'f> Reader<'f> {
    /// A reader of `files`, with direct I/O when `direct`; `refuse_direct`
    /// acts as a file system that refuses it.
    pub(super) fn new(files: &'f GgufModel, direct: bool, refuse_direct: bool) -> Reader<'f> {
        Reader {
            files,
            direct,
            refuse_direct,
            handles: (0..files.files().len()).map(|_| None).collect(),
            bounced_before: 0,
        }
    }

    /// File `fi` is read with direct I/O (opened already, and not fallen
    /// back to buffered reads).
    pub(super) fn is_direct(&self, fi: usize) -> bool {
        self.handles
            .get(fi)
            .is_some_and(|h| h.as_ref().is_some_and(|h| h.dio.is_some()))
    }

    fn path(&self, fi: usize) -> Result<&'f Path> {
        self.files.files()[fi].path().ok_or_else(|| {
            LlamaError::InvalidParam(format!(
                "split file {fi} has no path to read tensor data from"
            ))
        })
    }

    /// Opens file `fi` if not yet open.
    fn handle(&mut self, fi: usize) -> Result<&mut Handle> {
        if self.handles[fi].is_none() {
            let path = self.path(fi)?;
            let io = |source| LlamaError::Io {
                path: path.display().to_string(),
                source,
            };
            let direct = if !self.direct {
                None
            } else if self.refuse_direct {
                Some(Err(std::io::Error::from_raw_os_error(22)))
            } else {
                Some(open_direct(path))
            };
            let (file, dio) = match direct {
                Some(Ok((f, a))) => {
                    crate::debug!(
                        "load_tensors: direct I/O on {}: blocks of {} bytes, memory aligned to {}",
                        path.display(),
                        a.offset,
                        a.memory
                    );
                    (f, Some((a, Bounces::new())))
                }
                other => {
                    if let Some(Err(e)) = other {
                        crate::warn!(
                            "warning: load_tensors: direct I/O refused for {} ({e}): \
                             falling back to buffered reads",
                            path.display()
                        );
                    }
                    let f = File::open(path).map_err(io)?;
                    advise_sequential(&f);
                    (f, None)
                }
            };
            let len = file.metadata().map_err(io)?.len();
            self.handles[fi] = Some(Handle {
                file,
                pos: u64::MAX,
                len,
                dio,
            });
        }
        Ok(self.handles[fi].as_mut().expect("opened above"))
    }

    /// Opens every file now, so that a fall-back is reported before any
    /// data moves; the largest alignment direct reads ask for (1 when
    /// every file is read buffered).
    pub(super) fn open_all(&mut self) -> Result<DioAlign> {
        let mut align = DioAlign {
            offset: 1,
            memory: 1,
        };
        for fi in 0..self.handles.len() {
            if let Some((a, _)) = self.handle(fi)?.dio {
                align.offset = align.offset.max(a.offset);
                align.memory = align.memory.max(a.memory);
            }
        }
        Ok(align)
    }

    /// Bytes of direct reads that were copied out of a bounce buffer
    /// rather than read straight into place.
    pub(super) fn bounced(&self) -> u64 {
        self.bounced_before
            + self
                .handles
                .iter()
                .flatten()
                .filter_map(|h| h.dio.as_ref().map(|(_, b)| b.copied()))
                .sum::<u64>()
    }

    /// Switches file `fi` to buffered reads after a refused direct read.
    fn fall_back(&mut self, fi: usize, e: &std::io::Error) -> Result<()> {
        let path = self.path(fi)?;
        crate::warn!(
            "warning: load_tensors: direct read of {} refused ({e}): falling back to buffered reads",
            path.display()
        );
        let f = File::open(path).map_err(|source| LlamaError::Io {
            path: path.display().to_string(),
            source,
        })?;
        advise_sequential(&f);
        self.bounced_before += self.handles[fi]
            .as_ref()
            .and_then(|h| h.dio.as_ref())
            .map_or(0, |(_, b)| b.copied());
        let h = self.handles[fi].as_mut().expect("open");
        h.file = f;
        h.pos = u64::MAX;
        h.dio = None;
        Ok(())
    }

    fn io_err(&self, r: &WeightRequest, e: std::io::Error) -> LlamaError {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            return bounds_err(&r.desc.name);
        }
        let path = self
            .files
            .files()
            .get(r.file)
            .and_then(|f| f.path())
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        tensor_err(&r.desc.name, &format!("reading {path}"), e)
    }

    /// Reads `dst.len()` bytes of request `r`'s data from byte `start` of it.
    pub(super) fn read(&mut self, r: &WeightRequest, start: usize, dst: &mut [u8]) -> Result<()> {
        let at = r.file_offset + start as u64;
        let h = self.handle(r.file)?;
        if at + dst.len() as u64 > h.len {
            return Err(bounds_err(&r.desc.name));
        }
        let res = match &mut h.dio {
            Some((align, bounces)) => direct_read(&h.file, *align, bounces, at, dst),
            None => {
                let res = (|| {
                    if h.pos != at {
                        h.pos = u64::MAX;
                        h.file.seek(SeekFrom::Start(at))?;
                    }
                    h.file.read_exact(dst)?;
                    h.pos = at + dst.len() as u64;
                    Ok(())
                })();
                if res.is_err() {
                    h.pos = u64::MAX;
                }
                return res.map_err(|e| self.io_err(r, e));
            }
        };
        match res {
            Ok(()) => Ok(()),
            Err(e) if is_unsupported(&e) => {
                self.fall_back(r.file, &e)?;
                self.read(r, start, dst)
            }
            Err(e) => Err(self.io_err(r, e)),
        }
    }

    /// Reads several pieces `(request, start, dst)` of requests' data, all
    /// from file `fi`, as [`Reader::read`] does each; with direct I/O the
    /// chunks of all of them are read in one pass by several threads.
    pub(super) fn read_many(
        &mut self,
        fi: usize,
        items: &mut [(&WeightRequest, usize, &mut [u8])],
    ) -> Result<()> {
        let h = self.handle(fi)?;
        for (r, start, dst) in items.iter() {
            if r.file != fi {
                return Err(tensor_err(&r.desc.name, "read", "not in the file read"));
            }
            if r.file_offset + (start + dst.len()) as u64 > h.len {
                return Err(bounds_err(&r.desc.name));
            }
        }
        let res = match &mut h.dio {
            Some((a, bounces)) => {
                let spans = items
                    .iter_mut()
                    .map(|(r, start, dst)| (r.file_offset + *start as u64, &mut **dst))
                    .collect();
                direct_read_many(&h.file, *a, bounces, spans)
            }
            None => Ok(()),
        };
        match res {
            Ok(()) if self.is_direct(fi) => Ok(()),
            Err((k, e)) if !is_unsupported(&e) => Err(self.io_err(items[k].0, e)),
            // Buffered reads, or the fall-back after a refused direct read.
            other => {
                if let Err((_, e)) = other {
                    self.fall_back(fi, &e)?;
                }
                for (r, start, dst) in items.iter_mut() {
                    self.read(r, *start, dst)?;
                }
                Ok(())
            }
        }
    }

    /// Reads pieces `(request, start, len, buf)` of requests' data, all
    /// from file `fi`, into staging buffers `buf` with room for the data
    /// widened to whole blocks plus one alignment of slack: with direct I/O,
    /// the widened spans go straight into the buffers, read in one pass by
    /// several threads. Returns where in each `buf` its data starts.
    pub(super) fn read_spans(
        &mut self,
        fi: usize,
        items: &mut [(&WeightRequest, usize, usize, &mut [u8])],
    ) -> Result<Vec<usize>> {
        let h = self.handle(fi)?;
        for (r, start, len, _) in items.iter() {
            if r.file != fi {
                return Err(tensor_err(&r.desc.name, "read", "not in the file read"));
            }
            if r.file_offset + (start + len) as u64 > h.len {
                return Err(bounds_err(&r.desc.name));
            }
        }
        let res = match &mut h.dio {
            Some((a, bounces)) => {
                let a = *a;
                let mut froms = Vec::with_capacity(items.len());
                let mut spans = Vec::with_capacity(items.len());
                for (r, start, len, buf) in items.iter_mut() {
                    let at = r.file_offset + *start as u64;
                    let lo = at & !(a.offset as u64 - 1);
                    let head = (at - lo) as usize;
                    let span = (head + *len).next_multiple_of(a.offset);
                    let skip = buf.as_ptr().align_offset(a.memory);
                    if skip.saturating_add(span) > buf.len() {
                        return Err(tensor_err(
                            &r.desc.name,
                            "staging buffer",
                            format!("{} bytes cannot hold a direct read of {span}", buf.len()),
                        ));
                    }
                    froms.push(skip + head);
                    spans.push((lo, &mut buf[skip..skip + span], head + *len));
                }
                direct_read_blocks(&h.file, a, bounces, spans).map(|()| froms)
            }
            None => Err((0, std::io::Error::from(std::io::ErrorKind::Unsupported))),
        };
        match res {
            Ok(froms) => Ok(froms),
            Err((k, e)) if self.is_direct(fi) && !is_unsupported(&e) => {
                Err(self.io_err(items[k].0, e))
            }
            // Buffered reads, or the fall-back after a refused direct read.
            Err((_, e)) => {
                if self.is_direct(fi) {
                    self.fall_back(fi, &e)?;
                }
                for (r, start, len, buf) in items.iter_mut() {
                    self.read(r, *start, &mut buf[..*len])?;
                }
                Ok(vec![0; items.len()])
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::direct::CHUNK;
    use super::*;

    /// Reads of every shape (inside one block, across blocks, ending at the
    /// end of the file, into aligned and misaligned memory) return the
    /// file's bytes; reading past the end is an end-of-file error.
    /// Spans of several chunks are read by several threads at once.
    fn check_reads(file: &File, a: DioAlign, bytes: &[u8]) {
        let mut bounce = Bounces::new();
        let mut dst = AlignedBuf::new(bytes.len() + 8192, 4096).unwrap();
        let n = bytes.len() as u64;
        let b = a.offset as u64;
        let cases = [
            (0, 10),
            (3, 100),
            (b - 5, 10),
            (b, 3 * b),
            (7, 5 * b),
            (b + 32, 2 * b + 64),
            (n - 100, 100),
            (n - 3 * b - 7, 3 * b + 7),
            (CHUNK as u64 - 5, 2 * CHUNK as u64 + 10),
            (b, 2 * CHUNK as u64),
            (0, n),
            (1, n - 1),
        ];
        for (at, len) in cases {
            // Destinations congruent with the file offset take the direct
            // path for the middle; the others go through the bounce buffer.
            for shift in [0usize, 1, 32, (at % b) as usize] {
                let d = &mut dst.as_mut_slice()[shift..shift + len as usize];
                d.fill(0xAA);
                direct_read(file, a, &mut bounce, at, d)
                    .unwrap_or_else(|e| panic!("read {at}+{len} into +{shift}: {e}"));
                let want = &bytes[at as usize..(at + len) as usize];
                assert!(d == want, "read {at}+{len} into +{shift} differs");
            }
        }
        let d = &mut dst.as_mut_slice()[..100];
        let e = direct_read(file, a, &mut bounce, n - 50, d).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof);
        // Whole blocks into aligned memory (staging spans), the file ending
        // inside the span: the bytes up to the end are the file's.
        let cap = dst.as_mut_slice().len() / a.offset * a.offset;
        for lo in [0, b, (CHUNK as u64) - b, n & !(b - 1)] {
            let span = ((n - lo) as usize).next_multiple_of(a.offset).min(cap);
            let need = span.min((n - lo) as usize);
            let d = &mut dst.as_mut_slice()[..span];
            d.fill(0xAA);
            direct_read_blocks(file, a, &mut bounce, vec![(lo, &mut *d, need)])
                .unwrap_or_else(|(_, e)| panic!("blocks at {lo}: {e}"));
            assert!(d[..need] == bytes[lo as usize..lo as usize + need]);
            let (_, e) =
                direct_read_blocks(file, a, &mut bounce, vec![(lo, d, need + 1)]).unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof, "at {lo}");
        }
    }

    fn sample_file(name: &str) -> (std::path::PathBuf, Vec<u8>) {
        let dir = test_support::scratch_dir("llama", name);
        let p = dir.join("data.bin");
        // Several chunks of the parallel readers, and a partial block.
        let len = 3 * CHUNK as u32 + 5 * 4096 * 7 + 1234;
        let bytes: Vec<u8> = (0..len)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        std::fs::write(&p, &bytes).unwrap();
        (p, bytes)
    }

    #[test]
    fn widened_reads_return_the_exact_bytes() {
        let (p, bytes) = sample_file("dio-shapes");
        // The splitting into blocks, on a plain file with a block size of
        // 4096 and 512 assumed: any file system can run it.
        let f = File::open(&p).unwrap();
        for (offset, memory) in [(4096, 512), (4096, 4096), (512, 512)] {
            check_reads(&f, DioAlign { offset, memory }, &bytes);
        }
        // The same with O_DIRECT, where the file system allows it.
        match open_direct(&p) {
            Ok((f, a)) => {
                assert!(a.offset.is_power_of_two() && a.memory.is_power_of_two());
                assert!(a.memory <= a.offset, "{a:?}");
                check_reads(&f, a, &bytes);
            }
            Err(e) => eprintln!("O_DIRECT refused here ({e}): only the plain file was read"),
        }
    }

    /// Consecutive spans of unequal sizes and alignments (tensors in a
    /// row), read in one pass by several threads, give the file's bytes;
    /// a span past the end fails with its own index.
    #[test]
    fn batches_of_spans_return_the_exact_bytes() {
        let (p, bytes) = sample_file("dio-batches");
        let n = bytes.len();
        let plain = File::open(&p).unwrap();
        let direct = open_direct(&p).ok();
        let mut cfgs = vec![(
            &plain,
            DioAlign {
                offset: 4096,
                memory: 512,
            },
        )];
        if let Some((f, a)) = &direct {
            cfgs.push((f, *a));
        }
        let mut dst = AlignedBuf::new(n + 64 * 64, 4096).unwrap();
        for (file, a) in cfgs {
            let mut bounces = Bounces::new();
            // Sizes cycle through small, odd and multi-chunk spans; the
            // gap between destinations shifts their alignment.
            let sizes = [
                32usize,
                4096,
                5000,
                3 * 4096 + 7,
                CHUNK + 100,
                96,
                CHUNK - 32,
            ];
            let (mut at, mut out, mut k) = (5usize, 0usize, 0usize);
            let mut want = Vec::new();
            let mut spans = Vec::new();
            let mut rest = dst.as_mut_slice();
            while at < n {
                let len = sizes[k % sizes.len()].min(n - at);
                let gap = [0, 32, 64, 1][k % 4];
                let (_, r) = rest.split_at_mut(gap);
                let (d, r) = r.split_at_mut(len);
                rest = r;
                d.fill(0xAA);
                want.push((at, len, out + gap));
                spans.push((at as u64, d));
                out += gap + len;
                at += len;
                k += 1;
            }
            direct_read_many(file, a, &mut bounces, spans).unwrap();
            let got = dst.as_mut_slice();
            for (at, len, o) in want {
                assert!(
                    got[o..o + len] == bytes[at..at + len],
                    "span {at}+{len} ({a:?})"
                );
            }
            let (d1, d2) = dst.as_mut_slice().split_at_mut(8192);
            let spans = vec![(0u64, &mut d1[..100]), ((n - 10) as u64, &mut d2[..20])];
            let (k, e) = direct_read_many(file, a, &mut bounces, spans).unwrap_err();
            assert_eq!((k, e.kind()), (1, std::io::ErrorKind::UnexpectedEof));
        }
    }

    #[test]
    fn aligned_buffers_are_aligned() {
        for align in [1, 512, 4096, 65536] {
            let mut b = AlignedBuf::new(1000, align).unwrap();
            assert_eq!(b.as_mut_slice().as_ptr() as usize % align, 0);
            assert_eq!(b.as_mut_slice().len(), 1000);
        }
        assert!(AlignedBuf::new(10, 3).is_err());
    }
}
