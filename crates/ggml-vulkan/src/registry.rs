//! The backend registration: enumerates devices once and registers them
//! in ggml-core's registry.

use std::sync::{Arc, OnceLock};

use ggml_core::{BackendReg, Device};

use crate::device::VulkanDevice;
use crate::instance::{select, Instance};
use crate::logical::DeviceShared;
use crate::options::Options;

/// The Vulkan backend: its devices, or why there are none.
pub struct VulkanReg {
    devices: Vec<Arc<VulkanDevice>>,
    unavailable: Option<String>,
}

impl VulkanReg {
    /// Opens the Vulkan loader and makes a device for every physical device
    /// `opts` picks. Never fails: without a loader, driver or usable device
    /// the list is empty and [`VulkanReg::unavailable_reason`] says why.
    pub fn new(opts: &Options) -> VulkanReg {
        let instance = match Instance::new(opts) {
            Ok(i) => i,
            Err(e) => return VulkanReg::none(e.to_string()),
        };
        let phys = match instance.physical_devices() {
            Ok(p) => p,
            Err(e) => return VulkanReg::none(e.to_string()),
        };
        if phys.is_empty() {
            return VulkanReg::none("the Vulkan loader found no driver or device".into());
        }
        let (picks, mut notes) = select(&phys, opts);
        let mut devices = Vec::new();
        for i in picks {
            let name = format!("Vulkan{}", devices.len());
            match DeviceShared::new(instance.clone(), &phys[i], name, opts) {
                Ok(s) => devices.push(VulkanDevice::new(s)),
                Err(e) => notes.push(format!("device {i} ({}): {e}", phys[i].name())),
            }
        }
        let unavailable = devices.is_empty().then(|| {
            if notes.is_empty() {
                "no device was selected".to_string()
            } else {
                notes.join("; ")
            }
        });
        VulkanReg {
            devices,
            unavailable,
        }
    }

    fn none(reason: String) -> VulkanReg {
        VulkanReg {
            devices: Vec::new(),
            unavailable: Some(reason),
        }
    }

    /// The devices, with their concrete type.
    pub fn vulkan_devices(&self) -> &[Arc<VulkanDevice>] {
        &self.devices
    }

    /// Why there is no device, when there is none.
    pub fn unavailable_reason(&self) -> Option<&str> {
        self.unavailable.as_deref()
    }
}

impl BackendReg for VulkanReg {
    fn name(&self) -> &str {
        "Vulkan"
    }

    fn devices(&self) -> Vec<Arc<dyn Device>> {
        self.devices
            .iter()
            .map(|d| d.clone() as Arc<dyn Device>)
            .collect()
    }

    fn features(&self) -> Vec<(String, String)> {
        self.devices
            .iter()
            .map(|d| {
                let (size, on) = d.subgroups();
                (
                    format!("{} subgroup", d.name()),
                    if on { size.to_string() } else { "off".into() },
                )
            })
            .collect()
    }
}

static REG: OnceLock<Arc<VulkanReg>> = OnceLock::new();

/// The process-wide registration, made on first use from the environment
/// ([`Options::from_env`]); logs the devices found, or why there are none.
pub fn backend() -> Arc<VulkanReg> {
    REG.get_or_init(|| {
        let reg = VulkanReg::new(&Options::from_env());
        match reg.unavailable_reason() {
            Some(why) => eprintln!("ggml_vulkan: no Vulkan device: {why}"),
            None => {
                for d in &reg.devices {
                    let (sg, on) = d.subgroups();
                    eprintln!(
                        "ggml_vulkan: {} = {} | {:?} | subgroup size {sg}{} | driver: {}",
                        d.name(),
                        d.description(),
                        d.kind(),
                        if on { "" } else { " (subgroup ops off)" },
                        d.driver()
                    );
                }
            }
        }
        Arc::new(reg)
    })
    .clone()
}

/// Registers the Vulkan backend ("Vulkan") in ggml-core's registry. With no
/// usable device it registers nothing (the reason is logged once).
pub fn register() {
    let reg = backend();
    if !reg.devices.is_empty() {
        ggml_core::registry::register(reg);
    }
}
