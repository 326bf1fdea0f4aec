//! Every vector path against the scalar path: bit-exact where the float
//! accumulation is exact (unit scales), within f32 rounding otherwise, and
//! every path against ggml-core's reference `vec_dot`.

use ggml_core::{quants, Type};

use super::{kernels_for, scalar, MAX_COLS, MAX_ROWS};
use crate::convert;
use crate::features::{available_isas, Isa};

/// Weight types with kernels of their own.
pub(super) use ggml_core::MATMUL_TYPES as TYPES;

pub(super) use test_support::Rng;

pub(super) fn quantize(ty: Type, v: &[f32]) -> Vec<u8> {
    let mut out = vec![0u8; quants::row_size(ty, v.len()).unwrap()];
    convert::from_f32(ty, v, &mut out).unwrap();
    out
}

/// Sets every block scale of a row to 1 (and mins to 1), so that the f32
/// accumulation of integer block sums is exact.
pub(super) fn unit_scales(ty: Type, row: &mut [u8]) {
    const ONE: [u8; 2] = [0x00, 0x3c];
    let bs = ty.type_size();
    for b in row.chunks_exact_mut(bs) {
        match ty {
            Type::Q4_0 | Type::Q5_0 | Type::Q8_0 | Type::IQ4_NL | Type::IQ4_XS => {
                b[0..2].copy_from_slice(&ONE)
            }
            Type::Q4_1 | Type::Q5_1 | Type::Q4_K | Type::Q5_K => {
                b[0..2].copy_from_slice(&ONE);
                b[2..4].copy_from_slice(&ONE);
            }
            Type::Q8_1 => {
                b[0..2].copy_from_slice(&ONE);
                b[2..4].copy_from_slice(&ONE);
            }
            Type::Q2_K => {
                b[80..82].copy_from_slice(&ONE);
                b[82..84].copy_from_slice(&ONE);
            }
            Type::Q3_K => b[108..110].copy_from_slice(&ONE),
            Type::Q6_K => b[208..210].copy_from_slice(&ONE),
            Type::Q8_K => b[0..4].copy_from_slice(&1f32.to_le_bytes()),
            // E8M0 128 is 2^0 (the scale is stored halved, the levels doubled).
            Type::MXFP4 => b[0] = 128,
            _ => {}
        }
    }
}

/// Magnitude of the terms of a dot product of the f32 weights `xf` with
/// the row `y` of type `vt`: the dot of the absolute values.
pub(super) fn magnitude(xf: &[f32], vt: Type, y: &[u8]) -> f64 {
    let mut yf = vec![0f32; xf.len()];
    convert::to_f32(vt, y, &mut yf).unwrap();
    xf.iter()
        .zip(&yf)
        .map(|(a, b)| f64::from(a.abs() * b.abs()))
        .sum()
}

/// Random weight rows and activation rows of `n` elements.
fn setup(ty: Type, n: usize, seed: u64, unit: bool) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let mut rng = Rng(seed | 1);
    let vt = super::vec_dot_type(ty).unwrap();
    let mut xs: Vec<Vec<u8>> = (0..MAX_ROWS).map(|_| quantize(ty, &rng.vec(n))).collect();
    let mut ys: Vec<Vec<u8>> = (0..MAX_COLS).map(|_| quantize(vt, &rng.vec(n))).collect();
    if unit {
        for x in &mut xs {
            unit_scales(ty, x);
        }
        for y in &mut ys {
            unit_scales(vt, y);
        }
    }
    (xs, ys)
}

pub(super) fn lengths(ty: Type) -> Vec<usize> {
    let bs = ty.block_size().max(32);
    if ty.block_size() == 1 {
        vec![1, 7, 8, 15, 16, 17, 33, 64, 100, 333]
    } else {
        // 35 blocks: two runs of 16 (the kernels that take 16 blocks at a
        // time), a pair and a last single block.
        vec![bs, 2 * bs, 3 * bs, 8 * bs, 35 * bs]
    }
}

