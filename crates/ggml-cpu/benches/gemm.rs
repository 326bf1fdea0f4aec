//! Throughput of the panel matrix x matrix kernels alone (no backend, no
//! threads): what the MUL_MAT of 16 columns or more runs per panel. Needs
//! AVX2 or AVX-512 (no panel kernel is installed below; the bench then says
//! so and measures nothing).
//!
//! * `run`: one panel of 16 weight rows against 8 prepared columns, hot in
//!   the cache; elements are multiply-adds (16 x 8 x n per call).
//! * `tile`: the panels of 192 KiB of weights (a whole pair of panels for
//!   a kernel that takes two at a time) against 512 columns, 8 at a time
//!   (6 against a pair), from cache-aligned buffers, as a thread's share
//!   of a prompt is walked; elements as above.
//! * `pack`: packing 16 rows into a panel; bytes are the rows' bytes.
//! * `pack_from_memory`: packing a 2048 x 16384 matrix, larger than the
//!   caches; bytes are the matrix's.
//! * `q4k_ceiling`: only the `VPDPBUSD`s of the Q4_K kernel (same loads
//!   and broadcasts, no unpacking, scales or mins), with the activation
//!   broadcasts in memory operands or hoisted into registers: how far the
//!   Q4_K kernel is from the bare instruction throughput (AVX-512 VNNI).
//!
//! `GGML_BENCH_TYPES=q4_k,f16,...` limits the weight types.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ggml_core::{quants, Type};
use ggml_cpu::bench_support::{
    aligned_mut, panel_kernels, vec_dot_type, PanelKernel, GEMM_COLS, PAIR_COLS, PANEL_ROWS,
};
use test_support::Rng;

/// Row lengths the `run` and `pack` cases take (the first three for
/// float types, which were tuned across them; one for the others).
const LENGTHS: [usize; 3] = [2048, 64, 5632];

fn quantize(ty: Type, v: &[f32]) -> Vec<u8> {
    let mut out = vec![0u8; quants::row_size(ty, v.len()).expect("row size")];
    quants::quantize_row(ty, v, &mut out).expect("quantize");
    out
}

fn selected() -> Vec<(String, Type, PanelKernel)> {
    let wanted: Option<Vec<Type>> = std::env::var("GGML_BENCH_TYPES").ok().map(|list| {
        list.split(',')
            .filter_map(|s| Type::from_name(&s.trim().to_uppercase()))
            .collect()
    });
    let all = panel_kernels();
    if all.is_empty() {
        static SAID: std::sync::Once = std::sync::Once::new();
        SAID.call_once(|| {
            eprintln!("gemm: no panel kernel on this CPU (AVX-512 needed); nothing to measure")
        });
    }
    all.into_iter()
        .filter(|(_, ty, _)| wanted.as_ref().is_none_or(|w| w.contains(ty)))
        .collect()
}

fn lengths(ty: Type) -> &'static [usize] {
    if ty.block_size() == 1 {
        &LENGTHS
    } else {
        &LENGTHS[..1]
    }
}

/// A packed panel of random rows and `ncols` prepared random columns.
struct Case {
    rows: Vec<Vec<u8>>,
    panel: Vec<u8>,
    cols: Vec<Vec<u8>>,
}

impl Case {
    fn new(k: &PanelKernel, ty: Type, n: usize, ncols: usize) -> Case {
        let mut rng = Rng(12345);
        let vt = vec_dot_type(ty).expect("partner type");
        let rows: Vec<Vec<u8>> = (0..PANEL_ROWS).map(|_| quantize(ty, &rng.vec(n))).collect();
        let refs: Vec<&[u8]> = rows.iter().map(|v| &v[..]).collect();
        let mut panel = vec![0u8; k.panel_bytes(n)];
        k.pack(n, &refs, &mut panel);
        let cols = (0..ncols)
            .map(|_| {
                let y = quantize(vt, &rng.vec(n));
                let mut p = vec![0u8; k.act_bytes(n)];
                k.prep(n, &y, &mut p);
                p
            })
            .collect();
        Case { rows, panel, cols }
    }
}

