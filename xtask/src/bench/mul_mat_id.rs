//! MUL_MAT_ID through the CPU backend at a mixture-of-experts shape:
//! Qwen3-30B-A3B's expert up/gate projection (n_embd 2048, expert feed
//! forward 768, 128 experts, 8 used per token), in Q4_K and Q8_0.
//!
//! * 1 token (generation): only the 8 chosen experts are read, so the
//!   bound is the read bandwidth (STREAM, same run, same threads) over the
//!   bytes of 8 experts. Each pass picks other experts of another copy of
//!   the tensor (the sets cycle through all 128 experts of copies that
//!   together exceed 32 times the last-level cache, 1 GiB at least, as the
//!   MUL_MAT bench does), so that the chosen experts come from memory, as
//!   in a decode step, not from a cache that kept earlier passes'.
//! * 512 tokens (a prompt ubatch): tokens are grouped by expert, so each
//!   chosen expert is read once per ubatch; the figure is compute bound and
//!   the bytes per token are small. The bound is the peak multiply-add rate
//!   of the same run (8-bit where the CPU has it, else f32) over the
//!   operations of one token (2 k m per slot).
//!
//! Figures are tokens/s (best pass after a warm-up); the notes give the
//! expert bytes read per token and the GB/s they amount to.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ggml_core::alloc::GraphAlloc;
use ggml_core::backend::{Backend, Buffer, Placement};
use ggml_core::graph::{Flags, Graph, TensorId};
use ggml_core::tensor::TensorDesc;
use ggml_core::{quants, Type};
use ggml_cpu::{cpu_buffer_type, CpuBackend};

use super::matmul::{graph_per_copy, weight_bytes, weight_copies};
use super::report::Row;
use super::{host, peak_fma, peak_int8, read_bandwidth, BenchOptions, Suite};
use crate::error::Result;

/// Input width (n_embd) of the expert projection.
const N_EMBD: usize = 2048;
/// Output rows (expert feed-forward length).
const N_FF: usize = 768;
/// Experts in the layer.
const N_EXPERT: usize = 128;
/// Experts used per token.
const N_USED: usize = 8;
/// Tokens of the ubatch case (llama.cpp's default ubatch).
const UBATCH: usize = 512;
/// With `--quick`: fewer experts, a smaller ubatch.
const QUICK_EXPERTS: usize = 32;
const QUICK_UBATCH: usize = 64;
/// The weight types measured.
const TYPES: [Type; 2] = [Type::Q4_K, Type::Q8_0];
/// The least bytes the copies of the experts add up to in the 1-token
/// case, and the multiple of the last-level cache they reach.
const MIN_STREAMED_BYTES: usize = 1 << 30;
const STREAMED_LLC_FACTOR: usize = 32;
/// With `--quick`.
const QUICK_STREAMED_BYTES: usize = 64 << 20;

/// One MUL_MAT_ID of `[k, m, n_expert]` experts by `n_tok` tokens, with
/// several sets of expert ids a pass cycles through.
struct MulMatId {
    /// One graph per copy of the experts; they share inputs and output.
    graphs: Vec<Graph>,
    ids: TensorId,
    out: TensorId,
    id_sets: Vec<Vec<u8>>,
    /// Bytes of one expert.
    expert_bytes: usize,
    /// Distinct experts each id set chooses.
    distinct: Vec<usize>,
    _weights: Vec<Arc<dyn Buffer>>,
    _alloc: GraphAlloc,
}

/// Deterministic distinct experts for each token of `n_tok`, set `s`: the
/// sets together visit every expert about equally.
fn id_set(s: usize, n_tok: usize, n_expert: usize) -> Vec<i32> {
    let mut v = Vec::with_capacity(n_tok * N_USED);
    let mut h = 0x9e37_79b9_7f4a_7c15u64 ^ (s as u64).wrapping_mul(0x100_0000_01b3);
    for t in 0..n_tok {
        let mut chosen: Vec<i32> = Vec::with_capacity(N_USED);
        // Single tokens walk the experts in order so the sets cover them all.
        let mut next = (s * N_USED + t * 3) % n_expert;
        while chosen.len() < N_USED {
            if n_tok > 1 {
                h ^= h << 13;
                h ^= h >> 7;
                h ^= h << 17;
                next = (h % n_expert as u64) as usize;
            }
            if !chosen.contains(&(next as i32)) {
                chosen.push(next as i32);
            }
            next = (next + 1) % n_expert;
        }
        v.extend(chosen);
    }
    v
}

