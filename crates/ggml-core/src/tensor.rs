//! Tensor descriptors: type, shape and strides in ggml's order.

use crate::Type;

/// Most dimensions a tensor can have.
pub const MAX_DIMS: usize = 4;

/// Name, element type, sizes (`ne`) and byte strides (`nb`) of a tensor.
///
/// As in ggml, `ne[0]` is the innermost (row) dimension and `nb[i]` is the
/// byte distance between consecutive indices of dimension `i`; for a
/// block-quantized type `nb[0]` is the block size in bytes and `nb[1]` the row
/// size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorDesc {
    /// Name (e.g. `blk.0.attn_q.weight`).
    pub name: String,
    /// Element type.
    pub ty: Type,
    /// Number of elements per dimension.
    pub ne: [usize; MAX_DIMS],
    /// Stride in bytes per dimension.
    pub nb: [usize; MAX_DIMS],
}

impl TensorDesc {
    /// A contiguous tensor of shape `ne` (missing trailing dims are 1).
    pub fn new(name: impl Into<String>, ty: Type, ne: &[usize]) -> TensorDesc {
        let ne = pad_ne(ne);
        TensorDesc {
            name: name.into(),
            ty,
            ne,
            nb: contiguous_strides(ty, &ne),
        }
    }

    /// Number of elements.
    pub fn n_elements(&self) -> usize {
        self.ne.iter().product()
    }

    /// Number of rows (`ne[1] * ne[2] * ne[3]`).
    pub fn n_rows(&self) -> usize {
        self.ne[1] * self.ne[2] * self.ne[3]
    }

    /// Number of dimensions, ignoring trailing 1s (at least 1).
    pub fn n_dims(&self) -> usize {
        (1..MAX_DIMS)
            .rev()
            .find(|&i| self.ne[i] > 1)
            .map_or(1, |i| i + 1)
    }

    /// Bytes of one contiguous row of `ne[0]` elements.
    pub fn row_bytes(&self) -> usize {
        self.ne[0] / self.ty.block_size() * self.ty.type_size()
    }

    /// Bytes spanned by the tensor in memory (ggml_nbytes): for a
    /// non-contiguous view this is the distance from the first to one past the
    /// last byte it touches.
    pub fn nbytes(&self) -> usize {
        if self.ne.contains(&0) {
            return 0;
        }
        let bs = self.ty.block_size();
        let mut bytes = if bs == 1 {
            self.ty.type_size()
        } else {
            self.ne[0] * self.nb[0] / bs
        };
        if bs == 1 {
            bytes += (self.ne[0] - 1) * self.nb[0];
        }
        for i in 1..MAX_DIMS {
            bytes += (self.ne[i] - 1) * self.nb[i];
        }
        bytes
    }

    /// True when the elements are laid out densely in ggml order.
    pub fn is_contiguous(&self) -> bool {
        self.nb == contiguous_strides(self.ty, &self.ne)
            || self.ne.contains(&0)
            || contiguous_ignoring_unit_dims(self)
    }

    /// True when each row (`ne[0]` elements) is contiguous.
    pub fn rows_contiguous(&self) -> bool {
        self.ne[0] == 1 || self.nb[0] == self.ty.type_size()
    }

    /// True when the first two dims are swapped (nb[0] > nb[1]).
    pub fn is_transposed(&self) -> bool {
        self.nb[0] > self.nb[1]
    }

    /// True when the strides are not increasing.
    pub fn is_permuted(&self) -> bool {
        self.nb[0] > self.nb[1] || self.nb[1] > self.nb[2] || self.nb[2] > self.nb[3]
    }

    /// True when `other` has the same shape.
    pub fn same_shape(&self, other: &TensorDesc) -> bool {
        self.ne == other.ne
    }

    /// True when `other`'s shape repeats a whole number of times into this one.
    pub fn can_repeat_into(&self, other: &TensorDesc) -> bool {
        (0..MAX_DIMS).all(|i| self.ne[i] != 0 && other.ne[i] % self.ne[i] == 0)
    }

    /// Byte offset of element `(i0, i1, i2, i3)`; `i0` must be a multiple of
    /// the block size.
    pub fn offset_of(&self, i: [usize; MAX_DIMS]) -> usize {
        i[0] / self.ty.block_size() * self.nb[0]
            + i[1] * self.nb[1]
            + i[2] * self.nb[2]
            + i[3] * self.nb[3]
    }
}

fn contiguous_ignoring_unit_dims(t: &TensorDesc) -> bool {
    let mut next = t.ty.type_size();
    for i in 0..MAX_DIMS {
        if t.ne[i] != 1 {
            if t.nb[i] != next {
                return false;
            }
            next = t.nb[i]
                * if i == 0 {
                    t.ne[0] / t.ty.block_size()
                } else {
                    t.ne[i]
                };
        } else if i == 0 {
            if t.nb[0] != t.ty.type_size() {
                return false;
            }
            next = t.ty.type_size() * (t.ne[0] / t.ty.block_size()).max(1);
        }
    }
    true
}

/// Pads a shape with trailing 1s to four dims.
pub fn pad_ne(ne: &[usize]) -> [usize; MAX_DIMS] {
    let mut out = [1; MAX_DIMS];
    for (o, &n) in out.iter_mut().zip(ne) {
        *o = n;
    }
    out
}

/// Strides of a dense tensor of type `ty` and shape `ne`.
pub fn contiguous_strides(ty: Type, ne: &[usize; MAX_DIMS]) -> [usize; MAX_DIMS] {
    let mut nb = [0; MAX_DIMS];
    nb[0] = ty.type_size();
    nb[1] = nb[0] * (ne[0] / ty.block_size());
    nb[2] = nb[1] * ne[1];
    nb[3] = nb[2] * ne[2];
    nb
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strides_and_sizes() {
        let t = TensorDesc::new("a", Type::F32, &[3, 4, 5]);
        assert_eq!(t.nb, [4, 12, 48, 240]);
        assert_eq!(t.nbytes(), 240);
        assert_eq!(t.n_dims(), 3);
        assert!(t.is_contiguous());
        let q = TensorDesc::new("q", Type::Q4_0, &[64, 2]);
        assert_eq!(q.nb, [18, 36, 72, 72]);
        assert_eq!(q.nbytes(), 72);
        let mut tr = t.clone();
        tr.ne.swap(0, 1);
        tr.nb.swap(0, 1);
        assert!(tr.is_transposed());
        assert!(!tr.is_contiguous());
        assert_eq!(tr.nbytes(), 240);
    }
}
