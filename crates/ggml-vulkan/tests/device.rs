//! Device enumeration, buffers, transfers, events and chunked weights.

mod common;

use std::sync::Arc;

use ggml_core::alloc::LinearAlloc;
use ggml_core::backend::copy_placement;
use ggml_core::host::{HostBufferType, HOST_ALIGNMENT};
use ggml_core::{Buffer, BufferUsage, Device, DeviceKind, Placement, TensorDesc, Type};
use ggml_vulkan::{Options, VulkanDevice, VulkanReg};

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn read(b: &Arc<dyn Buffer>, offset: usize, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    b.get_tensor(offset, &mut out).unwrap();
    out
}

#[test]
fn software_devices_need_opt_in() {
    let reg = VulkanReg::new(&Options {
        allow_cpu_devices: false,
        ..Options::default()
    });
    for d in reg.vulkan_devices() {
        let desc = d.description();
        assert!(
            !desc.contains("llvmpipe") && !desc.contains("SwiftShader"),
            "software device {desc} listed without GGML_VK_ALLOW_CPU_DEVICES"
        );
    }
    if reg.vulkan_devices().is_empty() {
        // No loader, no driver, or only software devices: the reason is told.
        let why = reg
            .unavailable_reason()
            .expect("a reason when there is no device");
        eprintln!("no device without software devices: {why}");
        assert!(!why.is_empty());
    }
}

#[test]
fn device_props_and_registration() {
    let Some(dev) = common::device() else { return };
    let p = dev.props();
    assert_eq!(p.name, "Vulkan0");
    assert!(matches!(p.kind, DeviceKind::Gpu | DeviceKind::IGpu));
    assert!(p.memory_total > 0 && p.memory_free <= p.memory_total);
    assert!(p.caps.async_ && p.caps.host_buffer && p.caps.events);
    assert_eq!(dev.buffer_type().name(), "Vulkan0");
    assert_eq!(dev.host_buffer_type().unwrap().name(), "Vulkan_Host");
    assert!(dev.supports_buft(dev.buffer_type().as_ref()));
    assert!(!dev.supports_buft(dev.host_buffer_type().unwrap().as_ref()));
    assert!(dev.buffer_type().max_size() <= ggml_vulkan::MAX_BUFFER_SIZE);
    assert!(dev.buffer_type().alignment().is_power_of_two());

    ggml_vulkan::register();
    let reg = ggml_core::registry::backend_by_name("Vulkan").expect("registered");
    assert!(!reg.devices().is_empty());
    assert!(ggml_core::registry::device_by_name("Vulkan0").is_some());
}

#[test]
fn visible_devices_may_repeat_a_device() {
    if common::device().is_none() {
        return;
    }
    let reg = common::reg_with(Options {
        visible_devices: Some(vec![0, 0]),
        ..common::test_options()
    });
    let Some(reg) = reg else {
        eprintln!("skipped: device 0 is not usable");
        return;
    };
    let devs = reg.vulkan_devices();
    assert_eq!(devs.len(), 2);
    assert_eq!(devs[0].name(), "Vulkan0");
    assert_eq!(devs[1].name(), "Vulkan1");
    assert_eq!(devs[0].description(), devs[1].description());
    // Buffers of the two logical devices exchange data through the host.
    let a = devs[0].buffer_type().alloc_buffer(1000).unwrap();
    let b = devs[1].buffer_type().alloc_buffer(1000).unwrap();
    let data = pattern(1000, 7);
    a.set_tensor(0, &data).unwrap();
    let src = Placement::new(a.clone(), 100);
    let dst = Placement::new(b.clone(), 200);
    copy_placement(&src, &dst, 700).unwrap();
    assert_eq!(read(&b, 200, 700), data[100..800]);
    assert!(!devs[0].supports_buft(devs[1].buffer_type().as_ref()));
    common::assert_no_validation_errors();
}

