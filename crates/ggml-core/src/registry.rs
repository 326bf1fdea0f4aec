//! The backend registry: backends register at run time; devices are
//! enumerated in registration order.

use std::sync::{Arc, RwLock};

use crate::backend::{Backend, BackendReg, Device, DeviceKind};
use crate::{Error, Result};

static REGISTRY: RwLock<Vec<Arc<dyn BackendReg>>> = RwLock::new(Vec::new());

/// Registers a backend; registering a name twice keeps the first.
pub fn register(reg: Arc<dyn BackendReg>) {
    let mut regs = REGISTRY.write().unwrap_or_else(|e| e.into_inner());
    if regs.iter().all(|r| r.name() != reg.name()) {
        regs.push(reg);
    }
}

/// The registered backends, in registration order.
pub fn backends() -> Vec<Arc<dyn BackendReg>> {
    REGISTRY.read().unwrap_or_else(|e| e.into_inner()).clone()
}

/// A registered backend by name (case-insensitive).
pub fn backend_by_name(name: &str) -> Option<Arc<dyn BackendReg>> {
    backends()
        .into_iter()
        .find(|r| r.name().eq_ignore_ascii_case(name))
}

/// Every device of every registered backend, in registration order.
pub fn devices() -> Vec<Arc<dyn Device>> {
    backends().iter().flat_map(|r| r.devices()).collect()
}

/// One line about every registered device, as the tools list them:
/// `name: description (total MiB, free MiB free)`.
pub fn device_lines() -> Vec<String> {
    devices()
        .iter()
        .map(|d| {
            let (free, total) = d.memory();
            let desc = d.description();
            format!(
                "{}: {desc} ({} MiB, {} MiB free)",
                d.name(),
                total >> 20,
                free >> 20
            )
        })
        .collect()
}

/// A device by name (case-insensitive).
pub fn device_by_name(name: &str) -> Option<Arc<dyn Device>> {
    devices()
        .into_iter()
        .find(|d| d.name().eq_ignore_ascii_case(name))
}

/// The first device of a kind.
pub fn device_by_kind(kind: DeviceKind) -> Option<Arc<dyn Device>> {
    devices().into_iter().find(|d| d.kind() == kind)
}

/// A backend on the best device: a GPU, else an integrated GPU, else the CPU.
pub fn init_best() -> Result<Box<dyn Backend>> {
    [DeviceKind::Gpu, DeviceKind::IGpu, DeviceKind::Cpu]
        .into_iter()
        .find_map(device_by_kind)
        .ok_or_else(|| Error::Backend("no device registered".into()))?
        .init_backend()
}
