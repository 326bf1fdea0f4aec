//! The graph allocator on a 10,000-node transformer-like graph: time per
//! `alloc_graph` after a reserve (planning and placing every tensor; no
//! buffer is allocated), for a prompt-shaped and a decode-shaped graph.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use ggml_core::alloc::GraphAlloc;
use ggml_core::host::{HostBufferType, HOST_ALIGNMENT};
use ggml_core::{Buffer, BufferType, Graph};

#[path = "../tests/common/transformer.rs"]
mod transformer;

use transformer::Dims;

/// A llama-shaped graph of at least `min_nodes` nodes over `n_tokens` tokens.
fn transformer(min_nodes: usize, n_tokens: usize, buf: &Arc<dyn Buffer>) -> Graph {
    let dims = Dims {
        d: 512,
        n_head: 8,
        ff: 1408,
        vocab: 4096,
    };
    transformer::transformer(&dims, n_tokens, buf, |g, _| g.len() + 5 < min_nodes)
}

fn bench_alloc(c: &mut Criterion) {
    let wbt: Arc<dyn BufferType> = HostBufferType::new("weights", HOST_ALIGNMENT, usize::MAX);
    let weights = wbt.alloc_buffer(64).unwrap();
    let host = HostBufferType::new("CPU", HOST_ALIGNMENT, usize::MAX);
    let worst = transformer(10_000, 512, &weights);
    let decode = transformer(10_000, 1, &weights);
    eprintln!("graph: {} nodes", worst.len());
    let mut ga = GraphAlloc::new(host.clone());
    ga.reserve(&worst).unwrap();
    eprintln!("reserved: {} bytes", ga.buffer_size(0));
    let allocs = host.n_allocs();

    let mut group = c.benchmark_group("graph_alloc_10k_nodes");
    for (name, g) in [("prompt_512", &worst), ("decode_1", &decode)] {
        group.bench_function(name, |b| {
            b.iter_batched_ref(
                || g.clone(),
                |g| black_box(ga.alloc_graph(g).unwrap()),
                BatchSize::LargeInput,
            )
        });
    }
    group.finish();
    assert_eq!(host.n_allocs(), allocs, "no buffer allocated after reserve");
}

criterion_group!(benches, bench_alloc);
criterion_main!(benches);
