//! The search tables of the grid i-quant quantizers, built once on first
//! use (ggml's `iq2xs_init_impl` / `iq3xs_init_impl`): each grid point as
//! odd integers `2 l + 1`, a map from every packed level vector to its grid
//! index, and for each vector off the grid the list of its nearest grid
//! points (those at the `nwant` smallest squared distances, by distance
//! then index), which the quantizers search when rounding lands off the
//! grid.

use std::sync::OnceLock;

use super::grid_data::{
    IQ1S_PACKED, IQ2S_PACKED, IQ2XS_PACKED, IQ2XXS_PACKED, IQ3S_PACKED, IQ3XXS_PACKED,
};

/// The search tables of one grid of `W`-wide points.
pub(crate) struct GridSearch<const W: usize> {
    /// Grid points, coordinates `2 l + 1`.
    pub points: Vec<[i8; W]>,
    /// For each packed level vector: its grid index (>= 0), or
    /// `-(offset + 1)` of its neighbour list in `neighbours`.
    map: Vec<i32>,
    /// Neighbour lists: a count, then that many grid indices.
    neighbours: Vec<u16>,
}

/// What a grid's vectors look like.
struct Shape {
    /// Bits per coordinate of a vector (the map's index).
    bits: usize,
    /// Bits between coordinates in the compact grid tables.
    packed_stride: usize,
    /// Number of packed vectors mapped.
    map_size: usize,
    /// Distinct distances whose points make a neighbour list.
    nwant: usize,
}

impl<const W: usize> GridSearch<W> {
    fn build(packed: &[u16], shape: Shape) -> GridSearch<W> {
        let mask = (1u16 << shape.bits) - 1;
        let coords = |v: usize| -> [i8; W] {
            std::array::from_fn(|k| 2 * ((v >> (shape.bits * k)) as u16 & mask) as i8 + 1)
        };
        // The compact grids keep a coordinate every `packed_stride` bits;
        // the map indexes vectors with `bits` per coordinate.
        let index = |p: u16| -> usize {
            (0..W)
                .map(|k| (((p >> (shape.packed_stride * k)) & mask) as usize) << (shape.bits * k))
                .sum()
        };
        let points: Vec<[i8; W]> = packed.iter().map(|&p| coords(index(p))).collect();
        let mut map = vec![-1i32; shape.map_size];
        for (i, &p) in packed.iter().enumerate() {
            map[index(p)] = i as i32;
        }
        // The lists of the vectors off the grid, computed in parallel
        // (each alone, so the tables do not depend on the thread count)
        // and laid out in vector order.
        let off: Vec<usize> = (0..shape.map_size).filter(|&u| map[u] < 0).collect();
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(8));
        let per = off.len().div_ceil(threads).max(1);
        let parts: Vec<Vec<u16>> = std::thread::scope(|s| {
            let handles: Vec<_> = off
                .chunks(per)
                .map(|chunk| {
                    let (points, shape) = (&points, &shape);
                    s.spawn(move || {
                        let mut out = Vec::new();
                        for &u in chunk {
                            neighbour_list(points, coords(u), shape.nwant, &mut out);
                        }
                        out
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
                .collect()
        });
        let neighbours: Vec<u16> = parts.concat();
        let mut at = 0usize;
        for &u in &off {
            map[u] = -(at as i32 + 1);
            at += 1 + neighbours[at] as usize;
        }
        GridSearch {
            points,
            map,
            neighbours,
        }
    }

    /// The grid index of the packed level vector `u`, or its neighbour list.
    #[inline]
    pub fn lookup(&self, u: usize) -> Result<usize, &[u16]> {
        let m = self.map[u];
        if m >= 0 {
            Ok(m as usize)
        } else {
            let at = (-m - 1) as usize;
            let n = self.neighbours[at] as usize;
            Err(&self.neighbours[at + 1..at + 1 + n])
        }
    }
}

/// Appends the neighbour list of the vector at `pos`: its count, then
/// the grid points at the `nwant` smallest squared distances, by distance
/// then index.
fn neighbour_list<const W: usize>(
    points: &[[i8; W]],
    pos: [i8; W],
    nwant: usize,
    out: &mut Vec<u16>,
) {
    let d2: Vec<u32> = points
        .iter()
        .map(|p| {
            p.iter()
                .zip(&pos)
                .map(|(&a, &b)| ((a as i32 - b as i32) * (a as i32 - b as i32)) as u32)
                .sum()
        })
        .collect();
    let mut seen: Vec<u32> = Vec::with_capacity(nwant + 1);
    for &d in &d2 {
        if let Err(i) = seen.binary_search(&d) {
            if i < nwant {
                seen.insert(i, d);
                seen.truncate(nwant);
            }
        }
    }
    let at = out.len();
    out.push(0);
    for &want in &seen {
        for (j, &d) in d2.iter().enumerate() {
            if d == want {
                out.push(j as u16);
            }
        }
    }
    out[at] = (out.len() - at - 1) as u16;
}

/// The tables of IQ2_XXS (256 points, neighbours at 2 distances).
pub(crate) fn iq2xxs() -> &'static GridSearch<8> {
    static T: OnceLock<GridSearch<8>> = OnceLock::new();
    T.get_or_init(|| GridSearch::build(&IQ2XXS_PACKED, iq2_shape(2)))
}

/// The tables of IQ2_XS (512 points, neighbours at 2 distances).
pub(crate) fn iq2xs() -> &'static GridSearch<8> {
    static T: OnceLock<GridSearch<8>> = OnceLock::new();
    T.get_or_init(|| GridSearch::build(&IQ2XS_PACKED, iq2_shape(2)))
}

/// The tables of IQ2_S (1024 points, neighbours at 1 distance).
pub(crate) fn iq2s() -> &'static GridSearch<8> {
    static T: OnceLock<GridSearch<8>> = OnceLock::new();
    T.get_or_init(|| GridSearch::build(&IQ2S_PACKED, iq2_shape(1)))
}

