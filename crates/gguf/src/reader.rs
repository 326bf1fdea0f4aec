//! The GGUF parser and validator.
//!
//! Every count and length is checked against the bytes left in the file
//! before anything is allocated from it, so a hostile file cannot make the
//! reader allocate more than a small multiple of its own size. Checks cover
//! at least what llama.cpp's reader and loader check; errors name the field
//! and its byte offset.

use crate::error::{Error, Result};
use crate::format::{align_up, Endian, Prim, MAGIC, MAX_ARRAY_DEPTH};
use crate::index::NameIndex;
use crate::input::Input;
use crate::metadata::{Metadata, KEY_ALIGNMENT};
use crate::tensor::{check_dims, TensorInfo, MAX_DIMS, MAX_NAME_LEN};
use crate::types::{GgmlType, GGML_TYPE_COUNT};
use crate::value::{Array, StringArray, Value, ValueType};

/// How strictly tensor data offsets are checked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DataLayout {
    /// As llama.cpp: tensors lie back to back in info order, each starting
    /// where the previous one's padded size ends.
    #[default]
    Strict,
    /// Offsets only need to be aligned, inside the file and non-overlapping,
    /// in any order.
    Relaxed,
}

/// Options for parsing.
#[derive(Clone, Debug, Default)]
pub struct ReadOptions {
    /// Tensor offset rules.
    pub layout: DataLayout,
}

/// The result of parsing a file's header.
#[derive(Debug)]
pub(crate) struct Parsed {
    pub version: u32,
    pub endian: Endian,
    pub alignment: u64,
    pub data_offset: u64,
    pub file_size: u64,
    pub metadata: Metadata,
    pub tensors: Vec<TensorInfo>,
    pub tensor_index: NameIndex,
}

/// Offsets of a tensor info's start and of its data offset field.
type InfoAt = (u64, u64);

/// Most entries reserved up front from a count the file declares; beyond
/// this, vectors grow only as entries are actually read.
const PREALLOC_MAX: usize = 4096;

struct Parser<I> {
    input: I,
    big: bool,
    v1: bool,
}

/// Parses and validates a whole file.
pub(crate) fn parse<I: Input>(input: I, opts: &ReadOptions) -> Result<Parsed> {
    let mut p = Parser {
        input,
        big: false,
        v1: false,
    };
    p.parse(opts)
}

fn invalid(field: impl Into<String>, offset: u64, reason: impl Into<String>) -> Error {
    Error::Invalid {
        field: field.into(),
        offset,
        reason: reason.into(),
    }
}

impl<I: Input> Parser<I> {
    fn pos(&self) -> u64 {
        self.input.pos()
    }

    fn remaining(&self) -> u64 {
        self.input.len().saturating_sub(self.input.pos())
    }

    /// The next `n` bytes, or a truncation error naming `field`.
    fn bytes(&mut self, n: u64, field: impl FnOnce() -> String) -> Result<&[u8]> {
        let offset = self.pos();
        let available = self.remaining();
        if n > available {
            return Err(Error::Truncated {
                field: field(),
                offset,
                needed: n,
                available,
            });
        }
        let n = usize::try_from(n)
            .map_err(|_| invalid(field(), offset, "does not fit in memory on this platform"))?;
        Ok(self.input.take(n)?)
    }

    fn read<T: Prim>(&mut self, field: impl FnOnce() -> String) -> Result<T> {
        let big = self.big;
        let b = self.bytes(T::SIZE as u64, field)?;
        Ok(T::decode(b, big))
    }

    fn read_vec<T: Prim>(&mut self, n: usize, field: impl FnOnce() -> String) -> Result<Vec<T>> {
        let big = self.big;
        let b = self.bytes((n as u64).saturating_mul(T::SIZE as u64), field)?;
        Ok(b.chunks_exact(T::SIZE).map(|c| T::decode(c, big)).collect())
    }

    /// A count or length: `u64`, or `u32` in version 1.
    fn count(&mut self, field: impl FnOnce() -> String) -> Result<u64> {
        if self.v1 {
            self.read::<u32>(field).map(u64::from)
        } else {
            self.read::<u64>(field)
        }
    }

