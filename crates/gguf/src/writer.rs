//! Streaming GGUF writer.
//!
//! The header, metadata and tensor infos are written first; tensor data then
//! follows tensor by tensor, in declaration order, each padded to the
//! alignment. Nothing but the header is held in memory, so a model of any
//! size can be written from a mapping or a stream.

use std::io::Write;

use crate::error::{Error, Result};
use crate::format::{align_up, Endian, Prim, MAGIC, MAX_ARRAY_DEPTH, VERSION};
use crate::index::NameIndex;
use crate::metadata::Metadata;
use crate::tensor::{checked_size, TensorInfo};
use crate::value::{Array, Value};

/// Options for writing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteOptions {
    /// Byte order of the numbers in the header. Tensor bytes are written as
    /// given: for a big-endian file the caller supplies big-endian data.
    pub endian: Endian,
    /// Version to write: 2 or 3 (the layouts are identical; 3 is current).
    pub version: u32,
}

impl Default for WriteOptions {
    fn default() -> WriteOptions {
        WriteOptions {
            endian: Endian::Little,
            version: VERSION,
        }
    }
}

/// Writes one GGUF file: construct it with the metadata and the tensor
/// declarations (which writes the header), then hand over each tensor's
/// bytes in order, then [`GgufWriter::finish`].
///
/// ```
/// use gguf::{GgmlType, GgufWriter, Metadata, TensorInfo};
/// let mut md = Metadata::new();
/// md.set("general.architecture", "llama");
/// let t = TensorInfo::new("w", GgmlType::F32, &[2])?;
/// let mut w = GgufWriter::new(Vec::new(), &md, &[t])?;
/// w.write_tensor("w", &[0u8; 8])?;
/// let bytes = w.finish()?;
/// assert_eq!(&bytes[..4], b"GGUF");
/// # Ok::<(), gguf::Error>(())
/// ```
#[derive(Debug)]
pub struct GgufWriter<W: Write> {
    out: W,
    alignment: u64,
    data_offset: u64,
    tensors: Vec<TensorInfo>,
    /// Index of the tensor whose data comes next.
    current: usize,
    /// Bytes of the current tensor already written.
    written: u64,
}

impl<W: Write> GgufWriter<W> {
    /// Starts a little-endian version 3 file.
    pub fn new(out: W, metadata: &Metadata, tensors: &[TensorInfo]) -> Result<GgufWriter<W>> {
        GgufWriter::with_options(out, metadata, tensors, &WriteOptions::default())
    }

    /// Starts a file: checks the declarations, lays the tensors out (offsets
    /// given in `tensors` are ignored) and writes everything up to the data.
    pub fn with_options(
        mut out: W,
        metadata: &Metadata,
        tensors: &[TensorInfo],
        opts: &WriteOptions,
    ) -> Result<GgufWriter<W>> {
        if !(2..=3).contains(&opts.version) {
            return Err(Error::Writer(format!(
                "cannot write version {}, only 2 or 3",
                opts.version
            )));
        }
        let alignment = metadata.alignment()?;
        let tensors = layout(tensors, alignment)?;
        let header = encode_header(metadata, &tensors, opts)?;
        let mut data_offset = header.len() as u64;
        out.write_all(&header)?;
        if !tensors.is_empty() {
            // Writers differ for files without tensors; like gguf-py, we add
            // no padding after the header then.
            let padded = align_up(data_offset, alignment)
                .ok_or_else(|| Error::Writer("header size overflows".into()))?;
            write_zeros(&mut out, padded - data_offset)?;
            data_offset = padded;
        }
        Ok(GgufWriter {
            out,
            alignment,
            data_offset,
            tensors,
            current: 0,
            written: 0,
        })
    }

    /// The tensors as laid out in the file (offsets assigned).
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// Absolute offset of the data section.
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// The tensor whose data comes next, if any.
    pub fn next_tensor(&self) -> Option<&TensorInfo> {
        self.tensors.get(self.current)
    }

