//! GPU time per shader (`GGML_VK_PERF_LOGGER=1`).
//!
//! Each recording that dispatches gets a timestamp query pool: one
//! timestamp when the first dispatch is recorded and one after each
//! dispatch. When the submission has completed, the difference between
//! consecutive timestamps is charged to the dispatch that ends it.
//! Dispatches that the backend records without a barrier between them may
//! overlap on the GPU; the time of such a run is then split among them as
//! the GPU retired them, so per-shader figures are close, not exact, while
//! their sum is the GPU's busy time of the recording. The host's share is
//! measured per graph: recording, and waiting for the GPU; with the
//! dispatches per graph (in generation, a graph is one token).
//!
//! The report goes to stderr when the backend is dropped.

use std::collections::HashMap;
use std::fmt::Write;
use std::time::{Duration, Instant};

use ash::vk;

use crate::error::{Result, VkContext};

/// Graphs whose host times are kept for the medians.
const GRAPHS_KEPT: usize = 1 << 16;

/// Timestamps per recording; dispatches past the last one go untimed (and
/// are counted as such).
const QUERIES: u32 = 8192;

/// The timestamps of one recording and what each one ends.
pub(crate) struct Queries {
    pool: vk::QueryPool,
    /// Shader and bytes it touched, per timestamp after the first.
    ends: Vec<(String, u64)>,
    untimed: u64,
}

impl Queries {
    /// A fresh pool, reset and started in `cmd` (recording, outside any
    /// dispatch).
    pub(crate) fn start(dev: &ash::Device, cmd: vk::CommandBuffer) -> Result<Queries> {
        // SAFETY: a live device; the pool is destroyed in `collect` or
        // `discard`.
        let pool = unsafe {
            dev.create_query_pool(
                &vk::QueryPoolCreateInfo::default()
                    .query_type(vk::QueryType::TIMESTAMP)
                    .query_count(QUERIES),
                None,
            )
        }
        .ctx("vkCreateQueryPool")?;
        // SAFETY: `cmd` is recording; the queries are inside the pool.
        unsafe {
            dev.cmd_reset_query_pool(cmd, pool, 0, QUERIES);
            dev.cmd_write_timestamp(cmd, vk::PipelineStageFlags::TOP_OF_PIPE, pool, 0);
        }
        Ok(Queries {
            pool,
            ends: Vec::new(),
            untimed: 0,
        })
    }

    /// Marks the end of the dispatch of `shader` just recorded in `cmd`.
    pub(crate) fn after(
        &mut self,
        dev: &ash::Device,
        cmd: vk::CommandBuffer,
        shader: &str,
        bytes: u64,
    ) {
        let index = self.ends.len() as u32 + 1;
        if index >= QUERIES {
            self.untimed += 1;
            return;
        }
        // SAFETY: `cmd` is recording; the query was reset at the start.
        unsafe {
            dev.cmd_write_timestamp(
                cmd,
                vk::PipelineStageFlags::BOTTOM_OF_PIPE,
                self.pool,
                index,
            )
        };
        self.ends.push((shader.to_string(), bytes));
    }

    /// Reads the timestamps of a completed submission into `log` and
    /// destroys the pool.
    pub(crate) fn collect(self, dev: &ash::Device, log: &mut PerfLog) {
        self.read(dev, log);
        // SAFETY: no submission uses the pool any more.
        unsafe { dev.destroy_query_pool(self.pool, None) };
    }

    /// Reads the timestamps of a completed submission into `log`, keeping
    /// the pool (for a command buffer submitted again).
    pub(crate) fn read(&self, dev: &ash::Device, log: &mut PerfLog) {
        let n = self.ends.len() + 1;
        let mut ticks = vec![0u64; n];
        // SAFETY: the submission that wrote the queries has completed; the
        // buffer holds one u64 per query.
        let read = unsafe {
            dev.get_query_pool_results(self.pool, 0, &mut ticks, vk::QueryResultFlags::TYPE_64)
        };
        log.untimed += self.untimed;
        if read.is_err() {
            log.unread += self.ends.len() as u64;
            return;
        }
        for (i, (shader, bytes)) in self.ends.iter().enumerate() {
            let dt = log.ticks_between(ticks[i], ticks[i + 1]);
            let s = log.shaders.entry(shader.clone()).or_default();
            s.calls += 1;
            s.ns += dt as f64 * log.period as f64;
            s.bytes += *bytes;
        }
    }

