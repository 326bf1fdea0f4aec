//! MUL_MAT through the CPU backend at LLM shapes, per weight type: a graph
//! with one MUL_MAT node over an imported weight and an F32 input, placed by
//! the graph allocator and computed by the backend, as a model's layers are.
//!
//! * matvec (1 column): what generation does. It streams the weights, so
//!   the figure is GB/s of weights read, compared with the read-only STREAM
//!   bandwidth at the same thread count measured in the same run. Each
//!   pass cycles through copies of the weight that together exceed 32
//!   times the last-level cache (1 GiB at least), so that the bytes come
//!   from memory as in a decode step, whose weights dwarf any cache. With
//!   only four times (STREAM's rule for its arrays) a cache that does not
//!   evict in LRU order still serves part of a cyclic working set, and the
//!   figure can pass the read bandwidth.
//!   Where the CPU stores weights of the type repacked for its panel kernels
//!   (the `CPU_REPACK` buffer type a model's weights go to without GPUs),
//!   a second row measures the same product from repacked weights.
//! * matmul (512 columns): what prompt processing does. It is compute
//!   bound: GFLOP/s (2 k m n per product), compared with the peak f32 FMA
//!   rate at the same thread count from the same run. The quantized types
//!   multiply 8-bit integers (the activations are quantized to Q8), so
//!   where the CPU has 8-bit multiply-add instructions (AVX-512 VNNI) their
//!   peak from the same run is the bound; elsewhere the f32 peak is a
//!   reference rather than a ceiling.
//!
//! Each figure is the best sample after a warm-up, like STREAM's.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ggml_core::alloc::GraphAlloc;
use ggml_core::backend::{Backend, Buffer, BufferType, BufferUsage, Placement};
use ggml_core::graph::{Flags, Graph, TensorId};
use ggml_core::tensor::TensorDesc;
use ggml_core::{quants, Type};
use ggml_cpu::{cpu_buffer_type, cpu_device, CpuBackend};

use super::report::Row;
use super::{host, peak_fma, peak_int8, read_bandwidth, BenchOptions, Suite};
use crate::error::{Error, Result};

/// The weight types measured by default, in ggml's order.
pub const DEFAULT_TYPES: &[Type] = ggml_core::MATMUL_TYPES;

/// Weight shapes (k = input width, m = output rows) of a default run: the
/// attention projections of a 7B model.
const SHAPES: &[(usize, usize)] = &[(4096, 4096)];
/// With `--full`: the feed-forward up/gate and down projections too.
const FULL_SHAPES: &[(usize, usize)] = &[(4096, 4096), (4096, 11008), (11008, 4096)];
/// With `--quick`.
const QUICK_SHAPES: &[(usize, usize)] = &[(1024, 1024)];
/// Columns of the matrix x matrix case: llama.cpp's default ubatch.
const MATMUL_COLS: usize = 512;
const QUICK_MATMUL_COLS: usize = 64;
/// The least bytes the matvec copies add up to, and the multiple of the
/// last-level cache they reach.
const MIN_STREAMED_BYTES: usize = 1 << 30;
const STREAMED_LLC_FACTOR: usize = 32;
/// With `--quick`.
const QUICK_STREAMED_BYTES: usize = 256 << 20;
/// Distinct weight rows generated; the rest repeat them (the values do not
/// change the speed, only the size does).
const DISTINCT_ROWS: usize = 16;

/// What to measure.
#[derive(Clone, Debug)]
pub struct Config {
    /// Weight types.
    pub types: Vec<Type>,
    /// Weight shapes `(k, m)`.
    pub shapes: Vec<(usize, usize)>,
    /// Columns of the matrix x matrix case.
    pub matmul_cols: usize,
    /// Thread counts.
    pub threads: Vec<usize>,
    /// The least bytes the matvec copies of a weight add up to.
    pub streamed_bytes: usize,
    /// Sampling of the matvec cases.
    pub matvec_sampling: Sampling,
    /// Sampling of the matmul cases.
    pub matmul_sampling: Sampling,
}

/// How long a case is measured: at least `min_samples` samples, and more
/// until `target` has passed.
#[derive(Clone, Copy, Debug)]
pub struct Sampling {
    /// The fewest samples.
    pub min_samples: usize,
    /// Time to fill with samples.
    pub target: Duration,
}

