//! ggml's quantizers with an importance matrix (what `ggml_quantize_chunk`
//! runs when llama-quantize is given one): one weight per column scales
//! each value's rounding error in the scale search, as
//! `imatrix * sqrt(sigma2 + x^2)`.

use super::blocks::{
    Block, BlockIq1M, BlockIq1S, BlockIq2S, BlockIq2Xs, BlockIq2Xxs, BlockIq3S, BlockIq3Xxs,
    BlockIq4Nl, BlockIq4Xs, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ4_0, BlockQ4_1, BlockQ5K,
    BlockQ5_0, BlockQ5_1, BlockQ6K, QK_K,
};
use super::fp::f2h;
use super::fp::{h2f, nearest_int};
use super::k_quants::{pack_2bit, pack_scale_min_k4, scale_min_k4};
use super::legacy::pack_q5;
use super::search::{make_qkx3_quants, make_qp_quants, make_qx_quants_weighted};
use crate::error::{Error, Result};
use crate::Type;

/// True for the types [`quantize_row_weighted`] quantizes.
pub(crate) fn has_weighted(ty: Type) -> bool {
    matches!(
        ty,
        Type::Q4_0
            | Type::Q4_1
            | Type::Q2_K
            | Type::Q3_K
            | Type::Q5_0
            | Type::Q5_1
            | Type::Q6_K
            | Type::IQ4_NL
            | Type::IQ4_XS
            | Type::IQ2_XXS
            | Type::IQ2_XS
            | Type::IQ2_S
            | Type::IQ3_XXS
            | Type::IQ3_S
            | Type::IQ1_S
            | Type::IQ1_M
    )
}

/// Quantizes one row `x` into `dst` with importance values `qw` (one per
/// column).
pub(crate) fn quantize_row_weighted(ty: Type, x: &[f32], qw: &[f32], dst: &mut [u8]) -> Result<()> {
    match ty {
        Type::Q4_0 | Type::Q5_0 => legacy_row(ty, x, qw, dst),
        Type::Q4_1 | Type::Q5_1 => legacy_min_row(ty, x, qw, dst),
        Type::Q2_K => blocks(x, qw, dst, QK_K, q2k_weighted),
        Type::Q3_K => blocks(x, qw, dst, QK_K, q3k_weighted),
        Type::Q4_K => blocks(x, qw, dst, QK_K, |x, w| {
            let (sc, d, dmin, l) = qkx_weighted(x, w, 15);
            BlockQ4K::pack(sc, d, dmin, &l)
        }),
        Type::Q5_K => blocks(x, qw, dst, QK_K, |x, w| {
            let (sc, d, dmin, l) = qkx_weighted(x, w, 31);
            BlockQ5K::pack(sc, d, dmin, &l)
        }),
        Type::Q6_K => blocks(x, qw, dst, QK_K, |x, w| {
            BlockQ6K::quantize_weighted(x, Some(w))
        }),
        Type::IQ4_NL => blocks(x, qw, dst, 32, |x, w| {
            BlockIq4Nl::quantize_weighted(x, Some(w))
        }),
        Type::IQ4_XS => blocks(x, qw, dst, QK_K, |x, w| {
            BlockIq4Xs::quantize_weighted(x, Some(w))
        }),
        Type::IQ2_XXS => blocks_try(x, qw, dst, BlockIq2Xxs::quantize_weighted),
        Type::IQ2_XS => blocks_try(x, qw, dst, BlockIq2Xs::quantize_weighted),
        Type::IQ2_S => blocks_try(x, qw, dst, |x, w| BlockIq2S::quantize_weighted(x, Some(w))),
        Type::IQ3_XXS => blocks_try(x, qw, dst, |x, w| {
            BlockIq3Xxs::quantize_weighted(x, Some(w))
        }),
        Type::IQ3_S => blocks_try(x, qw, dst, |x, w| BlockIq3S::quantize_weighted(x, Some(w))),
        Type::IQ1_S => blocks_try(x, qw, dst, BlockIq1S::quantize_weighted),
        Type::IQ1_M => blocks_try(x, qw, dst, |x, w| BlockIq1M::quantize_weighted(x, Some(w))),
        _ => Err(Error::Quant(format!(
            "quantize: type {ty} with an importance matrix is not supported"
        ))),
    }
}

