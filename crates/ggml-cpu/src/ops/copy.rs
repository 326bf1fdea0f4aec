//! DUP / CONT / CPY (element order copies with type conversion), GET_ROWS
//! and SET_ROWS.

use ggml_core::{Result, Type};

use super::read_index;
use crate::compute::{par_rows, NodeCtx};
use crate::convert;
use crate::tensor::View;

/// Copies element by element in ggml's logical order (dim 0 fastest) from
/// src0 into the result, converting the type. The shapes may differ; the
/// element counts match.
pub(crate) fn dup(ctx: &NodeCtx<'_>) -> Result<()> {
    let (a, d) = (&ctx.src[0], &ctx.dst);
    let alias = ctx.alias[0];
    if a.ty == d.ty && a.ne[0] == d.ne[0] && a.dense_rows() && d.dense_rows() {
        return copy_rows_bytes(a, d, alias);
    }
    if a.ty == d.ty && a.is_contiguous() && d.is_contiguous() {
        // Same bytes in the same order (a reshaping copy, block types too).
        if !alias {
            // SAFETY: both views are dense with the same element count, so
            // they span the same number of bytes, inside their buffers; a
            // source that overlaps the result was copied aside before.
            unsafe { std::ptr::copy(a.ptr.get() as *const u8, d.ptr.get(), d.len) };
        }
        return Ok(());
    }
    if a.ty == d.ty && !a.ty.is_quantized() {
        return copy_elements(a, d);
    }
    if a.ne == d.ne && scalar(a.ty) && scalar(d.ty) && d.ne[0] < SHORT_ROW {
        return convert_short_rows(a, d);
    }
    if a.ne[0] == d.ne[0] {
        // Row r of the result is row r of the source.
        return par_rows(d.n_rows(), d.ne[0], |rows, s| {
            for r in rows {
                // SAFETY: both have the same number of rows of ne0 elements;
                // aliased rows are copied before the write.
                let x = unsafe { a.read_row(a.row_index(r), alias, &mut s.a)? };
                // SAFETY: each result row is written by one task.
                unsafe { d.write_row(d.row_index(r), &mut s.c, |o| o.copy_from_slice(x))? };
            }
            Ok(())
        });
    }
    // Different row lengths: walk the source in flat order through a dense
    // f32 copy (the result must be written row by row for block types).
    let n = a.ne.iter().product::<usize>();
    let mut flat = vec![0f32; n];
    let mut buf = Vec::new();
    for r in 0..a.n_rows() {
        // SAFETY: rows in range; only read.
        let x = unsafe { a.read_row(a.row_index(r), true, &mut buf)? };
        flat[r * a.ne[0]..(r + 1) * a.ne[0]].copy_from_slice(x);
    }
    let ne0 = d.ne[0];
    par_rows(d.n_rows(), ne0, |rows, s| {
        for r in rows {
            let x = &flat[r * ne0..(r + 1) * ne0];
            // SAFETY: each result row is written by one task.
            unsafe { d.write_row(d.row_index(r), &mut s.c, |o| o.copy_from_slice(x))? };
        }
        Ok(())
    })
}

/// Rows shorter than this are converted element by element.
const SHORT_ROW: usize = 16;

/// Types whose elements convert one at a time.
fn scalar(t: Type) -> bool {
    matches!(t, Type::F32 | Type::F16 | Type::BF16 | Type::I32)
}

/// Same shape, short rows (a transposed store into the V cache has one
/// element per row and token): each element converted on its own, without
/// setting up a row conversion per row.
fn convert_short_rows(a: &View, d: &View) -> Result<()> {
    let (ea, ed) = (a.ty.type_size(), d.ty.type_size());
    par_rows(d.n_rows(), d.ne[0] * 4, |rows, _| {
        for r in rows {
            let i = d.row_index(r);
            let (src, dst) = (a.row_ptr(i), d.row_ptr(i));
            for e in 0..d.ne[0] {
                // SAFETY: element e of row i lies inside both validated views
                // of the same shape; an aliased source has the result's
                // layout, so each element is read before it is overwritten,
                // and each result row is written by one task.
                unsafe {
                    let x = std::slice::from_raw_parts(src.add(e * a.nb[0]), ea);
                    let v = convert::scalar_to_f32(a.ty, x);
                    let o = std::slice::from_raw_parts_mut(dst.add(e * d.nb[0]), ed);
                    convert::scalar_from_f32(d.ty, v, o);
                }
            }
        }
        Ok(())
    })
}

/// Same type, same row length, dense rows: byte copies of whole rows.
fn copy_rows_bytes(a: &View, d: &View, alias: bool) -> Result<()> {
    let rb = d.row_bytes();
    par_rows(d.n_rows(), rb / 4 + 1, |rows, _| {
        for r in rows {
            let src = a.row_ptr(a.row_index(r));
            let dst = d.row_ptr(d.row_index(r));
            if alias && std::ptr::eq(src, dst) {
                continue;
            }
            // SAFETY: both rows are `rb` bytes inside their validated views;
            // `copy` tolerates overlap of an aliased source; each result row
            // is written by one task.
            unsafe { std::ptr::copy(src as *const u8, dst, rb) };
        }
        Ok(())
    })
}

