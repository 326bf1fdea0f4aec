//! Graph reuse between ubatches: a ubatch whose graph would be identical to
//! the previous one's runs that graph again, and only its inputs are
//! written.
//!
//! A forward graph is a function of its [`UbatchShape`] (tokens, output
//! rows, the attended cells of each cache, token or embedding input) and of
//! what a context fixes at creation (model, devices, cache types, flash
//! attention, rope settings): K and V are stored through index inputs
//! (`set_rows`) and positions, masks and output rows are inputs too, so the
//! graphs of two ubatches of equal shape differ in their inputs only.
//! Sequences do not enter the shape: the cache is unified, and which cells a
//! token sees is the mask's business. The number of attended cells is
//! padded (to [`crate::graph::KQ_MASK_PAD`]), so a decode loop reuses one
//! graph until the cache grows past the next padding step.
//!
//! The graph also names the cache buffers K and V go to: a context whose
//! caches were replaced builds anew.
//!
//! The scheduler's own check ([`Scheduler::reuse_graph`]) adds the rest:
//! the graph is refused once another graph was split (a context shift), the
//! compute buffers were reserved again or the scheduler was reset.
//!
//! [`Scheduler::reuse_graph`]: ggml_core::sched::Scheduler::reuse_graph

use std::sync::Arc;
use std::time::Instant;

use ggml_core::sched::AllocationId;

use crate::context::Context;
use crate::error::Result;
use crate::graph::{BuiltGraph, UbatchShape};
use crate::memory::Memory;

/// The environment variable that turns graph reuse off (llama.cpp's name):
/// any value whose leading integer is not 0.
pub const GRAPH_REUSE_DISABLE_ENV: &str = "LLAMA_GRAPH_REUSE_DISABLE";

/// The last computed graph, kept for the next ubatch.
pub(super) struct KeptGraph {
    shape: UbatchShape,
    /// The cache buffers it reads and writes ([`kv_buffers`]).
    kv_buffers: Vec<usize>,
    built: BuiltGraph,
    alloc: AllocationId,
}

/// The leading integer of `s` (C's `atoi`: optional blanks and sign, then
/// digits; 0 when there are none).
fn atoi(s: &str) -> i64 {
    let t = s.trim_start();
    let (neg, rest) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    let v = match digits.parse::<i64>() {
        Ok(v) => v,
        Err(_) if digits.is_empty() => 0,
        // more digits than an i64 holds: still not zero
        Err(_) => i64::MAX,
    };
    if neg {
        -v
    } else {
        v
    }
}

/// The buffers of the caches, by address: a graph stores K and V into
/// them, so a graph kept from before the context's caches were replaced
/// (the cache is a public field) must not run again.
fn kv_buffers(mem: &Memory) -> Vec<usize> {
    let kv = mem
        .kv()
        .into_iter()
        .flat_map(|kv| kv.caches())
        .flat_map(|c| &c.buffers);
    let rs = mem.rs().into_iter().flat_map(|rs| &rs.buffers);
    kv.chain(rs)
        .map(|b| Arc::as_ptr(b) as *const () as usize)
        .collect()
}

/// Whether graph reuse is on: asked for in the parameters and not turned
/// off by [`GRAPH_REUSE_DISABLE_ENV`].
pub(super) fn resolve_graph_reuse(asked: bool) -> bool {
    let disabled = std::env::var(GRAPH_REUSE_DISABLE_ENV).is_ok_and(|v| atoi(&v) != 0);
    if asked && disabled {
        crate::warn!("llama_init_from_model: graph reuse disabled");
    }
    asked && !disabled
}

impl Context<'_> {
    /// Whether ubatches of equal shape reuse the previous graph.
    pub fn graph_reuse(&self) -> bool {
        self.graph_reuse
    }

    /// The graph of a ubatch of `shape`, allocated and ready for its
    /// inputs: the kept graph when it has that shape and the scheduler
    /// still holds its allocation, else a new one. Returns the graph and
    /// its allocation; hand both to [`Context::keep_graph`] after computing.
    pub(super) fn ubatch_graph(
        &mut self,
        shape: UbatchShape,
    ) -> Result<(BuiltGraph, AllocationId)> {
        let t0 = Instant::now();
        let res = self.ubatch_graph_inner(shape);
        self.perf.t_graph += t0.elapsed();
        res
    }

    fn ubatch_graph_inner(&mut self, shape: UbatchShape) -> Result<(BuiltGraph, AllocationId)> {
        // The kept graph is taken out either way: a graph that fails
        // anywhere below is never run again.
        if let Some(k) = self.kept.take() {
            if self.graph_reuse
                && k.shape == shape
                && k.kv_buffers == kv_buffers(&self.mem)
                && self.sched.reuse_graph(&k.built.graph, k.alloc)?
            {
                self.perf.n_graph_reuses += 1;
                return Ok((k.built, k.alloc));
            }
        }
        let mut built = self.build(shape)?;
        self.pin_layers(&built)?;
        self.sched.alloc_graph(&mut built.graph)?;
        let alloc = self.sched.last_allocation().ok_or_else(|| {
            crate::error::LlamaError::Decode("the scheduler lost the graph it allocated".into())
        })?;
        self.perf.n_graph_builds += 1;
        Ok((built, alloc))
    }

    /// Keeps a computed graph for the next ubatch (when reuse is on).
    pub(super) fn keep_graph(
        &mut self,
        shape: UbatchShape,
        built: BuiltGraph,
        alloc: AllocationId,
    ) {
        if self.graph_reuse {
            self.kept = Some(KeptGraph {
                shape,
                kv_buffers: kv_buffers(&self.mem),
                built,
                alloc,
            });
        }
    }

    /// Drops the kept graph: the next ubatch builds its own.
    pub(super) fn forget_graph(&mut self) {
        self.kept = None;
    }
}

#[cfg(test)]
mod tests {
    use super::atoi;

    #[test]
    fn atoi_reads_the_leading_integer() {
        assert_eq!(atoi("1"), 1);
        assert_eq!(atoi(" 2x"), 2);
        assert_eq!(atoi("-3"), -3);
        assert_eq!(atoi("0"), 0);
        assert_eq!(atoi(""), 0);
        assert_eq!(atoi("yes"), 0);
        assert_eq!(atoi("99999999999999999999"), i64::MAX);
    }
}
