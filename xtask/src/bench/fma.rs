//! Peak f32 FMA rate: independent chains of fused multiply-adds kept in
//! registers, with the widest SIMD the CPU has (AVX-512, AVX2+FMA, detected
//! at run time) and a portable fallback. Twelve accumulators cover the
//! latency of two FMA pipes; the measured figure is what a compute-bound
//! kernel can reach at best.

use std::hint::black_box;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use super::report::Row;
use super::{BenchOptions, Suite};
use crate::error::Result;

/// Time one measurement should take.
const TARGET: Duration = Duration::from_millis(300);
const QUICK_TARGET: Duration = Duration::from_millis(30);
/// Measurements per thread count; the best counts.
const REPS: usize = 5;
/// Iterations of the calibration run.
const CALIBRATION_ITERS: u64 = 1 << 20;

/// Multiplier and addend: the accumulators converge to 1 and stay normal.
/// They reach the loops through `black_box`: with known constants the
/// compiler could prove that 1.0 is a fixed point and drop the loop.
const MUL: f32 = 0.999_999;
const ADD: f32 = 1e-6;

/// An instruction set the loop can run with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    /// 512-bit FMA.
    Avx512,
    /// 512-bit 8-bit integer multiply-adds (VPDPBUSD), what the quantized
    /// matrix kernels run on.
    Avx512Vnni,
    /// 256-bit FMA.
    Avx2,
    /// Plain multiply and add, left to the compiler.
    Portable,
}

impl Isa {
    /// Name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Avx512 => "avx512 fma",
            Isa::Avx512Vnni => INT8_CASE,
            Isa::Avx2 => "avx2 fma",
            Isa::Portable => "portable mul+add",
        }
    }

    /// Floating-point operations of one loop iteration.
    pub fn flops_per_iter(self) -> u64 {
        match self {
            Isa::Avx512 => 12 * 16 * 2,
            Isa::Avx512Vnni => 12 * 64 * 2,
            Isa::Avx2 => 12 * 8 * 2,
            Isa::Portable => 8 * 2,
        }
    }

    /// The instruction sets this CPU supports, widest first.
    pub fn available() -> Vec<Isa> {
        let mut v = Vec::new();
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx512f") {
                v.push(Isa::Avx512);
            }
            if is_x86_feature_detected!("avx512vnni") {
                v.push(Isa::Avx512Vnni);
            }
            if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
                v.push(Isa::Avx2);
            }
        }
        v.push(Isa::Portable);
        v
    }

    /// Runs `iters` iterations; the result only defeats dead-code removal.
    fn run(self, iters: u64) -> f32 {
        let iters = black_box(iters);
        match self {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `Isa::Avx512` is only listed by `available()` when the
            // CPU reports avx512f.
            Isa::Avx512 => unsafe { x86::fma_avx512(iters) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: listed only when the CPU reports avx512vnni (and so
            // avx512f).
            Isa::Avx512Vnni => unsafe { x86::dpbusd_avx512(iters) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `Isa::Avx2` is only listed when the CPU reports avx2 and fma.
            Isa::Avx2 => unsafe { x86::fma_avx2(iters) },
            _ => portable(iters),
        }
    }
}

fn portable(iters: u64) -> f32 {
    let (m, c) = (black_box(MUL), black_box(ADD));
    let mut acc = [1f32; 8];
    for _ in 0..iters {
        for a in acc.iter_mut() {
            *a = *a * m + c;
        }
    }
    acc.iter().sum()
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;
    use std::hint::black_box;

    use super::{ADD, MUL};

    /// Twelve independent 512-bit FMA chains.
    #[target_feature(enable = "avx512f")]
    pub fn fma_avx512(iters: u64) -> f32 {
        let m = black_box(_mm512_set1_ps(MUL));
        let c = black_box(_mm512_set1_ps(ADD));
        let mut acc = [black_box(_mm512_set1_ps(1.0)); 12];
        for _ in 0..iters {
            for a in acc.iter_mut() {
                *a = _mm512_fmadd_ps(*a, m, c);
            }
        }
        let sum = acc
            .iter()
            .fold(_mm512_setzero_ps(), |s, &a| _mm512_add_ps(s, a));
        _mm512_reduce_add_ps(sum)
    }

    /// Twelve independent 512-bit chains of 8-bit multiply-adds (64
    /// multiplies and adds each).
    #[target_feature(enable = "avx512f,avx512vnni")]
    pub fn dpbusd_avx512(iters: u64) -> f32 {
        let a = black_box(_mm512_set1_epi8(3));
        let b = black_box(_mm512_set1_epi8(-2));
        let mut acc = [black_box(_mm512_setzero_si512()); 12];
        for _ in 0..iters {
            for s in acc.iter_mut() {
                *s = _mm512_dpbusd_epi32(*s, a, b);
            }
        }
        let sum = acc
            .iter()
            .fold(_mm512_setzero_si512(), |s, &v| _mm512_add_epi32(s, v));
        _mm512_reduce_add_epi32(sum) as f32
    }

    /// Twelve independent 256-bit FMA chains.
    #[target_feature(enable = "avx2,fma")]
    pub fn fma_avx2(iters: u64) -> f32 {
        let m = black_box(_mm256_set1_ps(MUL));
        let c = black_box(_mm256_set1_ps(ADD));
        let mut acc = [black_box(_mm256_set1_ps(1.0)); 12];
        for _ in 0..iters {
            for a in acc.iter_mut() {
                *a = _mm256_fmadd_ps(*a, m, c);
            }
        }
        let sum = acc
            .iter()
            .fold(_mm256_setzero_ps(), |s, &a| _mm256_add_ps(s, a));
        let s4 = _mm_add_ps(_mm256_castps256_ps128(sum), _mm256_extractf128_ps::<1>(sum));
        let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
        _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps::<1>(s2, s2)))
    }
}

