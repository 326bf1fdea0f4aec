//! Properties of the reference quant kernels on random data: round trips,
//! dot products against dequantize-then-multiply, length handling, validation.

use ggml_core::quants::{
    can_dequantize, can_quantize, dequantize_row, fp32_to_fp16, quantize_row, row_size,
    validate_row_data, vec_dot, vec_dot_type,
};
use ggml_core::{Type, MATMUL_TYPES};

use test_support::Rng;

/// Test values this file draws besides the shared generator's.
trait Draws {
    /// `n` normal values with standard deviation `std`.
    fn normals(&mut self, n: usize, std: f32) -> Vec<f32>;
    /// A positive normal f16 scale between 2^-10 and 2^4.
    fn scale(&mut self) -> [u8; 2];
}

impl Draws for Rng {
    fn normals(&mut self, n: usize, std: f32) -> Vec<f32> {
        (0..n).map(|_| self.normal() * std).collect()
    }
    fn scale(&mut self) -> [u8; 2] {
        let v = 2f32.powf(self.unit() * 14.0 - 10.0);
        fp32_to_fp16(v).to_le_bytes()
    }
}

fn quantize(ty: Type, x: &[f32]) -> Vec<u8> {
    let mut q = vec![0u8; row_size(ty, x.len()).unwrap()];
    quantize_row(ty, x, &mut q).unwrap();
    q
}

fn dequantize(ty: Type, q: &[u8], n: usize) -> Vec<f32> {
    let mut y = vec![0f32; n];
    dequantize_row(ty, q, &mut y).unwrap();
    y
}

/// 2000 blocks of `ty` (32 weights after a 2-byte f16 scale): a random
/// positive scale, then `levels` fills the rest (and may flip the scale's
/// sign), including a level that fixes the scale; quantizing the block's
/// values must give the block back.
fn assert_requantizes(ty: Type, seed: u64, mut levels: impl FnMut(&mut Rng, &mut [u8])) {
    let mut rng = Rng(seed);
    for _ in 0..2000 {
        let mut block = vec![0u8; ty.type_size()];
        block[..2].copy_from_slice(&rng.scale());
        levels(&mut rng, &mut block);
        let x = dequantize(ty, &block, 32);
        assert_eq!(quantize(ty, &x), block);
    }
}

#[test]
fn q4_0_requantizes_its_own_blocks() {
    assert_requantizes(Type::Q4_0, 1, |rng, block| {
        if rng.below(2) == 0 {
            block[1] |= 0x80; // negative scale
        }
        for b in &mut block[2..] {
            *b = rng.next_u64() as u8;
        }
        // The level 0 (value -8 d) fixes the scale; make sure one is present.
        let k = 2 + rng.below(16);
        block[k] &= if rng.below(2) == 0 { 0xf0 } else { 0x0f };
    });
}

#[test]
fn q8_0_requantizes_its_own_blocks() {
    assert_requantizes(Type::Q8_0, 2, |rng, block| {
        for b in &mut block[2..] {
            *b = (rng.below(255) as i32 - 127) as i8 as u8;
        }
        // A level of magnitude 127 fixes the scale.
        let k = 2 + rng.below(32);
        block[k] = if rng.below(2) == 0 {
            127
        } else {
            (-127i8) as u8
        };
    });
}

/// Random stored data of `ty` with finite, moderate scales, for types
/// without a quantizer here.
fn random_row(rng: &mut Rng, ty: Type, n: usize) -> Vec<u8> {
    let mut q = rng.bytes(row_size(ty, n).unwrap());
    let ts = ty.type_size();
    for block in q.chunks_exact_mut(ts) {
        let s = rng.scale();
        match ty {
            Type::IQ1_M => {
                // The f16 scale is the top nibble of each of the 4 scale words.
                let bits = u16::from_le_bytes(s);
                for k in 0..4 {
                    let o = ts - 8 + 2 * k + 1;
                    block[o] = (block[o] & 0x0f) | ((((bits >> (4 * k)) & 0xf) as u8) << 4);
                }
            }
            _ => block[..2].copy_from_slice(&s),
        }
    }
    q
}

/// Types with a reference dot product: the matrix types and the i-quants
/// whose dots exist only in the reference.
fn dot_types() -> impl Iterator<Item = Type> {
    MATMUL_TYPES.iter().copied().chain([
        Type::IQ2_XXS,
        Type::IQ2_XS,
        Type::IQ2_S,
        Type::IQ3_XXS,
        Type::IQ3_S,
        Type::IQ1_S,
        Type::IQ1_M,
        Type::TQ1_0,
        Type::TQ2_0,
    ])
}

