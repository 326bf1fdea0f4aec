//! MUL_MAT: `dst[i, j] = dot(row i of src0, row j of src1)` per matrix,
//! src0 broadcast over src1's dims 2 and 3 (grouped-query attention).
//!
//! As in ggml, the src1 rows are first converted to the weight type's
//! partner (Q8_0 / Q8_1 / Q8_K for quantized weights, F16 for F16, BF16 for
//! BF16), so the dot products run on integers per block. The work is cut in
//! tiles of weight rows x activation columns: a tile of few columns
//! (matrix x vector) is a plain stream over the weights, split by rows so
//! that every thread reads its own part; with many columns the tile's
//! weight rows stay in cache while all its columns go by. Inside a tile the
//! kernels take register tiles of [`MAX_ROWS`] weight rows x up to
//! [`MAX_COLS`] columns: each weight block is decoded once per group of
//! columns and each activation block loaded once per group of rows.

use ggml_core::{Result, Type};

use crate::compute::{NodeCtx, Workspace};
use crate::convert;
use crate::pool;
use crate::simd::{
    self, scalar, Gemm, Kernels, Wide, GEMM_COLS, MAX_COLS, MAX_ROWS, PAIR_COLS, PANEL_ROWS,
};
use crate::tensor::{AlignedBytes, SendPtr, View};

/// Bytes of weight rows a tile should keep in cache (a share of L2).
pub(crate) const TILE_WEIGHT_BYTES: usize = 192 * 1024;
/// Columns per tile when there are many.
const TILE_COLS: usize = 16;
/// Tiles per thread the split aims for, for load balance.
pub(crate) const TILES_PER_THREAD: usize = 8;
/// Activation columns from which weight rows are packed into panels for a
/// [`Gemm`] kernel: packing costs about one pass over the weights, which
/// many columns repay.
pub(crate) const GEMM_MIN_COLS: usize = 16;

/// Multiply-adds below which a MUL_MAT runs on the calling thread, its
/// weights stored or not. Measured with `benches/split.rs` on 2 threads
/// (fastest runs), F32 weights x 1 column: up to 11,000 one thread was as
/// fast or faster (64 x 64: 0.91 against 1.08 us; 64 x 172: 1.57 against
/// 1.86), from 32,768 splitting won (64 x 512: 3.43 against 3.73 us;
/// 288 x 288: 3.99 against 5.20).
const SERIAL_MACS: usize = 32 * 1024;

/// True when MUL_MAT takes weights of type `t`.
pub(crate) fn supports_type(t: Type) -> bool {
    simd::vec_dot_type(t).is_some()
}

/// How one weight row is dotted with activation rows.
#[derive(Clone, Copy)]
pub(crate) enum RowDot {
    Kernel(simd::DotFn),
    Reference(Type),
}

impl RowDot {
    /// The best dot product of `kern` for weights of type `t`.
    pub(crate) fn for_type(kern: &Kernels, t: Type) -> RowDot {
        match kern.dot(t) {
            Some(f) => RowDot::Kernel(f),
            None => RowDot::Reference(t),
        }
    }

    #[inline]
    pub(crate) fn run(self, n: usize, xs: &[&[u8]], ys: &[&[u8]], out: &mut [f32]) {
        match self {
            RowDot::Kernel(f) => f(n, xs, ys, out),
            RowDot::Reference(t) => scalar::reference_dot(t, n, xs, ys, out),
        }
    }
}

/// MUL_MAT with the best kernels of this CPU.
pub(crate) fn mul_mat(ctx: &NodeCtx<'_>, ws: &mut Workspace) -> Result<()> {
    match ctx.packed {
        Some(g) => mul_mat_stored(&ctx.src[0], &ctx.src[1], &ctx.dst, g, ws),
        None => mul_mat_with(&ctx.src[0], &ctx.src[1], &ctx.dst, ws, simd::kernels()),
    }
}

/// MUL_MAT of weights stored as panels of `g`'s layout (see
/// `crate::repack`), for any number of columns: through `g`'s wide kernel
/// where it has one and the columns repay expanding (`Wide::min_cols`).
pub(crate) fn mul_mat_stored(
    a: &View,
    b: &View,
    d: &View,
    g: &'static Gemm,
    ws: &mut Workspace,
) -> Result<()> {
    let vt = partner(a.ty)?;
    let ys = ColumnSource::new(b, vt, a.ne[0], &mut ws.act)?;
    match g.wide_for(b.ne[1]) {
        Some(w) => mul_mat_panels(a, &ys, d, w.gemm, Weights::Expanded(g, w), &mut ws.prep),
        _ => mul_mat_panels(a, &ys, d, g, Weights::Stored, &mut ws.prep),
    }
}

