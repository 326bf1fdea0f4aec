//! A backend keeps the nodes it resolved for a graph while the graph comes
//! back unchanged (its revision): computing it again must still read the
//! data written since, and a changed graph must be resolved again.

use std::sync::Arc;

use ggml_core::backend::{Backend, Buffer, Placement};
use ggml_core::graph::Graph;
use ggml_core::Type;

mod common;
use common::place;

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn read(buf: &Arc<dyn Buffer>, offset: usize, n: usize) -> Vec<f32> {
    let mut b = vec![0u8; 4 * n];
    buf.get_tensor(offset, &mut b).unwrap();
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
fn a_graph_computed_again_reads_what_was_written_since() {
    let mut g = Graph::new();
    let x = g.input("x", Type::F32, &[64, 3]);
    let w = g.new_tensor("w", Type::F32, &[64, 40]);
    let y = g.mul_mat(w, x).unwrap();
    let z = g.scale(y, 0.5).unwrap();
    let bufs = place(&mut g, &[x, w, y, z]);
    let mut backend = ggml_cpu::CpuBackend::new(2).unwrap();
    for round in 0..3 {
        let xs: Vec<f32> = (0..64 * 3).map(|i| ((i + round) % 7) as f32).collect();
        let ws: Vec<f32> = (0..64 * 40)
            .map(|i| ((i * (round + 1)) % 5) as f32)
            .collect();
        bufs[0].set_tensor(0, &f32s(&xs)).unwrap();
        bufs[1].set_tensor(0, &f32s(&ws)).unwrap();
        backend.graph_compute(&g, &[y, z]).unwrap();
        let got = read(&bufs[3], 0, 40 * 3);
        for c in 0..3 {
            for r in 0..40 {
                let want: f32 = (0..64).map(|i| ws[r * 64 + i] * xs[c * 64 + i]).sum();
                assert_eq!(
                    got[c * 40 + r],
                    0.5 * want,
                    "round {round}, row {r}, col {c}"
                );
            }
        }
    }
}

#[test]
fn a_changed_graph_is_resolved_again() {
    let mut g = Graph::new();
    let x = g.input("x", Type::F32, &[8]);
    let y = g.scale(x, 3.0).unwrap();
    let bufs = place(&mut g, &[x, y]);
    bufs[0].set_tensor(0, &f32s(&[1.0; 8])).unwrap();
    let mut backend = ggml_cpu::CpuBackend::new(1).unwrap();
    backend.graph_compute(&g, &[y]).unwrap();
    assert_eq!(read(&bufs[1], 0, 8), vec![3.0; 8]);

    // The result moves to another buffer: the new place is written, the
    // old one is left alone.
    let other = ggml_cpu::cpu_buffer_type().alloc_buffer(64).unwrap();
    g.node_mut(y).at = Some(Placement {
        buffer: other.clone(),
        offset: 32,
    });
    bufs[1].set_tensor(0, &f32s(&[0.0; 8])).unwrap();
    backend.graph_compute(&g, &[y]).unwrap();
    assert_eq!(read(&other, 32, 8), vec![3.0; 8]);
    assert_eq!(read(&bufs[1], 0, 8), vec![0.0; 8]);

    // A change that leaves the result without memory is an error, not a
    // write to where it was.
    g.node_mut(y).at = None;
    let err = backend.graph_compute(&g, &[y]).unwrap_err().to_string();
    assert!(err.contains("has no data"), "{err}");
    assert_eq!(read(&other, 32, 8), vec![3.0; 8]);
}

#[test]
fn lists_of_one_graph_computed_in_turn_keep_their_own_nodes() {
    let mut g = Graph::new();
    let x = g.input("x", Type::F32, &[16]);
    let a = g.scale(x, 2.0).unwrap();
    let b = g.scale(a, 5.0).unwrap();
    let bufs = place(&mut g, &[x, a, b]);
    let mut backend = ggml_cpu::CpuBackend::new(2).unwrap();
    for v in [1.0f32, -2.0, 4.0] {
        bufs[0].set_tensor(0, &f32s(&[v; 16])).unwrap();
        // One list per split, then the whole graph as one list.
        backend.graph_compute(&g, &[a]).unwrap();
        backend.graph_compute(&g, &[b]).unwrap();
        assert_eq!(read(&bufs[2], 0, 16), vec![10.0 * v; 16]);
        bufs[2].set_tensor(0, &f32s(&[0.0; 16])).unwrap();
        backend.graph_compute(&g, &[a, b]).unwrap();
        assert_eq!(read(&bufs[2], 0, 16), vec![10.0 * v; 16]);
    }
}
