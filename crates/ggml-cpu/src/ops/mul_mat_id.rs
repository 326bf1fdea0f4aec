//! MUL_MAT_ID: for every token `t` and slot `e`, the expert matrix
//! `ids[e, t]` times activation column `b[:, e % b.ne1, t]`.
//!
//! The (slot, token) pairs are first grouped by expert, so that each
//! expert's weights are read once per call however many tokens chose it
//! (a ubatch of 512 tokens with 8 of 128 experts each reads every expert
//! once instead of 32 times). The activations are converted once to the
//! weight type's partner, as for MUL_MAT; then the team works on tiles of
//! one expert's rows x all the columns that chose it, with MUL_MAT's
//! kernels: a panel kernel when an expert has many columns, the row dot
//! products otherwise. Experts nobody chose are never read.
//!
//! Expert weights stored repacked (`CPU_REPACK`, see `crate::repack`) are
//! already panels, one expert's matrix after the other: every expert then
//! runs the panel kernel straight from memory whatever its column count,
//! token generation included (one column per selected expert), which
//! streams the weights faster than the row kernels do.

use std::cell::RefCell;
use std::ops::Range;

use ggml_core::Result;

use crate::compute::{NodeCtx, Workspace};
use crate::matmul::{
    dense_rows, expand_panels, pack_panels, partner, prepare_columns, stored_panels, weight_row,
    ColumnSource, RowDot, TILES_PER_THREAD, TILE_WEIGHT_BYTES,
};
use crate::ops::read_index;
use crate::pool;
use crate::simd::{self, Gemm, Wide, GEMM_COLS, MAX_COLS, MAX_ROWS, PANEL_ROWS};
use crate::tensor::{AlignedBytes, View};

/// Multiply-adds below which the call runs on the calling thread.
const SERIAL_WORK: usize = 64 * 1024;

