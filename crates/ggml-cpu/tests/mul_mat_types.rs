//! MUL_MAT and GET_ROWS for every weight type ggml has a dot product for:
//! the CPU's result must equal the matrix product of the dequantized
//! weights and the f32 activations within NMSE 5e-4 (llama.cpp's
//! test-backend-ops tolerance), and GET_ROWS must equal dequantization.

use ggml_core::backend::Backend;
use ggml_core::graph::Graph;
use ggml_core::{quants, Type};

mod common;
use common::{place, Rng};

/// A row of `n` weights of `ty`: quantized from random values where ggml-core
/// can quantize the type, else random bytes with a sane scale (the i-quants
/// that need an importance matrix).
fn weight_row(ty: Type, n: usize, rng: &mut Rng) -> Vec<u8> {
    let size = quants::row_size(ty, n).unwrap();
    if quants::can_quantize(ty) {
        let v: Vec<f32> = (0..n).map(|_| rng.f()).collect();
        let mut out = vec![0u8; size];
        quants::quantize_row(ty, &v, &mut out).unwrap();
        return out;
    }
    let mut out: Vec<u8> = (0..size).map(|_| rng.next_u64() as u8).collect();
    for b in out.chunks_exact_mut(ty.type_size()) {
        match ty {
            // The f16 scale is spread over the top nibbles of the scale words.
            Type::IQ1_M => {
                for w in 0..4 {
                    b[48 + 2 * w + 1] &= 0x0f;
                }
                b[48 + 7] |= 0x20;
            }
            _ => b[0..2].copy_from_slice(&half::f16::from_f32(0.01).to_bits().to_le_bytes()),
        }
    }
    out
}

fn types() -> Vec<Type> {
    Type::all()
        .iter()
        .copied()
        .filter(|&t| {
            !t.is_removed() && quants::vec_dot_type(t).is_some() && quants::can_dequantize(t)
        })
        .collect()
}

/// MUL_MAT of random `ty` weights [k, m, wb2, wb3] by random f32
/// activations [k, n, xb2, xb3] (src0 broadcast over the batch dims)
/// against the f64 product of the dequantized weights; returns the NMSE.
fn mul_mat_nmse(
    backend: &mut ggml_cpu::CpuBackend,
    rng: &mut Rng,
    ty: Type,
    (k, m, n): (usize, usize, usize),
    wb: [usize; 2],
    xb: [usize; 2],
) -> f64 {
    let mut g = Graph::new();
    let w = g.new_tensor("w", ty, &[k, m, wb[0], wb[1]]);
    let x = g.input("x", Type::F32, &[k, n, xb[0], xb[1]]);
    let y = g.mul_mat(w, x).unwrap();
    let bufs = place(&mut g, &[w, x, y]);
    let n_w = m * wb[0] * wb[1];
    let rows: Vec<Vec<u8>> = (0..n_w).map(|_| weight_row(ty, k, rng)).collect();
    bufs[0].set_tensor(0, &rows.concat()).unwrap();
    let n_x = n * xb[0] * xb[1];
    let xs: Vec<f32> = (0..k * n_x).map(|_| rng.f()).collect();
    let xbytes: Vec<u8> = xs.iter().flat_map(|v| v.to_le_bytes()).collect();
    bufs[1].set_tensor(0, &xbytes).unwrap();
    backend.graph_compute(&g, &[y]).unwrap();
    let mut out = vec![0u8; 4 * m * n_x];
    bufs[2].get_tensor(0, &mut out).unwrap();
    let got: Vec<f32> = out
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    let wf: Vec<Vec<f32>> = rows
        .iter()
        .map(|row| {
            let mut v = vec![0f32; k];
            quants::dequantize_row(ty, row, &mut v).unwrap();
            v
        })
        .collect();
    let (mut num, mut den) = (0f64, 0f64);
    for i3 in 0..xb[1] {
        for i2 in 0..xb[0] {
            let (a2, a3) = (i2 / (xb[0] / wb[0]), i3 / (xb[1] / wb[1]));
            for j in 0..n {
                let xr = ((i3 * xb[0] + i2) * n + j) * k;
                for i in 0..m {
                    let want: f64 = wf[(a3 * wb[0] + a2) * m + i]
                        .iter()
                        .zip(&xs[xr..xr + k])
                        .map(|(&a, &b)| f64::from(a) * f64::from(b))
                        .sum();
                    let d = f64::from(got[((i3 * xb[0] + i2) * n + j) * m + i]) - want;
                    num += d * d;
                    den += want * want;
                }
            }
        }
    }
    num / den
}

