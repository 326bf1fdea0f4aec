//! Tensor memory as the kernels see it: a host pointer with ggml's type,
//! sizes and byte strides, validated once per node so that the kernels can
//! index without further checks.

use ggml_core::backend::Placement;
use ggml_core::graph::{Graph, TensorId};
use ggml_core::{Error, Result, TensorDesc, Type};

use crate::convert;

/// A raw pointer that may be shared with worker threads. The kernels that
/// share one guarantee that threads write disjoint bytes and that nothing
/// they read is written during the node.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SendPtr(pub *mut u8);

// SAFETY: the pointer is only dereferenced inside kernels whose work split
// gives every thread disjoint output bytes (see the type's documentation).
unsafe impl Send for SendPtr {}
// SAFETY: as for `Send`; shared reads never race with writes.
unsafe impl Sync for SendPtr {}

impl SendPtr {
    /// The pointer (a method, so that closures capture the whole wrapper).
    #[inline]
    pub fn get(self) -> *mut u8 {
        self.0
    }
}

/// Owned scratch bytes aligned to 8 (enough for every element type), for
/// private copies of tensors that kernels may view as typed slices.
#[derive(Default, Debug)]
pub(crate) struct AlignedBytes {
    words: Vec<u64>,
    len: usize,
}

impl AlignedBytes {
    /// `len` zeroed bytes.
    pub fn zeroed(len: usize) -> AlignedBytes {
        AlignedBytes {
            words: vec![0; len.div_ceil(8)],
            len,
        }
    }

    /// The bytes.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: the vector owns at least `len` initialised bytes (whole
        // u64 words), u8 has no alignment requirement, and the borrow of
        // `self` keeps the memory exclusively ours.
        unsafe { std::slice::from_raw_parts_mut(self.words.as_mut_ptr() as *mut u8, self.len) }
    }
}

/// One tensor's memory: start pointer, type, sizes and strides.
#[derive(Clone, Debug)]
pub(crate) struct View {
    /// Address of element (0, 0, 0, 0).
    pub ptr: SendPtr,
    /// Element type.
    pub ty: Type,
    /// Sizes, ggml order.
    pub ne: [usize; 4],
    /// Byte strides, ggml order.
    pub nb: [usize; 4],
    /// Bytes spanned from `ptr` (ggml_nbytes).
    pub len: usize,
}

/// Byte alignment the kernels need for an element type when they form
/// typed references.
fn align_of(ty: Type) -> usize {
    match ty {
        Type::F32 | Type::I32 => 4,
        Type::F16 | Type::BF16 | Type::I16 => 2,
        Type::I64 | Type::F64 => 8,
        _ => 1,
    }
}

impl View {
    /// Resolves node `id` of `graph`, placed at `at` (its resolved
    /// placement), to host memory and checks that every byte the descriptor
    /// addresses lies inside its buffer; `write` also requires a writable
    /// buffer.
    pub fn of(graph: &Graph, id: TensorId, at: &Placement, write: bool) -> Result<View> {
        let desc = graph.desc(id);
        let base = at.buffer.base().ok_or_else(|| {
            Error::Backend(format!(
                "CPU: tensor '{}' is in {} memory, which the CPU cannot address",
                desc.name,
                at.buffer.buffer_type().name()
            ))
        })?;
        if write && at.buffer.is_read_only() {
            return Err(Error::Invalid(format!(
                "CPU: tensor '{}' would be written, but its buffer is read-only",
                desc.name
            )));
        }
        check_desc(desc)?;
        let len = desc.nbytes();
        let end = at
            .offset
            .checked_add(len)
            .ok_or_else(|| Error::OutOfBounds {
                what: format!("tensor '{}'", desc.name),
                offset: at.offset,
                end: usize::MAX,
                size: at.buffer.size(),
            })?;
        if end > at.buffer.size() {
            return Err(Error::OutOfBounds {
                what: format!("tensor '{}'", desc.name),
                offset: at.offset,
                end,
                size: at.buffer.size(),
            });
        }
        // SAFETY: `at.offset + len <= size` was checked, so the pointer stays
        // inside (or one past) the buffer's allocation.
        let ptr = unsafe { base.as_ptr().add(at.offset) };
        let a = align_of(desc.ty);
        if (ptr as usize) % a != 0 || desc.nb.iter().any(|&s| s % a != 0) {
            return Err(Error::Invalid(format!(
                "CPU: tensor '{}' ({}) is not {a}-byte aligned (offset {}, nb {:?})",
                desc.name, desc.ty, at.offset, desc.nb
            )));
        }
        Ok(View {
            ptr: SendPtr(ptr),
            ty: desc.ty,
            ne: desc.ne,
            nb: desc.nb,
            len,
        })
    }

