//! The exact memory plan of a model and a context: per device and buffer
//! type, the bytes of weights, of the K and V caches and of the compute
//! buffers after the reservation of the worst-case graphs.
//!
//! Nothing is estimated: the model and the context are laid out as a load
//! would lay them out, over planned buffers that hold no memory
//! ([`ggml_core::alloc::PlannedBuffer`]), and the graph allocator reserves
//! the same prompt and token graphs as [`Context::new`], so every size is
//! the one a real load allocates. Only the metadata of the file is read.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use ggml_core::BufferType;

use crate::context::{Context, ContextParams};
use crate::error::Result;
use crate::model::Model;
use crate::params::ModelParams;

const MIB: f64 = 1024.0 * 1024.0;

/// The bytes one buffer type of one device holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlanBytes {
    /// Model weights.
    pub weights: usize,
    /// K cache.
    pub k: usize,
    /// V cache.
    pub v: usize,
    /// Compute buffer of the backend that uses this buffer type.
    pub compute: usize,
    /// Recurrent states (convolution and SSM states of recurrent layers).
    pub rs: usize,
}

impl PlanBytes {
    /// Everything.
    pub fn total(&self) -> usize {
        self.weights + self.k + self.v + self.compute + self.rs
    }
}

/// The memory a model and a context take, per (device, buffer type).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemoryPlan {
    /// Bytes per (device, buffer type name). The device is `CPU` for host
    /// memory (including the pinned host memory of a GPU); weights used in
    /// place from the file mapping are under `CPU_Mapped`.
    pub entries: BTreeMap<(String, String), PlanBytes>,
    /// Context size the plan was made for (after padding).
    pub n_ctx: usize,
    /// Layers offloaded to GPUs (of n_layer + 1, counting the output).
    pub n_offloaded: usize,
    /// n_layer + 1.
    pub n_layer: usize,
    /// Experts per layer of a mixture-of-experts model (0 for a dense one).
    pub n_expert: usize,
}

impl MemoryPlan {
    /// Total bytes on `device`.
    pub fn device_total(&self, device: &str) -> usize {
        self.entries
            .iter()
            .filter(|((d, _), _)| d == device)
            .map(|(_, b)| b.total())
            .sum()
    }

    /// The devices of the plan.
    pub fn devices(&self) -> Vec<String> {
        let mut d: Vec<String> = self.entries.keys().map(|(d, _)| d.clone()).collect();
        d.dedup();
        d
    }

    fn at(&mut self, device: String, buft: &str) -> &mut PlanBytes {
        self.entries.entry((device, buft.to_string())).or_default()
    }
}

/// The device whose memory `buft` is: `CPU` for host memory.
pub fn buft_device(buft: &dyn BufferType) -> String {
    if buft.is_host() {
        return "CPU".into();
    }
    buft.device_name().unwrap_or_else(|| "CPU".into())
}

impl Model {
    /// The exact memory plan of loading `path` with `params` and creating
    /// a context with `cparams`: only the metadata is read and nothing is
    /// allocated.
    pub fn plan(
        path: impl AsRef<Path>,
        params: &ModelParams,
        cparams: &ContextParams,
    ) -> Result<MemoryPlan> {
        let model = Model::load_planned(path, params)?;
        let ctx = Context::new_planned(&model, cparams.clone())?;
        Ok(MemoryPlan::of(&model, &ctx))
    }
}

impl MemoryPlan {
    /// The memory `model` and `ctx` hold (planned or real).
    pub fn of(model: &Model, ctx: &Context<'_>) -> MemoryPlan {
        let mut plan = MemoryPlan {
            n_ctx: ctx.n_ctx(),
            n_offloaded: model.plan.n_offloaded + usize::from(model.plan.output_offloaded),
            n_layer: model.hparams.n_layer + 1,
            n_expert: model.hparams.n_expert,
            ..MemoryPlan::default()
        };
        // Weights: the loader's sizes per buffer type name; the device is
        // that of a buffer of the type (mapped weights are in host memory).
        for (name, &bytes) in &model.memory_plan {
            let base = name.strip_suffix("_Mapped").unwrap_or(name);
            let device = model
                .buffers
                .iter()
                .map(|b| b.buffer_type())
                .find(|bt| bt.name() == base)
                .map(|bt| buft_device(&*bt))
                .unwrap_or_else(|| "CPU".into());
            plan.at(device, name).weights += bytes;
        }
        // Both caches when sliding-window layers have their own.
        let caches = ctx.kv().into_iter().flat_map(|kv| kv.caches());
        for cache in caches {
            for (buf, (name, k, v)) in cache.buffers.iter().zip(&cache.sizes) {
                let e = plan.at(buft_device(&*buf.buffer_type()), name);
                e.k += k;
                e.v += v;
            }
        }
        if let Some(rs) = ctx.mem.rs() {
            for l in rs.layers.iter().flatten() {
                for w in [&l.r, &l.s] {
                    let bt = w.at.buffer.buffer_type();
                    let e = plan.at(buft_device(&*bt), bt.name());
                    e.rs += w.desc.nbytes();
                }
            }
        }
        let sched = ctx.scheduler();
        for i in 0..sched.n_backends() {
            let Some(bt) = sched.buffer_type(i) else {
                continue;
            };
            let bytes = sched.buffer_size(i);
            if bytes > 0 {
                plan.at(buft_device(&**bt), bt.name()).compute += bytes;
            }
        }
        plan
    }
}

impl fmt::Display for MemoryPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mib = |b: usize| b as f64 / MIB;
        writeln!(
            f,
            "memory plan: n_ctx = {}, {}/{} layers offloaded",
            self.n_ctx, self.n_offloaded, self.n_layer
        )?;
        writeln!(
            f,
            "{:<10} {:<14} {:>10} {:>10} {:>10} {:>10} {:>10}",
            "device", "buffer type", "weights", "K", "V", "compute", "total"
        )?;
        let with_rs = self.entries.values().any(|b| b.rs > 0);
        for ((dev, buft), b) in &self.entries {
            if with_rs {
                writeln!(
                    f,
                    "{dev:<10} {buft:<14} {:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>10.2} (recurrent states {:.2})",
                    mib(b.weights),
                    mib(b.k),
                    mib(b.v),
                    mib(b.compute),
                    mib(b.total()),
                    mib(b.rs)
                )?;
                continue;
            }
            writeln!(
                f,
                "{dev:<10} {buft:<14} {:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>10.2}",
                mib(b.weights),
                mib(b.k),
                mib(b.v),
                mib(b.compute),
                mib(b.total())
            )?;
        }
        for dev in self.devices() {
            writeln!(
                f,
                "{dev:<10} {:<14} {:>54.2}",
                "(total MiB)",
                mib(self.device_total(&dev))
            )?;
        }
        Ok(())
    }
}