    fn string(&mut self, field: &dyn Fn() -> String) -> Result<&[u8]> {
        let len = self.count(|| format!("{} length", field()))?;
        self.bytes(len, || format!("{} ({len} bytes)", field()))
    }

    /// Fewest bytes one encoded value of type `t` takes.
    fn min_size(&self, t: ValueType) -> u64 {
        let len = if self.v1 { 4 } else { 8 };
        match t.fixed_size() {
            Some(s) => s as u64,
            None if t == ValueType::String => len,
            None => 4 + len,
        }
    }

    fn parse(&mut self, opts: &ReadOptions) -> Result<Parsed> {
        let magic = self.bytes(4, || "magic".into())?;
        if magic != MAGIC {
            return Err(Error::BadMagic {
                found: magic.to_vec(),
            });
        }
        let raw: u32 = self.read(|| "version".into())?;
        let version = if (1..=3).contains(&raw) {
            raw
        } else if (1..=3).contains(&raw.swap_bytes()) {
            self.big = true;
            raw.swap_bytes()
        } else {
            return Err(Error::UnsupportedVersion { version: raw });
        };
        self.v1 = version == 1;

        let (n_tensors_at, n_tensors) = (self.pos(), self.count(|| "header tensor count".into())?);
        let (n_kv_at, n_kv) = (self.pos(), self.count(|| "header key/value count".into())?);
        let len = if self.v1 { 4 } else { 8 };
        let min_kv = len + 1 + 4 + 1;
        let min_ti = len + 4 + 4 + 8;
        let rem = self.remaining();
        let ti_bytes = n_tensors
            .checked_mul(min_ti)
            .filter(|&b| b <= rem)
            .ok_or_else(|| {
                invalid(
                    "header tensor count",
                    n_tensors_at,
                    format!("{n_tensors} tensor infos cannot fit in the {rem} bytes left"),
                )
            })?;
        n_kv.checked_mul(min_kv)
            .and_then(|b| b.checked_add(ti_bytes))
            .filter(|&b| b <= rem)
            .ok_or_else(|| {
                invalid(
                    "header key/value count",
                    n_kv_at,
                    format!(
                        "{n_kv} key/value pairs and {n_tensors} tensor infos cannot fit in the {rem} bytes left"
                    ),
                )
            })?;
        // Both counts are now bounded by the file size.
        let too_many = |at| {
            invalid(
                "header counts",
                at,
                "more entries than this platform can index",
            )
        };
        let n_kv = usize::try_from(n_kv).map_err(|_| too_many(n_kv_at))?;
        let n_tensors = usize::try_from(n_tensors).map_err(|_| too_many(n_tensors_at))?;

        let (metadata, kv_offsets) = self.parse_kvs(n_kv)?;
        let alignment = metadata.alignment().map_err(|e| {
            let i = metadata.position(KEY_ALIGNMENT).unwrap_or(0);
            invalid(
                format!("kv[{i}] '{KEY_ALIGNMENT}'"),
                kv_offsets.get(i).copied().unwrap_or(0),
                e.to_string(),
            )
        })?;
        drop(kv_offsets);

        let (tensors, info_offsets) = self.parse_tensor_infos(n_tensors)?;
        let tensor_index = NameIndex::build(tensors.len(), |i| tensors[i].name.as_str()).map_err(
            |(_, second)| Error::DuplicateTensor {
                name: tensors[second].name.clone(),
                offset: info_offsets[second].0,
            },
        )?;

        let data_offset = align_up(self.pos(), alignment)
            .ok_or_else(|| invalid("data section offset", self.pos(), "overflows"))?;
        match opts.layout {
            DataLayout::Strict => check_strict_layout(&tensors, &info_offsets, alignment)?,
            DataLayout::Relaxed => check_relaxed_layout(&tensors, &info_offsets, alignment)?,
        }
        let file_size = self.input.len();
        for t in &tensors {
            let end = data_offset
                .checked_add(t.offset)
                .and_then(|s| s.checked_add(t.size));
            if !matches!(end, Some(e) if e <= file_size) {
                return Err(Error::DataOutOfBounds {
                    name: t.name.clone(),
                });
            }
        }

        Ok(Parsed {
            version,
            endian: if self.big {
                Endian::Big
            } else {
                Endian::Little
            },
            alignment,
            data_offset,
            file_size,
            metadata,
            tensors,
            tensor_index,
        })
    }

