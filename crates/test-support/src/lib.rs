//! Helpers shared by the tests of every crate of the workspace, so that
//! each exists once: where the reference fixtures and the real models are
//! (skipping, or failing when the environment requires them), one seeded
//! random generator, a counting global allocator, and the greedy pick of
//! a row of logits.
//!
//! This crate is a dev-dependency only and depends on nothing, so any crate
//! of the workspace can use it.

mod alloc;
mod paths;
mod rng;

pub use alloc::{peak_during, CountingAlloc};
pub use paths::{fixtures, fixtures_with, real_model, required, scratch_dir, workspace_root};
pub use rng::Rng;

/// Evaluates to the fixtures folder, or returns from the calling test after
/// printing why (see [`fixtures`]).
#[macro_export]
macro_rules! fixtures_or_skip {
    () => {
        match $crate::fixtures() {
            Some(d) => d,
            None => return,
        }
    };
}

/// Index of the largest value (the first one on ties), as greedy sampling
/// picks; 0 for an empty or all-NaN slice.
pub fn argmax(v: &[f32]) -> usize {
    v.iter()
        .enumerate()
        .fold((0usize, f32::NEG_INFINITY), |(bi, bv), (i, &x)| {
            if x > bv {
                (i, x)
            } else {
                (bi, bv)
            }
        })
        .0
}

/// The token greedy sampling picks from a row of logits.
pub fn greedy_token(logits: &[f32]) -> i32 {
    argmax(logits) as i32
}
