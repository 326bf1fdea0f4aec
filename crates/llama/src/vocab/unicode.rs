//! Unicode helpers with llama.cpp's exact behaviour: lenient UTF-8 decoding,
//! code point categories from Unicode 15.1, the GPT-2 byte-to-unicode map,
//! simple lower-casing and first-code-point NFD.

use std::sync::OnceLock;

use super::unicode_data::{CATEGORY_RANGES, LOWERCASE, NFD_FIRST};

/// Code points are `u32` rather than `char`: lenient decoding can produce
/// surrogates, which `char` cannot hold.
pub(crate) type Cpt = u32;

/// The replacement character, produced for every byte of invalid UTF-8.
pub(crate) const REPLACEMENT: Cpt = 0xFFFD;

/// Category and whitespace flags of one code point.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Flags {
    /// One of the `CAT_*` bits, or 0 for "no code point" (out of range).
    pub category: u8,
    /// Unicode `White_Space`.
    pub whitespace: bool,
}

/// Unassigned code point (`Cn`).
pub(crate) const CAT_UNDEFINED: u8 = 0x01;
/// `\p{N}`.
pub(crate) const CAT_NUMBER: u8 = 0x02;
/// `\p{L}`.
pub(crate) const CAT_LETTER: u8 = 0x04;
// 0x08 is `\p{Z}`, which no tokenizer asks for by name.
/// `\p{M}`.
pub(crate) const CAT_MARK: u8 = 0x10;
/// `\p{P}`.
pub(crate) const CAT_PUNCTUATION: u8 = 0x20;
/// `\p{S}`.
pub(crate) const CAT_SYMBOL: u8 = 0x40;
/// `\p{C}` other than `Cn`.
pub(crate) const CAT_CONTROL: u8 = 0x80;

impl Flags {
    /// Flags of a position outside the text: no category, no whitespace.
    pub const NONE: Flags = Flags {
        category: 0,
        whitespace: false,
    };

    /// `\p{L}`.
    pub fn is_letter(self) -> bool {
        self.category == CAT_LETTER
    }
    /// `\p{N}`.
    pub fn is_number(self) -> bool {
        self.category == CAT_NUMBER
    }
    /// `\p{P}`.
    pub fn is_punctuation(self) -> bool {
        self.category == CAT_PUNCTUATION
    }
    /// `\p{S}`.
    pub fn is_symbol(self) -> bool {
        self.category == CAT_SYMBOL
    }
    /// `\p{M}`.
    pub fn is_mark(self) -> bool {
        self.category == CAT_MARK
    }
    /// `\p{C}` (without unassigned code points).
    pub fn is_control(self) -> bool {
        self.category == CAT_CONTROL
    }
    /// A real code point (any category), as opposed to [`Flags::NONE`].
    pub fn is_some(self) -> bool {
        self.category != 0 || self.whitespace
    }
}

/// Whether `cpt` has the Unicode `White_Space` property.
pub(crate) fn is_whitespace(cpt: Cpt) -> bool {
    matches!(
        cpt,
        0x09..=0x0D | 0x20 | 0x85 | 0xA0 | 0x1680 | 0x2000..=0x200A | 0x2028 | 0x2029 | 0x202F | 0x205F | 0x3000
    )
}

/// The general category flag of `cpt` (`CAT_*`).
pub(crate) fn category(cpt: Cpt) -> u8 {
    if cpt >= 0x11_0000 {
        return CAT_UNDEFINED;
    }
    // The last range starting at or before `cpt`.
    let i = CATEGORY_RANGES.partition_point(|&(start, _)| start <= cpt);
    match i.checked_sub(1) {
        Some(i) => CATEGORY_RANGES[i].1,
        None => CAT_UNDEFINED,
    }
}

/// Category and whitespace flags of `cpt`.
pub(crate) fn flags(cpt: Cpt) -> Flags {
    Flags {
        category: category(cpt),
        whitespace: is_whitespace(cpt),
    }
}

/// Simple lower-case mapping; code points without one map to themselves.
pub(crate) fn to_lower(cpt: Cpt) -> Cpt {
    match LOWERCASE.binary_search_by_key(&cpt, |&(from, _)| from) {
        Ok(i) => LOWERCASE[i].1,
        Err(_) => cpt,
    }
}

