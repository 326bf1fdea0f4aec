//! Fused dispatches: the runs the backend fuses (RMS_NORM + MUL before
//! matrix x vector products, several products of one input, ADD or a gated
//! unit after them) give the scalar reference's results fused and unfused
//! (`GGML_VK_DISABLE_FUSION`), in fewer dispatches; runs whose
//! intermediates are read elsewhere are not fused.

mod common;

use common::graph::{values, Built, Placed};

use std::sync::Arc;

use ggml_core::conformance::{self, mul_mat_check, Case, Check};
use ggml_core::quants;
use ggml_core::{Device, Flags, GluOp, Graph, TensorDesc, TensorId, Type};
use ggml_vulkan::{Fusions, Options, VulkanDevice};

/// The weight types of the cases: float, legacy (Q8_0 and Q8_1 partners)
/// and K-quants (Q8_K partner).
const TYPES: [Type; 8] = [
    Type::F32,
    Type::F16,
    Type::BF16,
    Type::Q4_0,
    Type::Q4_1,
    Type::Q8_0,
    Type::Q4_K,
    Type::Q6_K,
];

/// Rows of the weights: one more than a multiple of the rows per
/// workgroup, so that partial tiles are covered.
const M: usize = 37;

fn k_of(ty: Type) -> usize {
    if ty.block_size() > 32 {
        512
    } else {
        96
    }
}

fn check(ty: Type) -> Check {
    mul_mat_check(ty)
}

/// The fusable runs, for weights of type `ty` and `n` columns.
fn cases(ty: Type, n: usize) -> Vec<Case> {
    let k = k_of(ty);
    let mut out = Vec::new();
    out.push(Case::new(
        format!("fused RMS_NORM MUL + Q K V {ty} x [{k},{n}]"),
        check(ty),
        move |c| {
            let x = c.rand("x", Type::F32, &[k, n]);
            let w = c.rand("norm", Type::F32, &[k]);
            let wq = c.rand("wq", ty, &[k, M]);
            let wk = c.rand("wk", ty, &[k, 16]);
            let wv = c.rand("wv", ty, &[k, 16]);
            let g = &mut *c.g;
            let h = g.rms_norm(x, 1e-5)?;
            let h = g.mul(h, w)?;
            let q = g.mul_mat(wq, h)?;
            let kk = g.mul_mat(wk, h)?;
            let v = g.mul_mat(wv, h)?;
            // The three results in one output.
            let qk = g.concat(q, kk, 0)?;
            g.concat(qk, v, 0)
        },
    ));
    for op in [GluOp::Swiglu, GluOp::Geglu] {
        // The reference's GELU is ggml's table of f16 values.
        let chk = match (op, check(ty)) {
            (GluOp::Geglu, Check::Nmse(e)) => Check::Nmse(e.max(1e-6)),
            (_, c) => c,
        };
        out.push(Case::new(
            format!("fused RMS_NORM MUL + up gate {op:?} {ty} x [{k},{n}]"),
            chk,
            move |c| {
                let x = c.rand("x", Type::F32, &[k, n]);
                let w = c.rand("norm", Type::F32, &[k]);
                let wu = c.rand("wu", ty, &[k, M]);
                let wg = c.rand("wg", ty, &[k, M]);
                let g = &mut *c.g;
                let h = g.rms_norm(x, 1e-5)?;
                let h = g.mul(h, w)?;
                let up = g.mul_mat(wu, h)?;
                let gate = g.mul_mat(wg, h)?;
                g.glu_split(gate, up, op)
            },
        ));
    }
    out.push(Case::new(
        format!("fused MUL_MAT + ADD residual {ty} x [{k},{n}]"),
        check(ty),
        move |c| {
            let x = c.rand("x", Type::F32, &[k, n]);
            let wo = c.rand("wo", ty, &[k, M]);
            let r = c.rand("residual", Type::F32, &[M, n]);
            let g = &mut *c.g;
            let o = g.mul_mat(wo, x)?;
            g.add_op(o, r)
        },
    ));
    out.push(Case::new(
        format!("fused MUL_MAT + ADD bias {ty} x [{k},{n}]"),
        check(ty),
        move |c| {
            let x = c.rand("x", Type::F32, &[k, n]);
            let wo = c.rand("wo", ty, &[k, M]);
            let bias = c.rand("bias", Type::F32, &[M]);
            let g = &mut *c.g;
            let o = g.mul_mat(wo, x)?;
            let bias = g.reshape(bias, &[M, 1])?;
            g.add_op(o, bias)
        },
    ));
    out.push(Case::new(
        format!("fused ADD of a MUL_MAT as second source {ty} x [{k},{n}]"),
        check(ty),
        move |c| {
            let x = c.rand("x", Type::F32, &[k, n]);
            let wo = c.rand("wo", ty, &[k, M]);
            let r = c.rand("residual", Type::F32, &[M, n]);
            let g = &mut *c.g;
            let o = g.mul_mat(wo, x)?;
            g.add_op(r, o)
        },
    ));
    out.push(Case::new(
        format!("fused RMS_NORM MUL + output {ty} x [{k},{n}]"),
        check(ty),
        move |c| {
            let x = c.rand("x", Type::F32, &[k, n]);
            let w = c.rand("norm", Type::F32, &[k]);
            let wo = c.rand("output", ty, &[k, M]);
            let g = &mut *c.g;
            let h = g.rms_norm(x, 1e-5)?;
            let h = g.mul(h, w)?;
            g.mul_mat(wo, h)
        },
    ));
    out
}