impl MulMatId {
    fn new(ty: Type, n_expert: usize, n_tok: usize, streamed: usize) -> Result<MulMatId> {
        let (k, m) = (N_EMBD, N_FF);
        let desc = TensorDesc::new("exps", ty, &[k, m, n_expert]);
        let data = weight_bytes(ty, k, m * n_expert)?;
        let wbuft = cpu_buffer_type();
        let copies = if n_tok == 1 {
            streamed.div_ceil(data.len()).max(1)
        } else {
            1
        };
        let weights = weight_copies(&wbuft, &desc, &data, copies)?;
        let mut g = Graph::new();
        let w = g.import(desc, Placement::new(weights[0].clone(), 0), Flags::WEIGHT);
        let x = g.input("x", Type::F32, &[k, 1, n_tok]);
        let ids = g.input("ids", Type::I32, &[N_USED, n_tok]);
        let out = g.mul_mat_id(w, x, ids)?;
        g.set_output(out);
        let mut alloc = GraphAlloc::new(cpu_buffer_type());
        alloc.alloc_graph(&mut g)?;
        let xs: Vec<u8> = (0..k * n_tok)
            .flat_map(|i| (((i * 37) % 101) as f32 / 50.0 - 1.0).to_le_bytes())
            .collect();
        let at = g.placement_or_err(x)?;
        at.buffer.set_tensor(at.offset, &xs)?;
        let n_sets = if n_tok == 1 {
            n_expert.div_ceil(N_USED)
        } else {
            4
        };
        let mut id_sets = Vec::new();
        let mut distinct = Vec::new();
        for s in 0..n_sets {
            let v = id_set(s, n_tok, n_expert);
            let mut seen = vec![false; n_expert];
            v.iter().for_each(|&e| seen[e as usize] = true);
            distinct.push(seen.iter().filter(|&&b| b).count());
            id_sets.push(v.iter().flat_map(|e| e.to_le_bytes()).collect());
        }
        let graphs = graph_per_copy(g, w, &weights);
        Ok(MulMatId {
            graphs,
            ids,
            out,
            id_sets,
            expert_bytes: quants::row_size(ty, k)? * m,
            distinct,
            _weights: weights,
            _alloc: alloc,
        })
    }

    /// Runs pass `s`: the product with copy `s % copies` of the experts
    /// and the next id set once every copy has had the last one.
    fn run(&self, backend: &mut dyn Backend, s: usize) -> Result<()> {
        let copies = self.graphs.len();
        let g = &self.graphs[s % copies];
        let at = g.placement_or_err(self.ids)?;
        let set = &self.id_sets[(s / copies) % self.id_sets.len()];
        at.buffer.set_tensor(at.offset, set)?;
        backend.graph_compute(g, &[self.out])?;
        Ok(())
    }

    /// A warm-up over every id set, then samples for at least `target`;
    /// returns the best mean time of one product over a sample and the
    /// mean distinct experts.
    fn time(&self, backend: &mut dyn Backend, target: Duration) -> Result<(Duration, f64)> {
        for s in 0..self.id_sets.len() * self.graphs.len() {
            self.run(backend, s)?;
        }
        // A sample is a whole cycle through the copies and id sets (as a
        // STREAM sample is a whole pass over its arrays), so that a short
        // product that happens to run undisturbed is not taken for the rate.
        let per_sample = self.graphs.len() * self.id_sets.len();
        let start = Instant::now();
        let mut best = Duration::MAX;
        let mut n = 0;
        while n < 3 || start.elapsed() < target {
            let t = Instant::now();
            for s in 0..per_sample {
                self.run(backend, n * per_sample + s)?;
            }
            best = best.min(t.elapsed() / per_sample as u32);
            n += 1;
        }
        let mean = self.distinct.iter().sum::<usize>() as f64 / self.distinct.len() as f64;
        Ok((best, mean))
    }
}

/// The MUL_MAT_ID suite: tokens/s at 1 and at a ubatch of tokens.
pub struct MulMatIdSuite;

