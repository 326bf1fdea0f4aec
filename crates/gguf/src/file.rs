//! An opened GGUF file: header, metadata, tensor table and (when mapped)
//! zero-copy access to tensor data.

use std::fs::File;
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::Mmap;

use crate::error::{Error, Result};
use crate::format::{Endian, VERSION};
use crate::index::NameIndex;
use crate::input::{SliceInput, StreamInput};
use crate::metadata::{forward_metadata_getters, Metadata};
use crate::reader::{parse, Parsed, ReadOptions};
use crate::tensor::TensorInfo;
use crate::writer::{GgufWriter, WriteOptions};

/// A parsed and validated GGUF file.
#[derive(Debug)]
pub struct GgufFile {
    path: Option<PathBuf>,
    mmap: Option<Arc<Mmap>>,
    version: u32,
    endian: Endian,
    alignment: u64,
    data_offset: u64,
    file_size: u64,
    metadata: Metadata,
    tensors: Vec<TensorInfo>,
    tensor_index: NameIndex,
}

fn open_file(path: &Path) -> Result<File> {
    File::open(path).map_err(|source| Error::Open {
        path: path.to_path_buf(),
        source,
    })
}

impl GgufFile {
    /// Opens, memory-maps, parses and validates a file (llama.cpp's rules).
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile> {
        GgufFile::open_with(path, &ReadOptions::default())
    }

    /// [`GgufFile::open`] with options.
    pub fn open_with(path: impl AsRef<Path>, opts: &ReadOptions) -> Result<GgufFile> {
        let path = path.as_ref();
        let file = open_file(path)?;
        let len = file.metadata()?.len();
        if len == 0 {
            // Nothing to map; report the missing magic.
            let parsed = parse(SliceInput::new(&[]), opts)?;
            return Ok(GgufFile::from_parsed(
                parsed,
                Some(path.to_path_buf()),
                None,
            ));
        }
        // SAFETY: the map is read-only and private to this process. As with
        // any file mapping, the file must not be truncated or rewritten by
        // someone else while mapped; that is the documented contract of
        // opening model files this way (llama.cpp makes the same assumption).
        let mmap = unsafe { Mmap::map(&file) }?;
        let parsed = parse(SliceInput::new(&mmap), opts)?;
        Ok(GgufFile::from_parsed(
            parsed,
            Some(path.to_path_buf()),
            Some(Arc::new(mmap)),
        ))
    }

    /// Parses and validates from a stream (from its position 0), without a
    /// mapping; read tensor bytes with [`GgufFile::read_tensor_data`].
    pub fn read_from<R: Read + Seek>(reader: R) -> Result<GgufFile> {
        GgufFile::read_from_with(reader, &ReadOptions::default())
    }

    /// [`GgufFile::read_from`] with options.
    pub fn read_from_with<R: Read + Seek>(reader: R, opts: &ReadOptions) -> Result<GgufFile> {
        let parsed = parse(StreamInput::new(reader)?, opts)?;
        Ok(GgufFile::from_parsed(parsed, None, None))
    }

    /// Parses and validates a file held in memory (no mapping, no copy of
    /// the tensor data; tensor bytes are then slices of `bytes`, see
    /// [`GgufFile::tensor_data_in`]).
    pub fn from_bytes(bytes: &[u8]) -> Result<GgufFile> {
        GgufFile::from_bytes_with(bytes, &ReadOptions::default())
    }

    /// [`GgufFile::from_bytes`] with options.
    pub fn from_bytes_with(bytes: &[u8], opts: &ReadOptions) -> Result<GgufFile> {
        let parsed = parse(SliceInput::new(bytes), opts)?;
        Ok(GgufFile::from_parsed(parsed, None, None))
    }

    fn from_parsed(p: Parsed, path: Option<PathBuf>, mmap: Option<Arc<Mmap>>) -> GgufFile {
        GgufFile {
            path,
            mmap,
            version: p.version,
            endian: p.endian,
            alignment: p.alignment,
            data_offset: p.data_offset,
            file_size: p.file_size,
            metadata: p.metadata,
            tensors: p.tensors,
            tensor_index: p.tensor_index,
        }
    }

    /// The GGUF version (1, 2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Byte order of the file.
    pub fn endian(&self) -> Endian {
        self.endian
    }

    /// Data alignment (`general.alignment`, default 32).
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Absolute byte offset of the tensor data section.
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// Size of the file in bytes.
    pub fn file_size(&self) -> u64 {
        self.file_size
    }

    /// The path, for files opened by path.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The mapping, for files opened by path. Hand a clone of the `Arc` to
    /// whatever must keep the bytes alive.
    pub fn mmap(&self) -> Option<&Arc<Mmap>> {
        self.mmap.as_ref()
    }