/// MUL_MAT of `a` x `b` into `d` with a given kernel set.
pub(crate) fn mul_mat_with(
    a: &View,
    b: &View,
    d: &View,
    ws: &mut Workspace,
    kern: &Kernels,
) -> Result<()> {
    let mut a_copy = AlignedBytes::default();
    let a = &dense_rows(a, &mut a_copy);
    let k = a.ne[0];
    let vt = partner(a.ty)?;
    let dot = RowDot::for_type(kern, a.ty);
    let ys = ColumnSource::new(b, vt, k, &mut ws.act)?;

    let (ne01, ne11) = (a.ne[1], b.ne[1]);
    if ne11 >= GEMM_MIN_COLS {
        if let Some(g) = kern.gemm(a.ty) {
            let g = g.for_packed_rows();
            return mul_mat_panels(a, &ys, d, g, Weights::Rows, &mut ws.prep);
        }
    }
    let n_batch = b.ne[2] * b.ne[3];
    let (r2, r3) = (b.ne[2] / a.ne[2], b.ne[3] / a.ne[3]);
    let x_row = a.row_bytes();
    let back_to_back = a.nb[1] == x_row;
    let threads = pool::current_num_threads().max(1);

    let cols_per_tile = if ne11 <= MAX_COLS { ne11 } else { TILE_COLS };
    let col_tiles = ne11.div_ceil(cols_per_tile);
    let rows_cache = (TILE_WEIGHT_BYTES / x_row.max(1)).clamp(4, 512);
    let wanted = threads * TILES_PER_THREAD;
    let per_batch = (wanted / (n_batch * col_tiles).max(1)).max(1);
    let rows_balance = ne01.div_ceil(per_batch).max(1);
    let rows_per_tile = rows_cache.min(rows_balance).next_multiple_of(MAX_ROWS);
    let row_tiles = ne01.div_ceil(rows_per_tile);
    let n_tiles = n_batch * col_tiles * row_tiles;

    let dptr = d.ptr;
    let tile = |t: usize| {
        let rt = t % row_tiles;
        let ct = (t / row_tiles) % col_tiles;
        let bt = t / (row_tiles * col_tiles);
        let (i2, i3) = (bt % b.ne[2], bt / b.ne[2]);
        let (a2, a3) = (i2 / r2, i3 / r3);
        let rows = rt * rows_per_tile..((rt + 1) * rows_per_tile).min(ne01);
        let cols = ct * cols_per_tile..((ct + 1) * cols_per_tile).min(ne11);
        let mut out = [0f32; MAX_ROWS * MAX_COLS];
        let mut c0 = cols.start;
        while c0 < cols.end {
            let nc = (cols.end - c0).min(MAX_COLS);
            let mut yr: [&[u8]; MAX_COLS] = [&[]; MAX_COLS];
            for (j, y) in yr.iter_mut().enumerate().take(nc) {
                *y = ys.row(c0 + j, i2, i3);
            }
            let mut r0 = rows.start;
            while r0 < rows.end {
                let nr = if rows.end - r0 >= MAX_ROWS {
                    MAX_ROWS
                } else {
                    1
                };
                let mut xs: [&[u8]; MAX_ROWS] = [&[]; MAX_ROWS];
                for (i, x) in xs.iter_mut().enumerate().take(nr) {
                    *x = weight_row(a, r0 + i, a2, a3);
                }
                // A full group of back-to-back rows has the kernel ask for
                // the rows after it (see `simd::RowPrefetch`); otherwise
                // the kernels prefetch ahead inside their rows, and the
                // first bytes of the next group of rows are asked for here.
                let next_rows = if nr == MAX_ROWS && back_to_back {
                    0..0
                } else {
                    r0 + nr..(r0 + 2 * nr).min(rows.end)
                };
                for i in next_rows {
                    simd::prefetch_row_start(weight_row(a, i, a2, a3));
                }
                dot.run(k, &xs[..nr], &yr[..nc], &mut out[..nr * nc]);
                for i in 0..nr {
                    for j in 0..nc {
                        let o =
                            (r0 + i) * d.nb[0] + (c0 + j) * d.nb[1] + i2 * d.nb[2] + i3 * d.nb[3];
                        // SAFETY: element (r0 + i, c0 + j, i2, i3) of the F32
                        // result is in bounds, aligned, and written by this
                        // tile only.
                        unsafe { (dptr.get().add(o) as *mut f32).write(out[i * nc + j]) };
                    }
                }
                r0 += nr;
            }
            c0 += nc;
        }
    };
    let work = ne01 * ne11 * n_batch * k;
    if threads == 1 || n_tiles == 1 || !crate::compute::split_pays(work, SERIAL_MACS) {
        (0..n_tiles).for_each(tile);
    } else {
        pool::for_each(n_tiles, tile);
    }
    Ok(())
}

