//! Memory bandwidth, STREAM style: copy (`c = a`) and triad
//! (`a = b + s * c`) over f64 arrays far larger than the last-level cache,
//! each thread working on its own contiguous slice, and a read-only sum
//! (`s += a`), the access pattern of a matrix x vector product, whose
//! weights are only read. Reported like STREAM: best repetition, bytes
//! counted as read + written (16, 24 and 8 bytes per element), without the
//! write-allocate traffic the hardware adds.

use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::report::Row;
use super::{host, BenchOptions, Suite};
use crate::error::Result;

/// Smallest array length (f64 elements, 512 MiB per array): a repetition
/// lasts tens of milliseconds, so that a thread that starts late on a busy
/// machine costs little of it.
const MIN_ELEMS: usize = 1 << 26;
/// Array length of a quick run.
const QUICK_ELEMS: usize = 1 << 22;
/// Repetitions; the best counts.
const REPS: usize = 10;
const QUICK_REPS: usize = 3;

/// Best time of each kernel.
#[derive(Clone, Copy, Debug)]
pub struct StreamTimes {
    /// `c = a`.
    pub copy: Duration,
    /// `a = b + s * c`.
    pub triad: Duration,
    /// `s += a`.
    pub read: Duration,
}

fn copy(a: &[f64], c: &mut [f64]) {
    for (y, x) in c.iter_mut().zip(a) {
        *y = *x;
    }
}

/// Independent partial sums: enough additions in flight to keep loads
/// streaming.
const READ_LANES: usize = 16;

/// Sums `a` with the widest loads the CPU has: with narrow ones a single
/// core cannot keep enough cache-line requests in flight, and the figure
/// would be below what the SIMD kernels of the engine read.
fn read(a: &[f64]) -> f64 {
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU reports avx512f.
            return unsafe { x86::read_avx512(a) };
        }
        if is_x86_feature_detected!("avx") {
            // SAFETY: the CPU reports avx.
            return unsafe { x86::read_avx(a) };
        }
    }
    read_portable(a)
}

fn read_portable(a: &[f64]) -> f64 {
    let mut acc = [0f64; READ_LANES];
    let chunks = a.chunks_exact(READ_LANES);
    let rest: f64 = chunks.remainder().iter().sum();
    for c in chunks {
        for (s, x) in acc.iter_mut().zip(c) {
            *s += x;
        }
    }
    acc.iter().sum::<f64>() + rest
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// Eight 512-bit partial sums.
    #[target_feature(enable = "avx512f")]
    pub fn read_avx512(a: &[f64]) -> f64 {
        let chunks = a.chunks_exact(64);
        let rest: f64 = chunks.remainder().iter().sum();
        let mut acc = [_mm512_setzero_pd(); 8];
        for c in chunks {
            for (j, s) in acc.iter_mut().enumerate() {
                // SAFETY: `c` holds 64 elements; lanes 8j..8j+8 are in it.
                let v = unsafe { _mm512_loadu_pd(c.as_ptr().add(8 * j)) };
                *s = _mm512_add_pd(*s, v);
            }
        }
        let sum = acc
            .iter()
            .fold(_mm512_setzero_pd(), |s, &x| _mm512_add_pd(s, x));
        _mm512_reduce_add_pd(sum) + rest
    }

    /// Eight 256-bit partial sums.
    #[target_feature(enable = "avx")]
    pub fn read_avx(a: &[f64]) -> f64 {
        let chunks = a.chunks_exact(32);
        let rest: f64 = chunks.remainder().iter().sum();
        let mut acc = [_mm256_setzero_pd(); 8];
        for c in chunks {
            for (j, s) in acc.iter_mut().enumerate() {
                // SAFETY: `c` holds 32 elements; lanes 4j..4j+4 are in it.
                let v = unsafe { _mm256_loadu_pd(c.as_ptr().add(4 * j)) };
                *s = _mm256_add_pd(*s, v);
            }
        }
        let sum = acc
            .iter()
            .fold(_mm256_setzero_pd(), |s, &x| _mm256_add_pd(s, x));
        let mut lanes = [0f64; 4];
        // SAFETY: `lanes` has room for the four lanes.
        unsafe { _mm256_storeu_pd(lanes.as_mut_ptr(), sum) };
        lanes.iter().sum::<f64>() + rest
    }
}