fn bench_run(c: &mut Criterion) {
    let mut g = c.benchmark_group("gemm/run");
    for (name, ty, k) in selected() {
        for &n in lengths(ty) {
            let case = Case::new(&k, ty, n, GEMM_COLS);
            let cols: Vec<&[u8]> = case.cols.iter().map(|v| &v[..]).collect();
            let mut out = vec![0f32; GEMM_COLS * PANEL_ROWS];
            g.throughput(Throughput::Elements((n * PANEL_ROWS * GEMM_COLS) as u64));
            g.bench_function(BenchmarkId::new(&name, n), |b| {
                b.iter(|| k.run(n, std::hint::black_box(&case.panel), &cols, &mut out))
            });
        }
    }
    g.finish();
}

fn bench_tile(c: &mut Criterion) {
    let mut g = c.benchmark_group("gemm/tile");
    let n = 2048;
    let ncols = 512;
    for (name, ty, k) in selected() {
        let case = Case::new(&k, ty, n, ncols);
        let pb = case.panel.len();
        let mut np = (192 * 1024 / pb).max(1);
        if k.has_pair() {
            np = np.next_multiple_of(2);
        }
        let mut pbuf = Vec::new();
        let panels = aligned_mut(&mut pbuf, np * pb);
        for p in panels.chunks_exact_mut(pb) {
            p.copy_from_slice(&case.panel);
        }
        let ab = k.act_bytes(n);
        let mut cbuf = Vec::new();
        let colbytes = aligned_mut(&mut cbuf, ncols * ab);
        for (dst, src) in colbytes.chunks_exact_mut(ab).zip(&case.cols) {
            dst.copy_from_slice(src);
        }
        let cols: Vec<&[u8]> = colbytes.chunks_exact(ab).collect();
        let group = if k.has_pair() { PAIR_COLS } else { GEMM_COLS };
        let mut out = vec![0f32; 2 * GEMM_COLS * PANEL_ROWS];
        g.throughput(Throughput::Elements((np * ncols * n * PANEL_ROWS) as u64));
        g.bench_function(BenchmarkId::new(&name, format!("{np}x{ncols}")), |b| {
            b.iter(|| {
                for cg in cols.chunks(group) {
                    let mut p = 0;
                    while p < np {
                        let panel = |i: usize| std::hint::black_box(&panels[i * pb..(i + 1) * pb]);
                        if k.has_pair() && p + 1 < np {
                            k.run_pair(n, panel(p), panel(p + 1), cg, &mut out);
                            p += 2;
                        } else {
                            k.run(n, panel(p), cg, &mut out);
                            p += 1;
                        }
                    }
                }
            })
        });
    }
    g.finish();
}

fn bench_pack(c: &mut Criterion) {
    let mut g = c.benchmark_group("gemm/pack");
    for (name, ty, k) in selected() {
        for &n in lengths(ty) {
            let case = Case::new(&k, ty, n, 0);
            let refs: Vec<&[u8]> = case.rows.iter().map(|v| &v[..]).collect();
            let mut panel = case.panel.clone();
            g.throughput(Throughput::Bytes(refs.iter().map(|r| r.len() as u64).sum()));
            g.bench_function(BenchmarkId::new(&name, n), |b| {
                b.iter(|| k.pack(n, std::hint::black_box(&refs), &mut panel))
            });
        }
    }
    g.finish();
}

fn bench_pack_from_memory(c: &mut Criterion) {
    let mut g = c.benchmark_group("gemm/pack_from_memory");
    g.sample_size(10);
    let (n, nrows) = (2048, 16384);
    for (name, ty, k) in selected() {
        if ty.block_size() != 1 {
            continue;
        }
        let rb = quants::row_size(ty, n).expect("row size");
        // Small integers: finite values of every float type.
        let m: Vec<u8> = (0..nrows * rb)
            .map(|i| (i * 7 % 251) as u8 & 0x3f)
            .collect();
        let mut panel = vec![0u8; k.panel_bytes(n)];
        g.throughput(Throughput::Bytes(m.len() as u64));
        g.bench_function(BenchmarkId::new(&name, format!("{n}x{nrows}")), |b| {
            b.iter(|| {
                for rows16 in m.chunks_exact(PANEL_ROWS * rb) {
                    let rows: Vec<&[u8]> = rows16.chunks_exact(rb).collect();
                    k.pack(n, &rows, &mut panel);
                    std::hint::black_box(&panel);
                }
            })
        });
    }
    g.finish();
}

#[cfg(target_arch = "x86_64")]
mod ceiling {
    use std::arch::x86_64::*;

    use ggml_cpu::bench_support::Q4K_PANEL_LAYOUT;

