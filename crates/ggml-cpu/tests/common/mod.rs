//! Helpers shared by the integration tests.

// Each test binary uses a part of these.
#[allow(unused_imports)]
pub use test_support::Rng;

use std::sync::Arc;

use ggml_core::backend::{Buffer, Placement};
use ggml_core::graph::{Graph, TensorId};
use ggml_core::{quants, Type};

/// Random rows of `ty` (quantized from random values).
#[allow(dead_code)]
pub fn weights(ty: Type, k: usize, rows: usize, rng: &mut Rng) -> Vec<u8> {
    let v: Vec<f32> = (0..k * rows).map(|_| rng.f()).collect();
    let mut out = vec![0u8; quants::row_size(ty, k).unwrap() * rows];
    let rb = out.len() / rows;
    for (r, o) in out.chunks_exact_mut(rb).enumerate() {
        quants::quantize_row(ty, &v[r * k..(r + 1) * k], o).unwrap();
    }
    out
}

/// Gives each of `ids` its own CPU buffer (returned, to keep them alive).
#[allow(dead_code)]
pub fn place(g: &mut Graph, ids: &[TensorId]) -> Vec<Arc<dyn Buffer>> {
    let buft = ggml_cpu::cpu_buffer_type();
    ids.iter()
        .map(|&id| {
            let b = buft.alloc_buffer(g.desc(id).nbytes().max(1)).unwrap();
            g.node_mut(id).at = Some(Placement {
                buffer: b.clone(),
                offset: 0,
            });
            b
        })
        .collect()
}