    /// Destroys the pool of a recording that was never submitted.
    pub(crate) fn discard(self, dev: &ash::Device) {
        // SAFETY: nothing was submitted that uses the pool.
        unsafe { dev.destroy_query_pool(self.pool, None) };
    }
}

/// The CPU time this thread has used, where the system tells it.
fn thread_cpu() -> Option<Duration> {
    #[cfg(unix)]
    {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a valid clock id and a pointer to a live timespec.
        if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } == 0 {
            return Some(Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32));
        }
    }
    None
}

/// A moment of a graph's computation: wall clock and the thread's CPU
/// time (which a busy machine moves less than the wall clock).
#[derive(Clone, Copy)]
pub(crate) struct Stamp {
    wall: Instant,
    cpu: Option<Duration>,
}

impl Stamp {
    pub(crate) fn now() -> Stamp {
        Stamp {
            wall: Instant::now(),
            cpu: thread_cpu(),
        }
    }

    fn cpu_since(&self, earlier: &Stamp) -> Option<Duration> {
        Some(self.cpu?.saturating_sub(earlier.cpu?))
    }
}

/// Totals of one shader.
#[derive(Default)]
struct ShaderStat {
    calls: u64,
    ns: f64,
    bytes: u64,
}

/// What the logger gathered over the backend's life.
pub(crate) struct PerfLog {
    /// False when the queue writes no timestamps: only the host's share
    /// and the dispatches are counted.
    pub(crate) timed: bool,
    /// Nanoseconds per tick.
    period: f32,
    valid_mask: u64,
    shaders: HashMap<String, ShaderStat>,
    graphs: u64,
    /// Graphs whose recorded command buffers were submitted again.
    pub(crate) replayed: u64,
    dispatches: u64,
    record: Duration,
    /// CPU time of the recording and of the submission, when known for
    /// every graph.
    record_cpu: Option<Duration>,
    submit_cpu: Option<Duration>,
    /// Per graph (the first [`GRAPHS_KEPT`]): recording wall time, its CPU
    /// time and the submission's CPU time, in us.
    per_graph: Vec<[f64; 3]>,
    wall: Duration,
    untimed: u64,
    unread: u64,
}

impl PerfLog {
    /// A logger for a queue whose timestamps have `valid_bits` bits and
    /// tick every `period` ns.
    pub(crate) fn new(period: f32, valid_bits: u32) -> PerfLog {
        PerfLog {
            timed: true,
            period,
            valid_mask: if valid_bits >= 64 {
                u64::MAX
            } else {
                (1u64 << valid_bits) - 1
            },
            shaders: HashMap::new(),
            graphs: 0,
            replayed: 0,
            dispatches: 0,
            record_cpu: Some(Duration::ZERO),
            submit_cpu: Some(Duration::ZERO),
            per_graph: Vec::new(),
            record: Duration::ZERO,
            wall: Duration::ZERO,
            untimed: 0,
            unread: 0,
        }
    }

    /// A logger without GPU times.
    pub(crate) fn untimed() -> PerfLog {
        PerfLog {
            timed: false,
            ..PerfLog::new(1.0, 64)
        }
    }

    /// Ticks from timestamp `a` to the later `b`, across a wrap of the
    /// valid bits.
    fn ticks_between(&self, a: u64, b: u64) -> u64 {
        (b & self.valid_mask).wrapping_sub(a & self.valid_mask) & self.valid_mask
    }

    /// Adds one graph: started at `t0`, recorded until `submit` (the
    /// final submission), submitted at `submitted`, the whole call ending
    /// now; `dispatches` recorded (or submitted again).
    pub(crate) fn graph(&mut self, t0: Stamp, submit: Stamp, submitted: Stamp, dispatches: u64) {
        self.graphs += 1;
        self.dispatches += dispatches;
        self.record += submit.wall - t0.wall;
        self.wall += t0.wall.elapsed();
        self.record_cpu = self
            .record_cpu
            .zip(submit.cpu_since(&t0))
            .map(|(a, b)| a + b);
        self.submit_cpu = self
            .submit_cpu
            .zip(submitted.cpu_since(&submit))
            .map(|(a, b)| a + b);
        if self.per_graph.len() < GRAPHS_KEPT {
            let us = |d: Option<Duration>| d.map_or(f64::NAN, |d| d.as_secs_f64() * 1e6);
            self.per_graph.push([
                us(Some(submit.wall - t0.wall)),
                us(submit.cpu_since(&t0)),
                us(submitted.cpu_since(&submit)),
            ]);
        }
    }