    fn parse_kvs(&mut self, n_kv: usize) -> Result<(Metadata, Vec<u64>)> {
        let mut entries = Vec::with_capacity(n_kv.min(PREALLOC_MAX));
        let mut offsets = Vec::with_capacity(n_kv.min(PREALLOC_MAX));
        for i in 0..n_kv {
            let at = self.pos();
            let key = self.string(&|| format!("kv[{i}] key"))?;
            if key.is_empty() {
                return Err(invalid(format!("kv[{i}] key"), at, "empty key"));
            }
            let key: Box<str> = std::str::from_utf8(key)
                .map_err(|_| invalid(format!("kv[{i}] key"), at, "key is not valid UTF-8"))?
                .into();
            let ctx = || format!("kv[{i}] '{key}'");
            let ty = self.value_type(&|| format!("{} value type", ctx()))?;
            let value = self.value(ty, &ctx)?;
            entries.push((key, value));
            offsets.push(at);
        }
        let index =
            NameIndex::build(entries.len(), |i| &*entries[i].0).map_err(|(_, second)| {
                Error::DuplicateKey {
                    key: entries[second].0.to_string(),
                    offset: offsets[second],
                }
            })?;
        Ok((Metadata::from_parts(entries, index), offsets))
    }

    /// A value type id (`what` names it in errors).
    fn value_type(&mut self, what: &dyn Fn() -> String) -> Result<ValueType> {
        let at = self.pos();
        let id: u32 = self.read(what)?;
        ValueType::from_u32(id)
            .ok_or_else(|| invalid(what(), at, format!("unknown value type {id}")))
    }

    fn value(&mut self, ty: ValueType, ctx: &dyn Fn() -> String) -> Result<Value> {
        let f = || format!("{} value", ctx());
        Ok(match ty {
            ValueType::U8 => Value::U8(self.read(f)?),
            ValueType::I8 => Value::I8(self.read(f)?),
            ValueType::U16 => Value::U16(self.read(f)?),
            ValueType::I16 => Value::I16(self.read(f)?),
            ValueType::U32 => Value::U32(self.read(f)?),
            ValueType::I32 => Value::I32(self.read(f)?),
            ValueType::F32 => Value::F32(self.read(f)?),
            ValueType::Bool => Value::Bool(self.read::<u8>(f)? != 0),
            ValueType::String => Value::String(self.string(&f)?.to_vec()),
            ValueType::Array => Value::Array(self.array(ctx, 0)?),
            ValueType::U64 => Value::U64(self.read(f)?),
            ValueType::I64 => Value::I64(self.read(f)?),
            ValueType::F64 => Value::F64(self.read(f)?),
        })
    }

