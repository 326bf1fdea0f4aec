//! Test helpers: the Vulkan devices of the process (with the validation
//! layer on), skipping when there are none unless `REQUIRE_VULKAN=1`.

#![allow(dead_code)]

pub mod graph;

use std::sync::{Arc, OnceLock};

use ggml_vulkan::{Options, VulkanDevice, VulkanReg};

/// Options of the test registry: the environment's, with validation on.
pub fn test_options() -> Options {
    Options {
        validation: true,
        ..Options::from_env()
    }
}

fn reg() -> &'static VulkanReg {
    static REG: OnceLock<VulkanReg> = OnceLock::new();
    REG.get_or_init(|| VulkanReg::new(&test_options()))
}

/// True when Vulkan tests must not skip.
pub fn required() -> bool {
    std::env::var("REQUIRE_VULKAN").is_ok_and(|v| v == "1")
}

/// The devices to test on; prints why and returns none when there are
/// none (fails instead with `REQUIRE_VULKAN=1`).
pub fn devices() -> Vec<Arc<VulkanDevice>> {
    let r = reg();
    if r.vulkan_devices().is_empty() {
        let why = r.unavailable_reason().unwrap_or("unknown");
        assert!(
            !required(),
            "REQUIRE_VULKAN=1 but there is no Vulkan device: {why}"
        );
        eprintln!("skipped: no Vulkan device ({why})");
    }
    r.vulkan_devices().to_vec()
}

/// The first device, if any (see [`devices`]).
pub fn device() -> Option<Arc<VulkanDevice>> {
    devices().into_iter().next()
}

/// A registry of its own with `opts` (validation on), or `None` when it
/// has no device (then the process registry has none either).
pub fn reg_with(opts: Options) -> Option<VulkanReg> {
    let r = VulkanReg::new(&Options {
        validation: true,
        ..opts
    });
    (!r.vulkan_devices().is_empty()).then_some(r)
}

/// Fails when the validation layer reported an error.
pub fn assert_no_validation_errors() {
    let errors = ggml_vulkan::take_validation_errors();
    assert!(
        errors.is_empty(),
        "validation errors:\n{}",
        errors.join("\n")
    );
}