    /// A dense tensor over `bytes` (which must stay alive and unmoved while
    /// the view is used, and be aligned for the type, see [`AlignedBytes`]).
    pub fn over(bytes: &mut [u8], ty: Type, ne: [usize; 4]) -> View {
        let nb = ggml_core::tensor::contiguous_strides(ty, &ne);
        let len = ne.iter().product::<usize>() / ty.block_size() * ty.type_size();
        debug_assert!(len <= bytes.len());
        View {
            ptr: SendPtr(bytes.as_mut_ptr()),
            ty,
            ne,
            nb,
            len,
        }
    }

    /// Number of rows (`ne1 * ne2 * ne3`).
    pub fn n_rows(&self) -> usize {
        self.ne[1] * self.ne[2] * self.ne[3]
    }

    /// The (i1, i2, i3) of flat row `r`: one division, or two for a row
    /// past the first batch (row loops of small ops call this per row).
    #[inline]
    pub fn row_index(&self, r: usize) -> [usize; 3] {
        let (n1, n2) = (self.ne[1], self.ne[2]);
        if r < n1 {
            return [r, 0, 0];
        }
        let q = r / n1;
        let i1 = r - q * n1;
        if q < n2 {
            return [i1, q, 0];
        }
        let i3 = q / n2;
        [i1, q - i3 * n2, i3]
    }

    /// Byte offset of row (i1, i2, i3).
    #[inline]
    pub fn row_offset(&self, i: [usize; 3]) -> usize {
        i[0] * self.nb[1] + i[1] * self.nb[2] + i[2] * self.nb[3]
    }

    /// Address of row (i1, i2, i3); in bounds when the indices are.
    #[inline]
    pub fn row_ptr(&self, i: [usize; 3]) -> *mut u8 {
        self.ptr.0.wrapping_add(self.row_offset(i))
    }

    /// True when the elements of a row are adjacent.
    pub fn dense_rows(&self) -> bool {
        self.ne[0] <= 1 || self.nb[0] == self.ty.type_size()
    }

    /// Bytes of one dense row.
    pub fn row_bytes(&self) -> usize {
        self.ne[0] / self.ty.block_size() * self.ty.type_size()
    }

    /// True when the elements are laid out densely in ggml order.
    pub fn is_contiguous(&self) -> bool {
        TensorDesc {
            name: String::new(),
            ty: self.ty,
            ne: self.ne,
            nb: self.nb,
        }
        .is_contiguous()
    }

    /// The byte range `[start, end)` the view spans, as addresses.
    pub fn span(&self) -> (usize, usize) {
        let s = self.ptr.0 as usize;
        (s, s + self.len)
    }

    /// True when the byte spans of the two views intersect.
    pub fn overlaps(&self, other: &View) -> bool {
        let (a0, a1) = self.span();
        let (b0, b1) = other.span();
        a0 < b1 && b0 < a1 && self.len > 0 && other.len > 0
    }

    /// True when both views address exactly the same elements the same way.
    pub fn same_layout(&self, other: &View) -> bool {
        self.ptr.0 == other.ptr.0
            && self.ty == other.ty
            && self.ne == other.ne
            && self.nb == other.nb
    }