/// The type activations are converted to for weights of type `t`.
pub(crate) fn partner(t: Type) -> Result<Type> {
    simd::vec_dot_type(t).ok_or_else(|| {
        ggml_core::Error::Invalid(format!("CPU: MUL_MAT has no dot product for {t}"))
    })
}

/// Weight row `(i1, i2, i3)` of `a` (dense rows, validated, not written
/// while MUL_MAT runs).
pub(crate) fn weight_row(a: &View, i1: usize, i2: usize, i3: usize) -> &[u8] {
    let xo = i1 * a.nb[1] + i2 * a.nb[2] + i3 * a.nb[3];
    // SAFETY: the row lies inside src0, whose view was validated against
    // its buffer, and its `row_bytes` are contiguous (dense rows).
    unsafe { std::slice::from_raw_parts(a.ptr.get().add(xo) as *const u8, a.row_bytes()) }
}

/// Where activation column `col` of batch `(i2, i3)` is, in the weight
/// type's partner: src1 itself or the converted rows.
pub(crate) struct ColumnSource<'a> {
    b: &'a View,
    direct: bool,
    act: &'a [u8],
    y_row: usize,
}

impl<'a> ColumnSource<'a> {
    /// The columns of `b` for weights of `k` elements per row whose partner
    /// type is `vt`: src1 itself when it already is in that type, else
    /// converted into `act`.
    pub(crate) fn new(
        b: &'a View,
        vt: Type,
        k: usize,
        act: &'a mut Vec<u8>,
    ) -> Result<ColumnSource<'a>> {
        let y_row = k / vt.block_size() * vt.type_size();
        let direct = b.ty == vt && b.dense_rows();
        let need = if direct { 0 } else { y_row * b.n_rows() };
        if act.len() < need {
            act.resize(need, 0);
        }
        if !direct {
            convert_rows(b, vt, y_row, &mut act[..need])?;
        }
        Ok(ColumnSource {
            b,
            direct,
            act: &act[..need],
            y_row,
        })
    }

    pub(crate) fn row(&self, col: usize, i2: usize, i3: usize) -> &[u8] {
        if self.direct {
            // SAFETY: src1 is validated and holds this row of `y_row` bytes,
            // which nobody writes while MUL_MAT runs.
            unsafe { std::slice::from_raw_parts(self.b.row_ptr([col, i2, i3]), self.y_row) }
        } else {
            let r = (i3 * self.b.ne[2] + i2) * self.b.ne[1] + col;
            &self.act[r * self.y_row..(r + 1) * self.y_row]
        }
    }
}

thread_local! {
    /// Packed panels of the tile a thread works on.
    static PANELS: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Panels `p0..p0 + np` of matrix `matrix` (counted over `ne[2] x ne[3]`)
/// of weights stored repacked (`crate::repack`): each matrix is
/// `ceil(ne[1] / PANEL_ROWS)` panels, one matrix after the other.
pub(crate) fn stored_panels<'a>(
    g: &Gemm,
    a: &'a View,
    matrix: usize,
    p0: usize,
    np: usize,
) -> &'a [u8] {
    let pb = (g.panel_bytes)(a.ne[0]);
    let per_matrix = a.ne[1].div_ceil(PANEL_ROWS);
    assert!(
        matrix < a.ne[2] * a.ne[3] && p0 + np <= per_matrix,
        "stored panels {p0}+{np} of matrix {matrix} outside {:?}",
        a.ne
    );
    // SAFETY: the tensor's buffer holds `per_matrix` panels of `pb` bytes
    // for each of its matrices (its repacked size, checked when it was
    // placed); the panels asked for lie inside matrix `matrix` (checked
    // above), which nothing writes while the weights are read.
    unsafe { std::slice::from_raw_parts(a.ptr.get().add((matrix * per_matrix + p0) * pb), np * pb) }
}