thread_local! {
    /// Packed panels of the tile a thread works on, kept between calls.
    static PANELS: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// The (slot, token) pairs of every expert, grouped by expert in token order.
struct Groups {
    /// `pairs[start[x]..start[x + 1]]` chose expert x.
    start: Vec<usize>,
    pairs: Vec<(u32, u32)>,
}

impl Groups {
    /// Groups the ids (a counting sort by expert); an id outside
    /// `0..n_expert` is an error naming the node.
    fn new(ctx: &NodeCtx<'_>, ids: &View, n_expert: usize) -> Result<Groups> {
        let (n_used, n_tok) = (ids.ne[0], ids.ne[1]);
        let mut chosen = Vec::with_capacity(n_used * n_tok);
        let mut start = vec![0usize; n_expert + 1];
        for t in 0..n_tok {
            for e in 0..n_used {
                // SAFETY: (e, t) is inside the I32 ids tensor.
                let x = unsafe { read_index(ids, [e, t, 0, 0]) };
                if x < 0 || x as usize >= n_expert {
                    return Err(ctx.err(format!(
                        "expert id {x} of slot {e}, token {t} is outside 0..{n_expert}"
                    )));
                }
                start[x as usize + 1] += 1;
                chosen.push(x as usize);
            }
        }
        for x in 0..n_expert {
            start[x + 1] += start[x];
        }
        let mut fill = start.clone();
        let mut pairs = vec![(0u32, 0u32); chosen.len()];
        for (i, &x) in chosen.iter().enumerate() {
            pairs[fill[x]] = ((i % n_used) as u32, (i / n_used) as u32);
            fill[x] += 1;
        }
        Ok(Groups { start, pairs })
    }

    fn of(&self, x: usize) -> &[(u32, u32)] {
        &self.pairs[self.start[x]..self.start[x + 1]]
    }
}

/// One unit of work: rows of one expert against all its columns.
struct Task {
    expert: usize,
    rows: Range<usize>,
    kernel: Kernel,
}

/// How a [`Task`] computes.
#[derive(Clone, Copy)]
enum Kernel {
    /// The row dot products.
    Rows,
    /// The panel kernel, on panels as stored or packed for the call.
    Panels,
    /// The stored layout's wide kernel, on its panels expanded for the call.
    Wide(&'static Wide),
}

/// Columns (tokens) of one expert from which its rows are packed for the
/// panel kernel. Lower than MUL_MAT's `GEMM_MIN_COLS`: a prompt spreads
/// its tokens over the experts (256 tokens x 8 of 128 experts: 16 each on
/// average, many fewer), and packing an expert for 4 columns already
/// beats the row kernels (Qwen3-30B-A3B-shaped Q4_K_M, pp256 on 1 thread,
/// AVX2, alternated: 251-301 t/s with 16, 263-356 with 4).
const ID_GEMM_MIN_COLS: usize = 4;

/// MUL_MAT_ID with the best kernels of this CPU, or with the panel kernel
/// of the weights' layout when they are stored repacked (`ctx.packed`).
pub(crate) fn mul_mat_id(ctx: &NodeCtx<'_>, ws: &mut Workspace) -> Result<()> {
    let (b, ids, d) = (&ctx.src[1], &ctx.src[2], &ctx.dst);
    let stored = ctx.packed;
    let mut a_copy = AlignedBytes::default();
    let a = &match stored {
        // Panels as stored; their rows are not ggml's and are never read
        // as rows.
        Some(_) => ctx.src[0].clone(),
        None => dense_rows(&ctx.src[0], &mut a_copy),
    };
    let kern = simd::kernels();
    let (k, m, n_expert) = (a.ne[0], a.ne[1], a.ne[2]);
    let groups = Groups::new(ctx, ids, n_expert)?;
    let vt = partner(a.ty)?;
    let ys = ColumnSource::new(b, vt, k, &mut ws.act)?;
    let gemm = stored.or_else(|| Some(kern.gemm(a.ty)?.for_packed_rows()));
    let threads = pool::current_num_threads().max(1);

    // Columns are prepared for the panel kernel when the weights are
    // stored as panels, else only when an expert has enough of them to
    // repay packing its rows.
    let any_gemm = stored.is_some()
        || (gemm.is_some() && (0..n_expert).any(|x| groups.of(x).len() >= ID_GEMM_MIN_COLS));
    let prep: &[u8] = match (any_gemm, gemm) {
        (true, Some(g)) => prepare_columns(g, &ys, b, k, &mut ws.prep),
        _ => &[],
    };

    let active: Vec<usize> = (0..n_expert)
        .filter(|&x| !groups.of(x).is_empty())
        .collect();
    let tiles_per_expert = (threads * TILES_PER_THREAD).div_ceil(active.len().max(1));
    let row_bytes = a.row_bytes().max(1);
    let mut tasks = Vec::new();
    for &x in &active {
        let n_cols = groups.of(x).len();
        let wide = stored.and_then(|g| g.wide_for(n_cols));
        let kernel = if let Some(w) = wide {
            Kernel::Wide(w)
        } else if stored.is_some() || (any_gemm && n_cols >= ID_GEMM_MIN_COLS) {
            Kernel::Panels
        } else {
            Kernel::Rows
        };
        // Weights read once per call (few columns) need no cache-sized
        // tiles: each task streams through its rows.
        let once = if stored.is_some() {
            GEMM_COLS
        } else {
            MAX_COLS
        };
        let cached_row_bytes = match wide {
            Some(w) => (w.gemm.panel_bytes)(k) / PANEL_ROWS,
            None => row_bytes,
        };
        let rows_cache = if n_cols <= once {
            m
        } else {
            (TILE_WEIGHT_BYTES / cached_row_bytes.max(1)).max(PANEL_ROWS)
        };
        let per_tile = m
            .div_ceil(tiles_per_expert)
            .min(rows_cache)
            .next_multiple_of(PANEL_ROWS);
        let mut r = 0;
        while r < m {
            let end = (r + per_tile).min(m);
            tasks.push(Task {
                expert: x,
                rows: r..end,
                kernel,
            });
            r = end;
        }
    }

    let dot = RowDot::for_type(kern, a.ty);
    let nb1 = b.ne[1];
    let dptr = d.ptr;
    let put = |r: usize, (e, t): (u32, u32), v: f32| {
        let o = r * d.nb[0] + e as usize * d.nb[1] + t as usize * d.nb[2];
        // SAFETY: element (r, e, t) of the F32 result is in bounds and
        // aligned; each (row, slot, token) belongs to one expert's group and
        // to one row tile of it, so one task writes it.
        unsafe { (dptr.get().add(o) as *mut f32).write(v) };
    };
    let run = |t: usize| {
        let task = &tasks[t];
        let cols = groups.of(task.expert);
        match (task.kernel, gemm) {
            (Kernel::Rows, _) | (_, None) => dot_tile(dot, a, task, cols, &ys, nb1, &put),
            (kernel, Some(g)) => PANELS.with_borrow_mut(|buf| {
                if stored.is_none() {
                    let rows = |r| weight_row(a, r, task.expert, 0);
                    let panels = pack_panels(g, k, task.rows.clone(), rows, buf);
                    return panel_tile(g, k, panels, task, cols, prep, nb1, &put);
                }
                // Stored panels; tasks start on a panel boundary. The wide
                // kernel takes the same prepared columns.
                debug_assert!(task.rows.start % PANEL_ROWS == 0);
                let (p0, np) = (
                    task.rows.start / PANEL_ROWS,
                    task.rows.len().div_ceil(PANEL_ROWS),
                );
                let panels = stored_panels(g, a, task.expert, p0, np);
                match kernel {
                    Kernel::Wide(w) => {
                        let wide = expand_panels(g, w, k, panels, buf);
                        panel_tile(w.gemm, k, wide, task, cols, prep, nb1, &put)
                    }
                    _ => panel_tile(g, k, panels, task, cols, prep, nb1, &put),
                }
            }),
        }
    };
    let work = groups.pairs.len() * m * k;
    if threads == 1 || tasks.len() <= 1 || work < SERIAL_WORK {
        (0..tasks.len()).for_each(run);
    } else {
        pool::for_each(tasks.len(), run);
    }
    Ok(())
}

/// Rows of one expert by its columns through the row dot products,
/// [`MAX_ROWS`] x [`MAX_COLS`] at a time.
fn dot_tile(
    dot: RowDot,
    a: &View,
    task: &Task,
    cols: &[(u32, u32)],
    ys: &ColumnSource<'_>,
    nb1: usize,
    put: &impl Fn(usize, (u32, u32), f32),
) {
    let k = a.ne[0];
    let mut out = [0f32; MAX_ROWS * MAX_COLS];
    for group in cols.chunks(MAX_COLS) {
        let nc = group.len();
        let mut yr: [&[u8]; MAX_COLS] = [&[]; MAX_COLS];
        for (y, &(e, t)) in yr.iter_mut().zip(group) {
            *y = ys.row(e as usize % nb1, t as usize, 0);
        }
        let mut r0 = task.rows.start;
        while r0 < task.rows.end {
            let nr = if task.rows.end - r0 >= MAX_ROWS {
                MAX_ROWS
            } else {
                1
            };
            let mut xs: [&[u8]; MAX_ROWS] = [&[]; MAX_ROWS];
            for (i, x) in xs.iter_mut().enumerate().take(nr) {
                *x = weight_row(a, r0 + i, task.expert, 0);
            }
            dot.run(k, &xs[..nr], &yr[..nc], &mut out[..nr * nc]);
            for i in 0..nr {
                for (j, &pair) in group.iter().enumerate() {
                    put(r0 + i, pair, out[i * nc + j]);
                }
            }
            r0 += nr;
        }
    }
}

/// Rows of one expert as panels (packed for this call, or as stored) by
/// all its columns [`GEMM_COLS`] at a time.
#[allow(clippy::too_many_arguments)]
fn panel_tile(
    g: &Gemm,
    k: usize,
    panels: &[u8],
    task: &Task,
    cols: &[(u32, u32)],
    prep: &[u8],
    nb1: usize,
    put: &impl Fn(usize, (u32, u32), f32),
) {
    let pb = (g.panel_bytes)(k);
    let ab = (g.act_bytes)(k);
    let r_end = task.rows.end;
    let mut out = [0f32; GEMM_COLS * PANEL_ROWS];
    for group in cols.chunks(GEMM_COLS) {
        let nc = group.len();
        let mut cs: [&[u8]; GEMM_COLS] = [&[]; GEMM_COLS];
        for (c, &(e, t)) in cs.iter_mut().zip(group) {
            let r = t as usize * nb1 + e as usize % nb1;
            *c = &prep[r * ab..(r + 1) * ab];
        }
        for (p, panel) in panels.chunks_exact(pb).enumerate() {
            let r0 = task.rows.start + p * PANEL_ROWS;
            let nr = PANEL_ROWS.min(r_end - r0);
            (g.run)(k, panel, &cs[..nc], &mut out[..nc * PANEL_ROWS]);
            for (j, &pair) in group.iter().enumerate() {
                for i in 0..nr {
                    put(r0 + i, pair, out[j * PANEL_ROWS + i]);
                }
            }
        }
    }
}
