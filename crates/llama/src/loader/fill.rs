//! The second phase of loading: the data of every request, in file order,
//! by the route its buffer took (used in place, read into host memory,
//! uploaded synchronously or through the staging ring).

use super::read::AlignedBuf;
use super::*;

/// What moves the data: the source files, progress, statistics and the
/// validation of `check_tensors`.
pub(super) struct Fill<'a> {
    pub(super) files: &'a GgufModel,
    pub(super) reqs: &'a [WeightRequest],
    pub(super) opts: &'a LoadOptions,
    /// Copies come from the file mappings (else from reads).
    pub(super) mmap: bool,
    pub(super) progress: Progress<'a>,
    pub(super) stats: LoadStats,
    pub(super) reader: Reader<'a>,
    pub(super) checks: Checks<'a>,
    /// Direct reads into host memory not yet made: pieces `(request,
    /// start, destination)` of consecutive requests of one file, read in
    /// one pass once they add up to [`DIRECT_PIECE_SIZE`] (or another
    /// route or file comes).
    pub(super) batch: Vec<BatchItem<'a>>,
    /// Direct reads into staging buffers not yet made: pieces of
    /// consecutive requests of one file and one uploader, each in a
    /// staging buffer of its own, read at once when half the ring is
    /// taken (or another route or file comes), then queued for upload.
    pub(super) staged: Vec<StagedItem>,
    /// Room a staging buffer of direct reads needs past its data.
    pub(super) slack: usize,
}

/// A piece of an upload read with direct I/O, waiting in `staged`.
pub(super) struct StagedItem {
    req: usize,
    /// Where the piece starts in the request's data, and its bytes.
    start: usize,
    len: usize,
    /// The uploader, and its staging buffer that the piece takes.
    uploader: usize,
    slot: usize,
    /// Where the piece goes.
    dst: Placement,
}

/// A piece of a direct read into host memory, waiting in the batch.
pub(super) struct BatchItem<'a> {
    req: usize,
    /// Where the piece starts in the request's data.
    start: usize,
    dst: &'a mut [u8],
    /// The request's first byte in its host buffer.
    base: NonNull<u8>,
}