/// Runs an `rows` x `cols` tile; result indexed [r][c].
fn run(
    ty: Type,
    isa: Isa,
    n: usize,
    xs: &[Vec<u8>],
    ys: &[Vec<u8>],
    rows: usize,
    cols: usize,
) -> Vec<Vec<f32>> {
    let k = kernels_for(isa).unwrap();
    let f = k.dot(ty).unwrap();
    let xr: Vec<&[u8]> = xs[..rows].iter().map(|v| &v[..]).collect();
    let yr: Vec<&[u8]> = ys[..cols].iter().map(|v| &v[..]).collect();
    let mut out = vec![0f32; rows * cols];
    f(n, &xr, &yr, &mut out);
    out.chunks(cols).map(|c| c.to_vec()).collect()
}

#[test]
fn scalar_kernels_equal_the_reference_vec_dot() {
    for &ty in TYPES {
        for n in lengths(ty) {
            let (xs, ys) = setup(ty, n, 11 + n as u64, false);
            let got = run(ty, Isa::Scalar, n, &xs, &ys, MAX_ROWS, MAX_COLS);
            for (r, x) in xs.iter().enumerate() {
                for (c, y) in ys.iter().enumerate() {
                    let want = quants::vec_dot(ty, n, x, y).unwrap();
                    assert_eq!(
                        got[r][c].to_bits(),
                        want.to_bits(),
                        "{ty} n={n} ({r},{c}): {} vs {want}",
                        got[r][c]
                    );
                }
            }
        }
    }
}

/// Runs `f` on every vector level, type of [`TYPES`] and length of
/// [`lengths`], with the weight rows and activation columns of
/// [`setup`] (seeded `seed + n`).
fn each_row_set(seed: u64, mut f: impl FnMut(Isa, Type, usize, &[Vec<u8>], &[Vec<u8>])) {
    for isa in available_isas() {
        for &ty in TYPES {
            for n in lengths(ty) {
                let (xs, ys) = setup(ty, n, seed + n as u64, false);
                f(isa, ty, n, &xs, &ys);
            }
        }
    }
}

#[test]
fn tiles_do_not_change_results() {
    each_row_set(5, |isa, ty, n, xs, ys| {
        let all = run(ty, isa, n, xs, ys, MAX_ROWS, MAX_COLS);
        for rows in [1, MAX_ROWS] {
            for cols in 1..=MAX_COLS {
                let some = run(ty, isa, n, xs, ys, rows, cols);
                for r in 0..rows {
                    for c in 0..cols {
                        assert_eq!(
                            some[r][c].to_bits(),
                            all[r][c].to_bits(),
                            "{ty} {isa:?} n={n} tile {rows}x{cols} ({r},{c})"
                        );
                    }
                }
            }
        }
        // A single row other than the first, alone.
        let one = run(ty, isa, n, &xs[2..], &ys[1..], 1, 1);
        assert_eq!(
            one[0][0].to_bits(),
            all[2][1].to_bits(),
            "{ty} {isa:?} n={n} row 2 alone"
        );
    });
}

#[test]
fn vector_paths_are_bit_exact_on_integer_sums() {
    for isa in available_isas() {
        for &ty in TYPES {
            if ty.block_size() == 1 {
                continue;
            }
            let mut checked = 0;
            // Rows of at most 8 blocks: longer ones can sum past 2^24,
            // where f32 stops holding every integer.
            for n in lengths(ty)
                .into_iter()
                .filter(|&n| n <= 8 * ty.block_size().max(32))
            {
                let (xs, ys) = setup(ty, n, 3 + n as u64, true);
                let want = run(ty, Isa::Scalar, n, &xs, &ys, MAX_ROWS, MAX_COLS);
                // Sub-block scales can still take a sum past 2^24 (then
                // the order of the float additions shows).
                let limit = (1u32 << 24) as f32;
                if want.iter().flatten().any(|v| v.abs() >= limit) {
                    continue;
                }
                let got = run(ty, isa, n, &xs, &ys, MAX_ROWS, MAX_COLS);
                assert_eq!(got, want, "{ty} {isa:?} n={n}");
                checked += 1;
            }
            assert!(checked > 0, "{ty} {isa:?}: no length sums exactly");
        }
    }
}