/// [`blocks`] of super-blocks whose quantizer can fail.
fn blocks_try<B: Block>(
    x: &[f32],
    qw: &[f32],
    dst: &mut [u8],
    f: impl Fn(&[f32], &[f32]) -> Result<B>,
) -> Result<()> {
    for ((x, w), out) in x
        .chunks_exact(QK_K)
        .zip(qw.chunks_exact(QK_K))
        .zip(dst.chunks_exact_mut(B::BYTES))
    {
        f(x, w)?.write(out)?;
    }
    Ok(())
}

fn blocks<B: Block>(
    x: &[f32],
    qw: &[f32],
    dst: &mut [u8],
    n: usize,
    f: impl Fn(&[f32], &[f32]) -> B,
) -> Result<()> {
    for ((x, w), out) in x
        .chunks_exact(n)
        .zip(qw.chunks_exact(n))
        .zip(dst.chunks_exact_mut(B::BYTES))
    {
        f(x, w).write(out)?;
    }
    Ok(())
}

/// Q4_0 and Q5_0 (`quantize_row_q4_0_impl`, `quantize_row_q5_0_impl`):
/// sigma2 is the row's mean square, the levels come from
/// `make_qx_quants` with the weights.
fn legacy_row(ty: Type, x: &[f32], qw: &[f32], dst: &mut [u8]) -> Result<()> {
    let sigma2 = row_sigma2(x);
    let nmax = if ty == Type::Q4_0 { 8 } else { 16 };
    let mut weight = [0f32; 32];
    let mut l = [0i8; 32];
    let bytes = if ty == Type::Q4_0 {
        BlockQ4_0::BYTES
    } else {
        BlockQ5_0::BYTES
    };
    for ((xb, qb), out) in x
        .chunks_exact(32)
        .zip(qw.chunks_exact(32))
        .zip(dst.chunks_exact_mut(bytes))
    {
        for ((w, &v), &q) in weight.iter_mut().zip(xb).zip(qb) {
            *w = q * (sigma2 + v * v).sqrt();
        }
        let d = make_qx_quants_weighted(nmax, xb, Some(&weight), &mut l);
        if ty == Type::Q4_0 {
            let mut qs = [0u8; 16];
            for j in 0..16 {
                qs[j] = l[j] as u8 | ((l[j + 16] as u8) << 4);
            }
            BlockQ4_0 { d: f2h(d), qs }.write(out)?;
        } else {
            let lu = l.map(|v| v as u8);
            let mut qs = [0u8; 16];
            let qh = pack_q5(&lu, &mut qs);
            BlockQ5_0 { d: f2h(d), qh, qs }.write(out)?;
        }
    }
    Ok(())
}

/// Q4_1 and Q5_1 (`quantize_row_q4_1_impl`, `quantize_row_q5_1_impl`):
/// levels and minimum from `make_qkx3_quants` with the weights.
fn legacy_min_row(ty: Type, x: &[f32], qw: &[f32], dst: &mut [u8]) -> Result<()> {
    let sigma2 = row_sigma2(x);
    let q4 = ty == Type::Q4_1;
    let nmax = if q4 { 15 } else { 31 };
    let bytes = if q4 {
        BlockQ4_1::BYTES
    } else {
        BlockQ5_1::BYTES
    };
    let mut weight = [0f32; 32];
    let mut l = [0u8; 32];
    for ((xb, qb), out) in x
        .chunks_exact(32)
        .zip(qw.chunks_exact(32))
        .zip(dst.chunks_exact_mut(bytes))
    {
        for ((w, &v), &q) in weight.iter_mut().zip(xb).zip(qb) {
            *w = q * (sigma2 + v * v).sqrt();
        }
        let (d, min) = make_qkx3_quants(nmax, xb, &weight, &mut l, -0.9, 0.05, 36);
        let (d, m) = (f2h(d), f2h(-min));
        if q4 {
            let mut qs = [0u8; 16];
            for j in 0..16 {
                qs[j] = l[j] | (l[j + 16] << 4);
            }
            BlockQ4_1 { d, m, qs }.write(out)?;
        } else {
            let mut qs = [0u8; 16];
            let qh = pack_q5(&l, &mut qs);
            BlockQ5_1 { d, m, qh, qs }.write(out)?;
        }
    }
    Ok(())
}