impl<'a> Fill<'a> {
    /// The mapped bytes of request `i`, when copies come from the mapping.
    fn mapped(&self, i: usize) -> Result<Option<&'a [u8]>> {
        let r = &self.reqs[i];
        if !self.mmap {
            return Ok(None);
        }
        let Some(m) = self.files.files()[r.file].mmap() else {
            return Ok(None);
        };
        let start = r.file_offset as usize;
        m.get(start..start.saturating_add(r.size))
            .map(Some)
            .ok_or_else(|| bounds_err(&r.desc.name))
    }

    /// Loads request `i` into placement `p` by `route`.
    pub(super) fn request(
        &mut self,
        i: usize,
        p: &Placement,
        route: Route,
        uploaders: &mut [Uploader],
    ) -> Result<()> {
        let src = self.mapped(i)?;
        let r = &self.reqs[i];
        let direct = src.is_none() && self.reader.is_direct(r.file);
        match route {
            Route::Host if direct => {
                self.flush_staged(uploaders)?;
                return self.host_direct(i, p);
            }
            Route::Device(u) if direct && matches!(uploaders[u], Uploader::Async(_)) => {
                self.flush_direct()?;
                return self.staged_direct(i, p, u, uploaders);
            }
            _ => {}
        }
        self.flush_direct()?;
        self.flush_staged(uploaders)?;
        match route {
            Route::Mapped => self.mapped_in_place(i, src),
            Route::Host => self.host(i, p, src),
            Route::Device(u) => {
                let r = &self.reqs[i];
                match &mut uploaders[u] {
                    Uploader::Sync {
                        staging,
                        aligned,
                        whole,
                    } => {
                        let whole = *whole;
                        self.upload_sync(i, p, src, (staging, aligned), whole)?;
                        if whole {
                            self.stats.bytes_repacked += r.size as u64;
                        } else {
                            self.stats.bytes_uploaded += r.size as u64;
                        }
                    }
                    Uploader::Async(ring) => {
                        match src {
                            Some(m) => self.upload_async_mapped(i, p, m, ring)?,
                            None => self.upload_async_read(i, p, ring)?,
                        }
                        self.stats.bytes_uploaded += r.size as u64;
                        self.stats.bytes_uploaded_async += r.size as u64;
                    }
                }
                if let (true, Some(m)) = (self.checks.on, src) {
                    self.checks.push(self.reqs, i, m)?;
                }
                Ok(())
            }
        }
    }

    /// A tensor used in place from the mapping: only checked and counted.
    fn mapped_in_place(&mut self, i: usize, src: Option<&'a [u8]>) -> Result<()> {
        let r = &self.reqs[i];
        let data = src.ok_or_else(|| bounds_err(&r.desc.name))?;
        self.checks.push(self.reqs, i, data)?;
        self.stats.bytes_mapped += r.size as u64;
        self.progress.advance(r.size as u64)
    }

    /// A tensor read with direct I/O into host memory: its pieces join the
    /// batch, read once it is large enough.
    fn host_direct(&mut self, i: usize, p: &Placement) -> Result<()> {
        let r = &self.reqs[i];
        if self
            .batch
            .first()
            .is_some_and(|b| self.reqs[b.req].file != r.file)
        {
            self.flush_direct()?;
        }
        let base = self.host_base(i, p)?;
        for (s, n) in pieces(&r.desc, r.size, DIRECT_PIECE_SIZE) {
            // SAFETY: as in `host`; the pieces of a tensor are disjoint.
            let d: &'a mut [u8] =
                unsafe { std::slice::from_raw_parts_mut(base.as_ptr().add(s), n) };
            self.batch.push(BatchItem {
                req: i,
                start: s,
                dst: d,
                base,
            });
            let queued: usize = self.batch.iter().map(|b| b.dst.len()).sum();
            if queued >= DIRECT_PIECE_SIZE {
                self.flush_direct()?;
            }
        }
        Ok(())
    }

    /// Reads the batch of direct reads, then counts, reports and checks
    /// what it finished.
    pub(super) fn flush_direct(&mut self) -> Result<()> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let mut batch = std::mem::take(&mut self.batch);
        let fi = self.reqs[batch[0].req].file;
        let mut items: Vec<(&WeightRequest, usize, &mut [u8])> = batch
            .iter_mut()
            .map(|b| (&self.reqs[b.req], b.start, &mut *b.dst))
            .collect();
        self.reader.read_many(fi, &mut items)?;
        drop(items);
        for b in batch {
            let r = &self.reqs[b.req];
            let n = b.dst.len();
            self.progress.advance(n as u64)?;
            self.stats.bytes_read += n as u64;
            if b.start + n == r.size && self.checks.on {
                // SAFETY: the whole tensor has been read (its pieces are
                // read in order, and this was its last); no piece of it is
                // used any longer, and it lies in a live host buffer.
                let whole = unsafe { std::slice::from_raw_parts(b.base.as_ptr(), r.size) };
                self.checks.push(self.reqs, b.req, whole)?;
            }
        }
        Ok(())
    }

    /// The first byte of request `i` in host buffer placement `p`, whose
    /// `size` bytes from there lie inside the buffer.
    fn host_base(&self, i: usize, p: &Placement) -> Result<NonNull<u8>> {
        let r = &self.reqs[i];
        let name = &r.desc.name;
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
        // SAFETY: the offset lies inside the buffer (checked above).
        Ok(unsafe { base.add(p.offset) })
    }

    /// A tensor written in place in host memory: copied from the mapping
    /// or read.
    fn host(&mut self, i: usize, p: &Placement, src: Option<&'a [u8]>) -> Result<()> {
        let r = &self.reqs[i];
        let base = self.host_base(i, p)?;
        // SAFETY: the range lies inside a host buffer that was allocated for
        // these weights (checked by `host_base`), that the caller keeps
        // alive until loading ends, and that nothing else reads or writes
        // while it is being filled; tensors of a buffer do not overlap.
        let dst: &'a mut [u8] = unsafe { std::slice::from_raw_parts_mut(base.as_ptr(), r.size) };
        for (s, n) in pieces(&r.desc, r.size, self.opts.piece_size) {
            match src {
                Some(m) => copy_parallel(&mut dst[s..s + n], &m[s..s + n]),
                None => self.reader.read(r, s, &mut dst[s..s + n])?,
            }
            self.progress.advance(n as u64)?;
        }
        self.stats.bytes_read += r.size as u64;
        self.checks.push(self.reqs, i, dst)
    }

    /// `set_tensor` piece by piece (or the whole tensor at once when
    /// `whole`), from the mapping or read into `staging`.
    fn upload_sync(
        &mut self,
        i: usize,
        p: &Placement,
        src: Option<&[u8]>,
        (staging, aligned): (&mut Vec<u8>, &mut Option<AlignedBuf>),
        whole: bool,
    ) -> Result<()> {
        let reqs = self.reqs;
        let r = &reqs[i];
        let piece = if whole {
            r.size.max(1)
        } else {
            self.opts.piece_size
        };
        for (s, n) in pieces(&r.desc, r.size, piece) {
            let data: &[u8] = match src {
                Some(m) => &m[s..s + n],
                // Direct reads go straight into aligned staging memory with
                // room for the widening to whole blocks.
                None if self.reader.is_direct(r.file) => {
                    let cap = n + self.slack;
                    if aligned.as_ref().is_none_or(|b| b.capacity() < cap) {
                        *aligned = Some(AlignedBuf::new(cap, MIN_PIECE_SIZE)?);
                    }
                    let buf = aligned.as_mut().expect("made above").as_mut_slice();
                    let from = self
                        .reader
                        .read_spans(r.file, &mut [(r, s, n, &mut *buf)])?[0];
                    &buf[from..from + n]
                }
                None => {
                    staging.resize(n, 0);
                    self.reader.read(r, s, &mut staging[..n])?;
                    &staging[..n]
                }
            };
            if self.checks.on && src.is_none() {
                check_piece(&mut self.checks, self.reqs, i, data, s)?;
            }
            p.buffer
                .set_tensor(p.offset + s, data)
                .map_err(|e| tensor_err(&r.desc.name, "upload", e))?;
            self.progress.advance(n as u64)?;
        }
        Ok(())
    }

    /// Asynchronous upload from the mapping: each piece is copied into the
    /// next free staging buffer and its transfer queued.
    fn upload_async_mapped(
        &mut self,
        i: usize,
        p: &Placement,
        m: &[u8],
        ring: &mut Ring,
    ) -> Result<()> {
        let r = &self.reqs[i];
        let name = &r.desc.name;
        for (s, n) in pieces(&r.desc, r.size, ring.size) {
            let k = ring
                .acquire()
                .map_err(|e| tensor_err(name, "staging buffer", e))?;
            ring.slot_mut(k)[..n].copy_from_slice(&m[s..s + n]);
            ring.submit(k, 0, &at(p, s), n)
                .map_err(|e| tensor_err(name, "upload", e))?;
            self.progress.advance(n as u64)?;
        }
        Ok(())
    }

    /// Asynchronous upload from plain reads: each piece is read into the
    /// next free staging buffer and its transfer queued.
    fn upload_async_read(&mut self, i: usize, p: &Placement, ring: &mut Ring) -> Result<()> {
        let r = &self.reqs[i];
        let name = &r.desc.name;
        for (s, n) in pieces(&r.desc, r.size, ring.size) {
            let k = ring
                .acquire()
                .map_err(|e| tensor_err(name, "staging buffer", e))?;
            let slot = ring.slot_mut(k);
            self.reader.read(r, s, &mut slot[..n])?;
            if self.checks.on {
                check_piece(&mut self.checks, self.reqs, i, &slot[..n], s)?;
            }
            ring.submit(k, 0, &at(p, s), n)
                .map_err(|e| tensor_err(name, "upload", e))?;
            self.progress.advance(n as u64)?;
        }
        Ok(())
    }

    /// Asynchronous upload from direct reads: each piece takes the next
    /// free staging buffer and joins `staged`, read once half the ring is
    /// taken, so that several reads are in flight while the copies of the
    /// other half run.
    fn staged_direct(
        &mut self,
        i: usize,
        p: &Placement,
        u: usize,
        uploaders: &mut [Uploader],
    ) -> Result<()> {
        let reqs = self.reqs;
        let r = &reqs[i];
        if self
            .staged
            .first()
            .is_some_and(|b| b.uploader != u || reqs[b.req].file != r.file)
        {
            self.flush_staged(uploaders)?;
        }
        let Uploader::Async(ring) = &uploaders[u] else {
            return Err(tensor_err(&r.desc.name, "upload", "no staging ring"));
        };
        for (s, n) in pieces(&r.desc, r.size, ring.size) {
            let Uploader::Async(ring) = &mut uploaders[u] else {
                return Err(tensor_err(&r.desc.name, "upload", "no staging ring"));
            };
            let k = ring
                .acquire()
                .map_err(|e| tensor_err(&r.desc.name, "staging buffer", e))?;
            let full = self.staged.len() + 1 >= ring.read_depth();
            self.staged.push(StagedItem {
                req: i,
                start: s,
                len: n,
                uploader: u,
                slot: k,
                dst: at(p, s),
            });
            if full {
                self.flush_staged(uploaders)?;
            }
        }
        self.stats.bytes_uploaded += r.size as u64;
        self.stats.bytes_uploaded_async += r.size as u64;
        Ok(())
    }

    /// Reads the pieces waiting in `staged` into their staging buffers at
    /// once, then checks, queues and reports each in order.
    pub(super) fn flush_staged(&mut self, uploaders: &mut [Uploader]) -> Result<()> {
        if self.staged.is_empty() {
            return Ok(());
        }
        let batch = std::mem::take(&mut self.staged);
        let reqs = self.reqs;
        let first = &reqs[batch[0].req];
        let Uploader::Async(ring) = &mut uploaders[batch[0].uploader] else {
            return Err(tensor_err(&first.desc.name, "upload", "no staging ring"));
        };
        let ks: Vec<usize> = batch.iter().map(|b| b.slot).collect();
        let mut items: Vec<(&WeightRequest, usize, usize, &mut [u8])> = batch
            .iter()
            .zip(ring.slots_mut(&ks))
            .map(|(b, buf)| (&reqs[b.req], b.start, b.len, buf))
            .collect();
        let froms = self.reader.read_spans(first.file, &mut items)?;
        drop(items);
        for (b, from) in batch.iter().zip(froms) {
            let name = &reqs[b.req].desc.name;
            if self.checks.on {
                let data = &ring.slot_mut(b.slot)[from..from + b.len];
                check_piece(&mut self.checks, reqs, b.req, data, b.start)?;
            }
            ring.submit(b.slot, from, &b.dst, b.len)
                .map_err(|e| tensor_err(name, "upload", e))?;
            self.progress.advance(b.len as u64)?;
        }
        Ok(())
    }
}

/// `s` bytes into placement `p`.
fn at(p: &Placement, s: usize) -> Placement {
    Placement {
        buffer: p.buffer.clone(),
        offset: p.offset + s,
    }
}