fn triad(a: &mut [f64], b: &[f64], c: &[f64], s: f64) {
    for ((y, x), z) in a.iter_mut().zip(b).zip(c) {
        *y = x + s * z;
    }
}

/// A barrier whose waiters spin (yielding now and then), so that the
/// threads of a timed kernel start together: one woken from a sleeping
/// barrier can start late by a scheduler tick, and the run's span with it.
struct SpinBarrier {
    n: usize,
    arrived: AtomicUsize,
    generation: AtomicUsize,
}

/// Spins between yields while waiting at a [`SpinBarrier`].
const SPINS_PER_YIELD: u32 = 1 << 12;

impl SpinBarrier {
    fn new(n: usize) -> SpinBarrier {
        SpinBarrier {
            n: n.max(1),
            arrived: AtomicUsize::new(0),
            generation: AtomicUsize::new(0),
        }
    }

    fn wait(&self) {
        let generation = self.generation.load(Ordering::Acquire);
        if self.arrived.fetch_add(1, Ordering::AcqRel) + 1 == self.n {
            self.arrived.store(0, Ordering::Relaxed);
            self.generation.fetch_add(1, Ordering::Release);
            return;
        }
        let mut spins = 0u32;
        while self.generation.load(Ordering::Acquire) == generation {
            std::hint::spin_loop();
            spins += 1;
            if spins % SPINS_PER_YIELD == 0 {
                std::thread::yield_now();
            }
        }
    }
}

/// Wall time of one parallel run: from the first thread's start to the last
/// thread's end. Each thread takes its own times, so a coordinating thread
/// that wakes late cannot shorten the measurement.
fn span(times: &[(Instant, Instant)]) -> Duration {
    let start = times.iter().map(|t| t.0).min();
    let end = times.iter().map(|t| t.1).max();
    match (start, end) {
        (Some(s), Some(e)) => e.saturating_duration_since(s),
        _ => Duration::ZERO,
    }
}

/// Runs the three kernels `reps` times on arrays of `n` elements split over
/// `threads` threads.
pub fn measure(n: usize, threads: usize, reps: usize) -> StreamTimes {
    run(n, threads, reps, true)
}

/// The read-only kernel alone, on one array of `n` elements: its best time
/// of `reps`.
pub fn measure_read(n: usize, threads: usize, reps: usize) -> Duration {
    run(n, threads, reps, false).read
}

/// Read bandwidth now (GB/s) on `threads` threads, over an array of the
/// STREAM suite's size (the quick size with `quick`), best of 3.
pub fn read_bandwidth_now(threads: usize, quick: bool) -> f64 {
    let n = array_len(quick);
    let t = measure_read(n, threads, 3);
    (8 * n) as f64 / t.as_secs_f64().max(1e-9) / 1e9
}

/// Elements per array: STREAM's rule, each array at least 4 times the
/// largest cache (a fixed small size for quick runs).
fn array_len(quick: bool) -> usize {
    if quick {
        QUICK_ELEMS
    } else {
        let llc = host::last_level_cache_bytes().unwrap_or(0);
        MIN_ELEMS.max(4 * llc / 8)
    }
}

/// `v` in `k` slices of `per` elements (empty ones past its end).
fn parts(v: &mut [f64], per: usize, k: usize) -> Vec<&mut [f64]> {
    let mut out: Vec<&mut [f64]> = v.chunks_mut(per).collect();
    out.resize_with(k, Default::default);
    out
}