    /// The `VPDPBUSD`s of the Q4_K kernel over `nb` super-blocks of a
    /// panel and 8 columns; `REGS` hoists the activation broadcasts.
    ///
    /// # Safety
    /// AVX-512 VNNI; `panel` and every column hold `nb` super-blocks,
    /// `out` 8 x 16 values.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
    unsafe fn dpbusd_only<const REGS: bool>(
        nb: usize,
        panel: &[u8],
        cols: &[&[u8]],
        out: &mut [f32],
    ) {
        let (sb, qs, act_sb) = Q4K_PANEL_LAYOUT;
        let mut acc = [_mm512_setzero_si512(); 8];
        for ib in 0..nb {
            // SAFETY: super-block ib of the panel and of every column is
            // inside them (caller).
            unsafe {
                let p = panel.as_ptr().add(ib * sb);
                let y: [*const u8; 8] = std::array::from_fn(|c| cols[c].as_ptr().add(ib * act_sb));
                if REGS {
                    let bs: [__m512i; 8] = std::array::from_fn(|c| {
                        _mm512_set1_epi32((y[c] as *const i32).read_unaligned())
                    });
                    for v in 0..64 {
                        let w = _mm512_loadu_si512(p.add(qs + (v % 32) * 64) as *const __m512i);
                        for c in 0..8 {
                            acc[c] = _mm512_dpbusd_epi32(acc[c], w, bs[c]);
                        }
                    }
                } else {
                    for v in 0..64 {
                        let w = _mm512_loadu_si512(p.add(qs + (v % 32) * 64) as *const __m512i);
                        for c in 0..8 {
                            let b =
                                _mm512_set1_epi32((y[c].add(4 * v) as *const i32).read_unaligned());
                            acc[c] = _mm512_dpbusd_epi32(acc[c], w, b);
                        }
                    }
                }
            }
        }
        for (c, a) in acc.iter().enumerate() {
            // SAFETY: 8 x 16 results (caller).
            unsafe { _mm512_storeu_ps(out.as_mut_ptr().add(c * 16), _mm512_cvtepi32_ps(*a)) };
        }
    }

    /// Runs [`dpbusd_only`] on a Q4_K panel of `n`-element rows, when the
    /// CPU has AVX-512 VNNI (else `None`).
    pub fn run(regs: bool, n: usize, panel: &[u8], cols: &[&[u8]], out: &mut [f32]) -> Option<()> {
        let (sb, _, act_sb) = Q4K_PANEL_LAYOUT;
        let nb = n / 256;
        let fits = panel.len() >= nb * sb
            && cols.len() == 8
            && cols.iter().all(|c| c.len() >= nb * act_sb)
            && out.len() >= 8 * 16;
        if !fits || !is_x86_feature_detected!("avx512vnni") || !is_x86_feature_detected!("avx512bw")
        {
            return None;
        }
        // SAFETY: VNNI and BW detected just above; lengths checked.
        unsafe {
            if regs {
                dpbusd_only::<true>(nb, panel, cols, out)
            } else {
                dpbusd_only::<false>(nb, panel, cols, out)
            }
        }
        Some(())
    }
}

#[cfg(target_arch = "x86_64")]
fn bench_q4k_ceiling(c: &mut Criterion) {
    let Some((_, ty, k)) = panel_kernels()
        .into_iter()
        .find(|(_, ty, _)| *ty == Type::Q4_K)
    else {
        return;
    };
    let n = 2048;
    let case = Case::new(&k, ty, n, GEMM_COLS);
    let cols: Vec<&[u8]> = case.cols.iter().map(|v| &v[..]).collect();
    let mut out = vec![0f32; GEMM_COLS * PANEL_ROWS];
    if ceiling::run(false, n, &case.panel, &cols, &mut out).is_none() {
        return;
    }
    let mut g = c.benchmark_group("gemm/q4k_ceiling");
    g.throughput(Throughput::Elements((n * PANEL_ROWS * GEMM_COLS) as u64));
    for (label, regs) in [("dpbusd only", false), ("dpbusd only, registers", true)] {
        g.bench_function(BenchmarkId::new(label, n), |b| {
            b.iter(|| ceiling::run(regs, n, std::hint::black_box(&case.panel), &cols, &mut out))
        });
    }
    g.finish();
}

#[cfg(not(target_arch = "x86_64"))]
fn bench_q4k_ceiling(_: &mut Criterion) {}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    targets = bench_run, bench_tile, bench_pack, bench_pack_from_memory, bench_q4k_ceiling
}
criterion_main!(benches);
