//! The grid i-quants IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S and
//! IQ1_M: dequantization (ggml's arithmetic order) and an integer view of a
//! super-block for the reference dot products. Their quantizers (which
//! ggml runs only with an importance matrix for IQ2_XXS, IQ2_XS and IQ1_S)
//! are in `iq_grid_quant.rs` and `iq1_quant.rs`.

use super::blocks::{
    BlockIq1M, BlockIq1S, BlockIq2S, BlockIq2Xs, BlockIq2Xxs, BlockIq3S, BlockIq3Xxs, QK_K,
};
use super::fp::{fp16_to_fp32, h2f};
use super::tables::{
    IQ1S_DELTA, IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID, KMASK_IQ2XS,
    KSIGNS_IQ2XS,
};

/// A super-block as integers: weight `i` is
/// `d * factor * ls[i / 16] * (q[i] + IQ1S_DELTA * delta[i / 8])`.
pub(crate) struct GridInts {
    /// f16 scale of the super-block.
    pub d: f32,
    /// Constant factor of the type (0.125 for IQ2, 0.25 for IQ3_XXS, 1 otherwise).
    pub factor: f32,
    /// Signed grid values.
    pub q: [i8; QK_K],
    /// Odd integer scale of each 16 weights.
    pub ls: [i32; QK_K / 16],
    /// Sign of the IQ1 offset of each 8 weights (0 for the other types).
    pub delta: [i8; QK_K / 8],
}

impl GridInts {
    fn new(d: f32, factor: f32) -> Self {
        Self {
            d,
            factor,
            q: [0; QK_K],
            ls: [0; QK_K / 16],
            delta: [0; QK_K / 8],
        }
    }
}

#[inline]
fn sign(signs: u8, j: usize) -> f32 {
    if signs & KMASK_IQ2XS[j] != 0 {
        -1.0
    } else {
        1.0
    }
}

#[inline]
fn signed(v: u8, signs: u8, j: usize) -> i8 {
    if signs & KMASK_IQ2XS[j] != 0 {
        -(v as i8)
    } else {
        v as i8
    }
}

/// The two u32 words of group `ib` of IQ2_XXS: grid indices, and signs + scale.
fn iq2xxs_words(b: &BlockIq2Xxs, ib: usize) -> (u32, u32) {
    let q = &b.qs[4 * ib..4 * ib + 4];
    (
        u32::from(q[0]) | (u32::from(q[1]) << 16),
        u32::from(q[2]) | (u32::from(q[3]) << 16),
    )
}

impl BlockIq2Xxs {
    pub(crate) fn dequantize(&self, y: &mut [f32]) {
        let d = h2f(self.d);
        for (ib, y) in y.chunks_exact_mut(32).enumerate() {
            let (idx, hi) = iq2xxs_words(self, ib);
            let db = d * (0.5 + (hi >> 28) as f32) * 0.25;
            for (l, y) in y.chunks_exact_mut(8).enumerate() {
                let grid = &IQ2XXS_GRID[((idx >> (8 * l)) & 255) as usize];
                let signs = KSIGNS_IQ2XS[((hi >> (7 * l)) & 127) as usize];
                for j in 0..8 {
                    y[j] = db * f32::from(grid[j]) * sign(signs, j);
                }
            }
        }
    }

    pub(crate) fn ints(&self) -> GridInts {
        let mut g = GridInts::new(h2f(self.d), 0.125);
        for ib in 0..8 {
            let (idx, hi) = iq2xxs_words(self, ib);
            let ls = 2 * (hi >> 28) as i32 + 1;
            g.ls[2 * ib] = ls;
            g.ls[2 * ib + 1] = ls;
            for l in 0..4 {
                let grid = &IQ2XXS_GRID[((idx >> (8 * l)) & 255) as usize];
                let signs = KSIGNS_IQ2XS[((hi >> (7 * l)) & 127) as usize];
                for j in 0..8 {
                    g.q[32 * ib + 8 * l + j] = signed(grid[j], signs, j);
                }
            }
        }
        g
    }
}

