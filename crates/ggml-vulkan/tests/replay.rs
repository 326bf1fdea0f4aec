//! An unchanged graph computed again submits the command buffers it was
//! recorded into: new inputs give new results (those of a backend that
//! records every time), the dispatches are counted again, and a destroyed
//! buffer or `GGML_VK_DISABLE_REPLAY` makes the backend record anew.

mod common;

use std::sync::Arc;

use common::graph::{values, Built, Placed};
use ggml_core::{quants, Backend, Buffer, Device, TensorDesc, TensorId, Type};
use ggml_vulkan::{Options, VulkanDevice};

/// A norm, two products of its result, their gated unit and a product with
/// a residual: several fused and plain dispatches. Leaf 0 is the input.
fn build(ty: Type) -> (Built, TensorId) {
    let mut b = Built::new();
    let k = 64;
    let leaf = |b: &mut Built, name: &str, ty: Type, ne: &[usize], seed: u32| {
        let desc = TensorDesc::new(name, ty, ne);
        let mut bytes = vec![0u8; desc.nbytes()];
        quants::quantize_row(ty, &values(desc.n_elements(), seed), &mut bytes).unwrap();
        let id = b.g.new_tensor(name, ty, ne);
        b.data.push((id, bytes));
        id
    };
    let x = leaf(&mut b, "x", Type::F32, &[k, 1], 1);
    let w = leaf(&mut b, "norm", Type::F32, &[k], 2);
    let wu = leaf(&mut b, "wu", ty, &[k, 96], 3);
    let wg = leaf(&mut b, "wg", ty, &[k, 96], 4);
    let wd = leaf(&mut b, "wd", ty, &[96, k], 5);
    let g = &mut b.g;
    let h = g.rms_norm(x, 1e-5).unwrap();
    let h = g.mul(h, w).unwrap();
    let up = g.mul_mat(wu, h).unwrap();
    let gate = g.mul_mat(wg, h).unwrap();
    let act = g.swiglu_split(gate, up).unwrap();
    let down = g.mul_mat(wd, act).unwrap();
    let out = g.add_op(down, x).unwrap();
    let out = g.scale(out, 0.5).unwrap();
    b.outs.push(out);
    (b, x)
}

fn input(seed: u32) -> Vec<u8> {
    values(64, seed)
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect()
}

fn registry(disable_replay: bool) -> Option<ggml_vulkan::VulkanReg> {
    common::reg_with(Options {
        disable_replay,
        ..common::test_options()
    })
}

fn device(reg: &ggml_vulkan::VulkanReg) -> Arc<VulkanDevice> {
    reg.vulkan_devices()[0].clone()
}

#[test]
fn an_unchanged_graph_is_submitted_again_with_new_inputs() {
    if common::device().is_none() {
        return;
    }
    let (replaying, recording) = (
        registry(false).expect("same devices"),
        registry(true).expect("same devices"),
    );
    for ty in [Type::F32, Type::Q4_0] {
        let (dr, dp) = (device(&replaying), device(&recording));
        let (b, x) = build(ty);
        let placed = Placed::new(&dr, b);
        let mut be = dr.new_backend().unwrap();
        let (b2, x2) = build(ty);
        let plain = Placed::new(&dp, b2);
        let mut be2 = dp.new_backend().unwrap();
        let first = placed.compute(&mut be);
        assert!(first > 0);
        for round in 0..4u32 {
            let data = input(100 + round);
            placed.write(x, &data);
            plain.write(x2, &data);
            let n = placed.compute(&mut be);
            assert_eq!(n, first, "{ty} round {round}: dispatches counted again");
            assert_eq!(plain.compute(&mut be2), first);
            let (got, want) = (placed.outputs(), plain.outputs());
            assert_eq!(got, want, "{ty} round {round}");
        }
        // Another buffer destroyed: the graph is recorded anew, and still
        // right.
        let other: Arc<dyn Buffer> = dr.buffer_type().alloc_buffer(4096).unwrap();
        drop(other);
        let data = input(7);
        placed.write(x, &data);
        plain.write(x2, &data);
        placed.compute(&mut be);
        plain.compute(&mut be2);
        assert_eq!(
            placed.outputs(),
            plain.outputs(),
            "{ty} after a buffer was freed"
        );
        be.synchronize().unwrap();
    }
    common::assert_no_validation_errors();
}
