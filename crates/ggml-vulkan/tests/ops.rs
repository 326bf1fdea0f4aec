//! Cases beyond the shared suite, run through its harness against the
//! scalar reference: grids larger than one dispatch dimension, several
//! matmul tiles, unaligned quantized views, chains of dependent ops in one
//! command buffer, and the kernels without subgroup operations.

mod common;

use std::sync::Arc;

use ggml_core::conformance::{self, mul_mat_check, Case, Check, Fill};
use ggml_core::{Device, RopeMode, RopeParams, Type};
use ggml_vulkan::Options;

fn run(dev: Arc<dyn Device>, cases: &[Case]) {
    let report = conformance::run_cases(&dev, cases);
    eprintln!("{report}");
    report.assert_ok();
    assert!(report.skipped().is_empty(), "{report}");
    common::assert_no_validation_errors();
}

#[test]
fn grids_larger_than_one_dimension() {
    let Some(dev) = common::device() else { return };
    let cases = vec![
        // One workgroup per output row: 70000 > 65535 workgroups.
        Case::mul_mat(Type::F16, &[32, 70000], Type::F32, &[32, 1]),
        Case::new("ARGMAX F32 [3,70000]", Check::Exact, |c| {
            let a = c.rand("a", Type::F32, &[3, 70000]);
            c.g.argmax(a)
        }),
    ];
    run(dev, &cases);
}

#[test]
fn matmul_tiles_and_unaligned_views() {
    let Some(dev) = common::device() else { return };
    let mut cases = Vec::new();
    for ty in [
        Type::F32,
        Type::F16,
        Type::Q4_0,
        Type::Q5_1,
        Type::Q8_0,
        Type::Q4_K,
        Type::Q6_K,
        Type::BF16,
    ] {
        let k = if ty.block_size() > 32 { 512 } else { 320 };
        cases.push(Case::mul_mat(ty, &[k, 130], Type::F32, &[k, 70, 2]));
    }
    for ty in [Type::Q4_0, Type::Q5_1, Type::Q3_K] {
        let k = if ty.block_size() > 32 { 256 } else { 64 };
        cases.push(Case::new(
            format!("MUL_MAT {ty} rows 3..8 view x F32 (unaligned binding)"),
            mul_mat_check(ty),
            move |c| {
                let w = c.rand("w", ty, &[k, 9]);
                let row = c.g.desc(w).nb[1];
                let v = c.g.view_2d(w, k, 5, row, 3 * row)?;
                let b = c.rand("b", Type::F32, &[k, 2]);
                c.g.mul_mat(v, b)
            },
        ));
    }
    // Odd K.
    cases.push(Case::mul_mat(Type::F32, &[37, 19], Type::F32, &[37, 23]));
    run(dev, &cases);
}

/// A llama-style attention and feed-forward block: every op depends on the
/// one before, all in one command buffer.
fn block_case(ty: Type, neox: bool) -> Case {
    let check = Check::Nmse(5e-4);
    Case::new(format!("block {ty} neox={neox}"), check, move |c| {
        let (d, heads, hd, tokens, ff) = (64, 4, 16, 5, 96);
        let emb = c.rand("tok_embd", ty, &[d, 11]);
        let ids = c.input("ids", Type::I32, &[tokens], Fill::Index(11));
        let pos = c.input("pos", Type::I32, &[tokens], Fill::Index(40));
        let mask = c.input("mask", Type::F32, &[tokens, tokens], Fill::Mask);
        let norm_w = c.rand("norm", Type::F32, &[d]);
        let wq = c.rand("wq", ty, &[d, d]);
        let wk = c.rand("wk", ty, &[d, d]);
        let wv = c.rand("wv", ty, &[d, d]);
        let wo = c.rand("wo", ty, &[d, d]);
        let wg = c.rand("wg", ty, &[d, ff]);
        let wu = c.rand("wu", ty, &[d, ff]);
        let wd = c.rand("wd", ty, &[ff, d]);
        let g = &mut *c.g;
        let x = g.get_rows(emb, ids)?;
        let n = g.rms_norm(x, 1e-5)?;
        let n = g.mul(n, norm_w)?;
        let mode = if neox {
            RopeMode::Neox
        } else {
            RopeMode::Normal
        };
        let rp = RopeParams::new(hd, mode, 10000.0);
        let q = g.mul_mat(wq, n)?;
        let q = g.reshape(q, &[hd, heads, tokens])?;
        let q = g.rope_ext(q, pos, None, rp)?;
        let k = g.mul_mat(wk, n)?;
        let k = g.reshape(k, &[hd, heads, tokens])?;
        let k = g.rope_ext(k, pos, None, rp)?;
        let v = g.mul_mat(wv, n)?;
        let v = g.reshape(v, &[hd, heads, tokens])?;
        let qp = g.permute(q, [0, 2, 1, 3])?;
        let kp = g.permute(k, [0, 2, 1, 3])?;
        let kq = g.mul_mat(kp, qp)?;
        let kq = g.soft_max_ext(kq, Some(mask), 0.25, 0.0)?;
        let vt = g.permute(v, [1, 2, 0, 3])?;
        let vt = g.cont(vt)?;
        let kqv = g.mul_mat(vt, kq)?;
        let kqv = g.permute(kqv, [0, 2, 1, 3])?;
        let kqv = g.cont_shape(kqv, &[d, tokens])?;
        let o = g.mul_mat(wo, kqv)?;
        let x = g.add_op(x, o)?;
        let n = g.rms_norm(x, 1e-5)?;
        let gate = g.mul_mat(wg, n)?;
        let up = g.mul_mat(wu, n)?;
        let h = g.swiglu_split(gate, up)?;
        let down = g.mul_mat(wd, h)?;
        g.add_op(x, down)
    })
}