impl Config {
    /// The configuration of a bench run.
    pub fn from_options(opts: &BenchOptions) -> Result<Config> {
        let mut types: Vec<Type> = Vec::new();
        for t in &opts.types {
            let ty = t.ty;
            if !DEFAULT_TYPES.contains(&ty) {
                return Err(Error::Usage(format!(
                    "--types {}: the kernels bench measures {}",
                    t.name,
                    DEFAULT_TYPES
                        .iter()
                        .map(|t| t.name().to_lowercase())
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
            if !types.contains(&ty) {
                types.push(ty);
            }
        }
        if types.is_empty() {
            types = DEFAULT_TYPES.to_vec();
        }
        let llc = host::last_level_cache_bytes();
        let (shapes, cols, mv, mm) = if opts.quick {
            (
                QUICK_SHAPES,
                QUICK_MATMUL_COLS,
                Sampling {
                    min_samples: 3,
                    target: Duration::from_millis(50),
                },
                Sampling {
                    min_samples: 2,
                    target: Duration::from_millis(100),
                },
            )
        } else {
            (
                if opts.full { FULL_SHAPES } else { SHAPES },
                MATMUL_COLS,
                Sampling {
                    min_samples: 5,
                    target: Duration::from_millis(600),
                },
                Sampling {
                    min_samples: 3,
                    target: Duration::from_millis(1500),
                },
            )
        };
        Ok(Config {
            types,
            shapes: shapes.to_vec(),
            matmul_cols: cols,
            threads: opts.thread_counts()?,
            streamed_bytes: if opts.quick {
                QUICK_STREAMED_BYTES
            } else {
                MIN_STREAMED_BYTES.max(STREAMED_LLC_FACTOR * llc.unwrap_or(0))
            },
            matvec_sampling: mv,
            matmul_sampling: mm,
        })
    }
}

/// Deterministic values in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// `copies` weight buffers of `wbuft`, each holding `desc` with `data` (a
/// matrix streamed from memory is read from one copy after another).
pub(super) fn weight_copies(
    wbuft: &Arc<dyn BufferType>,
    desc: &TensorDesc,
    data: &[u8],
    copies: usize,
) -> Result<Vec<Arc<dyn Buffer>>> {
    let mut weights = Vec::with_capacity(copies);
    for _ in 0..copies {
        let buf = wbuft.alloc_buffer(wbuft.alloc_size(desc))?;
        buf.set_usage(BufferUsage::Weights);
        buf.init_tensor(desc, 0)?;
        buf.set_tensor(0, data)?;
        weights.push(buf);
    }
    Ok(weights)
}

/// `g` once per weight copy: the weight `w` of the first graph is in
/// `weights[0]`, of the others in the next copies, so that a pass over the
/// graphs streams every copy from memory.
pub(super) fn graph_per_copy(g: Graph, w: TensorId, weights: &[Arc<dyn Buffer>]) -> Vec<Graph> {
    let mut graphs = vec![g];
    for buf in &weights[1..] {
        let mut gi = graphs[0].clone();
        gi.node_mut(w).at = Some(Placement::new(buf.clone(), 0));
        graphs.push(gi);
    }
    graphs
}

/// `m` rows of `k` weights of `ty`: a few distinct quantized rows, repeated.
pub(super) fn weight_bytes(ty: Type, k: usize, m: usize) -> Result<Vec<u8>> {
    let row = quants::row_size(ty, k)?;
    let distinct = DISTINCT_ROWS.min(m);
    let mut rows = vec![0u8; row * distinct];
    for (i, out) in rows.chunks_exact_mut(row).enumerate() {
        quants::quantize_row(ty, &values(k, 7 + i as u64), out)?;
    }
    let mut data = Vec::with_capacity(row * m);
    while data.len() < row * m {
        let take = (row * m - data.len()).min(rows.len());
        data.extend_from_slice(&rows[..take]);
    }
    Ok(data)
}

/// One MUL_MAT of a `[k, m]` weight of one type by a `[k, n]` F32 input,
/// with `copies` copies of the weight; a pass computes the product once per
/// copy.
pub struct MulMat {
    /// One graph per weight copy; they share the input and output memory.
    graphs: Vec<Graph>,
    out: TensorId,
    /// Bytes of one copy of the weight.
    pub weight_bytes: usize,
    /// Floating-point operations of one product (2 k m n).
    pub flops: f64,
    _weights: Vec<Arc<dyn Buffer>>,
    _alloc: GraphAlloc,
}

impl MulMat {
    /// Builds the graphs: the weight is imported with its placement (as a
    /// model's weights are), the input and the result are placed by the
    /// graph allocator, the input is filled.
    pub fn new(ty: Type, k: usize, m: usize, n: usize, copies: usize) -> Result<MulMat> {
        MulMat::new_in(&cpu_buffer_type(), ty, k, m, n, copies)
    }

    /// As [`MulMat::new`], with the weights in buffers of `wbuft`.
    pub fn new_in(
        wbuft: &Arc<dyn BufferType>,
        ty: Type,
        k: usize,
        m: usize,
        n: usize,
        copies: usize,
    ) -> Result<MulMat> {
        let buft = cpu_buffer_type();
        let desc = TensorDesc::new("w", ty, &[k, m]);
        let data = weight_bytes(ty, k, m)?;
        let weights = weight_copies(wbuft, &desc, &data, copies.max(1))?;
        let mut g = Graph::new();
        let w = g.import(desc, Placement::new(weights[0].clone(), 0), Flags::WEIGHT);
        let x = g.input("x", Type::F32, &[k, n]);
        let out = g.mul_mat(w, x)?;
        g.set_output(out);
        let mut alloc = GraphAlloc::new(buft);
        alloc.alloc_graph(&mut g)?;
        let xs: Vec<u8> = values(k * n, 3)
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let at = g.placement_or_err(x)?;
        at.buffer.set_tensor(at.offset, &xs)?;
        let graphs = graph_per_copy(g, w, &weights);
        Ok(MulMat {
            graphs,
            out,
            weight_bytes: data.len(),
            flops: 2.0 * (k * m * n) as f64,
            _weights: weights,
            _alloc: alloc,
        })
    }

    /// Copies of the weight a pass goes through.
    pub fn copies(&self) -> usize {
        self.graphs.len()
    }

    /// One pass: the product with every copy of the weight.
    pub fn pass(&self, backend: &mut dyn Backend) -> Result<()> {
        for g in &self.graphs {
            backend.graph_compute(g, &[self.out])?;
        }
        Ok(())
    }

    /// The result of the last pass, `[m, n]` in column order.
    pub fn output(&self) -> Result<Vec<f32>> {
        let g = &self.graphs[0];
        let at = g.placement_or_err(self.out)?;
        let mut bytes = vec![0u8; g.desc(self.out).nbytes()];
        at.buffer.get_tensor(at.offset, &mut bytes)?;
        Ok(bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect())
    }

    /// Runs a warm-up pass, then passes until `s` is satisfied; returns the
    /// best pass time and the number of passes timed.
    pub fn time(&self, backend: &mut dyn Backend, s: Sampling) -> Result<(Duration, usize)> {
        self.pass(backend)?;
        let start = Instant::now();
        let mut best = Duration::MAX;
        let mut n = 0;
        while n < s.min_samples.max(1) || start.elapsed() < s.target {
            let t = Instant::now();
            self.pass(backend)?;
            best = best.min(t.elapsed());
            n += 1;
        }
        Ok((best, n))
    }
}

/// The CPU's repacked-weights buffer type, where it takes `[k, m]`
/// weights of `ty` for MUL_MAT.
fn repack_for(ty: Type, k: usize, m: usize) -> Option<Arc<dyn BufferType>> {
    let buft = cpu_device().extra_buffer_types().into_iter().next()?;
    let mut g = Graph::new();
    let w = g.new_tensor("w", ty, &[k, m]);
    let x = g.input("x", Type::F32, &[k, 1]);
    let out = g.mul_mat(w, x).ok()?;
    buft.supports_weight(&g, out, w).then_some(buft)
}

/// Weight copies needed for `total` bytes at least.
fn copies_for(weight_bytes: usize, total: usize) -> usize {
    total.div_ceil(weight_bytes.max(1)).max(1)
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1u64 << 20) as f64
}

/// Measures `cfg`; `prior` holds the STREAM and FMA rows of the same run,
/// which give the bounds.
pub fn run_config(cfg: &Config, prior: &[Row]) -> Result<Vec<Row>> {
    let mut backends = Vec::new();
    for &t in &cfg.threads {
        backends.push((t, CpuBackend::new(t)?));
    }
    let mut matvec = Vec::new();
    let mut matmul = Vec::new();
    for &ty in &cfg.types {
        for &(k, m) in &cfg.shapes {
            let shape = format!("{k}x{m}");
            let one = quants::row_size(ty, k)? * m;
            // Plain weights, then repacked ones where the CPU stores them so.
            let mut wbufts = vec![(cpu_buffer_type(), false)];
            wbufts.extend(repack_for(ty, k, m).map(|rb| (rb, true)));
            for (wbuft, repacked) in &wbufts {
                let copies = copies_for(one, cfg.streamed_bytes);
                let mv = MulMat::new_in(wbuft, ty, k, m, 1, copies)?;
                for (t, backend) in backends.iter_mut() {
                    let (best, n) = mv.time(backend, cfg.matvec_sampling)?;
                    let secs = best.as_secs_f64().max(1e-9);
                    let bytes = (mv.weight_bytes * mv.copies()) as f64;
                    let gflops = mv.flops * mv.copies() as f64 / secs / 1e9;
                    let how = if *repacked {
                        format!("weights repacked ({}), ", wbuft.name())
                    } else {
                        String::new()
                    };
                    let note = format!(
                        "{how}{:.1} MiB x {} copies, {gflops:.1} GFLOP/s, best of {n}",
                        mib(mv.weight_bytes),
                        mv.copies()
                    );
                    let case = if *repacked {
                        format!("{} {shape} repacked", ty.name())
                    } else {
                        format!("{} {shape}", ty.name())
                    };
                    matvec.push(
                        Row::new("matvec", case, Some(*t), bytes / secs / 1e9, "GB/s", note)
                            .with_bound(read_bandwidth(prior, *t)),
                    );
                }
            }
            let cols = cfg.matmul_cols;
            let mm = MulMat::new(ty, k, m, cols, 1)?;
            for (t, backend) in backends.iter_mut() {
                let (best, n) = mm.time(backend, cfg.matmul_sampling)?;
                let gflops = mm.flops / best.as_secs_f64().max(1e-9) / 1e9;
                let note = format!(
                    "{:.1} ms per product, best of {n}",
                    best.as_secs_f64() * 1e3
                );
                matmul.push(
                    Row::new(
                        "matmul",
                        format!("{} {shape}x{cols}", ty.name()),
                        Some(*t),
                        gflops,
                        "GFLOP/s",
                        note,
                    )
                    .with_bound(if ty.is_quantized() {
                        peak_int8(prior, *t).or_else(|| peak_fma(prior, *t))
                    } else {
                        peak_fma(prior, *t)
                    }),
                );
            }
        }
    }
    matvec.extend(matmul);
    Ok(matvec)
}

/// The MUL_MAT suite (matvec and matmul rows).
pub struct MulMatSuite;

impl Suite for MulMatSuite {
    fn name(&self) -> &'static str {
        "mul_mat"
    }

    fn run(&self, opts: &BenchOptions, prior: &[Row]) -> Result<Vec<Row>> {
        run_config(&Config::from_options(opts)?, prior)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_reach_the_total() {
        assert_eq!(copies_for(10, 100), 10);
        assert_eq!(copies_for(30, 100), 4);
        assert_eq!(copies_for(300, 100), 1);
        assert_eq!(copies_for(0, 100), 100);
    }

    #[test]
    fn product_matches_the_dequantized_weights() {
        let (k, m, n) = (256, 8, 3);
        let mut backend = CpuBackend::new(2).unwrap();
        for ty in [Type::F32, Type::Q4_0, Type::Q4_K] {
            let mm = MulMat::new(ty, k, m, n, 2).unwrap();
            assert_eq!(mm.copies(), 2);
            mm.pass(&mut backend).unwrap();
            let got = mm.output().unwrap();
            let data = weight_bytes(ty, k, m).unwrap();
            let row = quants::row_size(ty, k).unwrap();
            let xs = values(k * n, 3);
            for i in 0..m {
                let mut w = vec![0f32; k];
                quants::dequantize_row(ty, &data[i * row..(i + 1) * row], &mut w).unwrap();
                for j in 0..n {
                    let want: f32 = w
                        .iter()
                        .zip(&xs[j * k..(j + 1) * k])
                        .map(|(a, b)| a * b)
                        .sum();
                    let g = got[j * m + i];
                    assert!(
                        (g - want).abs() < 0.05 * (1.0 + want.abs()),
                        "{ty} [{i},{j}]: {g} vs {want}"
                    );
                }
            }
        }
    }
}
