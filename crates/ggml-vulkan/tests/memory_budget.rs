//! `GGML_VK_MAX_MEMORY_MIB` (`Options::max_memory`): every device reports
//! at most the budget, less what it has allocated, and refuses device
//! allocations beyond it with an out-of-memory error naming the device and
//! the bytes; freeing gives the memory back.

mod common;

use ggml_core::Device;
use ggml_vulkan::Options;

const MIB: usize = 1 << 20;

#[test]
fn a_memory_budget_caps_reports_and_allocations() {
    if common::device().is_none() {
        return;
    }
    let reg = common::reg_with(Options {
        max_memory: Some(64 * MIB),
        ..common::test_options()
    })
    .expect("same devices as the test registry");
    for dev in reg.vulkan_devices() {
        let name = dev.name().to_string();
        let before = dev.props();
        assert!(before.memory_total <= 64 * MIB, "{name}: {before:?}");
        assert!(before.memory_free <= 64 * MIB, "{name}: {before:?}");
        let buft = dev.buffer_type();
        let a = buft.alloc_buffer(40 * MIB).unwrap();
        let free = dev.props().memory_free;
        assert!(free <= before.memory_free - 40 * MIB, "{name}: {free} free");
        let e = buft.alloc_buffer(40 * MIB).err().expect("past the budget");
        let msg = e.to_string();
        assert!(
            msg.contains(&name) && msg.contains(&(40 * MIB).to_string()),
            "{msg}"
        );
        assert!(msg.contains("out of device memory"), "{msg}");
        assert!(matches!(e, ggml_core::Error::Alloc { size, .. } if size == 40 * MIB));
        // Pinned host memory is not device memory: not counted.
        if let Some(host) = dev.host_buffer_type() {
            drop(host.alloc_buffer(40 * MIB).unwrap());
        }
        drop(a);
        assert_eq!(dev.props().memory_free, before.memory_free, "{name}");
        drop(buft.alloc_buffer(40 * MIB).unwrap());
    }
    common::assert_no_validation_errors();
}