#[test]
fn vector_paths_match_scalar_within_rounding() {
    each_row_set(17, |isa, ty, n, xs, ys| {
        let want = run(ty, Isa::Scalar, n, xs, ys, MAX_ROWS, MAX_COLS);
        let got = run(ty, isa, n, xs, ys, MAX_ROWS, MAX_COLS);
        let vt = super::vec_dot_type(ty).unwrap();
        for (r, x) in xs.iter().enumerate() {
            let mut xf = vec![0f32; n];
            convert::to_f32(ty, x, &mut xf).unwrap();
            for (c, y) in ys.iter().enumerate() {
                let tol = 2e-6 * magnitude(&xf, vt, y) + 1e-6;
                let err = f64::from((got[r][c] - want[r][c]).abs());
                assert!(
                    err <= tol,
                    "{ty} {isa:?} n={n} ({r},{c}): {} vs {} (tol {tol:e})",
                    got[r][c],
                    want[r][c]
                );
            }
        }
    });
}

#[test]
fn float_dot_helpers_agree() {
    let mut rng = Rng(99);
    for n in [0usize, 1, 5, 8, 31, 64, 127] {
        let a = rng.vec(n);
        let b = rng.vec(n);
        let want = scalar::dot_f32(&a, &b);
        let ah: Vec<half::f16> = a.iter().map(|&v| half::f16::from_f32(v)).collect();
        let bh: Vec<half::f16> = b.iter().map(|&v| half::f16::from_f32(v)).collect();
        let want16 = scalar::dot_f16(&ah, &bh);
        for isa in available_isas() {
            let k = kernels_for(isa).unwrap();
            assert!(
                ((k.dot_f32)(&a, &b) - want).abs() <= 1e-5 * (1.0 + want.abs()),
                "{isa:?} n={n}"
            );
            assert!(
                ((k.dot_f16)(&ah, &bh) - want16).abs() <= 1e-5 * (1.0 + want16.abs()),
                "{isa:?} n={n}"
            );
        }
    }
}

#[test]
fn geglu_agrees_across_paths() {
    let mut rng = Rng(77);
    let mut g: Vec<f32> = (0..1000).map(|_| rng.f() * 24.0).collect();
    // The bounds and around them, zeros, f16 subnormals, the largest
    // values, ties of the f16 rounding, and a NaN.
    let special = [
        -10.0,
        10.0,
        -10.000001,
        9.999999,
        0.0,
        -0.0,
        3e-6,
        -6e-8,
        f32::MAX,
        f32::MIN,
        1.0 + 1.0 / 2048.0,
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
    ];
    g[..special.len()].copy_from_slice(&special);
    let u: Vec<f32> = (0..1000).map(|_| rng.f() * 3.0).collect();
    for n in [0usize, 5, 8, 13, 1000] {
        let mut want = vec![0f32; n];
        scalar::geglu(&g[..n], &u[..n], &mut want);
        for isa in available_isas() {
            let k = kernels_for(isa).unwrap();
            let mut got = vec![0f32; n];
            (k.geglu)(&g[..n], &u[..n], &mut got);
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                assert!(
                    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
                    "{isa:?} geglu n={n} at {i} (x {}): {a} against {b}",
                    g[i]
                );
            }
        }
    }
}