/// The first code point of the canonical decomposition of `cpt`; accents
/// are thereby dropped, which is what the WordPiece tokenizer relies on.
pub(crate) fn nfd_first(cpt: Cpt) -> Cpt {
    let i = NFD_FIRST.partition_point(|&(first, _, _)| first <= cpt);
    match i.checked_sub(1) {
        Some(i) if cpt <= NFD_FIRST[i].1 => NFD_FIRST[i].2,
        _ => cpt,
    }
}

/// Length of a UTF-8 sequence from its first byte (1 for stray continuation
/// bytes), as the SPM and BPE symbol splitters use it.
pub(crate) fn utf8_len(first: u8) -> usize {
    const LOOKUP: [usize; 16] = [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4];
    LOOKUP[(first >> 4) as usize]
}

/// Decodes one code point at `bytes[pos..]`, accepting overlong forms and
/// surrogates; `None` when the bytes do not form a sequence.
pub(crate) fn decode_one(bytes: &[u8], pos: usize) -> Option<(Cpt, usize)> {
    let b0 = *bytes.get(pos)?;
    let cont = |k: usize| -> Option<Cpt> {
        let b = *bytes.get(pos + k)?;
        (b & 0xC0 == 0x80).then_some((b & 0x3F) as Cpt)
    };
    if b0 & 0x80 == 0 {
        Some((b0 as Cpt, 1))
    } else if b0 & 0x40 == 0 {
        None
    } else if b0 & 0x20 == 0 {
        Some((((b0 & 0x1F) as Cpt) << 6 | cont(1)?, 2))
    } else if b0 & 0x10 == 0 {
        Some((((b0 & 0x0F) as Cpt) << 12 | cont(1)? << 6 | cont(2)?, 3))
    } else if b0 & 0x08 == 0 {
        Some((
            ((b0 & 0x07) as Cpt) << 18 | cont(1)? << 12 | cont(2)? << 6 | cont(3)?,
            4,
        ))
    } else {
        None
    }
}

/// Decodes UTF-8 leniently: each byte that does not start a valid sequence
/// becomes U+FFFD and decoding resumes at the next byte.
pub(crate) fn cpts_from_utf8(bytes: &[u8]) -> Vec<Cpt> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut pos = 0;
    while pos < bytes.len() {
        match decode_one(bytes, pos) {
            Some((cpt, n)) => {
                out.push(cpt);
                pos += n;
            }
            None => {
                out.push(REPLACEMENT);
                pos += 1;
            }
        }
    }
    out
}

/// Appends the UTF-8 encoding of `cpt` (surrogates included; values above
/// U+10FFFF, which decoding never yields, are skipped).
pub(crate) fn push_utf8(out: &mut Vec<u8>, cpt: Cpt) {
    match cpt {
        0..=0x7F => out.push(cpt as u8),
        0x80..=0x7FF => {
            out.extend_from_slice(&[0xC0 | (cpt >> 6) as u8, 0x80 | (cpt & 0x3F) as u8])
        }
        0x800..=0xFFFF => out.extend_from_slice(&[
            0xE0 | (cpt >> 12) as u8,
            0x80 | ((cpt >> 6) & 0x3F) as u8,
            0x80 | (cpt & 0x3F) as u8,
        ]),
        0x1_0000..=0x10_FFFF => out.extend_from_slice(&[
            0xF0 | (cpt >> 18) as u8,
            0x80 | ((cpt >> 12) & 0x3F) as u8,
            0x80 | ((cpt >> 6) & 0x3F) as u8,
            0x80 | (cpt & 0x3F) as u8,
        ]),
        _ => {}
    }
}

/// The `char` for a code point; surrogates (never valid in `str`) become
/// U+FFFD, which has the same role in every pre-tokenizer regex.
pub(crate) fn to_char(cpt: Cpt) -> char {
    char::from_u32(cpt).unwrap_or('\u{FFFD}')
}

/// Whether GPT-2's byte-to-unicode map sends byte `b` to itself.
fn byte_is_printable(b: u8) -> bool {
    matches!(b, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF)
}

/// GPT-2's byte-to-unicode map and its inverse.
struct ByteMap {
    encode: [Cpt; 256],
    decode: [Option<u8>; 0x144],
}