    fn array(&mut self, ctx: &dyn Fn() -> String, depth: usize) -> Result<Array> {
        let at = self.pos();
        if depth >= MAX_ARRAY_DEPTH {
            return Err(invalid(
                format!("{} array", ctx()),
                at,
                format!("arrays nested deeper than {MAX_ARRAY_DEPTH} levels"),
            ));
        }
        let et = self.value_type(&|| format!("{} array element type", ctx()))?;
        let n_at = self.pos();
        let n = self.count(|| format!("{} array length", ctx()))?;
        let rem = self.remaining();
        if !matches!(n.checked_mul(self.min_size(et)), Some(b) if b <= rem) {
            return Err(invalid(
                format!("{} array length", ctx()),
                n_at,
                format!("{n} elements of type {et} cannot fit in the {rem} bytes left"),
            ));
        }
        let n = usize::try_from(n).map_err(|_| {
            invalid(
                format!("{} array length", ctx()),
                n_at,
                "too long for this platform",
            )
        })?;
        let f = || format!("{} array data", ctx());
        Ok(match et {
            ValueType::U8 => Array::U8(self.read_vec(n, f)?),
            ValueType::I8 => Array::I8(self.read_vec(n, f)?),
            ValueType::U16 => Array::U16(self.read_vec(n, f)?),
            ValueType::I16 => Array::I16(self.read_vec(n, f)?),
            ValueType::U32 => Array::U32(self.read_vec(n, f)?),
            ValueType::I32 => Array::I32(self.read_vec(n, f)?),
            ValueType::F32 => Array::F32(self.read_vec(n, f)?),
            ValueType::Bool => {
                Array::Bool(self.bytes(n as u64, f)?.iter().map(|&b| b != 0).collect())
            }
            ValueType::U64 => Array::U64(self.read_vec(n, f)?),
            ValueType::I64 => Array::I64(self.read_vec(n, f)?),
            ValueType::F64 => Array::F64(self.read_vec(n, f)?),
            ValueType::String => {
                if let Some(a) = self.string_array_in_memory(n) {
                    return Ok(Array::String(a));
                }
                let mut a = StringArray::with_capacity(n.min(PREALLOC_MAX), 0);
                for j in 0..n {
                    a.push(self.string(&|| format!("{} element {j}", ctx()))?);
                }
                Array::String(a)
            }
            ValueType::Array => {
                let mut v = Vec::with_capacity(n.min(PREALLOC_MAX));
                for j in 0..n {
                    v.push(self.array(&|| format!("{} element {j}", ctx()), depth + 1)?);
                }
                Array::Array(v)
            }
        })
    }

    /// Fast path for a string array when the input is in memory: one pass
    /// to check every length, then exact allocations and one copy. `None`
    /// (nothing consumed) when the input is a stream or the array is broken,
    /// in which case the careful path reports the error.
    fn string_array_in_memory(&mut self, n: usize) -> Option<StringArray> {
        let rest = self.input.rest()?;
        let lw = if self.v1 { 4 } else { 8 };
        let big = self.big;
        let len_at = |p: usize| -> Option<usize> {
            let b = rest.get(p..p + lw)?;
            let len = if lw == 4 {
                u64::from(u32::decode(b, big))
            } else {
                u64::decode(b, big)
            };
            usize::try_from(len).ok()
        };
        let (mut p, mut total) = (0usize, 0usize);
        for _ in 0..n {
            let len = len_at(p)?;
            p += lw;
            if len > rest.len() - p {
                return None;
            }
            p += len;
            total += len;
        }
        let mut data = Vec::with_capacity(total);
        let mut ends = Vec::with_capacity(n);
        let mut q = 0;
        for _ in 0..n {
            let len = len_at(q)?;
            q += lw;
            data.extend_from_slice(&rest[q..q + len]);
            ends.push(data.len());
            q += len;
        }
        self.input.take(p).ok()?;
        Some(StringArray::from_raw(data, ends))
    }

