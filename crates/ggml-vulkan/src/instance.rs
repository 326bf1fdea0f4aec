//! The Vulkan instance: loader, validation layer, debug messenger, and the
//! list of physical devices the backend exposes.

use std::ffi::{c_void, CStr};
use std::sync::{Arc, Mutex};

use ash::vk;

use crate::error::{Error, Result, VkContext};
use crate::options::Options;

const VALIDATION_LAYER: &CStr = c"VK_LAYER_KHRONOS_validation";

/// Validation errors reported by the debug messenger, oldest first.
static VALIDATION_ERRORS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Takes the validation-layer errors reported so far (all instances).
pub fn take_validation_errors() -> Vec<String> {
    std::mem::take(&mut *VALIDATION_ERRORS.lock().unwrap_or_else(|e| e.into_inner()))
}

unsafe extern "system" fn debug_callback(
    severity: vk::DebugUtilsMessageSeverityFlagsEXT,
    _types: vk::DebugUtilsMessageTypeFlagsEXT,
    data: *const vk::DebugUtilsMessengerCallbackDataEXT<'_>,
    _user: *mut c_void,
) -> vk::Bool32 {
    // SAFETY: the loader passes a valid callback data pointer whose message,
    // when not null, is a NUL-terminated string, for the duration of the call.
    let msg = unsafe {
        data.as_ref()
            .and_then(|d| (!d.p_message.is_null()).then(|| CStr::from_ptr(d.p_message)))
            .map(|m| m.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    if severity.contains(vk::DebugUtilsMessageSeverityFlagsEXT::ERROR) {
        eprintln!("ggml_vulkan: validation error: {msg}");
        VALIDATION_ERRORS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(msg);
    } else {
        eprintln!("ggml_vulkan: validation: {msg}");
    }
    vk::FALSE
}

/// An instance and what must outlive every device made from it.
pub(crate) struct Instance {
    /// Keeps the loader library loaded while the instance lives.
    _entry: ash::Entry,
    pub(crate) instance: ash::Instance,
    debug: Option<(ash::ext::debug_utils::Instance, vk::DebugUtilsMessengerEXT)>,
}

impl Drop for Instance {
    fn drop(&mut self) {
        // SAFETY: every device made from this instance holds an Arc to it and
        // is gone; the messenger belongs to this instance.
        unsafe {
            if let Some((du, m)) = self.debug.take() {
                du.destroy_debug_utils_messenger(m, None);
            }
            self.instance.destroy_instance(None);
        }
    }
}

/// A physical device with what the backend needs to know to pick it.
pub(crate) struct Physical {
    /// Index in the driver's enumeration order.
    pub(crate) index: usize,
    pub(crate) handle: vk::PhysicalDevice,
    pub(crate) props: vk::PhysicalDeviceProperties,
    /// Device UUID: the same device seen through two drivers shares it.
    pub(crate) uuid: [u8; vk::UUID_SIZE],
    /// The driver's name and version text (Vulkan 1.2 driver properties),
    /// or its numeric version when the device predates Vulkan 1.2.
    pub(crate) driver: String,
}

impl Physical {
    pub(crate) fn name(&self) -> String {
        self.props
            .device_name_as_c_str()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    }
}

/// "NAME INFO" of a device's driver properties (either may be empty).
fn driver_text(dp: &vk::PhysicalDeviceDriverProperties<'_>) -> String {
    fn text<E>(r: std::result::Result<&std::ffi::CStr, E>) -> String {
        r.map(|s| s.to_string_lossy().trim().to_string())
            .unwrap_or_default()
    }
    let name = text(dp.driver_name_as_c_str());
    let info = text(dp.driver_info_as_c_str());
    match (name.is_empty(), info.is_empty()) {
        (true, true) => "unknown driver".into(),
        (false, true) => name,
        (true, false) => info,
        (false, false) => format!("{name} {info}"),
    }
}

impl Instance {
    /// Loads the Vulkan loader and creates an instance (Vulkan 1.2), with
    /// the validation layer and a debug messenger when `opts.validation`.
    pub(crate) fn new(opts: &Options) -> Result<Arc<Instance>> {
        // SAFETY: loading the system Vulkan loader runs its initialisation;
        // ash keeps the library loaded as long as the Entry lives.
        let entry = unsafe { ash::Entry::load() }.map_err(|e| Error::Loader(e.to_string()))?;
        // SAFETY: plain queries through a loaded entry.
        let (layers, exts) = unsafe {
            (
                entry
                    .enumerate_instance_layer_properties()
                    .unwrap_or_default(),
                entry
                    .enumerate_instance_extension_properties(None)
                    .unwrap_or_default(),
            )
        };
        let has_layer = layers
            .iter()
            .any(|l| l.layer_name_as_c_str().is_ok_and(|n| n == VALIDATION_LAYER));
        let has_debug_utils = exts.iter().any(|e| {
            e.extension_name_as_c_str()
                .is_ok_and(|n| n == ash::ext::debug_utils::NAME)
        });
        let has_portability = exts.iter().any(|e| {
            e.extension_name_as_c_str()
                .is_ok_and(|n| n == ash::khr::portability_enumeration::NAME)
        });
        let mut layer_names = Vec::new();
        if opts.validation {
            if has_layer {
                layer_names.push(VALIDATION_LAYER.as_ptr());
            } else {
                eprintln!("ggml_vulkan: validation requested but VK_LAYER_KHRONOS_validation is not installed");
            }
        }
        let debug = opts.validation && has_debug_utils;
        let mut ext_names = Vec::new();
        if debug {
            ext_names.push(ash::ext::debug_utils::NAME.as_ptr());
        }
        let mut flags = vk::InstanceCreateFlags::empty();
        if has_portability {
            ext_names.push(ash::khr::portability_enumeration::NAME.as_ptr());
            flags |= vk::InstanceCreateFlags::ENUMERATE_PORTABILITY_KHR;
        }
        let app = vk::ApplicationInfo::default()
            .application_name(c"ggml-vulkan")
            .engine_name(c"ggml")
            .api_version(vk::API_VERSION_1_2);
        let mut messenger_info = vk::DebugUtilsMessengerCreateInfoEXT::default()
            .message_severity(
                vk::DebugUtilsMessageSeverityFlagsEXT::ERROR
                    | vk::DebugUtilsMessageSeverityFlagsEXT::WARNING,
            )
            .message_type(
                vk::DebugUtilsMessageTypeFlagsEXT::GENERAL
                    | vk::DebugUtilsMessageTypeFlagsEXT::VALIDATION
                    | vk::DebugUtilsMessageTypeFlagsEXT::PERFORMANCE,
            )
            .pfn_user_callback(Some(debug_callback));
        let mut info = vk::InstanceCreateInfo::default()
            .application_info(&app)
            .enabled_layer_names(&layer_names)
            .enabled_extension_names(&ext_names)
            .flags(flags);
        if debug {
            // Also reports problems of instance creation and destruction.
            info = info.push_next(&mut messenger_info);
        }
        // SAFETY: the create info and everything it points to live until the call returns.
        let instance = unsafe { entry.create_instance(&info, None) }.ctx("vkCreateInstance")?;
        let debug = if debug {
            let du = ash::ext::debug_utils::Instance::new(&entry, &instance);
            // SAFETY: the instance was created with VK_EXT_debug_utils enabled.
            match unsafe { du.create_debug_utils_messenger(&messenger_info, None) } {
                Ok(m) => Some((du, m)),
                Err(e) => {
                    eprintln!("ggml_vulkan: cannot create a debug messenger: {e}");
                    None
                }
            }
        } else {
            None
        };
        Ok(Arc::new(Instance {
            _entry: entry,
            instance,
            debug,
        }))
    }

    /// Every physical device, in the driver's order.
    pub(crate) fn physical_devices(&self) -> Result<Vec<Physical>> {
        // SAFETY: plain queries on a live instance.
        unsafe {
            let handles = self
                .instance
                .enumerate_physical_devices()
                .ctx("vkEnumeratePhysicalDevices")?;
            Ok(handles
                .into_iter()
                .enumerate()
                .map(|(index, handle)| {
                    let mut id = vk::PhysicalDeviceIDProperties::default();
                    let mut p2 = vk::PhysicalDeviceProperties2::default().push_next(&mut id);
                    self.instance
                        .get_physical_device_properties2(handle, &mut p2);
                    let props = p2.properties;
                    let driver = if props.api_version >= vk::API_VERSION_1_2 {
                        let mut dp = vk::PhysicalDeviceDriverProperties::default();
                        let mut p2 = vk::PhysicalDeviceProperties2::default().push_next(&mut dp);
                        self.instance
                            .get_physical_device_properties2(handle, &mut p2);
                        driver_text(&dp)
                    } else {
                        format!("driver version {:#x}", props.driver_version)
                    };
                    Physical {
                        index,
                        handle,
                        props,
                        uuid: id.device_uuid,
                        driver,
                    }
                })
                .collect())
        }
    }
}

/// Picks the physical devices to expose: `visible_devices` in its order
/// (repeats allowed), else every device once (devices seen through two
/// drivers once). Software devices only with `allow_cpu_devices`. Returns
/// the picks and a line for each device left out.
pub(crate) fn select(phys: &[Physical], opts: &Options) -> (Vec<usize>, Vec<String>) {
    let mut notes = Vec::new();
    let usable = |p: &Physical, notes: &mut Vec<String>| {
        if p.props.device_type == vk::PhysicalDeviceType::CPU && !opts.allow_cpu_devices {
            notes.push(format!(
                "device {} ({}) is a software device; set GGML_VK_ALLOW_CPU_DEVICES=1 to use it",
                p.index,
                p.name()
            ));
            return false;
        }
        if p.props.api_version < vk::API_VERSION_1_2 {
            notes.push(format!(
                "device {} ({}) supports Vulkan {}.{} only, 1.2 is needed",
                p.index,
                p.name(),
                vk::api_version_major(p.props.api_version),
                vk::api_version_minor(p.props.api_version)
            ));
            return false;
        }
        true
    };
    let mut picks = Vec::new();
    match &opts.visible_devices {
        Some(list) => {
            for &i in list {
                match phys.get(i) {
                    Some(p) if usable(p, &mut notes) => picks.push(i),
                    Some(_) => {}
                    None => notes.push(format!(
                        "GGML_VK_VISIBLE_DEVICES names device {i}, there are {}",
                        phys.len()
                    )),
                }
            }
        }
        None => {
            let mut seen = Vec::new();
            for p in phys {
                if !usable(p, &mut notes) {
                    continue;
                }
                // The same device through two drivers is listed once.
                if p.uuid != [0; vk::UUID_SIZE] && seen.contains(&p.uuid) {
                    continue;
                }
                seen.push(p.uuid);
                picks.push(p.index);
            }
        }
    }
    (picks, notes)
}
