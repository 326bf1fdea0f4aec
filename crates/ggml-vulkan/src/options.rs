//! Backend options, read from the environment by [`Options::from_env`].

/// How the backend picks devices and sizes buffers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// Also expose software devices (lavapipe, SwiftShader):
    /// `GGML_VK_ALLOW_CPU_DEVICES=1`.
    pub allow_cpu_devices: bool,
    /// Physical device indices (in the driver's enumeration order) to expose,
    /// in this order; an index may repeat: `GGML_VK_VISIBLE_DEVICES=0,1`.
    pub visible_devices: Option<Vec<usize>>,
    /// Enable `VK_LAYER_KHRONOS_validation` and turn its errors into
    /// [`crate::take_validation_errors`] entries: `GGML_VK_VALIDATE=1`.
    pub validation: bool,
    /// Cap on a single device buffer (bytes), below the device limits:
    /// `GGML_VK_MAX_BUFFER_SIZE`.
    pub max_buffer_size: Option<usize>,
    /// Cap on a storage-buffer binding (bytes), below the device limit:
    /// `GGML_VK_MAX_BINDING_SIZE`.
    pub max_binding_size: Option<usize>,
    /// Always move data through staging buffers, even when device memory
    /// is host-visible: `GGML_VK_FORCE_STAGING=1`.
    pub force_staging: bool,
    /// Do not use subgroup operations: `GGML_VK_DISABLE_SUBGROUPS=1`.
    pub disable_subgroups: bool,
    /// Device memory budget (bytes) of every device: it reports at most
    /// this much memory, less what it has allocated, and refuses device
    /// allocations beyond it with an out-of-memory error:
    /// `GGML_VK_MAX_MEMORY_MIB` (in MiB).
    pub max_memory: Option<usize>,
    /// Time every dispatch on the GPU (timestamp queries) and print, when
    /// the backend is dropped, the time per shader with the bytes it
    /// touched, and the host's share of each graph: `GGML_VK_PERF_LOGGER=1`.
    pub perf_logger: bool,
}

fn flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "0")
}

impl Options {
    /// Options from the `GGML_VK_*` environment variables. Validation is
    /// also on when `VK_INSTANCE_LAYERS` names the validation layer.
    pub fn from_env() -> Options {
        let visible_devices = std::env::var("GGML_VK_VISIBLE_DEVICES")
            .ok()
            .filter(|s| !s.trim().is_empty())
            .map(|s| {
                s.split(',')
                    .filter_map(|x| match x.trim().parse::<usize>() {
                        Ok(i) => Some(i),
                        Err(_) => {
                            eprintln!(
                                "ggml_vulkan: GGML_VK_VISIBLE_DEVICES: '{x}' is not an index, ignored"
                            );
                            None
                        }
                    })
                    .collect()
            });
        let validation = flag("GGML_VK_VALIDATE")
            || std::env::var("VK_INSTANCE_LAYERS")
                .is_ok_and(|l| l.contains("VK_LAYER_KHRONOS_validation"));
        Options {
            allow_cpu_devices: flag("GGML_VK_ALLOW_CPU_DEVICES"),
            visible_devices,
            validation,
            max_buffer_size: std::env::var("GGML_VK_MAX_BUFFER_SIZE")
                .ok()
                .and_then(|s| s.trim().parse().ok()),
            max_binding_size: std::env::var("GGML_VK_MAX_BINDING_SIZE")
                .ok()
                .and_then(|s| s.trim().parse().ok()),
            force_staging: flag("GGML_VK_FORCE_STAGING"),
            disable_subgroups: flag("GGML_VK_DISABLE_SUBGROUPS"),
            perf_logger: flag("GGML_VK_PERF_LOGGER"),
            max_memory: std::env::var("GGML_VK_MAX_MEMORY_MIB").ok().and_then(|s| {
                match s.trim().parse::<usize>() {
                    Ok(mib) => Some(mib.saturating_mul(1 << 20)),
                    Err(_) => {
                        eprintln!(
                            "ggml_vulkan: GGML_VK_MAX_MEMORY_MIB: '{s}' is not a number of MiB, ignored"
                        );
                        None
                    }
                }
            }),
        }
    }
}