    /// Tensor infos and, for each, the offsets of its start and of its offset field.
    fn parse_tensor_infos(&mut self, n: usize) -> Result<(Vec<TensorInfo>, Vec<InfoAt>)> {
        let mut tensors = Vec::with_capacity(n.min(PREALLOC_MAX));
        let mut offsets = Vec::with_capacity(n.min(PREALLOC_MAX));
        for i in 0..n {
            let at = self.pos();
            let field = || format!("tensor_info[{i}] name");
            let len = self.count(|| format!("{} length", field()))?;
            if len >= MAX_NAME_LEN as u64 {
                return Err(invalid(
                    format!("{} length", field()),
                    at,
                    format!("name is {len} bytes, must be shorter than {MAX_NAME_LEN}"),
                ));
            }
            let name = self.bytes(len, field)?;
            let name = std::str::from_utf8(name)
                .map_err(|_| invalid(field(), at, "name is not valid UTF-8"))?
                .to_string();
            let ctx = |what: &str| format!("tensor_info[{i}] '{name}' {what}");

            let nd_at = self.pos();
            let n_dims: u32 = self.read(|| ctx("n_dims"))?;
            if n_dims as usize > MAX_DIMS {
                return Err(invalid(
                    ctx("n_dims"),
                    nd_at,
                    format!("{n_dims} dimensions, at most {MAX_DIMS} allowed"),
                ));
            }
            let dims_at = self.pos();
            let mut dims = Vec::with_capacity(n_dims as usize);
            for j in 0..n_dims {
                let d = self.count(|| ctx(&format!("ne[{j}]")))?;
                dims.push(d);
            }
            check_dims(&dims).map_err(|r| invalid(ctx("dimensions"), dims_at, r))?;

            let ty_at = self.pos();
            let id: u32 = self.read(|| ctx("type"))?;
            let ty = GgmlType::from_u32(id).ok_or_else(|| {
                invalid(
                    ctx("type"),
                    ty_at,
                    format!(
                        "type id {id} is out of range (0 to {})",
                        GGML_TYPE_COUNT - 1
                    ),
                )
            })?;
            if ty.is_removed() {
                return Err(Error::RemovedType {
                    tensor: name,
                    id,
                    type_name: ty.name(),
                    offset: ty_at,
                });
            }
            let bs = ty.block_size() as u64;
            let ne0 = dims.first().copied().unwrap_or(1);
            if ne0 % bs != 0 {
                return Err(invalid(
                    ctx("ne[0]"),
                    dims_at,
                    format!(
                        "row length {ne0} is not a multiple of the block size {bs} of type {}",
                        ty.name()
                    ),
                ));
            }
            let size = ty
                .tensor_size(&dims)
                .ok_or_else(|| invalid(ctx("dimensions"), dims_at, "byte size overflows"))?;
            let off_at = self.pos();
            let offset: u64 = self.read(|| ctx("offset"))?;
            tensors.push(TensorInfo {
                name,
                ty,
                dims,
                offset,
                size,
            });
            offsets.push((at, off_at));
        }
        Ok((tensors, offsets))
    }
}

/// llama.cpp's rule: each tensor starts where the previous one's padded
/// size ends, the first at 0.
fn check_strict_layout(tensors: &[TensorInfo], at: &[InfoAt], alignment: u64) -> Result<()> {
    let mut expected: u64 = 0;
    for (i, t) in tensors.iter().enumerate() {
        let field = || format!("tensor_info[{i}] '{}' offset", t.name);
        if t.offset != expected {
            return Err(invalid(
                field(),
                at[i].1,
                format!("data offset is {}, expected {expected} (the end of the previous tensor, padded to {alignment})", t.offset),
            ));
        }
        expected = align_up(t.size, alignment)
            .and_then(|s| expected.checked_add(s))
            .ok_or_else(|| invalid(field(), at[i].1, "data section size overflows"))?;
    }
    Ok(())
}

/// Aligned and non-overlapping, in any order.
fn check_relaxed_layout(tensors: &[TensorInfo], at: &[InfoAt], alignment: u64) -> Result<()> {
    let field = |i: usize| format!("tensor_info[{i}] '{}' offset", tensors[i].name);
    for (i, t) in tensors.iter().enumerate() {
        if t.offset % alignment != 0 {
            return Err(invalid(
                field(i),
                at[i].1,
                format!(
                    "data offset {} is not a multiple of the alignment {alignment}",
                    t.offset
                ),
            ));
        }
        if t.offset.checked_add(t.size).is_none() {
            return Err(invalid(field(i), at[i].1, "data end overflows"));
        }
    }
    let mut order: Vec<usize> = (0..tensors.len())
        .filter(|&i| tensors[i].size > 0)
        .collect();
    order.sort_unstable_by_key(|&i| (tensors[i].offset, i));
    // The furthest data end so far, and whose it is.
    let mut reach: Option<(u64, usize)> = None;
    for &i in &order {
        let t = &tensors[i];
        // Cannot overflow: checked above.
        let end = t.offset + t.size;
        if let Some((r, owner)) = reach {
            if t.offset < r {
                return Err(invalid(
                    field(i),
                    at[i].1,
                    format!(
                        "data [{}, {end}) overlaps tensor '{}'",
                        t.offset, tensors[owner].name
                    ),
                ));
            }
        }
        if !matches!(reach, Some((r, _)) if r >= end) {
            reach = Some((end, i));
        }
    }
    Ok(())
}
