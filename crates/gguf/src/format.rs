//! Constants and small facts of the GGUF layout shared by reader and writer.

/// The four bytes every GGUF file starts with.
pub const MAGIC: [u8; 4] = *b"GGUF";

/// The version this crate writes.
pub const VERSION: u32 = 3;

/// Deepest nesting of arrays inside arrays the reader accepts; bounds the
/// recursion on hostile input.
pub const MAX_ARRAY_DEPTH: usize = 16;

/// Byte order of a file's numbers (and, by convention, of its tensor data).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Endian {
    /// Little-endian, the normal case.
    #[default]
    Little,
    /// Big-endian (GGUF v3 files made for big-endian hosts).
    Big,
}

impl Endian {
    /// `"little-endian"` or `"big-endian"`.
    pub fn name(self) -> &'static str {
        match self {
            Endian::Little => "little-endian",
            Endian::Big => "big-endian",
        }
    }
}

/// `x` rounded up to a multiple of `align` (a power of two), or `None` on overflow.
pub fn align_up(x: u64, align: u64) -> Option<u64> {
    debug_assert!(align.is_power_of_two());
    Some(x.checked_add(align - 1)? & !(align - 1))
}

/// Primitive numbers as encoded in GGUF.
pub(crate) trait Prim: Copy {
    /// Encoded size.
    const SIZE: usize;
    /// Decodes from exactly `SIZE` bytes.
    fn decode(b: &[u8], big: bool) -> Self;
    /// Appends the encoding.
    fn encode(self, out: &mut Vec<u8>, big: bool);
}

macro_rules! prim {
    ($($t:ty),*) => {$(
        impl Prim for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            #[inline]
            fn decode(b: &[u8], big: bool) -> $t {
                let mut a = [0u8; std::mem::size_of::<$t>()];
                a.copy_from_slice(b);
                if big { <$t>::from_be_bytes(a) } else { <$t>::from_le_bytes(a) }
            }
            #[inline]
            fn encode(self, out: &mut Vec<u8>, big: bool) {
                if big {
                    out.extend_from_slice(&self.to_be_bytes())
                } else {
                    out.extend_from_slice(&self.to_le_bytes())
                }
            }
        }
    )*};
}

prim!(u8, i8, u16, i16, u32, i32, u64, i64, f32, f64);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn align() {
        assert_eq!(align_up(0, 32), Some(0));
        assert_eq!(align_up(1, 32), Some(32));
        assert_eq!(align_up(64, 32), Some(64));
        assert_eq!(align_up(u64::MAX, 32), None);
    }
}
