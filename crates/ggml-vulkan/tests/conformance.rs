//! The shared backend conformance suite on every Vulkan device, with the
//! validation layer on: every supported case matches the scalar reference
//! within the suite's tolerances.

mod common;

use std::sync::Arc;

use ggml_core::conformance;
use ggml_core::Device;

#[test]
fn conformance_suite() {
    for dev in common::devices() {
        let d: Arc<dyn Device> = dev.clone();
        let report = conformance::run(&d);
        eprintln!("{report}");
        report.assert_ok();
        common::assert_no_validation_errors();
    }
}
