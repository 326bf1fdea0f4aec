//! Helpers shared by the tests of every crate of the workspace, so that
//! each exists once: where the reference fixtures and the real models are
//! (skipping, or failing when the environment requires them), one seeded
//! random generator, and a counting global allocator.
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