/// Runs `iters` iterations on each of `threads` threads at once; returns
/// the wall time from the first thread's start to the last one's end (each
/// thread times itself, so a late-waking coordinator cannot shorten it).
pub fn measure(isa: Isa, threads: usize, iters: u64) -> Duration {
    let barrier = Barrier::new(threads.max(1));
    let times: Vec<(Instant, Instant)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads.max(1))
            .map(|_| {
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    let start = Instant::now();
                    black_box(isa.run(iters));
                    (start, Instant::now())
                })
            })
            .collect();
        handles.into_iter().filter_map(|h| h.join().ok()).collect()
    });
    let start = times.iter().map(|t| t.0).min();
    let end = times.iter().map(|t| t.1).max();
    match (start, end) {
        (Some(s), Some(e)) => e.saturating_duration_since(s),
        _ => Duration::ZERO,
    }
}

/// Case name of the 8-bit integer peak.
pub const INT8_CASE: &str = "avx512 vnni int8";

/// The FMA suite.
pub struct PeakFma;

impl Suite for PeakFma {
    fn name(&self) -> &'static str {
        "fma"
    }

    fn run(&self, opts: &BenchOptions, _prior: &[Row]) -> Result<Vec<Row>> {
        let target = if opts.quick { QUICK_TARGET } else { TARGET };
        let mut rows = Vec::new();
        for isa in Isa::available() {
            let probe = measure(isa, 1, CALIBRATION_ITERS).as_secs_f64().max(1e-6);
            let iters = ((target.as_secs_f64() / probe) * CALIBRATION_ITERS as f64) as u64;
            let iters = iters.max(CALIBRATION_ITERS);
            for threads in opts.thread_counts()? {
                let best = (0..REPS)
                    .map(|_| measure(isa, threads, iters))
                    .min()
                    .unwrap_or_default();
                let flops = (isa.flops_per_iter() * iters * threads as u64) as f64;
                let gflops = flops / best.as_secs_f64().max(1e-9) / 1e9;
                let (kind, unit) = match isa {
                    Isa::Avx512Vnni => ("int8 x int8 -> int32", "GOP/s"),
                    _ => ("f32", "GFLOP/s"),
                };
                let note = format!("{kind}, {iters} iterations per thread, best of {REPS}");
                rows.push(Row::new(
                    self.name(),
                    isa.name(),
                    Some(threads),
                    gflops,
                    unit,
                    note,
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
    fn every_isa_computes_the_same() {
        let want = portable(1000);
        for isa in Isa::available() {
            if isa == Isa::Avx512Vnni {
                // 12 chains x 16 lanes x 1000 steps of 4 x (3 x -2).
                assert_eq!(isa.run(1000), (12 * 16 * 1000 * 4 * -6) as f32);
                continue;
            }
            let got = isa.run(1000);
            let lanes = (isa.flops_per_iter() / 2) as f32;
            // Each lane converges the same way; compare the per-lane mean.
            assert!(
                (got / lanes - want / 8.0).abs() < 1e-4,
                "{isa:?}: {got} vs {want}"
            );
        }
        assert!(measure(Isa::Portable, 2, 1000) > Duration::ZERO);
    }
}
