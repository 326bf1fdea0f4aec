//! MUL_MAT_ID on the CPU beyond the conformance suite: an expert id outside
//! the tensor is a clear error, and expert tensors stay in plain memory
//! (the repacked buffer type takes MUL_MAT weights only).

use std::sync::Arc;

use ggml_core::backend::{Backend, Buffer, Placement};
use ggml_core::graph::{Graph, TensorId};
use ggml_core::Type;

/// Gives every node that is not a view its own host buffer.
fn place_all(g: &mut Graph) -> Vec<Arc<dyn Buffer>> {
    let buft = ggml_cpu::cpu_buffer_type();
    let ids: Vec<TensorId> = g.ids().collect();
    let mut bufs = Vec::new();
    for id in ids {
        if g.node(id).view.is_some() || g.node(id).op.is_view() {
            continue;
        }
        let desc = g.desc(id).clone();
        let b = buft.alloc_buffer(buft.alloc_size(&desc).max(1)).unwrap();
        b.clear(0).unwrap();
        g.node_mut(id).at = Some(Placement {
            buffer: b.clone(),
            offset: 0,
        });
        bufs.push(b);
    }
    bufs
}

fn set_i32(g: &Graph, id: TensorId, v: &[i32]) {
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    let at = g.placement_or_err(id).unwrap();
    at.buffer.set_tensor(at.offset, &bytes).unwrap();
}

#[test]
fn expert_ids_out_of_range_are_an_error() {
    for bad in [4, -1, i32::MAX] {
        let mut g = Graph::new();
        let w = g.new_tensor("exps", Type::Q8_0, &[64, 8, 4]);
        let x = g.input("x", Type::F32, &[64, 1, 3]);
        let ids = g.input("ids", Type::I32, &[2, 3]);
        let y = g.mul_mat_id(w, x, ids).unwrap();
        let _bufs = place_all(&mut g);
        set_i32(&g, ids, &[0, 1, 2, bad, 3, 0]);
        let mut be = ggml_cpu::CpuBackend::new(2).unwrap();
        let err = be.graph_compute(&g, &[y]).unwrap_err().to_string();
        assert!(
            err.contains("MUL_MAT_ID") && err.contains(&format!("expert id {bad}")),
            "{err}"
        );
        assert!(err.contains("token 1"), "{err}");
    }
}

#[test]
fn repacked_buffer_type_refuses_expert_weights() {
    let Some(repack) = ggml_cpu::cpu_device()
        .extra_buffer_types()
        .into_iter()
        .next()
    else {
        return; // this CPU stores no weight repacked
    };
    let mut g = Graph::new();
    let w = g.new_tensor("exps", Type::Q4_0, &[256, 64, 8]);
    let x = g.input("x", Type::F32, &[256, 1, 32]);
    let ids = g.input("ids", Type::I32, &[2, 32]);
    let y = g.mul_mat_id(w, x, ids).unwrap();
    assert!(!repack.supports_weight(&g, y, w));
    assert!(ggml_cpu::cpu_device().supports_op(&g, y));
}