fn transfers_on(dev: &Arc<VulkanDevice>) {
    let buft = dev.buffer_type();
    let n = 40_000;
    let b = buft.alloc_buffer(n).unwrap();
    assert_eq!(b.size(), n);
    assert!(b.base().is_none());
    let data = pattern(n, 3);
    b.set_tensor(0, &data).unwrap();
    assert_eq!(read(&b, 0, n), data);
    // Odd offsets and lengths.
    b.set_tensor(13, &[1, 2, 3, 4, 5]).unwrap();
    assert_eq!(
        read(&b, 11, 9),
        [data[11], data[12], 1, 2, 3, 4, 5, data[18], data[19]]
    );
    b.memset_tensor(5, 0xab, 4099).unwrap();
    let got = read(&b, 0, 5000);
    assert_eq!(got[..5], data[..5]);
    assert!(got[5..4104].iter().all(|&x| x == 0xab));
    assert_eq!(got[4104..], data[4104..5000]);
    b.clear(0).unwrap();
    assert!(read(&b, 0, n).iter().all(|&x| x == 0));
    assert!(b.set_tensor(n - 2, &[0; 3]).is_err());
    assert!(b.get_tensor(n, &mut [0; 1]).is_err());

    // Copies from host memory and between Vulkan buffers.
    let host = HostBufferType::new("CPU", HOST_ALIGNMENT, usize::MAX);
    let h = host.alloc(5000).unwrap();
    h.set_tensor(0, &data[..5000]).unwrap();
    let hs = Placement::new(h.clone(), 10);
    assert!(b.cpy_tensor(&hs, 30, 4000).unwrap());
    assert_eq!(read(&b, 30, 4000), data[10..4010]);
    let c = buft.alloc_buffer(n).unwrap();
    let bs = Placement::new(b.clone(), 30);
    assert!(c.cpy_tensor(&bs, 1, 4000).unwrap());
    assert_eq!(read(&c, 1, 4000), data[10..4010]);
    // Overlapping copy inside one buffer goes through the host.
    let cs = Placement::new(c.clone(), 1);
    let cd = Placement::new(c.clone(), 101);
    copy_placement(&cs, &cd, 4000).unwrap();
    assert_eq!(read(&c, 101, 4000), data[10..4010]);
    // Vulkan buffer to host buffer.
    let h2 = host.alloc(4000).unwrap();
    copy_placement(&bs, &Placement::new(h2.clone(), 0), 4000).unwrap();
    let mut out = vec![0u8; 4000];
    h2.get_tensor(0, &mut out).unwrap();
    assert_eq!(out, data[10..4010]);

    // More than one staging round.
    let big = 16 * 1024 * 1024 + 4096 + 3;
    let bb = buft.alloc_buffer(big + 8).unwrap();
    let bdata = pattern(big, 9);
    bb.set_tensor(5, &bdata).unwrap();
    assert!(read(&bb, 5, big) == bdata);
}

#[test]
fn transfers_direct_and_staged() {
    if let Some(dev) = common::device() {
        transfers_on(&dev);
    }
    if common::device().is_some() {
        let reg = common::reg_with(Options {
            force_staging: true,
            ..common::test_options()
        })
        .expect("same devices as the test registry");
        transfers_on(&reg.vulkan_devices()[0]);
    }
    common::assert_no_validation_errors();
}

#[test]
fn pinned_host_buffers_are_mapped() {
    let Some(dev) = common::device() else { return };
    let ht = dev.host_buffer_type().unwrap();
    assert!(ht.is_host());
    assert!(ht.alignment() >= 64);
    let b = ht.alloc_buffer(4096).unwrap();
    let base = b.base().expect("pinned host memory is mapped");
    assert_eq!(base.as_ptr() as usize % 64, 0);
    let data = pattern(4096, 1);
    b.set_tensor(0, &data).unwrap();
    // SAFETY: the buffer holds 4096 bytes and nothing else uses it.
    let seen = unsafe { std::slice::from_raw_parts(base.as_ptr(), 4096) };
    assert_eq!(seen, &data[..]);
    // A device buffer copies from it.
    let d = dev.buffer_type().alloc_buffer(4096).unwrap();
    let whole = Placement::new(b.clone(), 0);
    assert!(d.cpy_tensor(&whole, 0, 4096).unwrap());
    assert_eq!(read(&d, 0, 4096), data);
    // An overlapping copy inside it.
    assert!(b.cpy_tensor(&whole, 100, 1000).unwrap());
    assert_eq!(read(&b, 100, 1000), data[..1000]);
    common::assert_no_validation_errors();
}