#[test]
fn activations_agree_across_paths() {
    let mut rng = Rng(1234);
    for n in [0usize, 1, 7, 8, 9, 15, 16, 17, 64, 333] {
        let mut x: Vec<f32> = (0..n).map(|_| rng.f() * 40.0).collect();
        if n > 3 {
            x[1] = 95.0;
            x[2] = -120.0;
            x[3] = f32::NEG_INFINITY;
        }
        if n >= 64 {
            // Whole chunks of masked keys and chunks partly masked.
            x[13..43].fill(f32::NEG_INFINITY);
        }
        let u: Vec<f32> = (0..n).map(|_| rng.f()).collect();
        let want_exp = {
            let mut v = x.clone();
            let s = scalar::exp_sum(&mut v, 100.0);
            (v, s)
        };
        let mut want_silu = vec![0f32; n];
        scalar::silu(&x, &mut want_silu);
        let mut want_glu = vec![0f32; n];
        scalar::swiglu(&x, &u, &mut want_glu);
        for isa in available_isas() {
            let k = kernels_for(isa).unwrap();
            let mut v = x.clone();
            let s = (k.exp_sum)(&mut v, 100.0);
            let bits = |a: &[f32]| a.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&v), bits(&want_exp.0), "{isa:?} exp n={n}");
            assert!(
                (s - want_exp.1).abs() <= 1e-12 * want_exp.1.abs(),
                "{isa:?} sum n={n}"
            );
            let mut o = vec![0f32; n];
            (k.silu)(&x, &mut o);
            assert_eq!(bits(&o), bits(&want_silu), "{isa:?} silu n={n}");
            (k.swiglu)(&x, &u, &mut o);
            assert_eq!(bits(&o), bits(&want_glu), "{isa:?} swiglu n={n}");
        }
    }
}

/// Attention's scaled and masked scores and their largest value are the
/// same at every level, NaNs, hidden keys and row tails included.
#[test]
fn scale_mask_max_is_the_same_at_every_level() {
    let mut rng = Rng(0x5ca1e);
    for n in [0usize, 1, 5, 16, 17, 31, 64, 100] {
        let x: Vec<f32> = (0..n).map(|_| rng.f() * 30.0).collect();
        let mut mask: Vec<f32> = (0..n).map(|_| rng.f()).collect();
        for (i, m) in mask.iter_mut().enumerate() {
            if i % 3 == 1 {
                *m = f32::NEG_INFINITY;
            }
        }
        let mut hidden = x.clone();
        if n > 2 {
            hidden[1] = f32::NAN;
            hidden[n - 1] = f32::NAN;
        }
        for (row, m) in [
            (&x, None),
            (&x, Some(&mask[..])),
            (&hidden, Some(&mask[..])),
            (&hidden, None),
        ] {
            let mut want = row.clone();
            let want_max = scalar::scale_mask_max(&mut want, m, 0.125);
            for isa in available_isas() {
                let mut got = row.clone();
                let got_max = (kernels_for(isa).unwrap().scale_mask_max)(&mut got, m, 0.125);
                let bits = |a: &[f32]| a.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want), "{isa:?} n={n}");
                assert_eq!(got_max.to_bits(), want_max.to_bits(), "{isa:?} n={n}");
            }
            let finite = want.iter().copied().filter(|v| !v.is_nan());
            let expect = finite.fold(f32::NEG_INFINITY, f32::max);
            assert_eq!(want_max, expect, "n={n}");
        }
    }
    // Every key hidden: the largest is -inf.
    let row = vec![1.0f32; 20];
    let mask = vec![f32::NEG_INFINITY; 20];
    for isa in available_isas() {
        let got = (kernels_for(isa).unwrap().scale_mask_max)(&mut row.clone(), Some(&mask), 1.0);
        assert_eq!(got, f32::NEG_INFINITY, "{isa:?}");
    }
}

