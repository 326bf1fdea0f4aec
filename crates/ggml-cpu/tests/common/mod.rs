//! Helpers shared by the integration tests.

// Each test binary uses a part of these.
#[allow(unused_imports)]
pub use test_support::Rng;

use std::sync::Arc;

use ggml_core::backend::{Buffer, Placement};
use ggml_core::graph::{Graph, TensorId};

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