/// Dequantizes an IQ2_XS / IQ2_S super-block, which differ only in how a
/// grid point is stored: 8 groups of 32 weights with a 4-bit scale per 16,
/// `point(ib, l)` the grid row and sign byte of the 8 weights `l` of group
/// `ib`.
fn dequantize_iq2_nibble_scaled(
    d: half::f16,
    scales: &[u8; QK_K / 32],
    point: impl Fn(usize, usize) -> (&'static [u8; 8], u8),
    y: &mut [f32],
) {
    let d = h2f(d);
    for (ib, y) in y.chunks_exact_mut(32).enumerate() {
        let sc = scales[ib];
        let db = [
            d * (0.5 + f32::from(sc & 0x0f)) * 0.25,
            d * (0.5 + f32::from(sc >> 4)) * 0.25,
        ];
        for (l, y) in y.chunks_exact_mut(8).enumerate() {
            let (grid, signs) = point(ib, l);
            for j in 0..8 {
                y[j] = db[l / 2] * f32::from(grid[j]) * sign(signs, j);
            }
        }
    }
}

/// The integer view of an IQ2_XS / IQ2_S super-block (see
/// [`dequantize_iq2_nibble_scaled`]).
fn ints_iq2_nibble_scaled(
    d: half::f16,
    scales: &[u8; QK_K / 32],
    point: impl Fn(usize, usize) -> (&'static [u8; 8], u8),
) -> GridInts {
    let mut g = GridInts::new(h2f(d), 0.125);
    for ib in 0..8 {
        let sc = scales[ib];
        g.ls[2 * ib] = 2 * i32::from(sc & 0x0f) + 1;
        g.ls[2 * ib + 1] = 2 * i32::from(sc >> 4) + 1;
        for l in 0..4 {
            let (grid, signs) = point(ib, l);
            for j in 0..8 {
                g.q[32 * ib + 8 * l + j] = signed(grid[j], signs, j);
            }
        }
    }
    g
}

impl BlockIq2Xs {
    /// Grid row and sign byte of the 8 weights `l` of group `ib`.
    fn point(&self, ib: usize, l: usize) -> (&'static [u8; 8], u8) {
        let q = self.qs[4 * ib + l];
        (
            &IQ2XS_GRID[usize::from(q & 511)],
            KSIGNS_IQ2XS[usize::from(q >> 9)],
        )
    }

    pub(crate) fn dequantize(&self, y: &mut [f32]) {
        dequantize_iq2_nibble_scaled(self.d, &self.scales, |ib, l| self.point(ib, l), y);
    }

    pub(crate) fn ints(&self) -> GridInts {
        ints_iq2_nibble_scaled(self.d, &self.scales, |ib, l| self.point(ib, l))
    }
}

impl BlockIq2S {
    /// Grid row and sign byte of the 8 weights `l` of group `ib`.
    fn point(&self, ib: usize, l: usize) -> (&'static [u8; 8], u8) {
        let low = usize::from(self.qs[4 * ib + l]);
        let high = (usize::from(self.qh[ib]) << (8 - 2 * l)) & 0x300;
        (&IQ2S_GRID[low | high], self.qs[QK_K / 8 + 4 * ib + l])
    }

    pub(crate) fn dequantize(&self, y: &mut [f32]) {
        dequantize_iq2_nibble_scaled(self.d, &self.scales, |ib, l| self.point(ib, l), y);
    }

    pub(crate) fn ints(&self) -> GridInts {
        ints_iq2_nibble_scaled(self.d, &self.scales, |ib, l| self.point(ib, l))
    }
}

/// Two 4-value grid points and the sign byte of 8 weights (IQ3_XXS,
/// IQ3_S).
type GridPair = (&'static [u8; 4], &'static [u8; 4], u8);

/// The 8 weights of a [`GridPair`] scaled by `db`.
fn dequantize_pair(y: &mut [f32], db: f32, (g1, g2, signs): GridPair) {
    for j in 0..4 {
        y[j] = db * f32::from(g1[j]) * sign(signs, j);
        y[j + 4] = db * f32::from(g2[j]) * sign(signs, j + 4);
    }
}

/// The 8 signed grid values of a [`GridPair`].
fn signed_pair(q: &mut [i8], (g1, g2, signs): GridPair) {
    for j in 0..4 {
        q[j] = signed(g1[j], signs, j);
        q[j + 4] = signed(g2[j], signs, j + 4);
    }
}

impl BlockIq3Xxs {
    /// The sign + scale word of group `ib`.
    fn word(&self, ib: usize) -> u32 {
        let o = QK_K / 4 + 4 * ib;
        u32::from_le_bytes([self.qs[o], self.qs[o + 1], self.qs[o + 2], self.qs[o + 3]])
    }

    /// The grid points and signs of the 8 weights `l` of group `ib`, whose
    /// sign + scale word is `aux`.
    fn points(&self, ib: usize, l: usize, aux: u32) -> GridPair {
        (
            &IQ3XXS_GRID[usize::from(self.qs[8 * ib + 2 * l])],
            &IQ3XXS_GRID[usize::from(self.qs[8 * ib + 2 * l + 1])],
            KSIGNS_IQ2XS[((aux >> (7 * l)) & 127) as usize],
        )
    }

    pub(crate) fn dequantize(&self, y: &mut [f32]) {
        let d = h2f(self.d);
        for (ib, y) in y.chunks_exact_mut(32).enumerate() {
            let aux = self.word(ib);
            let db = d * (0.5 + (aux >> 28) as f32) * 0.5;
            for (l, y) in y.chunks_exact_mut(8).enumerate() {
                dequantize_pair(y, db, self.points(ib, l, aux));
            }
        }
    }

    pub(crate) fn ints(&self) -> GridInts {
        let mut g = GridInts::new(h2f(self.d), 0.25);
        for ib in 0..8 {
            let aux = self.word(ib);
            let ls = 2 * (aux >> 28) as i32 + 1;
            g.ls[2 * ib] = ls;
            g.ls[2 * ib + 1] = ls;
            for l in 0..4 {
                let o = 32 * ib + 8 * l;
                signed_pair(&mut g.q[o..o + 8], self.points(ib, l, aux));
            }
        }
        g
    }
}

impl BlockIq3S {
    /// The two grid points and the sign byte of the 8 weights `l` of group `ib`.
    fn points(&self, ib: usize, l: usize) -> GridPair {
        let qh = usize::from(self.qh[ib]);
        let q0 = usize::from(self.qs[8 * ib + 2 * l]);
        let q1 = usize::from(self.qs[8 * ib + 2 * l + 1]);
        let i0 = q0 | ((qh << (8 - 2 * l)) & 256);
        let i1 = q1 | ((qh << (7 - 2 * l)) & 256);
        (&IQ3S_GRID[i0], &IQ3S_GRID[i1], self.signs[4 * ib + l])
    }

    /// The odd integer scale of group `ib` (two groups share a byte).
    fn group_scale(&self, ib: usize) -> i32 {
        let s = self.scales[ib / 2];
        1 + 2 * i32::from(if ib.is_multiple_of(2) {
            s & 0x0f
        } else {
            s >> 4
        })
    }

    pub(crate) fn dequantize(&self, y: &mut [f32]) {
        let d = h2f(self.d);
        for (ib, y) in y.chunks_exact_mut(32).enumerate() {
            let db = d * self.group_scale(ib) as f32;
            for (l, y) in y.chunks_exact_mut(8).enumerate() {
                dequantize_pair(y, db, self.points(ib, l));
            }
        }
    }

    pub(crate) fn ints(&self) -> GridInts {
        let mut g = GridInts::new(h2f(self.d), 1.0);
        for ib in 0..8 {
            let ls = self.group_scale(ib);
            g.ls[2 * ib] = ls;
            g.ls[2 * ib + 1] = ls;
            for l in 0..4 {
                let o = 32 * ib + 8 * l;
                signed_pair(&mut g.q[o..o + 8], self.points(ib, l));
            }
        }
        g
    }
}

impl BlockIq1S {
    fn grid(&self, ib: usize, l: usize) -> &'static [i8; 8] {
        let idx =
            usize::from(self.qs[4 * ib + l]) | ((usize::from(self.qh[ib] >> (3 * l)) & 7) << 8);
        &IQ1S_GRID[idx]
    }

    pub(crate) fn dequantize(&self, y: &mut [f32]) {
        let d = h2f(self.d);
        for (ib, y) in y.chunks_exact_mut(32).enumerate() {
            let qh = self.qh[ib];
            let dl = d * (2 * ((qh >> 12) & 7) + 1) as f32;
            let delta = if qh & 0x8000 != 0 {
                -IQ1S_DELTA
            } else {
                IQ1S_DELTA
            };
            for (l, y) in y.chunks_exact_mut(8).enumerate() {
                let grid = self.grid(ib, l);
                for j in 0..8 {
                    y[j] = dl * (f32::from(grid[j]) + delta);
                }
            }
        }
    }

    pub(crate) fn ints(&self) -> GridInts {
        let mut g = GridInts::new(h2f(self.d), 1.0);
        for ib in 0..8 {
            let qh = self.qh[ib];
            let ls = 2 * i32::from((qh >> 12) & 7) + 1;
            g.ls[2 * ib] = ls;
            g.ls[2 * ib + 1] = ls;
            let delta = if qh & 0x8000 != 0 { -1 } else { 1 };
            for l in 0..4 {
                g.q[32 * ib + 8 * l..32 * ib + 8 * l + 8].copy_from_slice(self.grid(ib, l));
                g.delta[4 * ib + l] = delta;
            }
        }
        g
    }
}

impl BlockIq1M {
    /// The four scale words.
    fn words(&self) -> [u16; 4] {
        let s = &self.scales;
        [0, 1, 2, 3].map(|k| u16::from_le_bytes([s[2 * k], s[2 * k + 1]]))
    }

    /// The f16 bits of the super-block scale, assembled from the top nibbles
    /// of the scale words.
    pub(crate) fn scale_bits(&self) -> u16 {
        let sc = self.words();
        (sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000)
    }

    /// The super-block scale.
    pub(crate) fn scale(&self) -> f32 {
        fp16_to_fp32(self.scale_bits())
    }

    /// Grid index and delta sign of the 8 weights `l` of group `ib`.
    fn point(&self, ib: usize, l: usize) -> (&'static [i8; 8], bool) {
        let qh = self.qh[2 * ib + l / 2];
        let nib = if l.is_multiple_of(2) {
            qh & 0x0f
        } else {
            qh >> 4
        };
        let idx = usize::from(self.qs[4 * ib + l]) | (usize::from(nib & 7) << 8);
        (&IQ1S_GRID[idx], nib & 0x08 != 0)
    }

    /// The odd integer scales of the two halves of group `ib`.
    fn group_scales(&self, ib: usize) -> [i32; 2] {
        let w = self.words()[ib / 2];
        let s = 6 * (ib % 2);
        [
            2 * i32::from((w >> s) & 7) + 1,
            2 * i32::from((w >> (s + 3)) & 7) + 1,
        ]
    }

    pub(crate) fn dequantize(&self, y: &mut [f32]) {
        let d = self.scale();
        for (ib, y) in y.chunks_exact_mut(32).enumerate() {
            let ls = self.group_scales(ib);
            let dl = [d * ls[0] as f32, d * ls[1] as f32];
            for (l, y) in y.chunks_exact_mut(8).enumerate() {
                let (grid, neg) = self.point(ib, l);
                let delta = if neg { -IQ1S_DELTA } else { IQ1S_DELTA };
                for j in 0..8 {
                    y[j] = dl[l / 2] * (f32::from(grid[j]) + delta);
                }
            }
        }
    }

    pub(crate) fn ints(&self) -> GridInts {
        let mut g = GridInts::new(self.scale(), 1.0);
        for ib in 0..8 {
            let ls = self.group_scales(ib);
            g.ls[2 * ib] = ls[0];
            g.ls[2 * ib + 1] = ls[1];
            for l in 0..4 {
                let (grid, neg) = self.point(ib, l);
                g.q[32 * ib + 8 * l..32 * ib + 8 * l + 8].copy_from_slice(grid);
                g.delta[4 * ib + l] = if neg { -1 } else { 1 };
            }
        }
        g
    }
}
