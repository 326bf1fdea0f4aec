//! UTF-8 decoding across token boundaries (llama.cpp's `decode_utf8` with
//! `llama_partial_utf8`): a token's piece may end inside a code point, which
//! the next piece completes.

/// The state of a code point cut by the end of a piece.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PartialUtf8 {
    /// The bits read so far (not shifted into place).
    pub value: u32,
    /// Bytes still to come; `-1` for an invalid sequence.
    pub n_remain: i32,
}

/// Decodes `piece` (up to its first NUL byte, as a C string), continuing
/// from `partial`: the whole code points and the state left at the end.
/// An invalid sequence gives no code point and `n_remain == -1`.
pub fn decode(piece: &[u8], partial: PartialUtf8) -> (Vec<u32>, PartialUtf8) {
    const LOOKUP: [i32; 16] = [1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 2, 2, 3, 4];
    let end = piece.iter().position(|&b| b == 0).unwrap_or(piece.len());
    let bytes = &piece[..end];
    let mut out = Vec::with_capacity(bytes.len());
    let mut value = partial.value;
    let mut n_remain = partial.n_remain;
    let mut pos = 0;
    // Continue a code point cut by the previous piece.
    while pos < bytes.len() && n_remain > 0 {
        let b = bytes[pos];
        if b >> 6 != 2 {
            return (
                Vec::new(),
                PartialUtf8 {
                    value: 0,
                    n_remain: -1,
                },
            );
        }
        value = (value << 6) + u32::from(b & 0x3f);
        pos += 1;
        n_remain -= 1;
    }
    if partial.n_remain > 0 && n_remain == 0 {
        out.push(value);
    }
    while pos < bytes.len() {
        let first = bytes[pos];
        n_remain = LOOKUP[usize::from(first >> 4)] - 1;
        if n_remain < 0 {
            return (Vec::new(), PartialUtf8 { value: 0, n_remain });
        }
        let mask = (1u32 << (7 - n_remain)) - 1;
        value = u32::from(first) & mask;
        pos += 1;
        while pos < bytes.len() && n_remain > 0 {
            value = (value << 6) + u32::from(bytes[pos] & 0x3f);
            pos += 1;
            n_remain -= 1;
        }
        if n_remain == 0 {
            out.push(value);
        }
    }
    (out, PartialUtf8 { value, n_remain })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_and_cut_code_points() {
        let (cps, p) = decode("aé".as_bytes(), PartialUtf8::default());
        assert_eq!(cps, vec![0x61, 0xe9]);
        assert_eq!(p.n_remain, 0);
        // "€" = E2 82 AC, cut after two bytes.
        let (cps, p) = decode(&[b'x', 0xe2, 0x82], PartialUtf8::default());
        assert_eq!(cps, vec![u32::from(b'x')]);
        assert_eq!(p.n_remain, 1);
        let (cps, p) = decode(&[0xac, b'y'], p);
        assert_eq!(cps, vec![0x20ac, u32::from(b'y')]);
        assert_eq!(p.n_remain, 0);
    }

    #[test]
    fn invalid_sequences_and_nul() {
        let (cps, p) = decode(&[0x80], PartialUtf8::default());
        assert!(cps.is_empty());
        assert_eq!(p.n_remain, -1);
        let cut = PartialUtf8 {
            value: 2,
            n_remain: 1,
        };
        let (cps, p) = decode(b"a", cut);
        assert!(cps.is_empty());
        assert_eq!(p.n_remain, -1);
        let (cps, _) = decode(b"ab\0cd", PartialUtf8::default());
        assert_eq!(cps, vec![0x61, 0x62]);
    }
}