/// Scales, mins and levels of a Q4_K / Q5_K super-block with importance
/// values (`quantize_row_q4_K_impl`, `quantize_row_q5_K_impl`): each group
/// from `make_qkx3_quants`, the group scales and mins from
/// `make_qp_quants` weighted by the groups' weight sums.
fn qkx_weighted(x: &[f32], qw: &[f32], nmax: i32) -> ([u8; 12], f32, f32, [u8; QK_K]) {
    let mut sum_x2 = 0f32;
    for &v in x {
        sum_x2 += v * v;
    }
    let sigma2 = 2.0 * sum_x2 / QK_K as f32;
    let mut l = [0u8; QK_K];
    let (mut scales, mut mins, mut sw) = ([0f32; 8], [0f32; 8], [0f32; 8]);
    let mut weights = [0f32; 32];
    for j in 0..8 {
        let r = 32 * j..32 * j + 32;
        for ((w, &v), &q) in weights.iter_mut().zip(&x[r.clone()]).zip(&qw[r.clone()]) {
            *w = q * (sigma2 + v * v).sqrt();
        }
        let mut sumw = 0f32;
        for &w in &weights {
            sumw += w;
        }
        sw[j] = sumw;
        (scales[j], mins[j]) =
            make_qkx3_quants(nmax, &x[r.clone()], &weights, &mut l[r], -0.9, 0.05, 36);
    }
    let (mut ls, mut lm) = ([0u8; 8], [0u8; 8]);
    let d_block = make_qp_quants(63, &scales, &mut ls, &sw);
    let m_block = make_qp_quants(63, &mins, &mut lm, &sw);
    if nmax == 31 {
        // Q5_K clamps the 6-bit levels; Q4_K stores them as found.
        for j in 0..8 {
            ls[j] = ls[j].min(63);
            lm[j] = lm[j].min(63);
        }
    }
    let packed = pack_scale_min_k4(&ls, &lm);
    let (d, dmin) = (h2f(f2h(d_block)), h2f(f2h(m_block)));
    for j in 0..8 {
        let (sc, m) = scale_min_k4(j, &packed);
        let dl = d * f32::from(sc);
        if dl == 0.0 {
            continue;
        }
        let dm = dmin * f32::from(m);
        for i in 32 * j..32 * j + 32 {
            l[i] = nearest_int((x[i] + dm) / dl).clamp(0, nmax) as u8;
        }
    }
    (packed, d_block, m_block, l)
}

/// A Q2_K super-block with importance values (`quantize_row_q2_K_impl`):
/// sigma2 is the super-block's mean square, groups of 16 from
/// `make_qkx3_quants`, their scales and mins from `make_qp_quants`.
fn q2k_weighted(x: &[f32], qw: &[f32]) -> BlockQ2K {
    let mut sumx2 = 0f32;
    for &v in x {
        sumx2 += v * v;
    }
    let sigma2 = sumx2 / QK_K as f32;
    let mut l = [0u8; QK_K];
    let (mut scales, mut mins, mut sw) = ([0f32; 16], [0f32; 16], [0f32; 16]);
    let mut weight = [0f32; 16];
    for j in 0..16 {
        let r = 16 * j..16 * j + 16;
        for ((w, &v), &q) in weight.iter_mut().zip(&x[r.clone()]).zip(&qw[r.clone()]) {
            *w = q * (sigma2 + v * v).sqrt();
        }
        for &w in &weight {
            sw[j] += w;
        }
        (scales[j], mins[j]) =
            make_qkx3_quants(3, &x[r.clone()], &weight, &mut l[r], -0.9, 0.05, 36);
    }
    let (mut ls, mut lm) = ([0u8; 16], [0u8; 16]);
    let dm = make_qp_quants(15, &scales, &mut ls, &sw);
    let mm = make_qp_quants(15, &mins, &mut lm, &sw);
    let (d, dmin) = (f2h(dm), f2h(mm));
    let (dm, mm) = (h2f(d), h2f(dmin));
    let mut sc = [0u8; 16];
    for j in 0..16 {
        sc[j] = ls[j] | (lm[j] << 4);
    }
    for j in 0..16 {
        let dl = dm * f32::from(sc[j] & 0x0f);
        if dl == 0.0 {
            continue;
        }
        let m = mm * f32::from(sc[j] >> 4);
        for i in 16 * j..16 * j + 16 {
            l[i] = nearest_int((x[i] + m) / dl).clamp(0, 3) as u8;
        }
    }
    BlockQ2K {
        scales: sc,
        qs: pack_2bit(&l),
        d,
        dmin,
    }
}