#[test]
fn allocation_failure_is_an_error() {
    let Some(dev) = common::device() else { return };
    let buft = dev.buffer_type();
    let size = buft.max_size() + 1;
    let err = buft
        .alloc_buffer(size)
        .err()
        .expect("too large")
        .to_string();
    assert!(
        err.contains("Vulkan0") && err.contains(&size.to_string()),
        "{err}"
    );
    let huge = usize::MAX / 2;
    let err = dev
        .host_buffer_type()
        .unwrap()
        .alloc_buffer(huge)
        .err()
        .expect("too large");
    assert!(err.to_string().contains(&huge.to_string()), "{err}");
}

#[test]
fn weights_are_held_in_chunks_of_at_most_max_size() {
    if common::device().is_none() {
        return;
    }
    let max = 1 << 20;
    let reg = common::reg_with(Options {
        max_buffer_size: Some(max),
        ..common::test_options()
    })
    .expect("same devices as the test registry");
    let dev = &reg.vulkan_devices()[0];
    let buft = dev.buffer_type();
    assert_eq!(buft.max_size(), max);
    // 3.5 MiB of weights in tensors of 300 KiB to 700 KiB.
    let descs: Vec<TensorDesc> = (0..8)
        .map(|i| TensorDesc::new(format!("w{i}"), Type::F32, &[1024, 75 + 25 * (i % 4) + 50]))
        .collect();
    let total: usize = descs.iter().map(|d| d.nbytes()).sum();
    assert!(total > 3 * max);
    let a = LinearAlloc::alloc_tensors(&buft, &descs, BufferUsage::Weights).unwrap();
    assert!(a.buffers.len() >= 4, "{} buffers", a.buffers.len());
    for b in &a.buffers {
        assert!(b.size() <= max);
        assert_eq!(b.usage(), BufferUsage::Weights);
    }
    for (i, (d, p)) in descs.iter().zip(&a.placements).enumerate() {
        let data = pattern(d.nbytes(), i as u8);
        p.buffer.set_tensor(p.offset, &data).unwrap();
    }
    for (i, (d, p)) in descs.iter().zip(&a.placements).enumerate() {
        assert_eq!(
            read(&p.buffer, p.offset, d.nbytes()),
            pattern(d.nbytes(), i as u8)
        );
    }
    common::assert_no_validation_errors();
}

#[test]
fn async_transfers_and_events() {
    let Some(dev) = common::device() else { return };
    let buft = dev.buffer_type();
    let a = buft.alloc_buffer(1 << 16).unwrap();
    let b = buft.alloc_buffer(1 << 16).unwrap();
    let pa = |o| Placement::new(a.clone(), o);
    let pb = |o| Placement::new(b.clone(), o);
    let data = pattern(1 << 15, 5);
    let mut be1 = dev.init_backend().unwrap();
    let mut be2 = dev.init_backend().unwrap();
    be1.set_tensor_async(&pa(0), &[]).unwrap();
    assert!(be1.cpy_tensor_async(&pa(0), &pb(0), 0).unwrap());
    be1.set_tensor_async(&pa(0), &data).unwrap();
    // Overwrite part of it in the same stream: the later write wins.
    be1.set_tensor_async(&pa(100), &[9; 50]).unwrap();
    assert!(be1.cpy_tensor_async(&pa(0), &pb(4), 1 << 15).unwrap());
    let ev = dev.event_new().expect("events");
    be1.event_record(ev.as_ref()).unwrap();
    be2.event_wait(ev.as_ref()).unwrap();
    let mut out = vec![0u8; 1 << 15];
    be2.get_tensor_async(&pb(4), &mut out).unwrap();
    let mut want = data.clone();
    want[100..150].fill(9);
    assert_eq!(out, want);
    ev.synchronize().unwrap();

    // From and to host buffers.
    let host = HostBufferType::new("CPU", HOST_ALIGNMENT, usize::MAX);
    let h = host.alloc(4096).unwrap();
    h.set_tensor(0, &data[..4096]).unwrap();
    let hp = Placement::new(h.clone(), 0);
    assert!(be1.cpy_tensor_async(&hp, &pa(8), 4096).unwrap());
    let h2 = host.alloc(4096).unwrap();
    let hp2 = Placement::new(h2.clone(), 0);
    assert!(be1.cpy_tensor_async(&pa(8), &hp2, 4096).unwrap());
    be1.synchronize().unwrap();
    let mut out = vec![0u8; 4096];
    h2.get_tensor(0, &mut out).unwrap();
    assert_eq!(out, data[..4096]);
    drop(be1);
    drop(be2);
    common::assert_no_validation_errors();
}
