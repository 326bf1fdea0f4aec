//! Which devices a model uses, and the registration of the compiled-in backends.

use std::sync::{Arc, Once};

use ggml_core::{registry, Device, DeviceKind};

use crate::error::{LlamaError, Result};
use crate::params::{ModelParams, SplitMode};

const MIB: usize = 1024 * 1024;

/// Registers the backends compiled into this build (CPU, Vulkan). Safe to
/// call many times.
pub fn backend_init() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        // First, so that remote devices come before local GPUs, as in llama.cpp.
        #[cfg(feature = "rpc")]
        ggml_rpc::register();
        #[cfg(feature = "vulkan")]
        ggml_vulkan::register();
        #[cfg(feature = "cpu")]
        ggml_cpu::register();
    });
}

/// Connects to the RPC servers of `list` (`host:port[,host:port...]`)
/// and registers their devices (`RPC0`, `RPC1`, ...), which are offloaded
/// to before local GPUs.
pub fn add_rpc_servers(list: &str) -> Result<()> {
    backend_init();
    #[cfg(feature = "rpc")]
    return ggml_rpc::add_servers(list)
        .map(|_| ())
        .map_err(|e| LlamaError::InvalidParam(format!("--rpc {list}: {e}")));
    #[cfg(not(feature = "rpc"))]
    Err(LlamaError::InvalidParam(format!(
        "--rpc {list}: this build has no RPC support (feature `rpc`)"
    )))
}

/// The CPU device, which every model needs for its input layer.
pub fn cpu_device() -> Result<Arc<dyn Device>> {
    registry::device_by_kind(DeviceKind::Cpu)
        .ok_or_else(|| LlamaError::InvalidParam("no CPU backend is registered".into()))
}

/// The GPU devices a model is offloaded to, in order: the explicit list, or
/// every discrete GPU (integrated ones only when there is no discrete one);
/// with split mode none only `main_gpu` is kept.
pub fn select_devices(params: &ModelParams) -> Result<Vec<Arc<dyn Device>>> {
    let mut devs: Vec<Arc<dyn Device>> = match &params.devices {
        Some(list) => list
            .iter()
            .filter(|d| d.kind() != DeviceKind::Cpu)
            .cloned()
            .collect(),
        None => {
            let all = registry::devices();
            let gpus: Vec<_> = all
                .iter()
                .filter(|d| d.kind() == DeviceKind::Gpu)
                .cloned()
                .collect();
            if gpus.is_empty() {
                all.into_iter()
                    .filter(|d| d.kind() == DeviceKind::IGpu)
                    .collect()
            } else {
                gpus
            }
        }
    };
    if params.split_mode == SplitMode::None && !devs.is_empty() {
        let mg = params.main_gpu;
        if mg < 0 {
            // A negative main_gpu with split mode none keeps the model on the CPU.
            devs.clear();
        } else if mg as usize >= devs.len() {
            return Err(LlamaError::InvalidParam(format!(
                "main_gpu = {mg} is out of range: there are {} devices (0..{})",
                devs.len(),
                devs.len()
            )));
        } else {
            devs = vec![devs[mg as usize].clone()];
        }
    }
    for d in &devs {
        let (free, _) = d.memory();
        crate::info!(
            "llama_model_load_from_file: using device {} ({}) - {} MiB free",
            d.name(),
            d.description(),
            free / MIB
        );
    }
    Ok(devs)
}
