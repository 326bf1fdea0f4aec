//! Byte sources the parser reads from: a mapped file (slice) or any
//! `Read + Seek` stream.

use std::io::{self, Read, Seek, SeekFrom};

/// Size of the stream buffer's reads.
const STREAM_CHUNK: usize = 64 * 1024;

/// A sequential byte source of known length.
pub(crate) trait Input {
    /// Absolute position of the next byte.
    fn pos(&self) -> u64;
    /// Total length.
    fn len(&self) -> u64;
    /// The next `n` bytes. Callers check `n <= len() - pos()` first, so a
    /// source never buffers more than the file holds.
    fn take(&mut self, n: usize) -> io::Result<&[u8]>;
    /// All unread bytes, when the whole input is in memory (fast paths).
    fn rest(&self) -> Option<&[u8]> {
        None
    }
}

/// Reads from memory (a mapped file).
pub(crate) struct SliceInput<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> SliceInput<'a> {
    pub(crate) fn new(data: &'a [u8]) -> SliceInput<'a> {
        SliceInput { data, pos: 0 }
    }
}

impl Input for SliceInput<'_> {
    fn pos(&self) -> u64 {
        self.pos as u64
    }

    fn len(&self) -> u64 {
        self.data.len() as u64
    }

    #[inline]
    fn take(&mut self, n: usize) -> io::Result<&[u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.data.len());
        match end {
            Some(end) => {
                let s = &self.data[self.pos..end];
                self.pos = end;
                Ok(s)
            }
            None => Err(io::ErrorKind::UnexpectedEof.into()),
        }
    }

    fn rest(&self) -> Option<&[u8]> {
        self.data.get(self.pos..)
    }
}

/// Reads from a stream through a buffer, from stream position 0.
pub(crate) struct StreamInput<R> {
    inner: R,
    buf: Vec<u8>,
    head: usize,
    filled: usize,
    pos: u64,
    len: u64,
}

impl<R: Read + Seek> StreamInput<R> {
    pub(crate) fn new(mut inner: R) -> io::Result<StreamInput<R>> {
        let len = inner.seek(SeekFrom::End(0))?;
        inner.seek(SeekFrom::Start(0))?;
        Ok(StreamInput {
            inner,
            buf: Vec::new(),
            head: 0,
            filled: 0,
            pos: 0,
            len,
        })
    }
}

impl<R: Read> Input for StreamInput<R> {
    fn pos(&self) -> u64 {
        self.pos
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn take(&mut self, n: usize) -> io::Result<&[u8]> {
        if self.filled - self.head < n {
            self.buf.copy_within(self.head..self.filled, 0);
            self.filled -= self.head;
            self.head = 0;
            let remaining = usize::try_from(self.len - self.pos).unwrap_or(usize::MAX);
            let want = n.max(STREAM_CHUNK.min(remaining));
            if self.buf.len() < want {
                self.buf.resize(want, 0);
            }
            while self.filled < n {
                let k = self.inner.read(&mut self.buf[self.filled..])?;
                if k == 0 {
                    return Err(io::ErrorKind::UnexpectedEof.into());
                }
                self.filled += k;
            }
        }
        let s = &self.buf[self.head..self.head + n];
        self.head += n;
        self.pos += n as u64;
        Ok(s)
    }
}