    /// The medians of the kept per-graph host times (see `per_graph`):
    /// the first graphs, which also make the pipelines, and the graphs a
    /// busy machine delays do not move them.
    fn medians(&self) -> Option<[f64; 3]> {
        if self.per_graph.is_empty() {
            return None;
        }
        let mut out = [0.0; 3];
        for (k, o) in out.iter_mut().enumerate() {
            let mut v: Vec<f64> = self.per_graph.iter().map(|g| g[k]).collect();
            v.sort_by(f64::total_cmp);
            *o = v[v.len() / 2];
        }
        Some(out)
    }

    /// The report: per graph, the host's and the GPU's time; per shader
    /// (longest first), calls, total and mean time, share of the GPU time
    /// and the rate at which it touched its tensors' bytes.
    pub(crate) fn report(&self, device: &str) -> String {
        let gpu_ns: f64 = self.shaders.values().map(|s| s.ns).sum();
        let mut out = String::new();
        let per = |d: f64| d / self.graphs.max(1) as f64;
        let _ = writeln!(
            out,
            "ggml_vulkan: {device}: perf over {} graphs: per graph {:.1} us wall, {:.1} us recording, {:.1} us GPU busy",
            self.graphs,
            per(self.wall.as_secs_f64() * 1e6),
            per(self.record.as_secs_f64() * 1e6),
            per(gpu_ns / 1e3)
        );
        // In generation a graph is one token.
        let cpu = |d: Option<Duration>| {
            d.map_or("?".to_string(), |d| {
                format!("{:.1}", per(d.as_secs_f64() * 1e6))
            })
        };
        let _ = writeln!(
            out,
            "ggml_vulkan: {device}: {:.1} dispatches per graph, host {:.1} us per graph recording ({} us CPU), {} us CPU submitting ({} dispatches, {} graphs replayed)",
            per(self.dispatches as f64),
            per(self.record.as_secs_f64() * 1e6),
            cpu(self.record_cpu),
            cpu(self.submit_cpu),
            self.dispatches,
            self.replayed
        );
        if let Some([w, c, sc]) = self.medians() {
            let _ = writeln!(
                out,
                "ggml_vulkan: {device}: median per graph: host {w:.1} us recording ({c:.1} us CPU), {sc:.1} us CPU submitting"
            );
        }
        let mut rows: Vec<_> = self.shaders.iter().collect();
        rows.sort_by(|a, b| b.1.ns.total_cmp(&a.1.ns).then(a.0.cmp(b.0)));
        let _ = writeln!(
            out,
            "  {:<36} {:>9} {:>11} {:>9} {:>6} {:>9}",
            "shader", "calls", "total ms", "mean us", "%", "GB/s"
        );
        for (name, s) in rows {
            let _ = writeln!(
                out,
                "  {:<36} {:>9} {:>11.3} {:>9.2} {:>6.1} {:>9.1}",
                name,
                s.calls,
                s.ns / 1e6,
                s.ns / 1e3 / s.calls.max(1) as f64,
                100.0 * s.ns / gpu_ns.max(1.0),
                if s.ns > 0.0 {
                    s.bytes as f64 / s.ns
                } else {
                    0.0
                }
            );
        }
        if self.untimed + self.unread > 0 {
            let _ = writeln!(
                out,
                "  ({} dispatches untimed: more than {} in one recording; {} unread)",
                self.untimed,
                QUERIES - 1,
                self.unread
            );
        }
        out
    }