fn byte_map() -> &'static ByteMap {
    static MAP: OnceLock<ByteMap> = OnceLock::new();
    MAP.get_or_init(|| {
        // Printable Latin-1 bytes stay themselves; the other 68 bytes take
        // the code points from U+0100 on, in byte order.
        let mut m = ByteMap {
            encode: [0; 256],
            decode: [None; 0x144],
        };
        let mut next = 0x100;
        for b in 0..=255u8 {
            let cpt = if byte_is_printable(b) {
                b as Cpt
            } else {
                next += 1;
                next - 1
            };
            m.encode[b as usize] = cpt;
            m.decode[cpt as usize] = Some(b);
        }
        m
    })
}

/// The code point GPT-2's byte-level BPE writes for byte `b`.
pub(crate) fn byte_to_cpt(b: u8) -> Cpt {
    byte_map().encode[b as usize]
}

/// The inverse of [`byte_to_cpt`]: the byte a code point stands for.
pub(crate) fn cpt_to_byte(cpt: Cpt) -> Option<u8> {
    byte_map().decode.get(cpt as usize).copied().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn categories() {
        assert_eq!(category('a' as Cpt), CAT_LETTER);
        assert_eq!(category('7' as Cpt), CAT_NUMBER);
        assert_eq!(category('!' as Cpt), CAT_PUNCTUATION);
        assert_eq!(category('$' as Cpt), CAT_SYMBOL);
        assert_eq!(category(' ' as Cpt), 0x08);
        assert_eq!(category('\n' as Cpt), CAT_CONTROL);
        assert_eq!(category(0x0301), CAT_MARK);
        assert_eq!(category(0x4E00), CAT_LETTER);
        assert_eq!(category(0x0378), CAT_UNDEFINED);
        assert_eq!(category(0xD800), CAT_CONTROL);
        assert_eq!(category(0x2EBF0), CAT_LETTER); // CJK extension I (Unicode 15.1)
        assert_eq!(category(0x10FFFF), CAT_UNDEFINED);
        assert_eq!(category(0x110000), CAT_UNDEFINED);
        assert!(flags(0x3000).whitespace);
        assert!(!flags(0x200B).whitespace);
    }

    #[test]
    fn case_and_nfd() {
        assert_eq!(to_lower('A' as Cpt), 'a' as Cpt);
        assert_eq!(to_lower(0x130), 'i' as Cpt);
        assert_eq!(to_lower('a' as Cpt), 'a' as Cpt);
        assert_eq!(nfd_first(0xE9), 'e' as Cpt); // é
        assert_eq!(nfd_first(0xC5), 'A' as Cpt); // Å
        assert_eq!(nfd_first('x' as Cpt), 'x' as Cpt);
    }

    #[test]
    fn lenient_utf8() {
        assert_eq!(
            cpts_from_utf8("aé€😀".as_bytes()),
            vec![0x61, 0xE9, 0x20AC, 0x1F600]
        );
        assert_eq!(
            cpts_from_utf8(&[0x80, b'a', 0xE2, 0x82]),
            vec![REPLACEMENT, 0x61, REPLACEMENT, REPLACEMENT]
        );
        // Surrogates and overlong forms decode as llama.cpp decodes them.
        assert_eq!(cpts_from_utf8(&[0xED, 0xA0, 0x80]), vec![0xD800]);
        assert_eq!(cpts_from_utf8(&[0xC0, 0x80]), vec![0]);
        let mut out = Vec::new();
        for c in [0x61, 0xE9, 0x20AC, 0x1F600, 0xD800] {
            push_utf8(&mut out, c);
        }
        assert_eq!(
            cpts_from_utf8(&out),
            vec![0x61, 0xE9, 0x20AC, 0x1F600, 0xD800]
        );
    }

    #[test]
    fn byte_map_is_a_bijection() {
        assert_eq!(byte_to_cpt(b' '), 0x120); // 'Ġ'
        assert_eq!(byte_to_cpt(b'\n'), 0x10A); // 'Ċ'
        assert_eq!(byte_to_cpt(b'a'), b'a' as Cpt);
        assert_eq!(byte_to_cpt(0xAD), 0x143);
        for b in 0..=255u8 {
            assert_eq!(cpt_to_byte(byte_to_cpt(b)), Some(b));
        }
        assert_eq!(cpt_to_byte(0x144), None);
        assert_eq!(cpt_to_byte(0x20), None);
    }
}
