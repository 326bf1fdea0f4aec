//! Helpers shared by the integration tests.

// Each test binary uses a part of these.
#[allow(unused_imports)]
pub use test_support::Rng;