/// The tables of IQ1_S and IQ1_M (2048 points, neighbours at 3 distances).
pub(crate) fn iq1s() -> &'static GridSearch<8> {
    static T: OnceLock<GridSearch<8>> = OnceLock::new();
    T.get_or_init(|| GridSearch::build(&IQ1S_PACKED, iq2_shape(3)))
}

/// The tables of IQ3_XXS (256 points, neighbours at 2 distances).
pub(crate) fn iq3xxs() -> &'static GridSearch<4> {
    static T: OnceLock<GridSearch<4>> = OnceLock::new();
    T.get_or_init(|| GridSearch::build(&IQ3XXS_PACKED, iq3_shape(2)))
}

/// The tables of IQ3_S (512 points, neighbours at 3 distances).
pub(crate) fn iq3s() -> &'static GridSearch<4> {
    static T: OnceLock<GridSearch<4>> = OnceLock::new();
    T.get_or_init(|| GridSearch::build(&IQ3S_PACKED, iq3_shape(3)))
}

fn iq2_shape(nwant: usize) -> Shape {
    Shape {
        bits: 2,
        packed_stride: 2,
        map_size: 43692,
        nwant,
    }
}

fn iq3_shape(nwant: usize) -> Shape {
    Shape {
        bits: 3,
        packed_stride: 4,
        map_size: 4096,
        nwant,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_points_map_to_themselves_and_others_to_their_nearest() {
        let t = iq2xxs();
        assert_eq!(t.points.len(), 256);
        assert_eq!(t.lookup(IQ2XXS_PACKED[7] as usize), Ok(7));
        // A vector off the grid: its neighbours are sorted by distance.
        let off = (0..43692usize)
            .find(|&u| t.lookup(u).is_err() && (0..8).all(|k| (u >> (2 * k)) & 3 < 3))
            .unwrap();
        let n = t.lookup(off).unwrap_err();
        assert!(!n.is_empty());
        let pos: Vec<i32> = (0..8)
            .map(|k| 2 * ((off >> (2 * k)) & 3) as i32 + 1)
            .collect();
        let dist = |j: u16| -> i32 {
            t.points[j as usize]
                .iter()
                .zip(&pos)
                .map(|(&a, &b)| (a as i32 - b) * (a as i32 - b))
                .sum()
        };
        for w in n.windows(2) {
            assert!((dist(w[0]), w[0]) < (dist(w[1]), w[1]));
        }
        let s3 = iq3s();
        assert_eq!(s3.points.len(), 512);
        // ggml's word 300 of the IQ3_S grid is 0x07030503: levels 1, 2, 1, 3.
        assert_eq!(s3.points[300], [3, 5, 3, 7]);
        assert_eq!(s3.lookup(1 | (2 << 3) | (1 << 6) | (3 << 9)), Ok(300));
    }
}
