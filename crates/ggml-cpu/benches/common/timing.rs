//! Timing for the benches that report the fastest and the median run
//! (criterion's mean is scattered by the load of a shared machine; the
//! fastest run is the least disturbed one).

use std::time::{Duration, Instant};

/// How many times a case runs: `warm_up` untimed runs, then at least `min`
/// and at most `max` timed ones.
pub struct Runs {
    /// Untimed runs first.
    pub warm_up: usize,
    /// Fewest timed runs, however long they take.
    pub min: usize,
    /// Most timed runs, however short they are.
    pub max: usize,
}

/// Fastest and median seconds of `f`, and how many timed runs, over about
/// `secs` seconds.
pub fn time(secs: f64, runs: Runs, mut f: impl FnMut()) -> (f64, f64, usize) {
    for _ in 0..runs.warm_up {
        f();
    }
    let mut times = Vec::new();
    let start = Instant::now();
    while times.len() < runs.min || start.elapsed() < Duration::from_secs_f64(secs) {
        let t = Instant::now();
        f();
        times.push(t.elapsed().as_secs_f64());
        if times.len() >= runs.max {
            break;
        }
    }
    times.sort_by(f64::total_cmp);
    (times[0], times[times.len() / 2], times.len())
}

/// `GGML_BENCH_SECS` (seconds per case, `default` when unset or not a
/// number) and `GGML_BENCH_FILTER` (only the cases whose name contains it;
/// empty when unset).
pub fn env_secs_and_filter(default: f64) -> (f64, String) {
    let secs = std::env::var("GGML_BENCH_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    let filter = std::env::var("GGML_BENCH_FILTER").unwrap_or_default();
    (secs, filter)
}