/// A Q3_K super-block with importance values (`quantize_row_q3_K_impl`):
/// groups of 16 and their scales from `make_qx_quants` with weights.
fn q3k_weighted(x: &[f32], qw: &[f32]) -> BlockQ3K {
    let mut sumx2 = 0f32;
    for &v in x {
        sumx2 += v * v;
    }
    let sigma2 = 2.0 * sumx2 / QK_K as f32;
    let mut l = [0i8; QK_K];
    let (mut scales, mut sw) = ([0f32; 16], [0f32; 16]);
    let mut weight = [0f32; 16];
    for j in 0..16 {
        let r = 16 * j..16 * j + 16;
        for ((w, &v), &q) in weight.iter_mut().zip(&x[r.clone()]).zip(&qw[r.clone()]) {
            *w = q * (sigma2 + v * v).sqrt();
        }
        let mut sumw = 0f32;
        for &w in &weight {
            sumw += w;
        }
        sw[j] = sumw;
        scales[j] = make_qx_quants_weighted(4, &x[r.clone()], Some(&weight), &mut l[r]);
    }
    let mut ls = [0i8; 16];
    let d_block = make_qx_quants_weighted(32, &scales, Some(&sw), &mut ls);
    let mut sc = [0u8; 12];
    for j in 0..16 {
        let q = ls[j] as u8;
        if j < 8 {
            sc[j] = q & 0x0f;
        } else {
            sc[j - 8] |= (q & 0x0f) << 4;
        }
        sc[j % 4 + 8] |= (q >> 4) << (2 * (j / 4));
    }
    BlockQ3K::pack(x, sc, d_block, l)
}

/// The mean square of a row.
fn row_sigma2(x: &[f32]) -> f32 {
    let mut sum_x2 = 0f32;
    for &v in x {
        sum_x2 += v * v;
    }
    sum_x2 / x.len() as f32
}

#[cfg(test)]
mod tests {
    use super::super::{dequantize_row, quantize_rows, row_size};
    use crate::Type;

    #[test]
    fn weighted_rows_round_trip_and_bad_calls_are_errors() {
        let n = 256;
        let x: Vec<f32> = (0..2 * n)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0)
            .collect();
        let w: Vec<f32> = (0..n).map(|i| 0.5 + (i % 7) as f32).collect();
        for ty in [
            Type::Q4_0,
            Type::Q5_0,
            Type::Q6_K,
            Type::IQ4_NL,
            Type::IQ4_XS,
        ] {
            let rs = row_size(ty, n).unwrap();
            let mut q = vec![0u8; 2 * rs];
            quantize_rows(ty, &x, &mut q, n, Some(&w)).unwrap();
            let mut y = vec![0f32; n];
            dequantize_row(ty, &q[rs..], &mut y).unwrap();
            let err: f32 = y
                .iter()
                .zip(&x[n..])
                .map(|(a, b)| (a - b).abs())
                .sum::<f32>()
                / n as f32;
            assert!(err < 0.2, "{ty}: mean error {err}");
            // The weights change the result: not the unweighted bytes.
            let mut plain = vec![0u8; 2 * rs];
            quantize_rows(ty, &x, &mut plain, n, None).unwrap();
            assert_ne!(q, plain, "{ty}");
            let e = quantize_rows(ty, &x, &mut q, n, Some(&w[1..])).unwrap_err();
            assert!(e.to_string().contains("importance matrix"), "{e}");
        }
        // IQ2_XXS is quantized with an importance matrix only.
        let mut q = vec![0u8; 2 * row_size(Type::IQ2_XXS, n).unwrap()];
        quantize_rows(Type::IQ2_XXS, &x, &mut q, n, Some(&w)).unwrap();
        let e = quantize_rows(Type::IQ2_XXS, &x, &mut q, n, None).unwrap_err();
        assert!(e.to_string().contains("needs an importance matrix"), "{e}");
    }
}