    /// Writes the next piece of the current tensor's data. Pieces may be of
    /// any size but cannot run past the end of the tensor; once a tensor is
    /// complete its padding is written and the next tensor begins.
    pub fn write_tensor_data(&mut self, chunk: &[u8]) -> Result<()> {
        let Some(t) = self.tensors.get(self.current) else {
            return Err(Error::Writer("data given after the last tensor".into()));
        };
        let got = self.written.saturating_add(chunk.len() as u64);
        if got > t.size {
            return Err(Error::TensorSize {
                name: t.name.clone(),
                expected: t.size,
                got,
            });
        }
        self.out.write_all(chunk)?;
        self.written = got;
        if self.written == t.size {
            let padded = align_up(t.size, self.alignment).unwrap_or(t.size);
            write_zeros(&mut self.out, padded - t.size)?;
            self.current += 1;
            self.written = 0;
        }
        Ok(())
    }

    /// Writes the whole data of the next tensor, which must be `name`.
    pub fn write_tensor(&mut self, name: &str, data: &[u8]) -> Result<()> {
        let Some(t) = self.tensors.get(self.current) else {
            return Err(Error::Writer(format!(
                "data for '{name}' given after the last tensor"
            )));
        };
        if t.name != name {
            return Err(Error::Writer(format!(
                "tensor data must come in declaration order: expected '{}', got '{name}'",
                t.name
            )));
        }
        if self.written != 0 || data.len() as u64 != t.size {
            return Err(Error::TensorSize {
                name: name.to_string(),
                expected: t.size,
                got: self.written + data.len() as u64,
            });
        }
        self.write_tensor_data(data)
    }

    /// Checks that every tensor got its data, flushes and returns the output.
    pub fn finish(mut self) -> Result<W> {
        if let Some(t) = self.tensors.get(self.current) {
            return Err(Error::Writer(format!(
                "tensor '{}' (number {} of {}) did not get all its data",
                t.name,
                self.current + 1,
                self.tensors.len()
            )));
        }
        self.out.flush()?;
        Ok(self.out)
    }
}

fn write_zeros<W: Write>(out: &mut W, mut n: u64) -> Result<()> {
    const ZEROS: [u8; 256] = [0; 256];
    while n > 0 {
        let k = n.min(ZEROS.len() as u64) as usize;
        out.write_all(&ZEROS[..k])?;
        n -= k as u64;
    }
    Ok(())
}

/// Checks tensor declarations and assigns back-to-back aligned offsets.
pub(crate) fn layout(tensors: &[TensorInfo], alignment: u64) -> Result<Vec<TensorInfo>> {
    NameIndex::build(tensors.len(), |i| tensors[i].name.as_str()).map_err(|(_, second)| {
        Error::Writer(format!("duplicate tensor name '{}'", tensors[second].name))
    })?;
    let mut offset: u64 = 0;
    let mut out = Vec::with_capacity(tensors.len());
    for t in tensors {
        let size = checked_size(&t.name, t.ty, &t.dims)
            .map_err(|r| Error::Writer(format!("tensor '{}': {r}", t.name)))?;
        if size != t.size {
            return Err(Error::Writer(format!(
                "tensor '{}' declares {} bytes but its type and shape make {size}",
                t.name, t.size
            )));
        }
        out.push(TensorInfo {
            offset,
            ..t.clone()
        });
        offset = align_up(size, alignment)
            .and_then(|s| offset.checked_add(s))
            .ok_or_else(|| Error::Writer("data section size overflows".into()))?;
    }
    Ok(out)
}

struct Encoder {
    buf: Vec<u8>,
    big: bool,
}

impl Encoder {
    fn put<T: Prim>(&mut self, x: T) {
        x.encode(&mut self.buf, self.big);
    }

    fn string(&mut self, s: &[u8]) {
        self.put(s.len() as u64);
        self.buf.extend_from_slice(s);
    }

    fn slice<T: Prim>(&mut self, v: &[T]) {
        self.buf.reserve(v.len() * T::SIZE);
        for &x in v {
            self.put(x);
        }
    }

    fn value(&mut self, key: &str, v: &Value) -> Result<()> {
        match v {
            Value::U8(x) => self.put(*x),
            Value::I8(x) => self.put(*x),
            Value::U16(x) => self.put(*x),
            Value::I16(x) => self.put(*x),
            Value::U32(x) => self.put(*x),
            Value::I32(x) => self.put(*x),
            Value::F32(x) => self.put(*x),
            Value::Bool(x) => self.put(u8::from(*x)),
            Value::String(s) => self.string(s),
            Value::Array(a) => self.array(key, a, 0)?,
            Value::U64(x) => self.put(*x),
            Value::I64(x) => self.put(*x),
            Value::F64(x) => self.put(*x),
        }
        Ok(())
    }

