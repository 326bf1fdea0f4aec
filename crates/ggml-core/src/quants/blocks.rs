//! Block layouts of the quantized types, field for field and byte for byte as
//! ggml stores them (all multi-byte fields little-endian, no padding).
//!
//! The structs are `#[repr(C)]` so that `size_of` equals the stored block
//! size, but they are never cast from raw memory: [`Block::read`] decodes
//! one from a byte slice field by field and [`Block::write`] encodes it back.

use half::f16;

use crate::error::{Error, Result};
use crate::Type;

/// Elements per block of Q4_0.
pub const QK4_0: usize = 32;
/// Elements per block of Q4_1.
pub const QK4_1: usize = 32;
/// Elements per block of Q5_0.
pub const QK5_0: usize = 32;
/// Elements per block of Q5_1.
pub const QK5_1: usize = 32;
/// Elements per block of Q8_0.
pub const QK8_0: usize = 32;
/// Elements per block of Q8_1.
pub const QK8_1: usize = 32;
/// Elements per block of IQ4_NL.
pub const QK4_NL: usize = 32;
/// Elements per block of MXFP4.
pub const QK_MXFP4: usize = 32;
/// Elements per super-block of the K-quants and most i-quants.
pub const QK_K: usize = gguf::QK_K;

/// A quantized block: its type, its element count and its stored size.
pub trait Block: Sized + Copy {
    /// The ggml type this block belongs to.
    const TYPE: Type;
    /// Elements per block.
    const BLOCK_SIZE: usize;
    /// Bytes per stored block.
    const BYTES: usize;

    /// Decodes a block from exactly [`Self::BYTES`] bytes.
    fn read(bytes: &[u8]) -> Result<Self>;

    /// Encodes the block into exactly [`Self::BYTES`] bytes.
    fn write(&self, out: &mut [u8]) -> Result<()>;
}

fn size_error(ty: Type, expected: usize, got: usize) -> Error {
    Error::Quant(format!("{ty} block: expected {expected} bytes, got {got}"))
}

/// Reads consecutive little-endian fields from a slice whose length was checked.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let mut a = [0u8; N];
        a.copy_from_slice(&self.bytes[self.at..self.at + N]);
        self.at += N;
        a
    }
}

/// Writes consecutive little-endian fields into a slice whose length was checked.
struct Writer<'a> {
    bytes: &'a mut [u8],
    at: usize,
}

impl Writer<'_> {
    fn put(&mut self, b: &[u8]) {
        self.bytes[self.at..self.at + b.len()].copy_from_slice(b);
        self.at += b.len();
    }
}

