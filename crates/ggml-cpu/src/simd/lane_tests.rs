//! The AVX2 row kernels against a scalar model of their lanes, bit for
//! bit. Each of the eight f32 lanes of a (row, column) accumulator sums,
//! block after block, one fused multiply-add of the block's scale product
//! and the exact integer sum of the weights that fall in that lane (bytes
//! `4i..4i + 4` of every 32-weight chunk, times their sub-block scale);
//! the lanes are then added as `hsum` does. A kernel may compute its
//! integer sums any way it likes, but not move a weight to another lane,
//! nor change the f32 operations: that would change the results.

use ggml_core::Type;

use super::scalar::{self, Decode32, Q8K_BYTES, Q8K_QS};
use super::tests::{lengths, quantize, Rng, TYPES};
use super::{kernels_for, MAX_COLS, MAX_ROWS};
use crate::features::{available_isas, Isa};

/// The horizontal sum of the AVX2 kernels: upper half plus lower half,
/// then lanes 0 + 2 and 1 + 3, then those two.
fn hsum(a: &[f32; 8]) -> f32 {
    let t: [f32; 4] = std::array::from_fn(|i| a[4 + i] + a[i]);
    (t[0] + t[2]) + (t[1] + t[3])
}

/// The lane model of a 32-weight block type against Q8_0.
fn model_q8_0(dec: Decode32, bytes: usize, n: usize, x: &[u8], y: &[u8]) -> f32 {
    let mut acc = [0f32; 8];
    let mut q = [0i8; 32];
    for ib in 0..n / 32 {
        let dx = dec(&x[ib * bytes..(ib + 1) * bytes], &mut q);
        let yb = &y[ib * 34..(ib + 1) * 34];
        let d = dx * scalar::f16_at(yb, 0);
        for (i, a) in acc.iter_mut().enumerate() {
            let s: i32 = (4 * i..4 * i + 4)
                .map(|j| i32::from(q[j]) * i32::from(yb[2 + j] as i8))
                .sum();
            *a = d.mul_add(s as f32, *a);
        }
    }
    hsum(&acc)
}