/// A tile's rows of exponentials at once give each level's `exp_sum` of
/// every row to the bit, its sum included; a row whose largest score is
/// `-inf` is left as it was.
#[test]
fn exp_sum_rows_is_exp_sum_row_by_row() {
    let mut rng = Rng(0xe4b5);
    for w in [1usize, 15, 16, 17, 64, 100] {
        for rows in [1usize, 3, 4, 9] {
            let mut x: Vec<f32> = (0..rows * w).map(|_| rng.f() * 20.0).collect();
            let mut maxes: Vec<f32> = (0..rows).map(|r| 10.0 + r as f32).collect();
            if rows > 2 {
                maxes[1] = f32::NEG_INFINITY;
            }
            if w >= 17 {
                // A whole chunk of hidden keys, a NaN score.
                x[..16].fill(f32::NEG_INFINITY);
                x[rows * w - 3] = f32::NAN;
            }
            for isa in available_isas() {
                let k = kernels_for(isa).unwrap();
                let mut want = x.clone();
                let mut want_sums = vec![-1f64; rows];
                for r in 0..rows {
                    if maxes[r] != f32::NEG_INFINITY {
                        want_sums[r] = (k.exp_sum)(&mut want[r * w..(r + 1) * w], maxes[r]);
                    }
                }
                let mut got = x.clone();
                let mut sums = vec![-1f64; rows];
                (k.exp_sum_rows)(&mut got, w, &maxes, &mut sums);
                let bits = |a: &[f32]| a.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want), "{isa:?} w={w} rows={rows}");
                let bits64 = |a: &[f64]| a.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert_eq!(
                    bits64(&sums),
                    bits64(&want_sums),
                    "{isa:?} w={w} rows={rows}"
                );
            }
        }
    }
}

#[test]
fn exp_is_within_two_ulp() {
    let mut worst = 0i32;
    let mut x = -87.0f32;
    while x < 88.0 {
        let want = x.exp();
        let got = scalar::exp_f32(x);
        let ulp = (got.to_bits() as i32 - want.to_bits() as i32).abs();
        worst = worst.max(ulp);
        x += 0.000_731;
    }
    assert!(worst <= 2, "worst {worst} ulp");
    assert_eq!(scalar::exp_f32(0.0), 1.0);
    assert_eq!(scalar::exp_f32(f32::NEG_INFINITY), 0.0);
    assert_eq!(scalar::exp_f32(100.0), f32::INFINITY);
    assert!(scalar::exp_f32(f32::NAN).is_nan());
}

#[cfg(target_arch = "x86_64")]
#[test]
fn packed_k4_scales_unpack_like_the_scalar_path() {
    let mut rng = Rng(0x1357);
    for _ in 0..2000 {
        let b: Vec<u8> = (0..12).map(|_| (rng.f() * 128.0 + 128.0) as u8).collect();
        let (sc, m) = super::avx512::k4_scale_bytes(&b);
        for g in 0..8 {
            let (s, mm) = scalar::scale_min_k4(g, &b);
            assert_eq!((sc >> (8 * g)) as u8, s, "scale {g} of {b:?}");
            assert_eq!((m >> (8 * g)) as u8, mm, "min {g} of {b:?}");
        }
    }
}

/// The f32 matrix product of every level gives the scalar kernel's bits
/// (one fused multiply-add per element and step, in order), whatever the
/// shape's remainders of the register tile.
#[test]
fn gemm_f32_is_the_same_at_every_level() {
    let mut rng = Rng(0x6e6d);
    for (m, k, n) in [
        (1, 1, 1),
        (4, 32, 16),
        (5, 7, 23),
        (64, 256, 64),
        (3, 64, 9),
        (70, 33, 40),
        (9, 17, 33),
        (64, 64, 64),
        (17, 5, 47),
    ] {
        let a = rng.vec(m * k);
        let b = rng.vec(k * n);
        let c0 = rng.vec(m * n);
        let mut want = c0.clone();
        scalar::gemm_f32(&mut want, &a, &b, m, k, n);
        for isa in available_isas() {
            let mut got = c0.clone();
            (kernels_for(isa).unwrap().gemm_f32)(&mut got, &a, &b, m, k, n);
            assert!(got == want, "{isa:?} {m}x{k}x{n}");
        }
        // And it is the product: within f32 rounding of an f64 sum.
        for i in 0..m {
            for j in 0..n {
                let exact: f64 = f64::from(c0[i * n + j])
                    + (0..k)
                        .map(|x| f64::from(a[i * k + x]) * f64::from(b[x * n + j]))
                        .sum::<f64>();
                assert!((f64::from(want[i * n + j]) - exact).abs() < 1e-4 * (k as f64).sqrt());
            }
        }
    }
}
