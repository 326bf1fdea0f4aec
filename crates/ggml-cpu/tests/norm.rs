//! RMS_NORM on the CPU gives the reference's bits (ggml's sum of squares
//! in f64, in order), whether rows go eight side by side (F32 rows read
//! where they lie, on one thread or split) or one at a time (a tail of
//! fewer than eight, F16 or permuted sources).

use ggml_core::conformance::{run_cases, Case, Check, Fill};
use ggml_core::Type;

#[test]
fn rms_norm_has_the_reference_bits() {
    let mut cases = Vec::new();
    for (ty, ne) in [
        (Type::F32, [67usize, 19, 1]),
        (Type::F32, [1, 9, 1]),
        (Type::F32, [2048, 150, 1]),
        (Type::F32, [64, 8, 3]),
        (Type::F16, [67, 19, 1]),
    ] {
        cases.push(Case::new(
            format!("RMS_NORM {ty} {ne:?}"),
            Check::Exact,
            move |c| {
                let a = c.input("a", ty, &ne, Fill::Uniform(-3.0, 5.0));
                c.g.rms_norm(a, 1e-5)
            },
        ));
    }
    cases.push(Case::new(
        "RMS_NORM F32 [40,12,2] permuted (0,2,1,3)".to_string(),
        Check::Exact,
        |c| {
            let a = c.permuted("a", Type::F32, &[40, 12, 2], [0, 2, 1, 3])?;
            c.g.rms_norm(a, 1e-6)
        },
    ));
    let report = run_cases(&ggml_cpu::cpu_device(), &cases);
    println!("{report}");
    report.assert_ok();
    assert_eq!(report.passed(), cases.len());
}