    /// True when no two elements of the view share bytes (needed for a
    /// tensor that is written by several threads).
    pub fn is_non_overlapping(&self) -> bool {
        let mut dims: Vec<(usize, usize)> = (0..4)
            .map(|i| {
                let n = if i == 0 {
                    self.ne[0] / self.ty.block_size()
                } else {
                    self.ne[i]
                };
                (self.nb[i], n)
            })
            .filter(|&(_, n)| n > 1)
            .collect();
        dims.sort_unstable();
        let mut extent = self.ty.type_size();
        for (stride, n) in dims {
            if stride < extent {
                return false;
            }
            extent += stride * (n - 1);
        }
        true
    }

    /// Reads row `i` as f32. A dense F32 row that `copy` does not force into
    /// `buf` is returned in place; anything else is converted into `buf`.
    ///
    /// # Safety
    /// The indices must be in range and nobody may write the row while the
    /// returned slice lives.
    pub unsafe fn read_row<'a>(
        &self,
        i: [usize; 3],
        copy: bool,
        buf: &'a mut Vec<f32>,
    ) -> Result<&'a [f32]> {
        let n = self.ne[0];
        let p = self.row_ptr(i);
        if self.ty == Type::F32 && self.dense_rows() && !copy {
            // SAFETY: the row is in bounds (validated view, indices in range),
            // 4-byte aligned (checked in `View::of`) and not written meanwhile
            // (caller's contract).
            return Ok(unsafe { std::slice::from_raw_parts(p as *const f32, n) });
        }
        // Every element is overwritten: the buffer only grows, never cleared
        // (a memset per row was a visible share of small graphs).
        if buf.len() < n {
            buf.resize(n, 0.0);
        }
        // SAFETY: as above; `read_strided` reads `n` elements at stride nb0.
        unsafe { self.read_strided(p, n, &mut buf[..n])? };
        Ok(&buf[..n])
    }

    /// Converts `n` elements from `p` (stride nb0) into `out`.
    ///
    /// # Safety
    /// `p` must address a row of this view with at least `n` elements that
    /// nobody writes meanwhile.
    pub unsafe fn read_strided(&self, p: *const u8, n: usize, out: &mut [f32]) -> Result<()> {
        if self.dense_rows() {
            let bytes = n / self.ty.block_size() * self.ty.type_size();
            // SAFETY: a dense row of `n` elements spans `bytes` bytes from `p`.
            let src = unsafe { std::slice::from_raw_parts(p, bytes) };
            return convert::to_f32(self.ty, src, &mut out[..n]);
        }
        let es = self.ty.type_size();
        for (j, o) in out[..n].iter_mut().enumerate() {
            // SAFETY: element j of the row lies at `p + j * nb0`, inside the view.
            let src = unsafe { std::slice::from_raw_parts(p.add(j * self.nb[0]), es) };
            *o = convert::scalar_to_f32(self.ty, src);
        }
        Ok(())
    }

    /// Lets `f` fill row `i` as f32 and stores it: in place for a dense F32
    /// row, else through `buf` with conversion to the view's type.
    ///
    /// # Safety
    /// The indices must be in range, no other thread may touch the row's
    /// bytes meanwhile, and the view must be writable.
    pub unsafe fn write_row(
        &self,
        i: [usize; 3],
        buf: &mut Vec<f32>,
        f: impl FnOnce(&mut [f32]),
    ) -> Result<()> {
        let n = self.ne[0];
        let p = self.row_ptr(i);
        if self.ty == Type::F32 && self.dense_rows() {
            // SAFETY: in bounds, aligned, exclusively ours (caller's contract).
            let out = unsafe { std::slice::from_raw_parts_mut(p as *mut f32, n) };
            f(out);
            return Ok(());
        }
        buf.clear();
        buf.resize(n, 0.0);
        f(&mut buf[..]);
        // SAFETY: as above.
        unsafe { self.write_strided(p, buf) }
    }

    /// Converts `vals` to the view's type and stores them from `p` at stride nb0.
    ///
    /// # Safety
    /// `p` must address a row of this view with at least `vals.len()`
    /// elements that no one else touches meanwhile.
    pub unsafe fn write_strided(&self, p: *mut u8, vals: &[f32]) -> Result<()> {
        let n = vals.len();
        if self.dense_rows() {
            let bytes = n / self.ty.block_size() * self.ty.type_size();
            // SAFETY: a dense row of `n` elements spans `bytes` bytes from `p`.
            let dst = unsafe { std::slice::from_raw_parts_mut(p, bytes) };
            return convert::from_f32(self.ty, vals, dst);
        }
        let es = self.ty.type_size();
        for (j, &v) in vals.iter().enumerate() {
            // SAFETY: element j lies at `p + j * nb0`, inside the view.
            let dst = unsafe { std::slice::from_raw_parts_mut(p.add(j * self.nb[0]), es) };
            convert::scalar_from_f32(self.ty, v, dst);
        }
        Ok(())
    }
}

