//! The shared backend conformance suite on the CPU device.

use ggml_core::conformance;

#[test]
fn cpu_device_passes_the_conformance_suite() {
    let dev = ggml_cpu::cpu_device();
    let report = conformance::run(&dev);
    println!("{report}");
    report.assert_ok();
    let skipped = report.skipped();
    assert!(skipped.is_empty(), "the CPU skipped cases: {skipped:#?}");
}