/// Runs the kernels (all three, or the read alone) `reps` times; the best
/// time of each, `Duration::MAX` for those not run.
fn run(n: usize, threads: usize, reps: usize, all: bool) -> StreamTimes {
    // Zeroed allocations are not touched here: each thread's first write
    // places its own pages (first touch).
    let m = if all { n } else { 0 };
    let mut a = vec![0f64; m];
    let mut b = vec![0f64; n];
    let mut c = vec![0f64; m];
    let per = n.div_ceil(threads.max(1)).max(1);
    let k = n.div_ceil(per);
    let barrier = SpinBarrier::new(k);
    let per_thread: Vec<Vec<[(Instant, Instant); 3]>> = std::thread::scope(|s| {
        let slices = parts(&mut a, per, k)
            .into_iter()
            .zip(parts(&mut b, per, k))
            .zip(parts(&mut c, per, k));
        let handles: Vec<_> = slices
            .map(|((a, b), c)| {
                let barrier = &barrier;
                s.spawn(move || {
                    a.fill(1.0);
                    b.fill(2.0);
                    c.fill(0.0);
                    let mut times = Vec::with_capacity(reps);
                    for _ in 0..reps {
                        let now = Instant::now();
                        let (mut t_copy, mut t_triad) = ((now, now), (now, now));
                        if all {
                            barrier.wait();
                            let t0 = Instant::now();
                            copy(a, c);
                            black_box(&mut *c);
                            t_copy = (t0, Instant::now());
                            barrier.wait();
                            let t2 = Instant::now();
                            triad(a, b, c, 3.0);
                            black_box(&mut *a);
                            t_triad = (t2, Instant::now());
                        }
                        barrier.wait();
                        let t4 = Instant::now();
                        black_box(read(black_box(&*b)));
                        times.push([t_copy, t_triad, (t4, Instant::now())]);
                    }
                    times
                })
            })
            .collect();
        handles.into_iter().filter_map(|h| h.join().ok()).collect()
    });
    let mut best = StreamTimes {
        copy: Duration::MAX,
        triad: Duration::MAX,
        read: Duration::MAX,
    };
    for rep in 0..reps {
        let kernel = |k: usize| -> Duration {
            let times: Vec<_> = per_thread
                .iter()
                .filter_map(|t| t.get(rep))
                .map(|t| t[k])
                .collect();
            span(&times)
        };
        if all {
            best.copy = best.copy.min(kernel(0));
            best.triad = best.triad.min(kernel(1));
        }
        best.read = best.read.min(kernel(2));
    }
    best
}

/// The STREAM suite.
pub struct Stream;

impl Suite for Stream {
    fn name(&self) -> &'static str {
        "stream"
    }

    fn run(&self, opts: &BenchOptions, _prior: &[Row]) -> Result<Vec<Row>> {
        let n = array_len(opts.quick);
        let reps = if opts.quick { QUICK_REPS } else { REPS };
        let mib = (n * 8) >> 20;
        let mut rows = Vec::new();
        for threads in opts.thread_counts()? {
            let t = measure(n, threads, reps);
            let note = format!("3 x {mib} MiB f64 arrays, best of {reps}");
            for (case, bytes, time) in [
                ("copy", 16, t.copy),
                ("triad", 24, t.triad),
                ("read", 8, t.read),
            ] {
                let gbs = (bytes * n) as f64 / time.as_secs_f64() / 1e9;
                rows.push(Row::new(
                    self.name(),
                    case,
                    Some(threads),
                    gbs,
                    "GB/s",
                    note.clone(),
                ));
            }
        }
        Ok(rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_compute_and_time() {
        let mut a = vec![1.0; 5];
        let b = vec![2.0; 5];
        let mut c = vec![0.0; 5];
        copy(&a, &mut c);
        triad(&mut a, &b, &c, 3.0);
        assert_eq!(a, vec![5.0; 5]);
        for n in [0, 1, 37, 64, 100, 1000] {
            let v: Vec<f64> = (0..n).map(f64::from).collect();
            let want = f64::from(n * (n.max(1) - 1) / 2);
            assert_eq!(read(&v), want, "{n}");
            assert_eq!(read_portable(&v), want, "{n}");
        }
        let t = measure(1000, 3, 2);
        let t4 = measure(1000, 4, 3);
        assert!(t4.read < Duration::MAX);
        assert!(t.copy < Duration::MAX && t.triad < Duration::MAX && t.read < Duration::MAX);
        let r = run(1000, 3, 2, false);
        assert!(r.read < Duration::MAX);
        assert_eq!((r.copy, r.triad), (Duration::MAX, Duration::MAX));
        assert!(read_bandwidth_now(2, true) > 0.0);
    }
}