/// Expands stored panels of `g`'s layout into `w`'s, at the start of
/// `buf` (grown as needed); returns the expanded panels.
pub(crate) fn expand_panels<'b>(
    g: &Gemm,
    w: &Wide,
    k: usize,
    panels: &[u8],
    buf: &'b mut Vec<u8>,
) -> &'b [u8] {
    let (pb, wb) = ((g.panel_bytes)(k), (w.gemm.panel_bytes)(k));
    let np = panels.len() / pb;
    let out = aligned_mut(buf, np * wb);
    for (src, dst) in panels.chunks_exact(pb).zip(out.chunks_exact_mut(wb)) {
        (w.expand)(k, src, dst);
    }
    out
}

/// Alignment of packed panels and prepared columns: a cache line, so that
/// no vector load of a kernel straddles two lines. (Two f32 panels against
/// six columns, n = 2048, one thread: about 100 GFLOP/s from a buffer
/// 16 bytes off a line, 160-185 from an aligned one.)
const PANEL_ALIGN: usize = 64;

/// `len` bytes of `buf` from its first [`PANEL_ALIGN`] boundary, growing
/// it as needed.
pub(crate) fn aligned_mut(buf: &mut Vec<u8>, len: usize) -> &mut [u8] {
    if buf.len() < len + PANEL_ALIGN - 1 {
        buf.resize(len + PANEL_ALIGN - 1, 0);
    }
    let off = (PANEL_ALIGN - buf.as_ptr() as usize % PANEL_ALIGN) % PANEL_ALIGN;
    &mut buf[off..off + len]
}

/// Where the panels of a [`mul_mat_panels`] come from.
#[derive(Clone, Copy)]
enum Weights {
    /// Weight rows in ggml's layout, packed tile by tile.
    Rows,
    /// Panels stored one matrix after the other (`crate::repack`).
    Stored,
    /// Panels stored in the first kernel's layout, expanded tile by tile
    /// for its wide kernel (the one run).
    Expanded(&'static Gemm, &'static Wide),
}