#[test]
fn quantizing_and_dequantizing_copies() {
    let Some(dev) = common::device() else { return };
    let mut cases = Vec::new();
    for ty in [Type::Q8_0, Type::Q4_0, Type::Q5_1] {
        // 4 x 40 x 3 = 480 blocks: several workgroups.
        cases.push(Case::copy(
            format!("CPY F16->{ty} [128,40,3]"),
            conformance::quantizing_copy_check(ty),
            Type::F16,
            ty,
            &[128, 40, 3],
        ));
        cases.push(Case::set_rows(ty, Type::I32, [128, 40, 3], 50));
    }
    for (ty, k) in [
        (Type::Q6_K, 256usize),
        (Type::Q4_1, 64),
        (Type::IQ4_XS, 256),
    ] {
        cases.push(Case::copy(
            format!("CPY {ty} [{k},6,2] -> F16 (dequantize)"),
            Check::Exact,
            ty,
            Type::F16,
            &[k, 6, 2],
        ));
    }
    run(dev, &cases);
}

#[test]
fn flash_attention_over_several_key_chunks() {
    let Some(dev) = common::device() else { return };
    let mut cases = Vec::new();
    for (d, n_kv, kv) in [(128usize, 150usize, Type::F16), (80, 67, Type::F32)] {
        cases.push(Case::new(
            format!("FLASH_ATTN_EXT q [{d},3,8] k/v {kv} [{d},{n_kv},2] with mask"),
            Check::Nmse(5e-4),
            move |c| {
                let q = c.permuted("q", Type::F32, &[d, 3, 8], [0, 2, 1, 3])?;
                let k = c.rand("k", kv, &[d, n_kv, 2]);
                let v = c.rand("v", kv, &[d, n_kv, 2]);
                let m = c.input("mask", Type::F16, &[n_kv, 3], Fill::Mask);
                c.g.flash_attn_ext(q, k, v, Some(m), 0.125, 0.0, 0.0)
            },
        ));
    }
    run(dev, &cases);
}

#[test]
fn dependent_ops_in_one_command_buffer() {
    let Some(dev) = common::device() else { return };
    let cases = vec![
        block_case(Type::F32, false),
        block_case(Type::Q8_0, true),
        // Write-after-read: the copy into `a` must wait for the scale reading it.
        Case::new("SCALE a then CPY c into a", Check::Exact, |c| {
            let a = c.rand("a", Type::F32, &[4096]);
            let cc = c.rand("c", Type::F32, &[4096]);
            let s = c.g.scale(a, 2.0)?;
            c.g.cpy(cc, a)?;
            Ok(s)
        }),
    ];
    run(dev, &cases);
}

#[test]
fn kernels_without_subgroups() {
    if common::device().is_none() {
        return;
    }
    let reg = common::reg_with(Options {
        disable_subgroups: true,
        ..common::test_options()
    })
    .expect("same devices as the test registry");
    let dev = reg.vulkan_devices()[0].clone();
    assert!(!dev.subgroups().1);
    let cases: Vec<Case> = conformance::cases()
        .into_iter()
        .filter(|c| c.name.starts_with("MUL_MAT") && c.name.contains("x F32 [96,1]"))
        .collect();
    assert!(!cases.is_empty());
    let report = conformance::run_cases(&(dev as Arc<dyn Device>), &cases);
    eprintln!("{report}");
    report.assert_ok();
    common::assert_no_validation_errors();
}

