//! The RWKV ops on every Vulkan device: the conformance suite's EXP,
//! L2_NORM, RWKV_WKV6 and RWKV_WKV7 cases all run here (none left to
//! another backend), the WKV shaders at their largest head, and a larger
//! head is refused.

mod common;

use std::sync::Arc;

use ggml_core::conformance::{self, Case, Check, Fill};
use ggml_core::{Device, Type};

fn run(dev: Arc<dyn Device>, cases: &[Case]) {
    let report = conformance::run_cases(&dev, cases);
    eprintln!("{report}");
    report.assert_ok();
    assert!(report.skipped().is_empty(), "{report}");
    common::assert_no_validation_errors();
}

#[test]
fn rwkv_cases_of_the_suite_run_on_the_device() {
    let Some(dev) = common::device() else { return };
    let cases: Vec<Case> = conformance::cases()
        .into_iter()
        .filter(|c| {
            ["RWKV_WKV", "L2_NORM", "UNARY Exp"]
                .iter()
                .any(|f| c.name.contains(f))
        })
        .collect();
    assert!(cases.len() >= 15, "{} cases", cases.len());
    run(dev, &cases);
}

const WKV: Check = Check::Close {
    atol: 1e-5,
    rtol: 1e-4,
};

fn wkv_case(six: bool, hs: usize, nh: usize, nt: usize, n_s: usize) -> Case {
    let kind = if six { "RWKV_WKV6" } else { "RWKV_WKV7" };
    Case::new(
        format!("{kind} head size {hs}, {nh} heads, {nt} tokens of {n_s} seqs"),
        WKV,
        move |c| {
            let tok = [hs, nh, nt];
            let small = Fill::Uniform(-0.1, 0.1);
            let x: Vec<_> = (0..4)
                .map(|i| c.input(&format!("x{i}"), Type::F32, &tok, small))
                .collect();
            let w = c.input("w", Type::F32, &tok, Fill::Uniform(0.5, 1.0));
            let s = c.rand("state", Type::F32, &[hs * hs * nh, n_s]);
            if six {
                let u = c.rand("u", Type::F32, &[hs, nh]);
                c.g.rwkv_wkv6(x[0], x[1], x[2], u, w, s)
            } else {
                let b = c.input("b", Type::F32, &tok, small);
                c.g.rwkv_wkv7(x[0], w, x[1], x[2], x[3], b, s)
            }
        },
    )
}

#[test]
fn wkv_at_the_shader_limits() {
    let Some(dev) = common::device() else { return };
    let mut cases = Vec::new();
    for six in [true, false] {
        cases.push(wkv_case(six, 128, 2, 6, 2));
    }
    run(dev.clone(), &cases);

    let mut g = ggml_core::Graph::new();
    let hs = 129;
    let t: Vec<_> = (0..6)
        .map(|i| g.input(format!("x{i}"), Type::F32, &[hs, 1, 1]))
        .collect();
    let s = g.input("s", Type::F32, &[hs * hs, 1]);
    let y = g.rwkv_wkv7(t[0], t[1], t[2], t[3], t[4], t[5], s).unwrap();
    assert!(
        !dev.supports_op(&g, y),
        "head size {hs} is past the shader's"
    );
}
