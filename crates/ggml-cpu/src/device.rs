//! The CPU registration, its one device, its buffer type and its backend
//! (an execution stream computing graphs with a team of worker threads).

use std::sync::{Arc, OnceLock};

use ggml_core::backend::{Backend, BackendReg, Buffer, BufferType, Device, HostMem};
use ggml_core::graph::{Graph, TensorId};
use ggml_core::host::{HostBuffer, HostBufferType, HOST_ALIGNMENT};
use ggml_core::{DeviceCaps, DeviceKind, DeviceProps, Error, Result};

use crate::compute::{self, Plans, Workspace};
use crate::features;
use crate::pool::Team;

/// Name of the registration, the device and the buffer type.
pub const CPU_NAME: &str = "CPU";

/// The CPU backend registration.
#[derive(Debug, Default)]
pub struct CpuReg;

impl BackendReg for CpuReg {
    fn name(&self) -> &str {
        CPU_NAME
    }
    fn devices(&self) -> Vec<Arc<dyn Device>> {
        vec![cpu_device()]
    }
    fn features(&self) -> Vec<(String, String)> {
        features::feature_list()
    }
}

/// The host CPU as a device.
pub struct CpuDevice {
    buft: Arc<HostBufferType>,
    description: String,
}

impl std::fmt::Debug for CpuDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuDevice")
            .field("description", &self.description)
            .finish()
    }
}

fn device_singleton() -> &'static Arc<CpuDevice> {
    static DEVICE: OnceLock<Arc<CpuDevice>> = OnceLock::new();
    DEVICE.get_or_init(|| {
        Arc::new(CpuDevice {
            buft: HostBufferType::new(CPU_NAME, HOST_ALIGNMENT, usize::MAX),
            description: cpu_model_name(),
        })
    })
}

/// The CPU device (one per process).
pub fn cpu_device() -> Arc<dyn Device> {
    device_singleton().clone()
}

/// The CPU buffer type: 64-byte aligned host memory.
pub fn cpu_buffer_type() -> Arc<dyn BufferType> {
    device_singleton().buft.clone()
}

/// Default thread count: the number of physical cores, else the available
/// parallelism.
pub fn default_n_threads() -> usize {
    physical_cores()
        .or_else(|| std::thread::available_parallelism().ok().map(|n| n.get()))
        .unwrap_or(1)
        .max(1)
}

fn physical_cores() -> Option<usize> {
    let text = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    let mut cores = std::collections::HashSet::new();
    let mut phys = None;
    for line in text.lines() {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        match k.trim() {
            "physical id" => phys = v.trim().parse::<u32>().ok(),
            "core id" => {
                if let Ok(c) = v.trim().parse::<u32>() {
                    cores.insert((phys.unwrap_or(0), c));
                }
            }
            _ => {}
        }
    }
    let avail = std::thread::available_parallelism().ok()?.get();
    (!cores.is_empty()).then(|| cores.len().min(avail))
}

fn cpu_model_name() -> String {
    if let Ok(text) = std::fs::read_to_string("/proc/cpuinfo") {
        for key in ["model name", "Model", "Hardware", "cpu model"] {
            if let Some(v) = text.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == key).then(|| v.trim().to_string())
            }) {
                if !v.is_empty() {
                    return v;
                }
            }
        }
    }
    std::env::consts::ARCH.to_string()
}

/// (available, total) host memory in bytes from /proc/meminfo.
fn host_memory() -> (usize, usize) {
    let Ok(text) = std::fs::read_to_string("/proc/meminfo") else {
        return (0, 0);
    };
    let field = |name: &str| {
        text.lines().find_map(|l| {
            let rest = l.strip_prefix(name)?.strip_prefix(':')?;
            let kb: usize = rest.trim().trim_end_matches("kB").trim().parse().ok()?;
            Some(kb * 1024)
        })
    };
    let total = field("MemTotal").unwrap_or(0);
    let free = field("MemAvailable")
        .or_else(|| field("MemFree"))
        .unwrap_or(0);
    (free, total)
}

impl Device for CpuDevice {
    fn name(&self) -> &str {
        CPU_NAME
    }
    fn description(&self) -> String {
        self.description.clone()
    }
    fn props(&self) -> DeviceProps {
        let (free, total) = host_memory();
        DeviceProps {
            name: CPU_NAME.into(),
            description: self.description.clone(),
            kind: DeviceKind::Cpu,
            memory_free: free,
            memory_total: total,
            caps: DeviceCaps {
                async_: false,
                host_buffer: false,
                buffer_from_host_ptr: true,
                events: false,
            },
        }
    }
    fn buffer_type(&self) -> Arc<dyn BufferType> {
        self.buft.clone()
    }
    fn buffer_from_host_mem(
        &self,
        mem: HostMem,
        offset: usize,
        size: usize,
        _max_tensor_size: usize,
    ) -> Result<Arc<dyn Buffer>> {
        Ok(HostBuffer::from_host_mem(
            self.buft.clone(),
            mem,
            offset,
            size,
        )?)
    }
    fn supports_op(&self, graph: &Graph, node: TensorId) -> bool {
        compute::supports(graph, node)
    }
    fn extra_buffer_types(&self) -> Vec<Arc<dyn BufferType>> {
        if crate::repack::available() {
            vec![crate::repack::repack_buffer_type()]
        } else {
            Vec::new()
        }
    }
    fn supports_buft(&self, buft: &dyn BufferType) -> bool {
        buft.is_host() || buft.name() == crate::repack::REPACK_NAME
    }
    fn init_backend(&self) -> Result<Box<dyn Backend>> {
        Ok(Box::new(CpuBackend::new(default_n_threads())?))
    }
}

/// A CPU execution stream: graphs are computed synchronously by the
/// calling thread and `n_threads - 1` workers.
pub struct CpuBackend {
    pool: Team,
    n_threads: usize,
    ws: Workspace,
    /// The nodes of the graphs computed last, resolved.
    plans: Plans,
}

impl std::fmt::Debug for CpuBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuBackend")
            .field("n_threads", &self.n_threads)
            .finish()
    }
}

fn build_pool(n: usize) -> Result<Team> {
    Team::new(n).map_err(|e| Error::Backend(format!("CPU: cannot start {n} threads: {e}")))
}

impl CpuBackend {
    /// A backend with `n_threads` workers (at least 1).
    pub fn new(n_threads: usize) -> Result<CpuBackend> {
        let n = n_threads.max(1);
        Ok(CpuBackend {
            pool: build_pool(n)?,
            n_threads: n,
            ws: Workspace::default(),
            plans: Plans::default(),
        })
    }

    /// Number of worker threads.
    pub fn n_threads(&self) -> usize {
        self.n_threads
    }
}

impl Backend for CpuBackend {
    fn name(&self) -> &str {
        CPU_NAME
    }
    fn device(&self) -> Arc<dyn Device> {
        cpu_device()
    }
    fn graph_compute(&mut self, graph: &Graph, nodes: &[TensorId]) -> Result<()> {
        let (ws, plans) = (&mut self.ws, &mut self.plans);
        self.pool.enter(|| plans.compute(graph, nodes, ws))
    }
    fn set_n_threads(&mut self, n_threads: usize) {
        let n = n_threads.max(1);
        if n != self.n_threads {
            if let Ok(pool) = build_pool(n) {
                self.pool = pool;
                self.n_threads = n;
            }
        }
    }
}

impl Drop for CpuBackend {
    fn drop(&mut self) {
        crate::profile::print_and_reset();
    }
}