#[test]
fn vec_dot_matches_dequantized_dot() {
    let mut rng = Rng(3);
    let n = 1024;
    for ty in dot_types() {
        let yt = vec_dot_type(ty).unwrap();
        for trial in 0..8 {
            let x = rng.normals(n, 0.5);
            let qx = if can_quantize(ty) {
                quantize(ty, &x)
            } else {
                random_row(&mut rng, ty, n)
            };
            let act = rng.normals(n, 2.0);
            let qy = quantize(yt, &act);
            let (dx, dy) = (dequantize(ty, &qx, n), dequantize(yt, &qy, n));
            let exact: f64 = dx
                .iter()
                .zip(&dy)
                .map(|(a, b)| f64::from(*a) * f64::from(*b))
                .sum();
            let scale: f64 = dx
                .iter()
                .zip(&dy)
                .map(|(a, b)| (f64::from(*a) * f64::from(*b)).abs())
                .sum();
            let mut tol = 1e-5 * scale + 1e-30;
            if yt == Type::Q8_1 {
                // Q8_1 carries sum(q) * d rounded to f16: allow that rounding.
                let mins: f64 = qx
                    .chunks_exact(ty.type_size())
                    .zip(qy.chunks_exact(36))
                    .map(|(bx, by)| {
                        let m = half::f16::from_le_bytes([bx[2], bx[3]]).to_f64();
                        let s = half::f16::from_le_bytes([by[2], by[3]]).to_f64();
                        (m * s).abs()
                    })
                    .sum();
                tol += mins * 2f64.powi(-11);
            }
            let got = f64::from(vec_dot(ty, n, &qx, &qy).unwrap());
            assert!(
                (got - exact).abs() <= tol,
                "{ty} x {yt} (trial {trial}): {got} vs {exact} (tolerance {tol:e})"
            );
        }
    }
}

#[test]
fn vec_dot_rejects_bad_lengths() {
    let n = 256;
    for ty in dot_types() {
        let yt = vec_dot_type(ty).unwrap();
        let x = vec![0u8; row_size(ty, n).unwrap()];
        let y = vec![0u8; row_size(yt, n).unwrap()];
        assert!(vec_dot(ty, n, &x, &y).is_ok(), "{ty}");
        assert!(vec_dot(ty, n, &x[1..], &y).is_err(), "{ty}");
        assert!(vec_dot(ty, n, &x, &y[..y.len() - 1]).is_err(), "{ty}");
        if ty.block_size() > 1 {
            assert!(vec_dot(ty, n + 1, &x, &y).is_err(), "{ty}");
        }
    }
    assert!(vec_dot_type(Type::I32).is_none());
    assert!(vec_dot(Type::I32, 4, &[0; 16], &[0; 16]).is_err());
}

#[test]
fn every_length_that_is_a_whole_number_of_blocks() {
    let mut rng = Rng(4);
    for &ty in Type::all() {
        if !can_dequantize(ty) {
            let mut y = [0f32; 256];
            assert!(dequantize_row(ty, &[0u8; 4096], &mut y).is_err(), "{ty}");
            continue;
        }
        let bs = ty.block_size();
        for blocks in [0usize, 1, 2, 3, 7, 16] {
            let n = blocks * bs;
            let q = random_row(&mut rng, ty, n);
            let mut y = vec![f32::NAN; n];
            dequantize_row(ty, &q, &mut y).unwrap();
            // Blocks are independent: each block alone gives the same values.
            for b in 0..blocks {
                let ts = ty.type_size();
                let one = dequantize(ty, &q[b * ts..(b + 1) * ts], bs);
                let same = one
                    .iter()
                    .zip(&y[b * bs..])
                    .all(|(a, c)| a.to_bits() == c.to_bits());
                assert!(same, "{ty} block {b}");
            }
            if can_quantize(ty) {
                let x = rng.normals(n, 1.0);
                let q = quantize(ty, &x);
                assert_eq!(q.len(), row_size(ty, n).unwrap());
            }
        }
        let q = random_row(&mut rng, ty, 2 * bs);
        let mut y = vec![0f32; 2 * bs];
        assert!(
            dequantize_row(ty, &q[1..], &mut y).is_err(),
            "{ty}: short source"
        );
        assert!(
            dequantize_row(ty, &q, &mut y[1..]).is_err(),
            "{ty}: short destination"
        );
        if bs > 1 {
            let mut y = vec![0f32; 2 * bs + 1];
            assert!(
                dequantize_row(ty, &q, &mut y).is_err(),
                "{ty}: partial block"
            );
            assert!(row_size(ty, bs + 1).is_err(), "{ty}");
        }
        if can_quantize(ty) {
            let x = vec![0.5f32; 2 * bs];
            let mut out = vec![0u8; q.len()];
            assert!(quantize_row(ty, &x, &mut out[1..]).is_err(), "{ty}");
            if bs > 1 {
                assert!(quantize_row(ty, &x[1..], &mut out).is_err(), "{ty}");
            }
        }
    }
}