fn fused_options(disable: Fusions) -> Options {
    Options {
        disable_fusion: disable,
        ..common::test_options()
    }
}

/// RMS_NORM and MUL alone (per-head norms of Q and K): a weight per row,
/// and one broadcast over the heads.
fn norm_mul_cases() -> Vec<Case> {
    let mut out = Vec::new();
    for (wne, label) in [(vec![16usize], "[16]"), (vec![16, 4], "[16,4]")] {
        out.push(Case::new(
            format!("fused RMS_NORM MUL x [16,4,3] w {label}"),
            Check::Nmse(1e-10),
            move |c| {
                let x = c.rand("x", Type::F32, &[16, 4, 3]);
                let w = c.rand("w", Type::F32, &wne);
                let g = &mut *c.g;
                let h = g.rms_norm(x, 1e-6)?;
                let h = g.mul(h, w)?;
                g.scale(h, 0.5)
            },
        ));
    }
    out
}

#[test]
fn fused_runs_match_the_reference_fused_and_unfused() {
    let Some(_) = common::device() else { return };
    let mut all: Vec<Case> = TYPES
        .iter()
        .flat_map(|&ty| [1, 3].into_iter().flat_map(move |n| cases(ty, n)))
        .collect();
    all.extend(norm_mul_cases());
    // Fused with and without subgroup reductions, and unfused.
    for (disable, no_subgroups) in [
        (Fusions::default(), false),
        (Fusions::default(), true),
        (Fusions::ALL, false),
    ] {
        let reg = common::reg_with(Options {
            disable_subgroups: no_subgroups,
            ..fused_options(disable)
        })
        .expect("same devices");
        let dev: Arc<dyn Device> = reg.vulkan_devices()[0].clone();
        let report = conformance::run_cases(&dev, &all);
        eprintln!("fusions off: {disable:?}, no subgroups: {no_subgroups}\n{report}");
        report.assert_ok();
        assert!(report.skipped().is_empty(), "{report}");
        common::assert_no_validation_errors();
    }
}

/// Places, fills and computes a built graph on `dev`: the results'
/// values and the dispatches recorded.
fn run_on(dev: &Arc<VulkanDevice>, build: &dyn Fn() -> Built) -> (Vec<Vec<f32>>, u64) {
    let placed = Placed::new(dev, build());
    let mut be = dev.new_backend().unwrap();
    let n = placed.compute(&mut be);
    (placed.outputs(), n)
}

fn leaf(b: &mut Built, name: &str, ty: Type, ne: &[usize], seed: u32) -> TensorId {
    let desc = TensorDesc::new(name, ty, ne);
    let v = values(desc.n_elements(), seed);
    let mut bytes = vec![0u8; desc.nbytes()];
    quants::quantize_row(ty, &v, &mut bytes).unwrap();
    let id = b.g.new_tensor(name, ty, ne);
    b.g.node_mut(id).flags.insert(Flags::WEIGHT);
    b.data.push((id, bytes));
    id
}

/// A llama-shaped layer for one token: norm, Q/K/V, output projection and
/// residual, norm, gate/up, SWIGLU, down projection and residual.
fn layer(ty: Type, extra_reader: bool) -> Built {
    let mut b = Built {
        g: Graph::new(),
        data: Vec::new(),
        outs: Vec::new(),
    };
    let k = k_of(ty);
    let x = leaf(&mut b, "x", Type::F32, &[k, 1], 1);
    let an = leaf(&mut b, "attn_norm", Type::F32, &[k], 2);
    let wq = leaf(&mut b, "wq", ty, &[k, k], 3);
    let wk = leaf(&mut b, "wk", ty, &[k, k], 4);
    let wv = leaf(&mut b, "wv", ty, &[k, k], 5);
    let wo = leaf(&mut b, "wo", ty, &[k, k], 6);
    let fnorm = leaf(&mut b, "ffn_norm", Type::F32, &[k], 7);
    let wu = leaf(&mut b, "wu", ty, &[k, 2 * k], 8);
    let wg = leaf(&mut b, "wg", ty, &[k, 2 * k], 9);
    let wd = leaf(&mut b, "wd", ty, &[2 * k, k], 10);
    let g = &mut b.g;
    let h = g.rms_norm(x, 1e-5).unwrap();
    let h = g.mul(h, an).unwrap();
    let q = g.mul_mat(wq, h).unwrap();
    let kk = g.mul_mat(wk, h).unwrap();
    let v = g.mul_mat(wv, h).unwrap();
    let qk = g.add_op(q, kk).unwrap();
    let att = g.add_op(qk, v).unwrap();
    let o = g.mul_mat(wo, att).unwrap();
    let r = g.add_op(o, x).unwrap();
    let h2 = g.rms_norm(r, 1e-5).unwrap();
    let h2 = g.mul(h2, fnorm).unwrap();
    let up = g.mul_mat(wu, h2).unwrap();
    let gate = g.mul_mat(wg, h2).unwrap();
    let act = g.swiglu_split(gate, up).unwrap();
    let down = g.mul_mat(wd, act).unwrap();
    let out = g.add_op(down, r).unwrap();
    b.outs.push(out);
    if extra_reader {
        // The normalized input and a product are also read elsewhere.
        let s = g.scale(h, 2.0).unwrap();
        let u = g.scale(up, 0.5).unwrap();
        b.outs.push(s);
        b.outs.push(u);
    }
    b
}

