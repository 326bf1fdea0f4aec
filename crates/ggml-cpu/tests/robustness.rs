//! Bad graphs are errors naming the node, never panics; results placed
//! over their own sources are computed as if they were not.

use ggml_core::backend::{Backend, Placement};
use ggml_core::graph::Graph;
use ggml_core::Type;

mod common;
use common::place;

#[test]
fn bad_row_index_is_an_error_naming_the_node() {
    let mut g = Graph::new();
    let w = g.new_tensor("tok_embd", Type::F32, &[8, 4]);
    let idx = g.input("ids", Type::I32, &[2]);
    let y = g.get_rows(w, idx).unwrap();
    let bufs = place(&mut g, &[w, idx, y]);
    bufs[1]
        .set_tensor(
            0,
            &[1i32, 9]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect::<Vec<u8>>(),
        )
        .unwrap();
    let mut backend = ggml_cpu::CpuBackend::new(1).unwrap();
    let err = backend.graph_compute(&g, &[y]).unwrap_err().to_string();
    assert!(
        err.contains("GET_ROWS") && err.contains("tok_embd") && err.contains('9'),
        "{err}"
    );
}

#[test]
fn unplaced_tensor_is_an_error_not_a_panic() {
    let mut g = Graph::new();
    let a = g.new_tensor("a", Type::F32, &[4]);
    let b = g.silu(a).unwrap();
    let mut backend = ggml_cpu::CpuBackend::new(1).unwrap();
    let err = backend.graph_compute(&g, &[b]).unwrap_err().to_string();
    assert!(err.contains("has no data"), "{err}");
}

#[test]
fn absurd_shapes_are_errors() {
    use ggml_core::graph::{Flags, Node};
    use ggml_core::{Op, TensorDesc};
    let mut g = Graph::new();
    let buf = ggml_cpu::cpu_buffer_type().alloc_buffer(64).unwrap();
    let desc = TensorDesc {
        name: "huge".into(),
        ty: Type::F32,
        ne: [usize::MAX / 2, 4, 1, 1],
        nb: [4, 8, 8, 8],
    };
    let a = g.push(Node {
        desc: desc.clone(),
        op: Op::None,
        src: Default::default(),
        view: None,
        flags: Flags::default(),
        at: Some(Placement {
            buffer: buf.clone(),
            offset: 0,
        }),
    });
    let mut out = desc;
    out.name = "scaled".into();
    let s = g.push(Node {
        desc: out,
        op: Op::Scale(2.0),
        src: [a].into_iter().collect(),
        view: None,
        flags: Flags::default(),
        at: Some(Placement {
            buffer: buf,
            offset: 0,
        }),
    });
    let mut backend = ggml_cpu::CpuBackend::new(1).unwrap();
    let err = backend.graph_compute(&g, &[s]).unwrap_err().to_string();
    assert!(
        err.contains("overflows") || err.contains("outside"),
        "{err}"
    );
}

/// Results placed over their own sources: an in-place update of the same
/// layout, and a transposing copy over its source (copied aside first).
#[test]
fn results_over_their_sources() {
    let buf = ggml_cpu::cpu_buffer_type().alloc_buffer(4096).unwrap();
    let at = |offset| {
        Some(Placement {
            buffer: buf.clone(),
            offset,
        })
    };
    let vals: Vec<f32> = (0..24).map(|i| i as f32 - 7.5).collect();
    let bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
    let read = |n: usize| -> Vec<f32> {
        let mut out = vec![0u8; 4 * n];
        buf.get_tensor(0, &mut out).unwrap();
        out.chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect()
    };
    let mut backend = ggml_cpu::CpuBackend::new(2).unwrap();

    // In place: a = a * 2 + a (two ops over the same memory).
    let mut g = Graph::new();
    let a = g.new_tensor("a", Type::F32, &[6, 4]);
    g.node_mut(a).at = at(0);
    let s = g.scale(a, 2.0).unwrap();
    g.node_mut(s).at = at(0);
    buf.set_tensor(0, &bytes).unwrap();
    backend.graph_compute(&g, &[s]).unwrap();
    assert_eq!(read(24), vals.iter().map(|v| v * 2.0).collect::<Vec<_>>());

    // A transposing copy written over its own source.
    let mut g = Graph::new();
    let a = g.new_tensor("a", Type::F32, &[6, 4]);
    g.node_mut(a).at = at(0);
    let t = g.transpose(a).unwrap();
    let c = g.cont(t).unwrap();
    g.node_mut(c).at = at(0);
    buf.set_tensor(0, &bytes).unwrap();
    backend.graph_compute(&g, &[c]).unwrap();
    let want: Vec<f32> = (0..4 * 6).map(|k| vals[(k % 4) * 6 + k / 4]).collect();
    assert_eq!(read(24), want);
}

/// A node pushed without the sources its op takes: the device does not
/// support it and computing it is an error naming the op, not a panic.
#[test]
fn node_without_its_sources_is_unsupported() {
    use ggml_core::graph::{Flags, Node};
    use ggml_core::{Op, TensorDesc};
    let mut g = Graph::new();
    let a = g.input("a", Type::F32, &[8, 2]);
    let m = g.push(Node {
        desc: TensorDesc::new("product", Type::F32, &[2, 2]),
        op: Op::MulMat,
        src: [a].into_iter().collect(),
        view: None,
        flags: Flags::default(),
        at: None,
    });
    let _bufs = place(&mut g, &[a, m]);
    assert!(!ggml_cpu::cpu_device().supports_op(&g, m));
    let mut backend = ggml_cpu::CpuBackend::new(1).unwrap();
    let err = backend.graph_compute(&g, &[m]).unwrap_err().to_string();
    assert!(
        err.contains("MUL_MAT") && err.contains("1 sources"),
        "{err}"
    );
}
