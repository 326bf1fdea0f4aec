//! Tensor descriptions as stored in the tensor-info section.

use crate::error::{Error, Result};
use crate::types::GgmlType;

/// Most dimensions a ggml tensor has.
pub const MAX_DIMS: usize = 4;

/// ggml's name buffer size: names must be shorter than this (63 bytes at most).
pub const MAX_NAME_LEN: usize = 64;

/// One tensor of a GGUF file.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorInfo {
    /// Unique name, shorter than [`MAX_NAME_LEN`] bytes.
    pub name: String,
    /// Element type.
    pub ty: GgmlType,
    /// Dimensions in ggml order (`dims[0]` is the row length), as stored:
    /// 1 to 4 entries (0 only for a scalar, which some writers emit).
    pub dims: Vec<u64>,
    /// Byte offset of the data, relative to the start of the data section.
    pub offset: u64,
    /// Size of the data in bytes.
    pub size: u64,
}

impl TensorInfo {
    /// Describes a tensor (offset 0; writers assign offsets), checking the
    /// name length, the number of dimensions, the type and the block size.
    pub fn new(name: impl Into<String>, ty: GgmlType, dims: &[u64]) -> Result<TensorInfo> {
        let name = name.into();
        let size = checked_size(&name, ty, dims)
            .map_err(|reason| Error::Writer(format!("tensor '{name}': {reason}")))?;
        Ok(TensorInfo {
            name,
            ty,
            dims: dims.to_vec(),
            offset: 0,
            size,
        })
    }

    /// The dimensions padded with 1 to four entries.
    pub fn ne(&self) -> [u64; 4] {
        let mut ne = [1; 4];
        for (n, d) in ne.iter_mut().zip(&self.dims) {
            *n = *d;
        }
        ne
    }

    /// Number of elements (saturating; validated tensors never saturate).
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().fold(1u64, |acc, &d| acc.saturating_mul(d))
    }

    /// Number of dimensions as stored.
    pub fn n_dims(&self) -> usize {
        self.dims.len()
    }
}

/// The byte size of a tensor after every check llama.cpp makes on a tensor
/// info, or the reason it is rejected.
pub(crate) fn checked_size(name: &str, ty: GgmlType, dims: &[u64]) -> Result<u64, String> {
    if name.len() >= MAX_NAME_LEN {
        return Err(format!(
            "name is {} bytes, must be shorter than {MAX_NAME_LEN}",
            name.len()
        ));
    }
    if dims.len() > MAX_DIMS {
        return Err(format!(
            "{} dimensions, at most {MAX_DIMS} allowed",
            dims.len()
        ));
    }
    if ty.is_removed() {
        return Err(format!(
            "type {} ({}) was removed from ggml",
            ty.id(),
            ty.name()
        ));
    }
    check_dims(dims)?;
    let bs = ty.block_size() as u64;
    let ne0 = dims.first().copied().unwrap_or(1);
    if ne0 % bs != 0 {
        return Err(format!(
            "row length {ne0} is not a multiple of the block size {bs} of type {}",
            ty.name()
        ));
    }
    ty.tensor_size(dims)
        .ok_or_else(|| "byte size overflows".to_string())
}

/// Each dimension fits `i64` and the element count is below `i64::MAX`.
pub(crate) fn check_dims(dims: &[u64]) -> Result<(), String> {
    let mut count: u64 = 1;
    for (j, &d) in dims.iter().enumerate() {
        if d > i64::MAX as u64 {
            return Err(format!("dimension {j} is {d}, more than {}", i64::MAX));
        }
        count = count
            .checked_mul(d)
            .filter(|&c| c < i64::MAX as u64)
            .ok_or_else(|| format!("element count of shape {dims:?} overflows i64"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_checks() {
        let t = TensorInfo::new("w", GgmlType::Q4_0, &[64, 3]).unwrap();
        assert_eq!(t.size, 108);
        assert_eq!(t.ne(), [64, 3, 1, 1]);
        assert_eq!(t.n_elements(), 192);
        assert!(TensorInfo::new("w", GgmlType::Q4_0, &[33]).is_err());
        assert!(TensorInfo::new("w", GgmlType::F32, &[1, 1, 1, 1, 1]).is_err());
        assert!(TensorInfo::new("x".repeat(64), GgmlType::F32, &[1]).is_err());
        assert!(TensorInfo::new("x".repeat(63), GgmlType::F32, &[1]).is_ok());
        assert!(TensorInfo::new("w", GgmlType::Q4_0_4_4, &[32]).is_err());
        assert!(TensorInfo::new("w", GgmlType::F32, &[1 << 32, 1 << 31]).is_err());
        assert!(TensorInfo::new("w", GgmlType::F32, &[u64::MAX]).is_err());
        let s = TensorInfo::new("s", GgmlType::F32, &[]).unwrap();
        assert_eq!((s.size, s.n_elements()), (4, 1));
    }
}