fn nmse(got: &[f32], want: &[f32]) -> f64 {
    let (mut num, mut den) = (0f64, 0f64);
    for (&g, &w) in got.iter().zip(want) {
        num += f64::from(g - w).powi(2);
        den += f64::from(w).powi(2);
    }
    num / den.max(1e-30)
}

#[test]
fn a_layer_takes_fewer_dispatches_fused() {
    if common::device().is_none() {
        return;
    }
    let fused = common::reg_with(fused_options(Fusions::default())).expect("same devices");
    let plain = common::reg_with(fused_options(Fusions::ALL)).expect("same devices");
    let (df, dp) = (
        fused.vulkan_devices()[0].clone(),
        plain.vulkan_devices()[0].clone(),
    );
    for ty in [Type::F32, Type::Q4_0, Type::Q4_1, Type::Q4_K] {
        let (got, nf) = run_on(&df, &|| layer(ty, false));
        let (want, np) = run_on(&dp, &|| layer(ty, false));
        let e = nmse(&got[0], &want[0]);
        assert!(e < 1e-5, "{ty}: NMSE {e:e} fused against unfused");
        // Unfused: 2 norms, 2 MULs, 7 products, 4 ADDs, 1 GLU (and the
        // roundings of quantized weights); fused: norm+QKV, 2 ADDs,
        // output+residual, norm+up+gate+GLU, down+residual.
        assert_eq!(nf, 6, "{ty}: {nf} dispatches fused ({np} unfused)");
        assert!(np >= 16, "{ty}: {np} dispatches unfused");
        // Intermediates read elsewhere: the norms and the up/gate pair stay
        // unfused where they are read, and the results still agree.
        let (got, nf2) = run_on(&df, &|| layer(ty, true));
        let (want, _) = run_on(&dp, &|| layer(ty, true));
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            let e = nmse(g, w);
            assert!(e < 1e-5, "{ty}: output {i}: NMSE {e:e}");
        }
        assert!(nf2 > nf + 2, "{ty}: {nf2} dispatches with extra readers");
    }
    common::assert_no_validation_errors();
}

#[test]
fn each_kind_can_be_switched_off() {
    if common::device().is_none() {
        return;
    }
    let count = |off: Fusions| {
        let reg = common::reg_with(fused_options(off)).expect("same devices");
        let dev = reg.vulkan_devices()[0].clone();
        run_on(&dev, &|| layer(Type::Q8_0, false)).1
    };
    let all = count(Fusions::default());
    let none = count(Fusions::ALL);
    assert!(all < none);
    for off in [
        Fusions {
            rms_norm: true,
            ..Fusions::default()
        },
        Fusions {
            multi: true,
            ..Fusions::default()
        },
        Fusions {
            add: true,
            ..Fusions::default()
        },
        Fusions {
            glu: true,
            ..Fusions::default()
        },
    ] {
        let n = count(off);
        assert!(
            n > all && n < none,
            "{off:?}: {n} dispatches ({all} / {none})"
        );
    }
}

#[test]
fn integer_dot_products_where_the_device_has_them() {
    let Some(dev) = common::device() else { return };
    let off = common::reg_with(Options {
        disable_integer_dot: true,
        ..common::test_options()
    })
    .expect("same devices");
    let plain = off.vulkan_devices()[0].clone();
    assert!(!plain.integer_dot());
    let mut devs: Vec<Arc<dyn Device>> = vec![plain];
    if dev.integer_dot() {
        devs.push(dev);
    } else {
        eprintln!(
            "driver {}: no VK_KHR_shader_integer_dot_product; only the fallback is checked",
            dev.driver()
        );
    }
    let all: Vec<Case> = [Type::Q4_0, Type::Q8_0]
        .into_iter()
        .flat_map(|ty| [1, 2].into_iter().flat_map(move |n| cases(ty, n)))
        .collect();
    for d in devs {
        let report = conformance::run_cases(&d, &all);
        eprintln!("{report}");
        report.assert_ok();
        assert!(report.skipped().is_empty(), "{report}");
    }
    common::assert_no_validation_errors();
}