#[test]
fn weights_larger_than_one_binding() {
    if common::device().is_none() {
        return;
    }
    let reg = common::reg_with(Options {
        max_binding_size: Some(32 * 1024),
        ..common::test_options()
    })
    .expect("same devices as the test registry");
    let dev = reg.vulkan_devices()[0].clone();
    assert_eq!(dev.max_binding_size(), 32 * 1024);
    let mut cases = Vec::new();
    // 300 rows of 43 to 77 KiB in all: two to five parts of whole rows.
    for (ty, k) in [
        (Type::F32, 64usize),
        (Type::Q4_0, 256),
        (Type::Q4_1, 256),
        (Type::Q6_K, 256),
    ] {
        for cols in [1usize, 3, 70] {
            cases.push(Case::new(
                format!("MUL_MAT {ty} [{k},300] x F32 [{k},{cols}] in parts"),
                mul_mat_check(ty),
                move |c| {
                    let a = c.rand("a", ty, &[k, 300]);
                    let b = c.rand("b", Type::F32, &[k, cols]);
                    c.g.mul_mat(a, b)
                },
            ));
        }
    }
    // b of 75 KiB: parts of its columns, rounded one part at a time.
    for ty in [Type::Q4_1, Type::Q4_K] {
        let k = ty.block_size().max(64);
        cases.push(Case::new(
            format!(
                "MUL_MAT {ty} [{k},20] x F32 [{k},{}] in parts of b",
                19200 / k
            ),
            mul_mat_check(ty),
            move |c| {
                let a = c.rand("a", ty, &[k, 20]);
                let b = c.rand("b", Type::F32, &[k, 19200 / k]);
                c.g.mul_mat(a, b)
            },
        ));
    }
    run(dev, &cases);
}

/// A node pushed without the sources its op takes is not supported (the
/// check never indexes a source that is not there).
#[test]
fn node_without_its_sources_is_unsupported() {
    use ggml_core::graph::{Flags, Graph, Node};
    use ggml_core::{Op, TensorDesc};
    let Some(dev) = common::device() else { return };
    let mut g = Graph::new();
    let a = g.input("a", Type::F32, &[8, 2]);
    for op in [
        Op::MulMat,
        Op::Add,
        Op::SetRows,
        Op::FlashAttnExt {
            scale: 1.0,
            max_bias: 0.0,
            softcap: 0.0,
        },
    ] {
        let n = g.push(Node {
            desc: TensorDesc::new("bad", Type::F32, &[8, 2]),
            op,
            src: [a].into_iter().collect(),
            view: None,
            flags: Flags::default(),
            at: None,
        });
        assert!(!dev.supports_op(&g, n));
    }
}

/// SSM_SCAN at the largest state row the shader holds (256 elements, eight
/// per invocation), Mamba-1 and Mamba-2, and a grid of more than 65535
/// state rows; a longer row is left to another backend.
#[test]
fn ssm_scan_at_the_shader_limits() {
    let Some(dev) = common::device() else { return };
    let scan_check = Check::Close {
        atol: 1e-5,
        rtol: 1e-4,
    };
    let mut cases = Vec::new();
    for (d_state, head_dim, n_head, a_rows, n_t) in
        [(256, 2, 4, 1, 3), (256, 1, 8, 256, 2), (8, 1, 70000, 1, 1)]
    {
        cases.push(Case::new(
            format!(
                "SSM_SCAN d_state {d_state}, head_dim {head_dim}, {n_head} heads, A rows {a_rows}, {n_t} tokens"
            ),
            scan_check,
            move |c| {
                let s = c.rand("s", Type::F32, &[d_state, head_dim, n_head, 2]);
                let x = c.rand("x", Type::F32, &[head_dim, n_head, n_t, 1]);
                let dt = c.rand("dt", Type::F32, &[n_head, n_t, 1]);
                let a = c.input("A", Type::F32, &[a_rows, n_head], Fill::Uniform(-2.0, -0.1));
                let b = c.rand("B", Type::F32, &[d_state, 1, n_t, 1]);
                let cc = c.rand("C", Type::F32, &[d_state, 1, n_t, 1]);
                let ids = c.input("ids", Type::I32, &[1], Fill::Index(2));
                c.g.ssm_scan(s, x, dt, a, b, cc, ids)
            },
        ));
    }
    run(dev.clone(), &cases);

    let mut g = ggml_core::Graph::new();
    let s = g.input("s", Type::F32, &[257, 1, 2, 1]);
    let x = g.input("x", Type::F32, &[1, 2, 1, 1]);
    let dt = g.input("dt", Type::F32, &[2, 1, 1]);
    let a = g.input("A", Type::F32, &[1, 2]);
    let b = g.input("B", Type::F32, &[257, 1, 1, 1]);
    let ids = g.input("ids", Type::I32, &[1]);
    let y = g.ssm_scan(s, x, dt, a, b, b, ids).unwrap();
    assert!(!dev.supports_op(&g, y));
}
