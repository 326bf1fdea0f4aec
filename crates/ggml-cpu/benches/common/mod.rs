//! Inputs shared by the MUL_MAT benches.

use ggml_core::{quants, Type};

/// `m` rows of `k` weights of `ty`: `distinct` rows quantized from
/// pseudo-random values, repeated. The values do not change the speed,
/// only the size does.
pub fn weight_rows(ty: Type, k: usize, m: usize, distinct: usize) -> Vec<u8> {
    let row = quants::row_size(ty, k).expect("row size");
    let distinct = distinct.min(m);
    let mut rows = vec![0u8; row * distinct];
    quants::quantize_row(ty, &test_support::Rng(7).vec(k * distinct), &mut rows).expect("quantize");
    let mut data = Vec::with_capacity(row * m);
    while data.len() < row * m {
        let take = (row * m - data.len()).min(rows.len());
        data.extend_from_slice(&rows[..take]);
    }
    data
}

/// `n` pseudo-random activations in [-1, 1), as f32 bytes.
pub fn activation_bytes(n: usize) -> Vec<u8> {
    test_support::Rng(3)
        .vec(n)
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect()
}