    fn array(&mut self, key: &str, a: &Array, depth: usize) -> Result<()> {
        if depth >= MAX_ARRAY_DEPTH {
            return Err(Error::Writer(format!(
                "key '{key}': arrays nested deeper than {MAX_ARRAY_DEPTH} levels"
            )));
        }
        self.put(a.element_type().id());
        self.put(a.len() as u64);
        match a {
            Array::U8(v) => self.buf.extend_from_slice(v),
            Array::I8(v) => self.slice(v),
            Array::U16(v) => self.slice(v),
            Array::I16(v) => self.slice(v),
            Array::U32(v) => self.slice(v),
            Array::I32(v) => self.slice(v),
            Array::F32(v) => self.slice(v),
            Array::Bool(v) => self.buf.extend(v.iter().map(|&b| u8::from(b))),
            Array::String(v) => {
                for s in v {
                    self.string(s);
                }
            }
            Array::Array(v) => {
                for inner in v {
                    self.array(key, inner, depth + 1)?;
                }
            }
            Array::U64(v) => self.slice(v),
            Array::I64(v) => self.slice(v),
            Array::F64(v) => self.slice(v),
        }
        Ok(())
    }
}

/// Everything before the data section (without the final padding).
fn encode_header(md: &Metadata, tensors: &[TensorInfo], opts: &WriteOptions) -> Result<Vec<u8>> {
    let mut e = Encoder {
        buf: Vec::new(),
        big: opts.endian == Endian::Big,
    };
    e.buf.extend_from_slice(&MAGIC);
    e.put(opts.version);
    e.put(tensors.len() as u64);
    e.put(md.len() as u64);
    for (key, value) in md.iter() {
        if key.is_empty() {
            return Err(Error::Writer("empty metadata key".into()));
        }
        e.string(key.as_bytes());
        e.put(value.value_type().id());
        e.value(key, value)?;
    }
    for t in tensors {
        e.string(t.name.as_bytes());
        e.put(t.dims.len() as u32);
        for &d in &t.dims {
            e.put(d);
        }
        e.put(t.ty.id());
        e.put(t.offset);
    }
    Ok(e.buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::GgmlType;

    #[test]
    fn order_and_sizes_are_checked() {
        let md = Metadata::new();
        let a = TensorInfo::new("a", GgmlType::F32, &[3]).unwrap();
        let b = TensorInfo::new("b", GgmlType::F16, &[2]).unwrap();
        let mut w = GgufWriter::new(Vec::new(), &md, &[a.clone(), b]).unwrap();
        assert_eq!(w.tensors()[1].offset, 32);
        assert!(w.write_tensor("b", &[0; 4]).is_err());
        assert!(w.write_tensor("a", &[0; 11]).is_err());
        w.write_tensor_data(&[1; 5]).unwrap();
        assert!(w.write_tensor_data(&[1; 8]).is_err());
        w.write_tensor_data(&[1; 7]).unwrap();
        assert_eq!(w.next_tensor().map(|t| t.name.as_str()), Some("b"));
        let w2 = GgufWriter::new(Vec::new(), &md, std::slice::from_ref(&a)).unwrap();
        assert!(w2.finish().is_err());
        w.write_tensor("b", &[2; 4]).unwrap();
        assert!(w.write_tensor_data(&[0]).is_err());
        let out = w.finish().unwrap();
        assert_eq!(out.len() as u64 % 32, 0);
    }

    #[test]
    fn bad_declarations() {
        let md = Metadata::new();
        let a = TensorInfo::new("a", GgmlType::F32, &[3]).unwrap();
        assert!(GgufWriter::new(Vec::new(), &md, &[a.clone(), a.clone()]).is_err());
        let mut wrong = a.clone();
        wrong.size = 4;
        assert!(GgufWriter::new(Vec::new(), &md, &[wrong]).is_err());
        let mut md = Metadata::new();
        md.set("general.alignment", 3u32);
        assert!(GgufWriter::new(Vec::new(), &md, &[a]).is_err());
        let mut md = Metadata::new();
        md.set("", 1u8);
        assert!(GgufWriter::new(Vec::new(), &md, &[]).is_err());
    }
}