impl Suite for MulMatIdSuite {
    fn name(&self) -> &'static str {
        "mul_mat_id"
    }

    fn run(&self, opts: &BenchOptions, prior: &[Row]) -> Result<Vec<Row>> {
        let (n_expert, ubatch, target, streamed) = if opts.quick {
            (
                QUICK_EXPERTS,
                QUICK_UBATCH,
                Duration::from_millis(100),
                QUICK_STREAMED_BYTES,
            )
        } else {
            let llc = host::last_level_cache_bytes().unwrap_or(0);
            (
                N_EXPERT,
                UBATCH,
                Duration::from_millis(1500),
                MIN_STREAMED_BYTES.max(STREAMED_LLC_FACTOR * llc),
            )
        };
        let types: Vec<Type> = if opts.types.is_empty() {
            TYPES.to_vec()
        } else {
            TYPES
                .into_iter()
                .filter(|t| opts.types.iter().any(|o| o.ty == *t))
                .collect()
        };
        let mut backends = Vec::new();
        for t in opts.thread_counts()? {
            backends.push((t, CpuBackend::new(t)?));
        }
        let mut rows = Vec::new();
        for ty in types {
            for n_tok in [1, ubatch] {
                let b = MulMatId::new(ty, n_expert, n_tok, streamed)?;
                for (t, backend) in backends.iter_mut() {
                    let (best, distinct) = b.time(backend, target)?;
                    let secs = best.as_secs_f64().max(1e-9);
                    let tok_s = n_tok as f64 / secs;
                    let per_tok = distinct * b.expert_bytes as f64 / n_tok as f64;
                    let gbs = per_tok * tok_s / 1e9;
                    let bound = if n_tok == 1 {
                        read_bandwidth(prior, *t).map(|bw| bw * 1e9 / per_tok)
                    } else {
                        let flops_per_tok = (2 * N_EMBD * N_FF * N_USED) as f64;
                        peak_int8(prior, *t)
                            .or_else(|| peak_fma(prior, *t))
                            .map(|g| g * 1e9 / flops_per_tok)
                    };
                    let note = format!(
                        "{:.2} MiB of experts per token ({distinct:.0} of {n_expert} experts \
                         of {:.2} MiB read per product, {} copies), {gbs:.1} GB/s, \
                         {:.2} ms per product",
                        per_tok / (1u64 << 20) as f64,
                        b.expert_bytes as f64 / (1u64 << 20) as f64,
                        b.graphs.len(),
                        secs * 1e3
                    );
                    let case = format!(
                        "{} {N_EMBD}x{N_FF}x{n_expert} top{N_USED} x {n_tok} tok",
                        ty.name()
                    );
                    rows.push(
                        Row::new("mul_mat_id", case, Some(*t), tok_s, "tok/s", note)
                            .with_bound(bound),
                    );
                }
            }
        }
        Ok(rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_sets_are_distinct_per_token_and_cover_the_experts() {
        let n_expert = 32;
        let mut seen = vec![false; n_expert];
        for s in 0..n_expert / N_USED {
            let v = id_set(s, 1, n_expert);
            assert_eq!(v.len(), N_USED);
            for &e in &v {
                seen[e as usize] = true;
            }
        }
        assert!(seen.iter().all(|&b| b));
        let v = id_set(0, 5, n_expert);
        for tok in v.chunks(N_USED) {
            let mut t = tok.to_vec();
            t.sort_unstable();
            t.dedup();
            assert_eq!(t.len(), N_USED);
        }
    }

    #[test]
    fn product_runs_at_a_small_shape() {
        let mut backend = CpuBackend::new(2).unwrap();
        let b = MulMatId::new(Type::Q8_0, 16, 3, 0).unwrap();
        assert_eq!(b.graphs.len(), 1);
        let one = MulMatId::new(Type::Q8_0, 16, 1, 3 * b.expert_bytes * 16).unwrap();
        assert_eq!(one.graphs.len(), 3);
        one.run(&mut backend, 4).unwrap();
        b.run(&mut backend, 0).unwrap();
        let (_, distinct) = b.time(&mut backend, Duration::ZERO).unwrap();
        assert!(distinct >= N_USED as f64);
    }
}