/// MUL_MAT through a panel kernel: every activation column is prepared
/// once; then each tile of weight rows, as panels of [`PANEL_ROWS`] rows
/// (packed here, or as stored), stays in cache while all columns go by,
/// [`GEMM_COLS`] at a time, or [`PAIR_COLS`] at a time against two panels
/// where the kernel has a [`Gemm::run_pair`].
fn mul_mat_panels(
    a: &View,
    ys: &ColumnSource<'_>,
    d: &View,
    g: &Gemm,
    weights: Weights,
    prep: &mut Vec<u8>,
) -> Result<()> {
    let b = ys.b;
    let k = a.ne[0];
    let (ne01, ne11) = (a.ne[1], b.ne[1]);
    let n_batch = b.ne[2] * b.ne[3];
    let (r2, r3) = (b.ne[2] / a.ne[2], b.ne[3] / a.ne[3]);
    let threads = pool::current_num_threads().max(1);

    // Prepared columns, in flat row order of src1.
    let ab = (g.act_bytes)(k);
    let prep = prepare_columns(g, ys, b, k, prep);

    // Tiles of whole panels, as many per thread as load balance wants and
    // no larger than a share of L2 once packed.
    let pb = (g.panel_bytes)(k);
    let panels = ne01.div_ceil(PANEL_ROWS);
    // Stored panels read once per call (a column group or less) need no
    // cache-sized tiles: each thread streams through its share.
    let panels_cache = if matches!(weights, Weights::Stored) && ne11 <= GEMM_COLS {
        panels
    } else {
        (TILE_WEIGHT_BYTES / pb.max(1)).max(1)
    };
    let per_batch = (threads * TILES_PER_THREAD).div_ceil(n_batch).max(1);
    let mut panels_per_tile = panels_cache.min(panels.div_ceil(per_batch)).max(1);
    // A kernel that takes two panels at a time gets tiles of whole pairs,
    // when the columns are many: with few, the panels stream from memory
    // through `run`, which asks for them ahead.
    let pair = g.run_pair.filter(|_| ne11 >= GEMM_MIN_COLS);
    let group = match pair {
        Some(_) => {
            panels_per_tile = panels_per_tile.next_multiple_of(2);
            PAIR_COLS
        }
        None => GEMM_COLS,
    };
    let row_tiles = panels.div_ceil(panels_per_tile);
    let n_tiles = n_batch * row_tiles;

    let dptr = d.ptr;
    let tile = |buf: &mut Vec<u8>, t: usize| {
        let rt = t % row_tiles;
        let bt = t / row_tiles;
        let (i2, i3) = (bt % b.ne[2], bt / b.ne[2]);
        let (a2, a3) = (i2 / r2, i3 / r3);
        let p0 = rt * panels_per_tile;
        let np = panels_per_tile.min(panels - p0);
        let tile_panels: &[u8] = match weights {
            Weights::Rows => {
                let rows = p0 * PANEL_ROWS..((p0 + np) * PANEL_ROWS).min(ne01);
                pack_panels(g, k, rows, |r| weight_row(a, r, a2, a3), buf)
            }
            Weights::Stored => stored_panels(g, a, a3 * a.ne[2] + a2, p0, np),
            Weights::Expanded(sg, w) => expand_panels(
                sg,
                w,
                k,
                stored_panels(sg, a, a3 * a.ne[2] + a2, p0, np),
                buf,
            ),
        };
        const { assert!(PAIR_COLS <= GEMM_COLS) };
        let mut out = [0f32; 2 * GEMM_COLS * PANEL_ROWS];
        let col_base = (i3 * b.ne[2] + i2) * ne11;
        let mut c0 = 0;
        while c0 < ne11 {
            let nc = (ne11 - c0).min(group);
            let mut cols: [&[u8]; GEMM_COLS] = [&[]; GEMM_COLS];
            for (j, c) in cols.iter_mut().enumerate().take(nc) {
                let r = col_base + c0 + j;
                *c = &prep[r * ab..(r + 1) * ab];
            }
            // The results of panel p of the tile for the nc columns, as
            // `run` lays them out.
            let put = |p: usize, out: &[f32]| {
                let r0 = (p0 + p) * PANEL_ROWS;
                let nr = PANEL_ROWS.min(ne01 - r0);
                for j in 0..nc {
                    let o = r0 * d.nb[0] + (c0 + j) * d.nb[1] + i2 * d.nb[2] + i3 * d.nb[3];
                    let vals = &out[j * PANEL_ROWS..j * PANEL_ROWS + nr];
                    if d.nb[0] == 4 {
                        // SAFETY: elements (r0..r0 + nr, c0 + j, i2, i3) of
                        // the F32 result are contiguous, in bounds, and
                        // written by this tile only.
                        unsafe {
                            std::ptr::copy_nonoverlapping(
                                vals.as_ptr(),
                                dptr.get().add(o) as *mut f32,
                                nr,
                            )
                        };
                    } else {
                        for (i, &v) in vals.iter().enumerate() {
                            // SAFETY: element (r0 + i, c0 + j, i2, i3) of the
                            // F32 result is in bounds, aligned, and written
                            // by this tile only.
                            unsafe { (dptr.get().add(o + i * d.nb[0]) as *mut f32).write(v) };
                        }
                    }
                }
            };
            let panel = |p: usize| &tile_panels[p * pb..(p + 1) * pb];
            let (cols, block) = (&cols[..nc], nc * PANEL_ROWS);
            let mut p = 0;
            while p < np {
                match pair {
                    Some(pair) if p + 1 < np => {
                        pair(k, panel(p), panel(p + 1), cols, &mut out[..2 * block]);
                        put(p, &out[..block]);
                        put(p + 1, &out[block..2 * block]);
                        p += 2;
                    }
                    _ => {
                        (g.run)(k, panel(p), cols, &mut out[..block]);
                        put(p, &out[..block]);
                        p += 1;
                    }
                }
            }
            c0 += nc;
        }
    };
    // Each thread keeps its panel buffer from one MUL_MAT to the next:
    // a fresh one per call would be a fresh mapping to fault in.
    let run = |t: usize| PANELS.with_borrow_mut(|buf| tile(buf, t));
    let work = ne01 * ne11 * n_batch * k;
    if threads == 1 || n_tiles == 1 || !crate::compute::split_pays(work, SERIAL_MACS) {
        (0..n_tiles).for_each(run);
    } else {
        pool::for_each(n_tiles, run);
    }
    Ok(())
}

/// Activation rows fewer than this many elements in all are prepared on
/// one thread.
const PREP_SERIAL_WORK: usize = 64 * 1024;