/// The 256 levels (0..63) of a Q6_K block, in weight order.
fn q6k_levels(b: &[u8]) -> [i32; 256] {
    let (ql, qh) = (&b[0..128], &b[128..192]);
    let mut q = [0i32; 256];
    for h in 0..2 {
        let (ql, qh, o) = (&ql[64 * h..], &qh[32 * h..], 128 * h);
        for l in 0..32 {
            q[o + l] = i32::from((ql[l] & 15) | ((qh[l] & 3) << 4));
            q[o + l + 32] = i32::from((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4));
            q[o + l + 64] = i32::from((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
            q[o + l + 96] = i32::from((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
        }
    }
    q
}

/// The lane model of Q6_K against Q8_K.
fn model_q6_k(n: usize, x: &[u8], y: &[u8]) -> f32 {
    let mut acc = [0f32; 8];
    for ib in 0..n / 256 {
        let xb = &x[ib * 210..(ib + 1) * 210];
        let yb = &y[ib * Q8K_BYTES..(ib + 1) * Q8K_BYTES];
        let q = q6k_levels(xb);
        let d = scalar::f16_at(xb, 208) * scalar::f32_at(yb, 0);
        for (i, a) in acc.iter_mut().enumerate() {
            let mut s = 0i32;
            for chunk in 0..8 {
                let at = 32 * chunk + 4 * i;
                let sc = i32::from(xb[192 + at / 16] as i8);
                let p: i32 = (at..at + 4)
                    .map(|j| (q[j] - 32) * i32::from(yb[Q8K_QS + j] as i8))
                    .sum();
                s += sc * p;
            }
            *a = d.mul_add(s as f32, *a);
        }
    }
    hsum(&acc)
}

/// The lane model of Q4_K (`five` false) or Q5_K against Q8_K: the
/// levels times the scales in lanes, and apart from them the mins times
/// the Q8_K block sums, whose lane `i` takes sums `2i` and `2i + 1`.
fn model_qk(five: bool, n: usize, x: &[u8], y: &[u8]) -> f32 {
    let bytes = if five { 176 } else { 144 };
    let qs = if five { 48 } else { 16 };
    let (mut acc, mut accm) = ([0f32; 8], [0f32; 8]);
    for ib in 0..n / 256 {
        let xb = &x[ib * bytes..(ib + 1) * bytes];
        let yb = &y[ib * Q8K_BYTES..(ib + 1) * Q8K_BYTES];
        let dy = scalar::f32_at(yb, 0);
        let level = |p: usize| {
            let (j, hi, b) = (p / 64, (p % 64) / 32, p % 32);
            let q = i32::from((xb[qs + 32 * j + b] >> (4 * hi)) & 15);
            let h = if five {
                i32::from((xb[16 + b] >> (2 * j + hi)) & 1) << 4
            } else {
                0
            };
            q + h
        };
        let d = scalar::f16_at(xb, 0) * dy;
        let dmin = scalar::f16_at(xb, 2) * dy;
        let bsum = |g: usize| scalar::q8k_bsum(yb, g);
        for i in 0..8 {
            let mut s = 0i32;
            for chunk in 0..8 {
                let sc = i32::from(scalar::scale_min_k4(chunk, &xb[4..16]).0);
                let at = 32 * chunk + 4 * i;
                let p: i32 = (at..at + 4)
                    .map(|j| level(j) * i32::from(yb[Q8K_QS + j] as i8))
                    .sum();
                s += sc * p;
            }
            acc[i] = d.mul_add(s as f32, acc[i]);
            let m = i32::from(scalar::scale_min_k4(i, &xb[4..16]).1);
            let ms = m * bsum(2 * i) + m * bsum(2 * i + 1);
            accm[i] = dmin.mul_add(ms as f32, accm[i]);
        }
    }
    hsum(&acc) - hsum(&accm)
}

/// A lane model: the result of a weight row and an activation row of `n`
/// elements.
type Model = fn(n: usize, x: &[u8], y: &[u8]) -> f32;

/// The model of a type's AVX2 row kernel, where there is one.
fn model(ty: Type) -> Option<Model> {
    Some(match ty {
        Type::Q4_0 => |n, x, y| model_q8_0(scalar::dec_q4_0, 18, n, x, y),
        Type::Q5_0 => |n, x, y| model_q8_0(scalar::dec_q5_0, 22, n, x, y),
        Type::Q8_0 => |n, x, y| model_q8_0(scalar::dec_q8_0, 34, n, x, y),
        Type::IQ4_NL => |n, x, y| model_q8_0(scalar::dec_iq4_nl, 18, n, x, y),
        Type::Q6_K => model_q6_k,
        Type::Q4_K => |n, x, y| model_qk(false, n, x, y),
        Type::Q5_K => |n, x, y| model_qk(true, n, x, y),
        _ => return None,
    })
}

#[test]
fn avx2_row_kernels_give_the_bits_of_their_lane_model() {
    if !available_isas().contains(&Isa::Avx2) {
        return;
    }
    let k = kernels_for(Isa::Avx2).unwrap();
    let mut checked = 0;
    for &ty in TYPES {
        let Some(model) = model(ty) else { continue };
        let vt = super::vec_dot_type(ty).unwrap();
        let f = k.dot(ty).unwrap();
        for n in lengths(ty) {
            let mut rng = Rng(n as u64 * 31 + 5);
            let xs: Vec<Vec<u8>> = (0..MAX_ROWS).map(|_| quantize(ty, &rng.vec(n))).collect();
            let ys: Vec<Vec<u8>> = (0..MAX_COLS).map(|_| quantize(vt, &rng.vec(n))).collect();
            for rows in [1, MAX_ROWS] {
                for cols in 1..=MAX_COLS {
                    let xr: Vec<&[u8]> = xs[..rows].iter().map(|v| &v[..]).collect();
                    let yr: Vec<&[u8]> = ys[..cols].iter().map(|v| &v[..]).collect();
                    let mut out = vec![0f32; rows * cols];
                    f(n, &xr, &yr, &mut out);
                    for r in 0..rows {
                        for c in 0..cols {
                            let want = model(n, &xs[r], &ys[c]);
                            assert_eq!(
                                out[r * cols + c].to_bits(),
                                want.to_bits(),
                                "{ty} n={n} tile {rows}x{cols} ({r},{c}): {} vs model {want}",
                                out[r * cols + c]
                            );
                            checked += 1;
                        }
                    }
                }
            }
        }
    }
    assert!(checked > 0);
}

/// ggml's AVX2 MXFP4 dot (`ggml_vec_dot_mxfp4_q8_0`) as a scalar model:
/// the even and the odd blocks of each pair in two sets of eight lanes,
/// one fused multiply-add of `dy * dx` and the lane's integer sum per
/// block, the two sets added lane by lane and summed as `hsum`, then a
/// last odd block added as `sum + (dy * dx) * sumi`.
fn model_mxfp4_ggml(n: usize, x: &[u8], y: &[u8]) -> f32 {
    let mut acc = [[0f32; 8]; 2];
    let mut q = [0i8; 32];
    let nb = n / 32;
    let pairs = nb - nb % 2;
    for ib in 0..pairs {
        let dx = scalar::dec_mxfp4(&x[ib * 17..(ib + 1) * 17], &mut q);
        let yb = &y[ib * 34..(ib + 1) * 34];
        let d = scalar::f16_at(yb, 0) * dx;
        for (i, a) in acc[ib % 2].iter_mut().enumerate() {
            let s: i32 = (4 * i..4 * i + 4)
                .map(|j| i32::from(q[j]) * i32::from(yb[2 + j] as i8))
                .sum();
            *a = d.mul_add(s as f32, *a);
        }
    }
    let both: [f32; 8] = std::array::from_fn(|i| acc[0][i] + acc[1][i]);
    let mut sum = hsum(&both);
    if pairs < nb {
        let dx = scalar::dec_mxfp4(&x[pairs * 17..(pairs + 1) * 17], &mut q);
        let yb = &y[pairs * 34..(pairs + 1) * 34];
        let s: i32 = (0..32)
            .map(|j| i32::from(q[j]) * i32::from(yb[2 + j] as i8))
            .sum();
        sum += (scalar::f16_at(yb, 0) * dx) * s as f32;
    }
    sum
}

/// The MXFP4 kernels of AVX2 and AVX-512 give the bits of ggml's AVX2
/// kernel (which ggml also runs on AVX-512 CPUs), for every tile, with
/// even and odd block counts, and with scales across the E8M0 range.
#[test]
fn mxfp4_kernels_give_the_bits_of_ggml_avx2() {
    let ty = Type::MXFP4;
    let mut checked = 0;
    for isa in [Isa::Avx2, Isa::Avx512] {
        if !available_isas().contains(&isa) {
            continue;
        }
        let f = kernels_for(isa).unwrap().dot(ty).unwrap();
        for n in [32, 64, 96, 160, 2880, 35 * 32] {
            let mut rng = Rng(n as u64 * 7 + 3);
            let mut xs: Vec<Vec<u8>> = (0..MAX_ROWS).map(|_| quantize(ty, &rng.vec(n))).collect();
            // Scales far from 1 as well (the quantizer's are near 2^-3).
            for (r, x) in xs.iter_mut().enumerate().skip(2) {
                for (b, blk) in x.chunks_exact_mut(17).enumerate() {
                    blk[0] = (90 + 13 * r + 7 * b) as u8 % 200 + 20;
                }
            }
            let ys: Vec<Vec<u8>> = (0..MAX_COLS)
                .map(|_| quantize(Type::Q8_0, &rng.vec(n)))
                .collect();
            for rows in [1, MAX_ROWS] {
                for cols in 1..=MAX_COLS {
                    let xr: Vec<&[u8]> = xs[..rows].iter().map(|v| &v[..]).collect();
                    let yr: Vec<&[u8]> = ys[..cols].iter().map(|v| &v[..]).collect();
                    let mut out = vec![0f32; rows * cols];
                    f(n, &xr, &yr, &mut out);
                    for r in 0..rows {
                        for c in 0..cols {
                            let want = model_mxfp4_ggml(n, &xs[r], &ys[c]);
                            assert_eq!(
                                out[r * cols + c].to_bits(),
                                want.to_bits(),
                                "{isa:?} n={n} tile {rows}x{cols} ({r},{c}): {} vs {want}",
                                out[r * cols + c]
                            );
                            checked += 1;
                        }
                    }
                }
            }
        }
    }
    if available_isas().contains(&Isa::Avx2) {
        assert!(checked > 0);
    }
}