#[test]
fn quantization_error_is_small() {
    // Relative RMS error bounds by bits per weight, as a sanity net.
    let mut rng = Rng(5);
    let x = rng.normals(4096, 1.0);
    for (ty, bound) in [
        (Type::F16, 1e-3),
        (Type::BF16, 5e-3),
        (Type::Q8_0, 0.01),
        (Type::Q8_1, 0.01),
        (Type::Q8_K, 0.01),
        (Type::Q6_K, 0.03),
        (Type::Q5_0, 0.06),
        (Type::Q5_1, 0.06),
        (Type::Q5_K, 0.06),
        (Type::Q4_0, 0.12),
        (Type::Q4_1, 0.12),
        (Type::Q4_K, 0.12),
        (Type::IQ4_NL, 0.12),
        (Type::IQ4_XS, 0.12),
        (Type::MXFP4, 0.2),
        (Type::Q3_K, 0.25),
        (Type::Q2_K, 0.45),
        (Type::TQ2_0, 1.0),
        (Type::TQ1_0, 1.0),
    ] {
        let y = dequantize(ty, &quantize(ty, &x), x.len());
        let se: f32 = x.iter().zip(&y).map(|(a, b)| (a - b) * (a - b)).sum();
        let rel = (se / x.len() as f32).sqrt();
        assert!(rel < bound, "{ty}: relative rms error {rel}");
    }
}

#[test]
fn ternary_round_trip_is_exact() {
    let mut rng = Rng(6);
    for ty in [Type::TQ1_0, Type::TQ2_0] {
        let x: Vec<f32> = (0..512).map(|_| rng.below(3) as f32 - 1.0).collect();
        let y = dequantize(ty, &quantize(ty, &x), x.len());
        assert_eq!(x, y, "{ty}");
    }
}

#[test]
fn validation_names_block_and_problem() {
    let mut rng = Rng(7);
    let x = rng.normals(256 * 4, 1.0);
    for ty in [
        Type::Q4_0,
        Type::Q4_1,
        Type::Q5_1,
        Type::Q8_0,
        Type::Q2_K,
        Type::Q4_K,
        Type::Q6_K,
        Type::IQ4_XS,
    ] {
        let mut q = quantize(ty, &x);
        validate_row_data(ty, &q).unwrap();
        let ts = ty.type_size();
        let d_at = match ty {
            Type::Q2_K => ts - 4,
            Type::Q6_K => ts - 2,
            _ => 0,
        };
        let nb = q.len() / ts;
        let b = nb - 1;
        q[b * ts + d_at..b * ts + d_at + 2].copy_from_slice(&0x7e00u16.to_le_bytes());
        let msg = validate_row_data(ty, &q).unwrap_err().to_string();
        assert!(
            msg.contains(&format!("block {b}")) && msg.contains("d is NaN"),
            "{ty}: {msg}"
        );
        q[b * ts + d_at..b * ts + d_at + 2].copy_from_slice(&0x7c00u16.to_le_bytes());
        let msg = validate_row_data(ty, &q).unwrap_err().to_string();
        assert!(msg.contains("infinite"), "{ty}: {msg}");
    }
    // The min of Q4_1 and dmin of the K-quants are checked too.
    // Each row of `x` in a type with `bad` written at byte `at`: the error
    // names what the bytes held and where.
    let error_with = |ty: Type, at: usize, bad: &[u8]| {
        let mut q = quantize(ty, &x);
        q[at..at + bad.len()].copy_from_slice(bad);
        validate_row_data(ty, &q).unwrap_err().to_string()
    };
    let msg = error_with(Type::Q4_K, 144 + 2, &0xfc00u16.to_le_bytes());
    assert!(
        msg.contains("block 1") && msg.contains("dmin is infinite"),
        "{msg}"
    );
    let msg = error_with(Type::F32, 12, &f32::NAN.to_le_bytes());
    assert!(msg.contains("element 3") && msg.contains("NaN"), "{msg}");
    let msg = error_with(Type::F16, 10, &0xfc00u16.to_le_bytes());
    assert!(msg.contains("element 5"), "{msg}");
    let msg = error_with(Type::BF16, 0, &0x7f80u16.to_le_bytes());
    assert!(msg.contains("infinite"), "{msg}");
    let msg = error_with(Type::Q8_K, 292, &f32::INFINITY.to_le_bytes());
    assert!(msg.contains("block 1"), "{msg}");

    assert!(validate_row_data(Type::Q4_0, &[0u8; 17]).is_err());
    validate_row_data(Type::I32, &[0xff; 8]).unwrap();
}