/// A field type of a block, with its little-endian encoding.
trait Field: Sized {
    fn get(r: &mut Reader<'_>) -> Self;
    fn put(&self, w: &mut Writer<'_>);
}

impl Field for u8 {
    fn get(r: &mut Reader<'_>) -> Self {
        r.take::<1>()[0]
    }
    fn put(&self, w: &mut Writer<'_>) {
        w.put(&[*self]);
    }
}

impl Field for u16 {
    fn get(r: &mut Reader<'_>) -> Self {
        u16::from_le_bytes(r.take())
    }
    fn put(&self, w: &mut Writer<'_>) {
        w.put(&self.to_le_bytes());
    }
}

impl Field for f16 {
    fn get(r: &mut Reader<'_>) -> Self {
        f16::from_bits(u16::get(r))
    }
    fn put(&self, w: &mut Writer<'_>) {
        self.to_bits().put(w);
    }
}

impl Field for f32 {
    fn get(r: &mut Reader<'_>) -> Self {
        f32::from_le_bytes(r.take())
    }
    fn put(&self, w: &mut Writer<'_>) {
        w.put(&self.to_le_bytes());
    }
}

impl<const N: usize> Field for [u8; N] {
    fn get(r: &mut Reader<'_>) -> Self {
        r.take()
    }
    fn put(&self, w: &mut Writer<'_>) {
        w.put(self);
    }
}

impl<const N: usize> Field for [i8; N] {
    fn get(r: &mut Reader<'_>) -> Self {
        r.take::<N>().map(|b| b as i8)
    }
    fn put(&self, w: &mut Writer<'_>) {
        for &v in self {
            w.put(&[v as u8]);
        }
    }
}

impl<const N: usize> Field for [u16; N] {
    fn get(r: &mut Reader<'_>) -> Self {
        let mut a = [0u16; N];
        for v in &mut a {
            *v = u16::get(r);
        }
        a
    }
    fn put(&self, w: &mut Writer<'_>) {
        for v in self {
            v.put(w);
        }
    }
}

impl<const N: usize> Field for [i16; N] {
    fn get(r: &mut Reader<'_>) -> Self {
        let mut a = [0i16; N];
        for v in &mut a {
            *v = i16::from_le_bytes(r.take());
        }
        a
    }
    fn put(&self, w: &mut Writer<'_>) {
        for v in self {
            w.put(&v.to_le_bytes());
        }
    }
}

macro_rules! blocks {
    ($(
        $(#[$meta:meta])*
        $name:ident: $ty:ident, $qk:expr, $bytes:expr, {
            $( $(#[$fmeta:meta])* $field:ident: $fty:ty ),* $(,)?
        }
    )*) => {$(
        $(#[$meta])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, PartialEq)]
        pub struct $name {
            $( $(#[$fmeta])* pub $field: $fty, )*
        }

        impl Block for $name {
            const TYPE: Type = Type::$ty;
            const BLOCK_SIZE: usize = $qk;
            const BYTES: usize = $bytes;

            fn read(bytes: &[u8]) -> Result<Self> {
                if bytes.len() != Self::BYTES {
                    return Err(size_error(Self::TYPE, Self::BYTES, bytes.len()));
                }
                let mut r = Reader { bytes, at: 0 };
                // Struct literal fields are evaluated in source order.
                Ok(Self { $( $field: Field::get(&mut r), )* })
            }

            fn write(&self, out: &mut [u8]) -> Result<()> {
                if out.len() != Self::BYTES {
                    return Err(size_error(Self::TYPE, Self::BYTES, out.len()));
                }
                let mut w = Writer { bytes: out, at: 0 };
                $( self.$field.put(&mut w); )*
                Ok(())
            }
        }

        const _: () = assert!(std::mem::size_of::<$name>() == $bytes);
    )*};
}

blocks! {
    /// Q4_0: 32 weights `(q - 8) * d`, q in 0..16; low nibbles hold elements
    /// 0..16, high nibbles 16..32.
    BlockQ4_0: Q4_0, QK4_0, 18, {
        /// Scale.
        d: f16,
        /// Nibbles.
        qs: [u8; QK4_0 / 2],
    }

    /// Q4_1: 32 weights `q * d + m`, q in 0..16, nibbles as Q4_0.
    BlockQ4_1: Q4_1, QK4_1, 20, {
        /// Scale.
        d: f16,
        /// Minimum.
        m: f16,
        /// Nibbles.
        qs: [u8; QK4_1 / 2],
    }

    /// Q5_0: 32 weights `(q - 16) * d`, q in 0..32; bit j of `qh` is the fifth
    /// bit of element j.
    BlockQ5_0: Q5_0, QK5_0, 22, {
        /// Scale.
        d: f16,
        /// Fifth bits (a little-endian u32).
        qh: [u8; 4],
        /// Low nibbles.
        qs: [u8; QK5_0 / 2],
    }

    /// Q5_1: 32 weights `q * d + m`, q in 0..32, bits as Q5_0.
    BlockQ5_1: Q5_1, QK5_1, 24, {
        /// Scale.
        d: f16,
        /// Minimum.
        m: f16,
        /// Fifth bits (a little-endian u32).
        qh: [u8; 4],
        /// Low nibbles.
        qs: [u8; QK5_1 / 2],
    }

    /// Q8_0: 32 weights `q * d`.
    BlockQ8_0: Q8_0, QK8_0, 34, {
        /// Scale.
        d: f16,
        /// Quants.
        qs: [i8; QK8_0],
    }

    /// Q8_1: 32 weights `q * d`, plus `s = d * sum(q)` for the Q4_1/Q5_1 dot products.
    BlockQ8_1: Q8_1, QK8_1, 36, {
        /// Scale.
        d: f16,
        /// `d * sum(qs)`.
        s: f16,
        /// Quants.
        qs: [i8; QK8_1],
    }

    /// Q2_K: 16 groups of 16 weights `d * sc * q - dmin * m`, q in 0..4, with
    /// 4-bit scale `sc` (low nibble) and min `m` (high nibble) per group.
    BlockQ2K: Q2_K, QK_K, 84, {
        /// Scales and mins, one byte per group.
        scales: [u8; QK_K / 16],
        /// 2-bit quants: byte l of each 32-byte half holds elements l, l+32, l+64, l+96.
        qs: [u8; QK_K / 4],
        /// Super-block scale of the scales.
        d: f16,
        /// Super-block scale of the mins.
        dmin: f16,
    }

    /// Q3_K: 16 groups of 16 weights `d * (sc - 32) * (q - 4)`, 3-bit q split
    /// in 2 low bits and a high bit, 6-bit group scales.
    BlockQ3K: Q3_K, QK_K, 110, {
        /// High bits: bit j of byte l is the high bit of element 32 * j + l.
        hmask: [u8; QK_K / 8],
        /// Low 2 bits, packed as Q2_K.
        qs: [u8; QK_K / 4],
        /// 6-bit scales: low nibbles in bytes 0..8, high 2-bit pairs in 8..12.
        scales: [u8; 12],
        /// Super-block scale.
        d: f16,
    }

    /// Q4_K: 8 groups of 32 weights `d * sc * q - dmin * m`, q in 0..16,
    /// 6-bit scales and mins packed in 12 bytes.
    BlockQ4K: Q4_K, QK_K, 144, {
        /// Super-block scale of the scales.
        d: f16,
        /// Super-block scale of the mins.
        dmin: f16,
        /// Packed 6-bit scales and mins.
        scales: [u8; 12],
        /// Nibbles: each 32 bytes hold 64 elements (low nibbles first).
        qs: [u8; QK_K / 2],
    }

    /// Q5_K: as Q4_K with a fifth bit per weight.
    BlockQ5K: Q5_K, QK_K, 176, {
        /// Super-block scale of the scales.
        d: f16,
        /// Super-block scale of the mins.
        dmin: f16,
        /// Packed 6-bit scales and mins.
        scales: [u8; 12],
        /// Fifth bits: bit 2i (2i+1) of byte l for element 64i + l (64i + 32 + l).
        qh: [u8; QK_K / 8],
        /// Low nibbles as Q4_K.
        qs: [u8; QK_K / 2],
    }

    /// Q6_K: 16 groups of 16 weights `d * sc * (q - 32)`, 6-bit q, 8-bit signed scales.
    BlockQ6K: Q6_K, QK_K, 210, {
        /// Low 4 bits.
        ql: [u8; QK_K / 2],
        /// High 2 bits.
        qh: [u8; QK_K / 4],
        /// Group scales.
        scales: [i8; QK_K / 16],
        /// Super-block scale.
        d: f16,
    }

    /// Q8_K: 256 weights `q * d` with an f32 scale and per-16 sums (activation type).
    BlockQ8K: Q8_K, QK_K, 292, {
        /// Scale.
        d: f32,
        /// Quants.
        qs: [i8; QK_K],
        /// Sums of each 16 quants.
        bsums: [i16; QK_K / 16],
    }

    /// IQ2_XXS: 2.0625 bits per weight; 8 groups of 32, each two u32: four
    /// 8-bit grid indices, then four 7-bit sign codes and a 4-bit scale.
    BlockIq2Xxs: IQ2_XXS, QK_K, 66, {
        /// Scale.
        d: f16,
        /// Grid indices, signs and scales.
        qs: [u16; QK_K / 8],
    }

    /// IQ2_XS: 2.3125 bits per weight; 9-bit grid index and 7-bit sign code per 8 weights.
    BlockIq2Xs: IQ2_XS, QK_K, 74, {
        /// Scale.
        d: f16,
        /// Grid index (low 9 bits) and sign code (high 7 bits).
        qs: [u16; QK_K / 8],
        /// Two 4-bit scales per group of 32.
        scales: [u8; QK_K / 32],
    }

    /// IQ2_S: 2.5625 bits per weight; 10-bit grid indices and explicit signs.
    BlockIq2S: IQ2_S, QK_K, 82, {
        /// Scale.
        d: f16,
        /// Low 8 bits of the grid indices (32 bytes), then sign bytes (32 bytes).
        qs: [u8; QK_K / 4],
        /// High 2 bits of the grid indices.
        qh: [u8; QK_K / 32],
        /// Two 4-bit scales per group of 32.
        scales: [u8; QK_K / 32],
    }

    /// IQ3_XXS: 3.0625 bits per weight; 8-bit indices into a 4-wide grid.
    BlockIq3Xxs: IQ3_XXS, QK_K, 98, {
        /// Scale.
        d: f16,
        /// Grid indices (64 bytes), then per group of 32 a u32 of sign codes and scale.
        qs: [u8; 3 * QK_K / 8],
    }

    /// IQ3_S: 3.4375 bits per weight; 9-bit indices into a 4-wide grid.
    BlockIq3S: IQ3_S, QK_K, 110, {
        /// Scale.
        d: f16,
        /// Low 8 bits of the grid indices.
        qs: [u8; QK_K / 4],
        /// Ninth bits of the grid indices.
        qh: [u8; QK_K / 32],
        /// Sign bits, one per weight.
        signs: [u8; QK_K / 8],
        /// Two 4-bit scales per 64 weights.
        scales: [u8; QK_K / 64],
    }

    /// IQ1_S: 1.5625 bits per weight; 11-bit indices into a ternary grid.
    BlockIq1S: IQ1_S, QK_K, 50, {
        /// Scale.
        d: f16,
        /// Low 8 bits of the grid indices.
        qs: [u8; QK_K / 8],
        /// Per group of 32: high index bits (4 x 3), 3-bit scale, delta sign.
        qh: [u16; QK_K / 32],
    }

    /// IQ1_M: 1.75 bits per weight; the f16 scale is spread over the top
    /// nibbles of the four scale words.
    BlockIq1M: IQ1_M, QK_K, 56, {
        /// Low 8 bits of the grid indices.
        qs: [u8; QK_K / 8],
        /// High index bits and delta signs, a nibble per 8 weights.
        qh: [u8; QK_K / 16],
        /// 3-bit scales per 16 weights and the pieces of the f16 scale.
        scales: [u8; QK_K / 32],
    }

    /// IQ4_NL: 32 weights `d * KVALUES_IQ4NL[q]`, nibbles as Q4_0.
    BlockIq4Nl: IQ4_NL, QK4_NL, 18, {
        /// Scale.
        d: f16,
        /// Nibbles.
        qs: [u8; QK4_NL / 2],
    }

    /// IQ4_XS: 8 groups of 32 weights `d * (ls - 32) * KVALUES_IQ4NL[q]`, 6-bit ls.
    BlockIq4Xs: IQ4_XS, QK_K, 136, {
        /// Super-block scale.
        d: f16,
        /// High 2 bits of the group scales.
        scales_h: u16,
        /// Low 4 bits of the group scales.
        scales_l: [u8; QK_K / 64],
        /// Nibbles, 16 bytes per group as IQ4_NL.
        qs: [u8; QK_K / 2],
    }

    /// TQ1_0: ternary weights `(t - 1) * d`, five trits per byte (base-3, scaled to 0..256).
    BlockTq1_0: TQ1_0, QK_K, 54, {
        /// 240 trits, five per byte.
        qs: [u8; (QK_K - 4 * QK_K / 64) / 5],
        /// 16 trits, four per byte.
        qh: [u8; QK_K / 64],
        /// Scale.
        d: f16,
    }

    /// TQ2_0: ternary weights `(q - 1) * d`, four 2-bit codes per byte.
    BlockTq2_0: TQ2_0, QK_K, 66, {
        /// 2-bit codes.
        qs: [u8; QK_K / 4],
        /// Scale.
        d: f16,
    }

    /// MXFP4: 32 FP4 (E2M1) weights with a shared E8M0 exponent.
    BlockMxfp4: MXFP4, QK_MXFP4, 17, {
        /// E8M0 exponent.
        e: u8,
        /// Nibbles as Q4_0, indexing `KVALUES_MXFP4`.
        qs: [u8; QK_MXFP4 / 2],
    }
}

/// Iterates the blocks of a byte slice whose length is a whole number of blocks.
pub(crate) fn iter_blocks<'a, B: Block + 'a>(
    bytes: &'a [u8],
) -> impl Iterator<Item = Result<B>> + 'a {
    bytes.chunks_exact(B::BYTES).map(B::read)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check<B: Block>() {
        assert_eq!(B::BYTES, B::TYPE.type_size(), "{}", B::TYPE);
        assert_eq!(B::BLOCK_SIZE, B::TYPE.block_size(), "{}", B::TYPE);
        let bytes: Vec<u8> = (0..B::BYTES).map(|i| (i * 37 + 11) as u8).collect();
        let b = B::read(&bytes).unwrap();
        let mut out = vec![0u8; B::BYTES];
        b.write(&mut out).unwrap();
        assert_eq!(bytes, out);
        assert!(B::read(&bytes[1..]).is_err());
        assert!(b.write(&mut out[1..]).is_err());
    }

    #[test]
    fn sizes_and_round_trip() {
        check::<BlockQ4_0>();
        check::<BlockQ4_1>();
        check::<BlockQ5_0>();
        check::<BlockQ5_1>();
        check::<BlockQ8_0>();
        check::<BlockQ8_1>();
        check::<BlockQ2K>();
        check::<BlockQ3K>();
        check::<BlockQ4K>();
        check::<BlockQ5K>();
        check::<BlockQ6K>();
        check::<BlockQ8K>();
        check::<BlockIq2Xxs>();
        check::<BlockIq2Xs>();
        check::<BlockIq2S>();
        check::<BlockIq3Xxs>();
        check::<BlockIq3S>();
        check::<BlockIq1S>();
        check::<BlockIq1M>();
        check::<BlockIq4Nl>();
        check::<BlockIq4Xs>();
        check::<BlockTq1_0>();
        check::<BlockTq2_0>();
        check::<BlockMxfp4>();
    }

    #[test]
    fn field_order_is_little_endian() {
        let mut bytes = [0u8; 18];
        bytes[0] = 0x00;
        bytes[1] = 0x3c; // 1.0 in f16
        bytes[2] = 0xab;
        let b = BlockQ4_0::read(&bytes).unwrap();
        assert_eq!(b.d.to_f32(), 1.0);
        assert_eq!(b.qs[0], 0xab);
    }
}