    /// True when anything was timed or measured.
    pub(crate) fn is_empty(&self) -> bool {
        self.graphs == 0 && self.shaders.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use ggml_core::{Backend, Buffer, Device, Flags, Graph, Placement, TensorDesc, Type};

    use super::*;
    use crate::ops::Pc4d;
    use crate::{Options, VulkanReg};

    /// Every dispatch of a backend with the logger on is timed and charged
    /// to its shader, with the bytes it touched; the results are unchanged.
    #[test]
    fn the_logger_times_every_dispatch() {
        let reg = VulkanReg::new(&Options {
            validation: true,
            perf_logger: true,
            ..Options::from_env()
        });
        let Some(dev) = reg.vulkan_devices().first().cloned() else {
            let required = std::env::var("REQUIRE_VULKAN").is_ok_and(|v| v == "1");
            assert!(!required, "REQUIRE_VULKAN=1 but there is no Vulkan device");
            return;
        };
        let mut be = dev.new_backend().unwrap();
        let n = 1000usize;
        let x: Vec<u8> = (0..n).flat_map(|i| (i as f32).to_le_bytes()).collect();
        let buf: Arc<dyn Buffer> = dev.buffer_type().alloc_buffer(8 * n).unwrap();
        buf.set_tensor(0, &x).unwrap();
        let desc = TensorDesc::new("x", Type::F32, &[n]);
        let mut g = Graph::new();
        let at = |offset| Placement {
            buffer: buf.clone(),
            offset,
        };
        let src = g.import(desc.clone(), at(0), Flags::default());
        let dst = g.import(desc.clone(), at(4 * n), Flags::default());
        let (bs, bd) = (be.bind(&g, src, 4).unwrap(), be.bind(&g, dst, 4).unwrap());
        let pc = Pc4d::new(n as u64)
            .unwrap()
            .tensor(0, &bs, &desc)
            .tensor(2, &bd, &desc);
        for _ in 0..3 {
            be.dispatch("copy_f32_f32", [Some(&bs), None, None], &bd, &pc.0, 4)
                .unwrap();
        }
        be.synchronize().unwrap();
        let mut got = vec![0u8; 4 * n];
        buf.get_tensor(4 * n, &mut got).unwrap();
        assert_eq!(got, x);
        let report = be.perf_report().expect("the logger is on");
        let row = report
            .lines()
            .find(|l| l.trim_start().starts_with("copy_f32_f32 "))
            .unwrap_or_else(|| panic!("no copy row in:\n{report}"));
        let cols: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cols[1], "3", "{report}");
        assert!(cols[2].parse::<f64>().unwrap() > 0.0, "{report}");
        assert!(crate::take_validation_errors().is_empty());
    }

    #[test]
    fn report_orders_shaders_by_time_and_gives_rates() {
        let mut log = PerfLog::new(1.0, 64);
        log.shaders.insert(
            "small".into(),
            ShaderStat {
                calls: 4,
                ns: 4_000.0,
                bytes: 400,
            },
        );
        log.shaders.insert(
            "big".into(),
            ShaderStat {
                calls: 2,
                ns: 16_000.0,
                bytes: 32_000,
            },
        );
        let t0 = Stamp::now();
        let at = |us: u64| Stamp {
            wall: t0.wall + Duration::from_micros(us),
            cpu: t0.cpu.map(|c| c + Duration::from_micros(us / 2)),
        };
        log.graph(t0, at(10), at(14), 7);
        log.graph(t0, at(10), at(14), 5);
        log.wall = Duration::from_micros(60);
        let r = log.report("Vulkan0");
        let lines: Vec<&str> = r.lines().collect();
        assert!(lines[0].contains("2 graphs"), "{r}");
        assert!(lines[0].contains("30.0 us wall"), "{r}");
        assert!(lines[0].contains("10.0 us recording"), "{r}");
        assert!(lines[0].contains("10.0 us GPU busy"), "{r}");
        assert!(
            lines[1].contains("6.0 dispatches per graph, host 10.0 us per graph recording"),
            "{r}"
        );
        assert!(
            lines[1].contains("(12 dispatches, 0 graphs replayed)"),
            "{r}"
        );
        assert!(
            lines[2].contains("median per graph: host 10.0 us recording"),
            "{r}"
        );
        if t0.cpu.is_some() {
            assert!(
                lines[1].contains("(5.0 us CPU), 2.0 us CPU submitting"),
                "{r}"
            );
        }
        assert!(lines[4].trim_start().starts_with("big"), "{r}");
        assert!(lines[5].trim_start().starts_with("small"), "{r}");
        // 32,000 bytes in 16 us: 2 GB/s; 80% of the GPU time.
        assert!(
            lines[4].ends_with("2.0") && lines[4].contains("80.0"),
            "{r}"
        );
    }

    #[test]
    fn wrapped_timestamps_use_the_valid_bits() {
        let log = PerfLog::new(1.0, 36);
        let top = (1u64 << 36) - 1;
        assert_eq!(log.ticks_between(top - 5, 10), 16);
        // Bits above the valid ones are ignored.
        assert_eq!(log.ticks_between(7 | (1 << 40), 9), 2);
        assert_eq!(PerfLog::new(1.0, 64).ticks_between(u64::MAX, 3), 4);
    }
}
