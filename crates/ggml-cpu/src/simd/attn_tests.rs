//! The one-query attention kernels of every level against the row-by-row
//! kernels they replace: the same bits, on head sizes with and without a
//! tail of lanes, rows at a stride wider than a row, and skipped rows.

use half::f16;

use super::{kernels_for, scalar};
use crate::features::available_isas;
use test_support::Rng;

fn f16_vec(rng: &mut Rng, n: usize, scale: f32) -> Vec<f16> {
    (0..n).map(|_| f16::from_f32(rng.f() * scale)).collect()
}

fn bytes(v: &[f16]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect()
}

/// `n_rows` rows of `d` F16 values at a stride of `stride` values (the
/// gaps hold NaN, which no kernel may read).
fn strided_rows(rng: &mut Rng, n_rows: usize, d: usize, stride: usize) -> (Vec<u8>, Vec<Vec<f16>>) {
    let mut all = vec![f16::NAN; (n_rows - 1) * stride + d];
    let mut rows = Vec::new();
    for r in 0..n_rows {
        let row = f16_vec(rng, d, 2.0);
        all[r * stride..r * stride + d].copy_from_slice(&row);
        rows.push(row);
    }
    (bytes(&all), rows)
}

/// Every other row listed, and the last.
fn some_keys(n_rows: usize) -> Vec<u32> {
    let mut keys: Vec<u32> = (0..n_rows as u32).step_by(2).collect();
    if n_rows % 2 == 0 {
        keys.push(n_rows as u32 - 1);
    }
    keys
}

#[test]
fn dot_rows_equal_the_row_dot_products() {
    let mut rng = Rng(17);
    for d in [1usize, 7, 8, 13, 32, 40, 64, 72, 128] {
        let n_rows = 37;
        let (rows, each) = strided_rows(&mut rng, n_rows, d, d + 3);
        let q = f16_vec(&mut rng, d, 1.0);
        let keys = some_keys(n_rows);
        for isa in available_isas() {
            let k = kernels_for(isa).unwrap();
            let mut out = vec![0f32; keys.len()];
            (k.dot_f16_rows)(&q, &rows, 2 * (d + 3), &keys, &mut out);
            for (o, &ic) in out.iter().zip(&keys) {
                let want = (k.dot_f16)(&each[ic as usize], &q);
                assert_eq!(o.to_bits(), want.to_bits(), "{isa:?} d={d} key {ic}");
            }
        }
    }
}

#[test]
fn value_sums_equal_the_row_by_row_updates() {
    let mut rng = Rng(23);
    for d in [1usize, 7, 8, 13, 32, 40, 64, 72, 128] {
        let n_rows = 41;
        let (rows, each) = strided_rows(&mut rng, n_rows, d, d + 5);
        let keys = some_keys(n_rows);
        // Factors as the online softmax makes them: a rescale (often 1,
        // sometimes 0 or exactly representable) or a weight in (0, 1].
        let ms: Vec<f32> = (0..keys.len())
            .map(|j| match j % 4 {
                0 => rng.unit(),
                1 if j == 1 => 0.0,
                _ => 1.0,
            })
            .collect();
        let vs: Vec<f32> = ms
            .iter()
            .map(|&m| if m == 1.0 { rng.unit() } else { 1.0 })
            .collect();
        let start = f16_vec(&mut rng, d, 4.0);
        for isa in available_isas() {
            let k = kernels_for(isa).unwrap();
            let mut want = start.clone();
            for ((&ic, &m), &s) in keys.iter().zip(&ms).zip(&vs) {
                if m != 1.0 {
                    (k.scale_f16)(&mut want, m);
                }
                (k.mad_f16)(&mut want, &each[ic as usize], s);
            }
            let mut want_scalar = start.clone();
            for ((&ic, &m), &s) in keys.iter().zip(&ms).zip(&vs) {
                if m != 1.0 {
                    scalar::scale_f16(&mut want_scalar, m);
                }
                scalar::mad_f16(&mut want_scalar, &each[ic as usize], s);
            }
            let mut got = start.clone();
            (k.attn_values_f16)(&mut got, &rows, 2 * (d + 5), &keys, &ms, &vs);
            let bits = |v: &[f16]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "{isa:?} d={d}");
            assert_eq!(bits(&got), bits(&want_scalar), "{isa:?} d={d} vs scalar");
        }
    }
}

#[test]
#[should_panic(expected = "attention rows out of range")]
fn a_key_past_the_rows_is_refused() {
    let rows = vec![0u8; 2 * 8 * 3];
    let q = vec![f16::ONE; 8];
    let mut out = [0f32; 1];
    let k = kernels_for(available_isas().into_iter().last().unwrap()).unwrap();
    (k.dot_f16_rows)(&q, &rows, 16, &[3], &mut out);
}