    /// The metadata key/values.
    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    /// The tensors in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The tensor named `name`.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensor_index
            .find(name, |i| self.tensors[i].name.as_str())
            .map(|i| &self.tensors[i])
    }

    /// Absolute byte offset of a tensor's data (saturating for foreign infos).
    pub fn tensor_file_offset(&self, info: &TensorInfo) -> u64 {
        self.data_offset.saturating_add(info.offset)
    }

    /// The byte range of a tensor's data in the file, checked.
    fn tensor_range(&self, info: &TensorInfo, len: u64) -> Result<std::ops::Range<usize>> {
        let out = || Error::DataOutOfBounds {
            name: info.name.clone(),
        };
        let start = self.data_offset.checked_add(info.offset).ok_or_else(out)?;
        let end = start
            .checked_add(info.size)
            .filter(|&e| e <= len)
            .ok_or_else(out)?;
        // Both are within a length that is in memory, so they fit usize.
        Ok(start as usize..end as usize)
    }

    /// A tensor's bytes as stored, borrowed from the mapping.
    pub fn tensor_data(&self, info: &TensorInfo) -> Result<&[u8]> {
        let map = self.mmap.as_ref().ok_or(Error::NotMapped)?;
        let r = self.tensor_range(info, map.len() as u64)?;
        Ok(&map[r])
    }

    /// A tensor's bytes as stored, from the in-memory file this was parsed
    /// from (see [`GgufFile::from_bytes`]).
    pub fn tensor_data_in<'a>(&self, bytes: &'a [u8], info: &TensorInfo) -> Result<&'a [u8]> {
        let r = self.tensor_range(info, bytes.len() as u64)?;
        Ok(&bytes[r])
    }

    /// Reads a tensor's bytes through a stream over the same file into
    /// `buf`, which must be exactly `info.size` bytes long.
    pub fn read_tensor_data<R: Read + Seek>(
        &self,
        reader: &mut R,
        info: &TensorInfo,
        buf: &mut [u8],
    ) -> Result<()> {
        if buf.len() as u64 != info.size {
            return Err(Error::TensorSize {
                name: info.name.clone(),
                expected: info.size,
                got: buf.len() as u64,
            });
        }
        let start = self.data_offset.checked_add(info.offset);
        let start = start
            .filter(|s| {
                s.checked_add(info.size)
                    .is_some_and(|e| e <= self.file_size)
            })
            .ok_or_else(|| Error::DataOutOfBounds {
                name: info.name.clone(),
            })?;
        reader.seek(SeekFrom::Start(start))?;
        reader.read_exact(buf).map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => Error::DataOutOfBounds {
                name: info.name.clone(),
            },
            _ => Error::Io(e),
        })
    }

    /// Writes options that reproduce this file's version and byte order
    /// (version 1 files are written as version 3).
    pub fn write_options(&self) -> WriteOptions {
        let version = if self.version >= 2 {
            self.version
        } else {
            VERSION
        };
        WriteOptions {
            endian: self.endian,
            version,
        }
    }

    /// Writes this file again, with the same metadata and tensors. A file
    /// that used the standard layout comes out byte for byte identical.
    pub fn write_to<W: Write>(&self, out: W) -> Result<W> {
        self.write_with_metadata(out, &self.metadata, &self.write_options())
    }

    /// Writes a file with `metadata` instead of this file's and the same
    /// tensors (data from the mapping). Changing `general.alignment` moves
    /// the tensors accordingly.
    pub fn write_with_metadata<W: Write>(
        &self,
        out: W,
        metadata: &Metadata,
        opts: &WriteOptions,
    ) -> Result<W> {
        let mut w = GgufWriter::with_options(out, metadata, &self.tensors, opts)?;
        for t in &self.tensors {
            w.write_tensor(&t.name, self.tensor_data(t)?)?;
        }
        w.finish()
    }

    /// The editor path: writes `metadata` and this file's tensors to a new
    /// file at `path`. Refuses to overwrite the file being read.
    pub fn save_with_metadata(&self, path: impl AsRef<Path>, metadata: &Metadata) -> Result<()> {
        let path = path.as_ref();
        if let Some(src) = &self.path {
            let same = match (src.canonicalize(), path.canonicalize()) {
                (Ok(a), Ok(b)) => a == b,
                _ => false,
            };
            if same {
                return Err(Error::Writer(format!(
                    "refusing to overwrite '{}' while reading from it",
                    path.display()
                )));
            }
        }
        let file = File::create(path).map_err(|source| Error::Open {
            path: path.to_path_buf(),
            source,
        })?;
        let out =
            self.write_with_metadata(BufWriter::new(file), metadata, &self.write_options())?;
        out.into_inner()
            .map_err(|e| Error::Io(e.into_error()))?
            .sync_all()?;
        Ok(())
    }

    forward_metadata_getters!(metadata);
}