/// Rejects descriptors the kernels cannot index safely.
fn check_desc(d: &TensorDesc) -> Result<()> {
    if d.ty.is_removed() || d.ty.block_size() == 0 || d.ty.type_size() == 0 {
        return Err(Error::Invalid(format!(
            "CPU: tensor '{}' has unusable type {}",
            d.name, d.ty
        )));
    }
    if d.ne[0] % d.ty.block_size() != 0 {
        return Err(Error::Invalid(format!(
            "CPU: tensor '{}' ({}) has ne[0] = {}, not a multiple of the block size {}",
            d.name,
            d.ty,
            d.ne[0],
            d.ty.block_size()
        )));
    }
    if d.ty.block_size() > 1 && d.ne[0] > 0 && d.nb[0] != d.ty.type_size() {
        return Err(Error::Invalid(format!(
            "CPU: quantized tensor '{}' has nb[0] = {} (block size is {} bytes)",
            d.name,
            d.nb[0],
            d.ty.type_size()
        )));
    }
    // The element count and the span ggml_nbytes computes, every step checked.
    let overflow = || {
        Error::Invalid(format!(
            "CPU: tensor '{}' ne {:?} nb {:?} overflows",
            d.name, d.ne, d.nb
        ))
    };
    let mut total: usize = 1;
    let mut span: usize = d.ty.type_size();
    for i in 0..4 {
        total = total.checked_mul(d.ne[i]).ok_or_else(overflow)?;
        let steps = if i == 0 {
            d.ne[0] / d.ty.block_size()
        } else {
            d.ne[i]
        };
        let extra = steps
            .saturating_sub(1)
            .checked_mul(d.nb[i])
            .ok_or_else(overflow)?;
        span = span.checked_add(extra).ok_or_else(overflow)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlap_detection() {
        let mut mem = vec![0u8; 64];
        let v = View::over(&mut mem, Type::F32, [4, 4, 1, 1]);
        assert!(v.is_non_overlapping());
        let mut t = v.clone();
        t.ne = [4, 4, 1, 1];
        t.nb = [4, 8, 64, 64];
        assert!(!t.is_non_overlapping());
        let mut p = v.clone();
        p.ne.swap(0, 1);
        p.nb.swap(0, 1);
        assert!(p.is_non_overlapping());
        let mut mem2 = vec![0u8; 96];
        let w = View::over(&mut mem2, Type::F32, [4, 2, 3, 1]);
        assert_eq!(w.row_index(5), [1, 2, 0]);
    }

    #[test]
    fn row_index_counts_rows_in_order() {
        for ne in [
            [3, 1, 1, 1],
            [3, 4, 1, 1],
            [3, 4, 5, 1],
            [3, 1, 5, 2],
            [3, 4, 5, 6],
            [3, 4, 1, 6],
        ] {
            let mut mem = vec![0u8; 4 * ne.iter().product::<usize>()];
            let v = View::over(&mut mem, Type::F32, ne);
            let mut r = 0;
            for i3 in 0..ne[3] {
                for i2 in 0..ne[2] {
                    for i1 in 0..ne[1] {
                        assert_eq!(v.row_index(r), [i1, i2, i3], "row {r} of {ne:?}");
                        r += 1;
                    }
                }
            }
            assert_eq!(r, v.n_rows());
        }
    }
}