/// Same non-block type, any layouts: element byte copies in flat order.
fn copy_elements(a: &View, d: &View) -> Result<()> {
    let es = d.ty.type_size();
    let ne0 = d.ne[0];
    par_rows(d.n_rows(), ne0, |rows, _| {
        for r in rows {
            // Unravel the flat index of the row's first element in the source.
            let mut k = r * ne0;
            let mut j = [0usize; 4];
            for (jd, &n) in j.iter_mut().zip(&a.ne) {
                *jd = k % n;
                k /= n;
            }
            let dst = d.row_ptr(d.row_index(r));
            for e in 0..ne0 {
                let off = j[0] * a.nb[0] + j[1] * a.nb[1] + j[2] * a.nb[2] + j[3] * a.nb[3];
                // SAFETY: `j` stays a valid source index (odometer below) and
                // `e` a valid element of the result row; the two views do not
                // overlap unless aliased with the same layout, where source and
                // destination bytes coincide; each result row has one writer.
                unsafe {
                    std::ptr::copy(a.ptr.get().add(off) as *const u8, dst.add(e * d.nb[0]), es)
                };
                for (jd, &n) in j.iter_mut().zip(&a.ne) {
                    *jd += 1;
                    if *jd < n {
                        break;
                    }
                    *jd = 0;
                }
            }
        }
        Ok(())
    })
}

/// Rows of src0 picked by the I32 indices of src1: result row (i10, i11,
/// i12) is row `idx[i10, i11, i12]` of src0's matrix (i11, i12).
pub(crate) fn get_rows(ctx: &NodeCtx<'_>) -> Result<()> {
    let (a, idx, d) = (&ctx.src[0], &ctx.src[1], &ctx.dst);
    let same = a.ty == d.ty && !a.ty.is_quantized() && a.dense_rows() && d.dense_rows();
    let rb = d.row_bytes();
    par_rows(d.n_rows(), d.ne[0], |rows, s| {
        for r in rows {
            let i = d.row_index(r);
            // SAFETY: (i0, i1, i2) of the result index the index tensor's
            // (ne0, ne1, ne2), which match (checked).
            let row = unsafe { read_index(idx, [i[0], i[1], i[2], 0]) };
            if row < 0 || row as usize >= a.ne[1] {
                return Err(ctx.err(format!(
                    "row index {row} at {i:?} is outside 0..{}",
                    a.ne[1]
                )));
            }
            let ia = [row as usize, i[1], i[2]];
            if same {
                // SAFETY: both rows are `rb` bytes inside their views, which do
                // not overlap (else the source was copied).
                unsafe {
                    std::ptr::copy_nonoverlapping(a.row_ptr(ia) as *const u8, d.row_ptr(i), rb)
                };
                continue;
            }
            // SAFETY: row in range (checked above); only read.
            let x = unsafe { a.read_row(ia, false, &mut s.a)? };
            // SAFETY: each result row is written by one task.
            unsafe { d.write_row(i, &mut s.c, |o| o.copy_from_slice(x))? };
        }
        Ok(())
    })
}

/// Writes row (i, i2, i3) of the source into row `idx[i, i2 % ni1, i3 %
/// ni2]` of the destination matrix (i2, i3), converting to its type.
pub(crate) fn set_rows(ctx: &NodeCtx<'_>) -> Result<()> {
    let (src, idx, d) = (&ctx.src[1], &ctx.src[2], &ctx.dst);
    let n = src.n_rows();
    let mut targets = Vec::with_capacity(n);
    for r in 0..n {
        let i = src.row_index(r);
        // SAFETY: idx.ne0 == src.ne1 and the batch dims wrap by modulo.
        let t = unsafe { read_index(idx, [i[0], i[1] % idx.ne[1], i[2] % idx.ne[2], 0]) };
        if t < 0 || t as usize >= d.ne[1] {
            return Err(ctx.err(format!(
                "row index {t} for source row {i:?} is outside 0..{}",
                d.ne[1]
            )));
        }
        targets.push([t as usize, i[1], i[2]]);
    }
    let mut sorted = targets.clone();
    sorted.sort_unstable();
    let distinct = sorted.windows(2).all(|w| w[0] != w[1]);
    let body = |rows: std::ops::Range<usize>, s: &mut crate::compute::Scratch| {
        for r in rows {
            // SAFETY: source row in range; the source does not overlap the
            // destination (else it was copied).
            let x = unsafe { src.read_row(src.row_index(r), false, &mut s.a)? };
            // SAFETY: target rows are distinct across tasks (or this runs on
            // one thread), inside the destination (checked above).
            unsafe { d.write_row(targets[r], &mut s.c, |o| o.copy_from_slice(x))? };
        }
        Ok(())
    };
    if distinct {
        par_rows(n, d.ne[0] * 2, body)
    } else {
        // Repeated targets: sequential, so the last write wins as in order.
        body(0..n, &mut crate::compute::Scratch::default())
    }
}