/// Prepares every activation row of `b` (read through `ys`) for the panel
/// kernel `g`, in flat row order, in `prep` (grown as needed).
pub(crate) fn prepare_columns<'p>(
    g: &Gemm,
    ys: &ColumnSource<'_>,
    b: &View,
    k: usize,
    prep: &'p mut Vec<u8>,
) -> &'p [u8] {
    let ab = (g.act_bytes)(k);
    let n_y = b.n_rows();
    let prep = aligned_mut(prep, ab * n_y);
    let prep_col = |r: usize, o: &mut [u8]| {
        let [col, i2, i3] = b.row_index(r);
        (g.prep)(k, ys.row(col, i2, i3), o);
    };
    if pool::current_num_threads() <= 1 || n_y * k < PREP_SERIAL_WORK {
        prep.chunks_exact_mut(ab)
            .enumerate()
            .for_each(|(r, o)| prep_col(r, o));
    } else {
        let base = SendPtr(prep.as_mut_ptr());
        pool::for_each(n_y, |r| {
            // SAFETY: row r's `ab` bytes lie inside `prep`, and each index is
            // handed to one thread only, so the rows written are disjoint.
            let o = unsafe { std::slice::from_raw_parts_mut(base.get().add(r * ab), ab) };
            prep_col(r, o)
        });
    }
    prep
}

/// Packs the weight rows `rows` (row `r` is `row(r)`) into panels of
/// [`PANEL_ROWS`] for the panel kernel `g`, at the start of `buf` (grown
/// as needed); returns the packed panels.
pub(crate) fn pack_panels<'b, 'a>(
    g: &Gemm,
    k: usize,
    rows: std::ops::Range<usize>,
    row: impl Fn(usize) -> &'a [u8],
    buf: &'b mut Vec<u8>,
) -> &'b [u8] {
    let pb = (g.panel_bytes)(k);
    let np = rows.len().div_ceil(PANEL_ROWS);
    let out = aligned_mut(buf, np * pb);
    for (p, dst) in out.chunks_exact_mut(pb).enumerate() {
        let r0 = rows.start + p * PANEL_ROWS;
        let nr = PANEL_ROWS.min(rows.end - r0);
        let mut xs: [&[u8]; PANEL_ROWS] = [&[]; PANEL_ROWS];
        for (i, x) in xs.iter_mut().enumerate().take(nr) {
            *x = row(r0 + i);
        }
        (g.pack)(k, &xs[..nr], dst);
    }
    out
}

/// Converts every row of `b` to `vt` into `out` (rows of `y_row` bytes in
/// flat row order).
fn convert_rows(b: &View, vt: Type, y_row: usize, out: &mut [u8]) -> Result<()> {
    let n_y = b.n_rows();
    let k = b.ne[0];
    if n_y * k < 64 * 1024 || pool::current_num_threads() <= 1 {
        let mut buf = Vec::new();
        for (r, o) in out.chunks_exact_mut(y_row).enumerate() {
            // SAFETY: row r of the validated source, only read.
            let x = unsafe { b.read_row(b.row_index(r), false, &mut buf)? };
            convert::from_f32(vt, x, o)?;
        }
        return Ok(());
    }
    assert!(out.len() >= n_y * y_row);
    let base = SendPtr(out.as_mut_ptr());
    pool::try_for_each_init(n_y, Vec::new, |buf, r| {
        // SAFETY: row r of the validated source, only read.
        let x = unsafe { b.read_row(b.row_index(r), false, buf)? };
        // SAFETY: row r's `y_row` bytes lie inside `out` (checked above),
        // and each index is handed to one thread only.
        let o = unsafe { std::slice::from_raw_parts_mut(base.get().add(r * y_row), y_row) };
        convert::from_f32(vt, x, o)
    })
}

/// `a` itself when its rows are dense, else a dense copy of it in `buf`.
pub(crate) fn dense_rows(a: &View, buf: &mut AlignedBytes) -> View {
    if a.dense_rows() {
        a.clone()
    } else {
        dense_copy(a, buf)
    }
}

/// A dense copy of a float tensor whose rows are strided.
pub(crate) fn dense_copy(a: &View, buf: &mut AlignedBytes) -> View {
    let rb = a.ne[0] * a.ty.type_size();
    *buf = AlignedBytes::zeroed(rb * a.n_rows());
    let bytes = buf.bytes_mut();
    let es = a.ty.type_size();
    for r in 0..a.n_rows() {
        let p = a.row_ptr(a.row_index(r));
        for (j, o) in bytes[r * rb..(r + 1) * rb].chunks_exact_mut(es).enumerate() {
            // SAFETY: element j of row r lies inside the validated view.
            o.copy_from_slice(unsafe { std::slice::from_raw_parts(p.add(j * a.nb[0]), es) });
        }
    }
    View::over(bytes, a.ty, a.ne)
}
