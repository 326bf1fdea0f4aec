//! Value tables of the non-linear and grid quant types, expanded at compile
//! time from their definitions (`grid_data.rs` holds the packed grids).

use super::grid_data::{
    IQ1S_PACKED, IQ2S_PACKED, IQ2XS_PACKED, IQ2XXS_PACKED, IQ3S_PACKED, IQ3XXS_PACKED,
};

/// The 16 levels of IQ4_NL and IQ4_XS.
pub const KVALUES_IQ4NL: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// The FP4 (E2M1) values of MXFP4, doubled so that they are integers.
pub const KVALUES_MXFP4: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// The offset added to the ternary IQ1 grid values (sign chosen per group).
pub const IQ1S_DELTA: f32 = 0.125;

/// Bit `j` selects the sign of element `j` of an 8-wide group.
pub const KMASK_IQ2XS: [u8; 8] = [1, 2, 4, 8, 16, 32, 64, 128];

/// Sign patterns of the IQ2/IQ3 types: a 7-bit code holds the signs of the
/// first 7 elements; the 8th sign makes the number of negatives even.
pub const KSIGNS_IQ2XS: [u8; 128] = {
    let mut t = [0u8; 128];
    let mut i = 0;
    while i < 128 {
        let parity = (i as u8).count_ones() as u8 & 1;
        t[i] = i as u8 | (parity << 7);
        i += 1;
    }
    t
};

/// Levels of the IQ2 grids.
const IQ2_LEVELS: [u8; 4] = [0x08, 0x19, 0x2b, 0];
/// Levels of the IQ3_XXS grid.
const IQ3XXS_LEVELS: [u8; 8] = [0x04, 0x0c, 0x14, 0x1c, 0x24, 0x2c, 0x34, 0x3e];
/// Levels of the IQ3_S grid.
const IQ3S_LEVELS: [u8; 8] = [0x01, 0x03, 0x05, 0x07, 0x09, 0x0b, 0x0d, 0x0f];

/// The values of IQ1's 2-bit coordinates: -1, 0, 1 (and 2, which the
/// grid does not use).
const IQ1_LEVELS: [i8; 4] = [-1, 0, 1, 2];

/// Grid points of `W` coordinates from their packed `u16`s: coordinate `k`
/// of point `i` is `levels[(packed[i] >> (stride * k)) & mask]`.
const fn expand<T: Copy, const N: usize, const W: usize>(
    packed: &[u16; N],
    levels: &[T],
    stride: usize,
    mask: u16,
) -> [[T; W]; N] {
    let mut t = [[levels[0]; W]; N];
    let mut i = 0;
    while i < N {
        let mut k = 0;
        while k < W {
            t[i][k] = levels[((packed[i] >> (stride * k)) & mask) as usize];
            k += 1;
        }
        i += 1;
    }
    t
}

/// IQ2_XXS grid: 256 points of 8 magnitudes.
pub static IQ2XXS_GRID: [[u8; 8]; 256] = expand(&IQ2XXS_PACKED, &IQ2_LEVELS, 2, 3);
/// IQ2_XS grid: 512 points of 8 magnitudes.
pub static IQ2XS_GRID: [[u8; 8]; 512] = expand(&IQ2XS_PACKED, &IQ2_LEVELS, 2, 3);
/// IQ2_S grid: 1024 points of 8 magnitudes.
pub static IQ2S_GRID: [[u8; 8]; 1024] = expand(&IQ2S_PACKED, &IQ2_LEVELS, 2, 3);
/// IQ3_XXS grid: 256 points of 4 magnitudes.
pub static IQ3XXS_GRID: [[u8; 4]; 256] = expand(&IQ3XXS_PACKED, &IQ3XXS_LEVELS, 4, 7);
/// IQ3_S grid: 512 points of 4 magnitudes.
pub static IQ3S_GRID: [[u8; 4]; 512] = expand(&IQ3S_PACKED, &IQ3S_LEVELS, 4, 7);
/// IQ1_S / IQ1_M grid: 2048 points of 8 values in {-1, 0, 1}.
pub static IQ1S_GRID: [[i8; 8]; 2048] = expand(&IQ1S_PACKED, &IQ1_LEVELS, 2, 3);

#[cfg(test)]
mod tests {
    use super::*;

    fn word8(g: &[u8; 8]) -> u64 {
        u64::from_le_bytes(*g)
    }

    #[test]
    fn grids_match_ggml_words() {
        // Spot checks against the u64 / u32 words of ggml's tables.
        assert_eq!(word8(&IQ2XXS_GRID[0]), 0x0808080808080808);
        assert_eq!(word8(&IQ2XXS_GRID[1]), 0x080808080808082b);
        assert_eq!(word8(&IQ2XXS_GRID[255]), 0x2b2b2b1908081908);
        assert_eq!(word8(&IQ2XS_GRID[5]), 0x0808080808190819);
        assert_eq!(word8(&IQ2XS_GRID[50]), 0x080808192b080819);
        assert_eq!(word8(&IQ2S_GRID[1023]), 0x2b2b2b2b2b2b2b2b);
        assert_eq!(u32::from_le_bytes(IQ3XXS_GRID[100]), 0x14040c1c);
        assert_eq!(u32::from_le_bytes(IQ3XXS_GRID[255]), 0x3e341c04);
        assert_eq!(u32::from_le_bytes(IQ3S_GRID[300]), 0x07030503);
        assert_eq!(u32::from_le_bytes(IQ3S_GRID[511]), 0x0f0f0101);
        assert_eq!(IQ1S_GRID[0], [-1; 8]);
        assert_eq!(IQ1S_GRID[1], [1, -1, -1, -1, -1, -1, -1, -1]);
        assert_eq!(IQ1S_GRID[2047], [1; 8]);
    }

    #[test]
    fn signs_have_even_parity() {
        assert_eq!(&KSIGNS_IQ2XS[..8], &[0, 129, 130, 3, 132, 5, 6, 135]);
        assert_eq!(KSIGNS_IQ2XS[127], 255);
        for s in KSIGNS_IQ2XS {
            assert_eq!(s.count_ones() % 2, 0);
        }
    }
}