#[test]
fn mul_mat_equals_dequantized_matmul_for_every_type() {
    let mut rng = Rng(0x1234_5678);
    let mut backend = ggml_cpu::CpuBackend::new(2).unwrap();
    let mut checked = Vec::new();
    for ty in types() {
        // Matrix x vector, a few columns, and enough columns for the panel
        // kernels (with a partial panel of rows and a partial group of
        // columns).
        for (k, m, n) in [(512, 9, 1), (512, 9, 6), (256, 37, 21)] {
            let nmse = mul_mat_nmse(&mut backend, &mut rng, ty, (k, m, n), [1, 1], [1, 1]);
            assert!(
                nmse < 5e-4,
                "MUL_MAT {ty} [{k},{m}] x [{k},{n}]: nmse {nmse:e}"
            );
            checked.push((ty, nmse));
        }
    }
    // Every quantized type of the kernels' list is among them.
    for t in [
        Type::Q4_0,
        Type::Q8_0,
        Type::Q4_K,
        Type::Q6_K,
        Type::IQ2_XXS,
        Type::IQ1_M,
        Type::TQ2_0,
    ] {
        assert!(checked.iter().any(|&(c, _)| c == t), "{t} was not checked");
    }
}

#[test]
fn mul_mat_broadcasts_weights_over_batches() {
    let mut rng = Rng(0x0bad_cafe);
    let mut backend = ggml_cpu::CpuBackend::new(2).unwrap();
    for ty in [
        Type::F32,
        Type::F16,
        Type::Q8_0,
        Type::Q4_0,
        Type::Q4_K,
        Type::Q6_K,
    ] {
        for n in [3, 20] {
            let nmse = mul_mat_nmse(&mut backend, &mut rng, ty, (256, 18, n), [2, 1], [4, 2]);
            assert!(
                nmse < 5e-4,
                "MUL_MAT {ty} [256,18,2,1] x [256,{n},4,2]: nmse {nmse:e}"
            );
        }
    }
}

#[test]
fn get_rows_equals_dequantization_for_every_type() {
    let mut rng = Rng(0x9abc_def1);
    let (k, m) = (256, 7);
    let mut backend = ggml_cpu::CpuBackend::new(2).unwrap();
    for ty in types() {
        let mut g = Graph::new();
        let w = g.new_tensor("w", ty, &[k, m]);
        let idx = g.input("idx", Type::I32, &[3]);
        let y = g.get_rows(w, idx).unwrap();
        let bufs = place(&mut g, &[w, idx, y]);
        let rows: Vec<Vec<u8>> = (0..m).map(|_| weight_row(ty, k, &mut rng)).collect();
        bufs[0].set_tensor(0, &rows.concat()).unwrap();
        let pick = [5i32, 0, 5];
        bufs[1]
            .set_tensor(
                0,
                &pick
                    .iter()
                    .flat_map(|v| v.to_le_bytes())
                    .collect::<Vec<u8>>(),
            )
            .unwrap();
        backend.graph_compute(&g, &[y]).unwrap();
        let mut out = vec![0u8; 4 * k * 3];
        bufs[2].get_tensor(0, &mut out).unwrap();
        for (j, &p) in pick.iter().enumerate() {
            let mut want = vec![0f32; k];
            quants::dequantize_row(ty, &rows[p as usize], &mut want).unwrap();
            for (i, w) in want.iter().enumerate() {
                let o = 4 * (j * k + i);
                let got = f32::from_le_bytes([out[o], out[o + 1], out[o + 2], out[o + 3]]);
                assert_eq!(
                    got.to_bits(),
                    w.to_bits(),
                    "GET_ROWS {ty} row {p} element {i}"
                );
            }
        }
    }
}
