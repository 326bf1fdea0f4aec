//! The backend conformance suite: every op on random inputs of odd shapes,
//! contiguous and through permuted / strided views, computed by a device and
//! by the scalar [`reference`](crate::reference) executor, and compared.
//!
//! ```ignore
//! let report = ggml_core::conformance::run(&device);
//! report.assert_ok(); // panics naming op, shapes, types and error
//! ```
//!
//! Each case builds its graph twice, once placed in buffers of the device's
//! buffer type and once in host buffers for the reference; inputs get the
//! same bytes on both sides, and the memory of every result starts as NaN
//! bytes, so an element a backend forgets to write fails the case.
//!
//! # Tolerances
//!
//! | check | used for | passes when |
//! |---|---|---|
//! | exact | copies and conversions between F32/F16/BF16/I32, GET_ROWS, SET_ROWS to float types, ADD, MUL, SCALE, NEG, RELU, ARGMAX, CONCAT, quantizing copies with the reference quantizers | every element equal (NaN equals NaN) |
//! | close(atol, rtol) | SILU and SWIGLU (atol 1e-6, rtol 1e-5: exp approximations), GELU and GEGLU (1e-4, 2e-3: ggml's CPU looks GELU up in an f16 table, a GPU may evaluate it in f32), RMS_NORM and NORM (1e-6, 1e-5), SOFT_MAX (1e-6, 1e-5), ROPE (1e-4, 1e-4: sin/cos of angles up to ~50 rad), SSM_CONV (1e-6, 1e-5), SSM_SCAN (1e-5, 1e-4: exp and softplus per step, states carried over many tokens); F16 results add 1e-3 to rtol | `abs(x - ref) <= atol + rtol * abs(ref)` for every element |
//! | nmse(limit) | MUL_MAT: F32 1e-10, F16 1e-6, BF16 5e-5, quantized weights 5e-4 (the activations are quantized to Q8_0/Q8_1/Q8_K first, as in ggml; llama.cpp's test-backend-ops uses the same 5e-4); FLASH_ATTN_EXT 5e-4 (F16 keys and values, Q rounded to F16); copies into Q8_0 1e-5 (backends may round activations half to even where the reference quantizer rounds half away from zero) | `sum((x - ref)^2) / sum(ref^2) <= limit` |
//!
//! The reference computes MUL_MAT and FLASH_ATTN_EXT exactly (f64 sums over
//! the dequantized weights and f32 activations), so the NMSE limits measure
//! a backend's own rounding, not a disagreement about semantics.

use std::fmt;
use std::sync::Arc;

use crate::backend::{Buffer, BufferType, Device, Placement};
use crate::graph::{Graph, TensorId};
use crate::host::{HostBufferType, HOST_ALIGNMENT};
use crate::{quants, reference, Result, Type};

mod cases;
mod delta_net_cases;
mod moe_cases;
mod oai_cases;
mod rwkv_cases;
mod ssm_cases;

pub use cases::{cases, covered_ops, mul_mat_check, quantizing_copy_check};

/// How a case's result is compared with the reference.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Check {
    /// Every element equal.
    Exact,
    /// `abs(x - ref) <= atol + rtol * abs(ref)` everywhere.
    Close {
        /// Absolute tolerance.
        atol: f32,
        /// Relative tolerance.
        rtol: f32,
    },
    /// Normalized mean squared error at most this.
    Nmse(f64),
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Check::Exact => write!(f, "exact"),
            Check::Close { atol, rtol } => write!(f, "atol {atol:e} rtol {rtol:e}"),
            Check::Nmse(l) => write!(f, "nmse <= {l:e}"),
        }
    }
}

/// How an input tensor is filled.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fill {
    /// Uniform values in `[lo, hi)` (quantized types are quantized from them).
    Uniform(f32, f32),
    /// Integers uniform in `0..n` (I32 / I64).
    Index(usize),
    /// Each row of `ne0` indices is a random selection of distinct values in
    /// `0..n` (I32 / I64), for SET_ROWS.
    Distinct(usize),
    /// An attention mask: uniform in [-1, 1) with about a quarter of the
    /// entries -inf, never a whole row.
    Mask,
    /// Floats from `n` levels `k / n`, k uniform in `0..n`: many ties.
    Levels(usize),
    /// A causal attention mask: row `i` sees columns `0..=i` (uniform in
    /// [-1, 1)), the others are -inf; whole blocks of columns are hidden
    /// from whole blocks of rows.
    Causal,
}

/// The graph of a case under construction: leaves it creates are
/// registered as inputs with their fill.
pub struct CaseGraph<'g> {
    /// The graph.
    pub g: &'g mut Graph,
    inputs: Vec<(TensorId, Fill)>,
}

impl CaseGraph<'_> {
    /// A new input leaf.
    pub fn input(&mut self, name: &str, ty: Type, ne: &[usize], fill: Fill) -> TensorId {
        let id = self.g.new_tensor(name, ty, ne);
        self.inputs.push((id, fill));
        id
    }

    /// A uniform [-1, 1) input.
    pub fn rand(&mut self, name: &str, ty: Type, ne: &[usize]) -> TensorId {
        self.input(name, ty, ne, Fill::Uniform(-1.0, 1.0))
    }

    /// An input of shape `ne` seen through a view with axes permuted by
    /// `axes` (the leaf is created with the inverse shape).
    pub fn permuted(
        &mut self,
        name: &str,
        ty: Type,
        ne: &[usize],
        axes: [usize; 4],
    ) -> Result<TensorId> {
        let ne4 = crate::tensor::pad_ne(ne);
        let mut leaf = [1; 4];
        for i in 0..4 {
            leaf[i] = ne4[axes[i]];
        }
        let t = self.rand(name, ty, &leaf);
        self.g.permute(t, axes)
    }
}

type BuildFn = dyn Fn(&mut CaseGraph<'_>) -> Result<TensorId> + Send + Sync;

/// One conformance case.
pub struct Case {
    /// Description: op, types, shapes, layout.
    pub name: String,
    /// Comparison.
    pub check: Check,
    build: Box<BuildFn>,
}

impl fmt::Debug for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Case({}, {})", self.name, self.check)
    }
}

impl Case {
    /// A case from its name, check and graph builder (which returns the
    /// tensor to compare).
    pub fn new(
        name: impl Into<String>,
        check: Check,
        build: impl Fn(&mut CaseGraph<'_>) -> Result<TensorId> + Send + Sync + 'static,
    ) -> Case {
        Case {
            name: name.into(),
            check,
            build: Box::new(build),
        }
    }

    /// MUL_MAT of random `ta` weights of shape `a` times random `tb`
    /// activations of shape `b`, checked as [`mul_mat_check`] of `ta`
    /// says; named `MUL_MAT {ta} [a] x {tb} [b]`.
    pub fn mul_mat(ta: Type, a: &[usize], tb: Type, b: &[usize]) -> Case {
        let dims = |ne: &[usize]| {
            let v: Vec<String> = ne.iter().map(|n| n.to_string()).collect();
            format!("[{}]", v.join(","))
        };
        let name = format!("MUL_MAT {ta} {} x {tb} {}", dims(a), dims(b));
        let (a, b) = (a.to_vec(), b.to_vec());
        Case::new(name, mul_mat_check(ta), move |c| {
            let x = c.rand("a", ta, &a);
            let y = c.rand("b", tb, &b);
            c.g.mul_mat(x, y)
        })
    }

    /// CPY of a random `from` tensor of shape `ne` into a random `to`
    /// tensor of the same shape (a conversion, quantization or
    /// dequantization), compared by `check`.
    pub fn copy(name: impl Into<String>, check: Check, from: Type, to: Type, ne: &[usize]) -> Case {
        let ne = ne.to_vec();
        Case::new(name, check, move |c| {
            let x = c.rand("x", from, &ne);
            let d = c.rand("dst", to, &ne);
            c.g.cpy(x, d)?;
            Ok(d)
        })
    }

    /// SET_ROWS of a random F32 `src` [ne0, n, ne2] into a random `to`
    /// tensor of `into_rows` rows, by `n` distinct ids of type `idx` per
    /// batch; checked as [`quantizing_copy_check`] of `to` says.
    pub fn set_rows(to: Type, idx: Type, src: [usize; 3], into_rows: usize) -> Case {
        let [ne0, n, ne2] = src;
        let name =
            format!("SET_ROWS F32 [{ne0},{n},{ne2}] into {to} [{ne0},{into_rows},{ne2}] by {idx} [{n},{ne2}]");
        Case::new(name, quantizing_copy_check(to), move |c| {
            let dst = c.rand("dst", to, &[ne0, into_rows, ne2]);
            let src = c.rand("src", Type::F32, &[ne0, n, ne2]);
            let ids = c.input("idx", idx, &[n, ne2], Fill::Distinct(into_rows));
            c.g.set_rows(dst, src, ids)?;
            Ok(dst)
        })
    }
}

/// What happened to one case.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Within tolerance; the measured error (max abs error or NMSE).
    Passed(f64),
    /// Outside tolerance.
    Failed {
        /// Measured error.
        err: f64,
        /// Where and what.
        detail: String,
    },
    /// The device does not support a node of the case.
    Skipped(String),
    /// Building, allocating or computing failed.
    Error(String),
}

/// The result of one case.
#[derive(Clone, Debug)]
pub struct CaseResult {
    /// The case's description.
    pub name: String,
    /// The comparison used.
    pub check: Check,
    /// What happened.
    pub outcome: Outcome,
}

/// The results of a suite run on one device.
#[derive(Clone, Debug)]
pub struct Report {
    /// The device's name.
    pub device: String,
    /// One entry per case, in order.
    pub results: Vec<CaseResult>,
}

impl Report {
    /// Cases that passed.
    pub fn passed(&self) -> usize {
        self.results
            .iter()
            .filter(|r| matches!(r.outcome, Outcome::Passed(_)))
            .count()
    }

    /// Cases that failed or errored.
    pub fn failures(&self) -> Vec<&CaseResult> {
        self.results
            .iter()
            .filter(|r| matches!(r.outcome, Outcome::Failed { .. } | Outcome::Error(_)))
            .collect()
    }

    /// Cases the device skipped.
    pub fn skipped(&self) -> Vec<&CaseResult> {
        self.results
            .iter()
            .filter(|r| matches!(r.outcome, Outcome::Skipped(_)))
            .collect()
    }

    /// Panics with every failure (op, shapes, types, error) when any case
    /// failed or errored.
    pub fn assert_ok(&self) {
        let f = self.failures();
        if !f.is_empty() {
            let lines: Vec<String> = f.iter().map(|r| format!("  {}", line(r))).collect();
            panic!(
                "{}: {} of {} conformance cases failed:\n{}",
                self.device,
                f.len(),
                self.results.len(),
                lines.join("\n")
            );
        }
    }
}

fn line(r: &CaseResult) -> String {
    match &r.outcome {
        Outcome::Passed(e) => format!("ok      {}: err {e:.3e} ({})", r.name, r.check),
        Outcome::Failed { err, detail } => {
            format!("FAILED  {}: err {err:.3e}, {} ({detail})", r.name, r.check)
        }
        Outcome::Skipped(why) => format!("skipped {}: {why}", r.name),
        Outcome::Error(e) => format!("ERROR   {}: {e}", r.name),
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{}: {} passed, {} failed, {} skipped",
            self.device,
            self.passed(),
            self.failures().len(),
            self.skipped().len()
        )?;
        for r in &self.results {
            writeln!(f, "  {}", line(r))?;
        }
        Ok(())
    }
}

/// Runs every case of [`cases`] on `device`.
pub fn run(device: &Arc<dyn Device>) -> Report {
    run_cases(device, &cases())
}

/// Runs the cases whose name contains `filter`.
pub fn run_filtered(device: &Arc<dyn Device>, filter: &str) -> Report {
    let all: Vec<Case> = cases()
        .into_iter()
        .filter(|c| c.name.contains(filter))
        .collect();
    run_cases(device, &all)
}

/// Runs the given cases on `device`.
pub fn run_cases(device: &Arc<dyn Device>, cases: &[Case]) -> Report {
    let results = cases
        .iter()
        .enumerate()
        .map(|(i, c)| CaseResult {
            name: c.name.clone(),
            check: c.check,
            outcome: run_case(device, c, 0x5eed_0000 + i as u64),
        })
        .collect();
    Report {
        device: device.name().to_string(),
        results,
    }
}

// ------------------------------------------------------------ running

/// SplitMix64: a tiny deterministic generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        let u = (self.next() >> 40) as f32 / (1u64 << 24) as f32;
        lo + (hi - lo) * u
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// A case's graph with its inputs and the tensor to compare.
struct Built {
    graph: Graph,
    inputs: Vec<(TensorId, Fill)>,
    out: TensorId,
}

fn build(case: &Case) -> Result<Built> {
    let mut g = Graph::new();
    let mut cg = CaseGraph {
        g: &mut g,
        inputs: Vec::new(),
    };
    let out = (case.build)(&mut cg)?;
    let inputs = cg.inputs;
    Ok(Built {
        graph: g,
        inputs,
        out,
    })
}

/// Gives every leaf and every computed node that is not a view its own
/// place in one buffer of `buft`, filled with NaN bytes.
fn place(g: &mut Graph, buft: &dyn BufferType) -> Result<Arc<dyn Buffer>> {
    let align = buft.alignment().max(1);
    let mut at = Vec::new();
    let mut total = 0usize;
    for id in g.ids() {
        let n = g.node(id);
        if n.view.is_some() || n.op.is_view() {
            continue;
        }
        total = total.div_ceil(align) * align;
        at.push((id, total));
        total += buft.alloc_size(&n.desc).max(1);
    }
    let buf = buft.alloc_buffer(total.max(1))?;
    buf.clear(0xff)?;
    for (id, offset) in at {
        g.node_mut(id).at = Some(Placement {
            buffer: buf.clone(),
            offset,
        });
    }
    Ok(buf)
}

/// The bytes of an input tensor (contiguous) for a fill.
fn input_bytes(g: &Graph, id: TensorId, fill: Fill, rng: &mut Rng) -> Result<Vec<u8>> {
    let d = g.desc(id);
    let n = d.n_elements();
    let ints = |v: Vec<i64>| -> Vec<u8> {
        if d.ty == Type::I64 {
            v.iter().flat_map(|x| x.to_le_bytes()).collect()
        } else {
            v.iter().flat_map(|&x| (x as i32).to_le_bytes()).collect()
        }
    };
    let float = |v: Vec<f32>| -> Result<Vec<u8>> {
        let mut out = vec![0u8; d.nbytes()];
        quants::quantize_row(d.ty, &v, &mut out)?;
        Ok(out)
    };
    match fill {
        Fill::Index(m) => Ok(ints((0..n).map(|_| rng.below(m) as i64).collect())),
        Fill::Distinct(m) => {
            let mut v = Vec::with_capacity(n);
            for _ in 0..n / d.ne[0].max(1) {
                let mut pool: Vec<i64> = (0..m as i64).collect();
                for _ in 0..d.ne[0] {
                    let k = rng.below(pool.len());
                    v.push(pool.swap_remove(k));
                }
            }
            Ok(ints(v))
        }
        Fill::Uniform(..) | Fill::Mask | Fill::Levels(_)
            if d.ty == Type::I32 || d.ty == Type::I64 =>
        {
            Ok(ints((0..n).map(|_| rng.below(8) as i64).collect()))
        }
        Fill::Levels(m) => float(
            (0..n)
                .map(|_| rng.below(m) as f32 / m.max(1) as f32)
                .collect(),
        ),
        Fill::Uniform(lo, hi) => float((0..n).map(|_| rng.uniform(lo, hi)).collect()),
        Fill::Causal | Fill::Mask => {
            // -inf where a causal mask hides a later position, or at random
            // (never in the first column, so that no row is all -inf).
            let n0 = d.ne[0];
            let causal = matches!(fill, Fill::Causal);
            let v: Vec<f32> = (0..n)
                .map(|i| {
                    let hidden = if causal {
                        i % n0 > (i / n0) % d.ne[1]
                    } else {
                        i % n0 != 0 && rng.below(4) == 0
                    };
                    if hidden {
                        f32::NEG_INFINITY
                    } else {
                        rng.uniform(-1.0, 1.0)
                    }
                })
                .collect();
            float(v)
        }
    }
}

fn run_case(device: &Arc<dyn Device>, case: &Case, seed: u64) -> Outcome {
    match try_run_case(device, case, seed) {
        Ok(o) => o,
        Err(e) => Outcome::Error(e.to_string()),
    }
}

fn try_run_case(device: &Arc<dyn Device>, case: &Case, seed: u64) -> Result<Outcome> {
    let Built {
        graph: mut gd,
        inputs,
        out,
    } = build(case)?;
    let mut gr = build(case)?.graph;
    let ids: Vec<TensorId> = gd.compute_ids().collect();
    for &id in &ids {
        if !device.supports_op(&gd, id) {
            return Ok(Outcome::Skipped(format!(
                "{} '{}' not supported",
                gd.node(id).op.name(),
                gd.desc(id).name
            )));
        }
    }
    let _dbuf = place(&mut gd, device.buffer_type().as_ref())?;
    let host = HostBufferType::new("reference", HOST_ALIGNMENT, usize::MAX);
    let _rbuf = place(&mut gr, host.as_ref())?;
    let mut rng = Rng(seed);
    for &(id, fill) in &inputs {
        let bytes = input_bytes(&gd, id, fill, &mut rng)?;
        for g in [&gd, &gr] {
            let at = g.placement_or_err(id)?;
            at.buffer.set_tensor(at.offset, &bytes)?;
        }
    }
    let mut backend = device.init_backend()?;
    backend.graph_compute(&gd, &ids)?;
    backend.synchronize()?;
    reference::compute(&gr, &ids)?;
    let got = reference::read_f32(&gd, out)?;
    let want = reference::read_f32(&gr, out)?;
    Ok(compare(&got, &want, case.check, &gd.desc(out).ne))
}

fn index_of(k: usize, ne: &[usize; 4]) -> [usize; 4] {
    let mut i = [0; 4];
    let mut k = k;
    for (d, &n) in i.iter_mut().zip(ne) {
        *d = k % n.max(1);
        k /= n.max(1);
    }
    i
}

fn compare(got: &[f32], want: &[f32], check: Check, ne: &[usize; 4]) -> Outcome {
    if got.len() != want.len() {
        return Outcome::Error(format!("{} elements, expected {}", got.len(), want.len()));
    }
    match check {
        Check::Exact | Check::Close { .. } => {
            let (atol, rtol) = match check {
                Check::Close { atol, rtol } => (atol, rtol),
                _ => (0.0, 0.0),
            };
            let mut worst = 0f64;
            for (k, (&g, &w)) in got.iter().zip(want).enumerate() {
                if g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()) || g == w {
                    continue;
                }
                let diff = (g - w).abs();
                let ok = diff.is_finite() && diff <= atol + rtol * w.abs();
                if !ok {
                    return Outcome::Failed {
                        err: f64::from(diff),
                        detail: format!("at {:?}: got {g:e}, expected {w:e}", index_of(k, ne)),
                    };
                }
                worst = worst.max(f64::from(diff));
            }
            Outcome::Passed(worst)
        }
        Check::Nmse(limit) => {
            let (mut num, mut den) = (0f64, 0f64);
            for (&g, &w) in got.iter().zip(want) {
                if !g.is_finite() || !w.is_finite() {
                    if g.to_bits() == w.to_bits() {
                        continue;
                    }
                    return Outcome::Failed {
                        err: f64::INFINITY,
                        detail: format!("non-finite value: got {g:e}, expected {w:e}"),
                    };
                }
                num += (f64::from(g) - f64::from(w)).powi(2);
                den += f64::from(w).powi(2);
            }
            let nmse = if den > 0.0 { num / den } else { num };
            if nmse <= limit {
                Outcome::Passed(nmse)
            } else {
                Outcome::Failed {
                    err: nmse,
                    detail: format!("nmse over {} elements", got.len()),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Backend;
    use crate::graph::Graph;
    use crate::{DeviceCaps, DeviceKind, DeviceProps};

    /// A device that computes with the reference executor, or (`lazy`)
    /// computes nothing at all.
    struct RefDevice {
        buft: Arc<HostBufferType>,
        lazy: bool,
    }

    struct RefBackend {
        lazy: bool,
    }

    impl Device for RefDevice {
        fn name(&self) -> &str {
            if self.lazy {
                "LAZY"
            } else {
                "REF"
            }
        }
        fn description(&self) -> String {
            "reference executor".into()
        }
        fn props(&self) -> DeviceProps {
            DeviceProps {
                name: self.name().into(),
                description: self.description(),
                kind: DeviceKind::Accel,
                memory_free: 0,
                memory_total: 0,
                caps: DeviceCaps::default(),
            }
        }
        fn buffer_type(&self) -> Arc<dyn BufferType> {
            self.buft.clone()
        }
        fn supports_op(&self, _graph: &Graph, _node: TensorId) -> bool {
            true
        }
        fn supports_buft(&self, buft: &dyn BufferType) -> bool {
            buft.is_host()
        }
        fn init_backend(&self) -> Result<Box<dyn Backend>> {
            Ok(Box::new(RefBackend { lazy: self.lazy }))
        }
    }

    impl Backend for RefBackend {
        fn name(&self) -> &str {
            "REF"
        }
        fn device(&self) -> Arc<dyn Device> {
            device(self.lazy)
        }
        fn graph_compute(&mut self, graph: &Graph, nodes: &[TensorId]) -> Result<()> {
            if self.lazy {
                return Ok(());
            }
            reference::compute(graph, nodes)
        }
    }

    fn device(lazy: bool) -> Arc<dyn Device> {
        Arc::new(RefDevice {
            buft: HostBufferType::new("REF", HOST_ALIGNMENT, usize::MAX),
            lazy,
        })
    }

    #[test]
    fn the_reference_passes_its_own_suite() {
        let report = run(&device(false));
        report.assert_ok();
        assert!(report.skipped().is_empty());
        assert_eq!(report.passed(), cases().len());
    }

    #[test]
    fn a_backend_that_computes_nothing_fails_every_case() {
        let report = run(&device(true));
        let failed = report.failures().len();
        assert_eq!(failed, report.results.len(), "{report}");
        let msg = std::panic::catch_unwind(|| report.assert_ok())
            .expect_err("assert_ok must panic")
            .downcast::<String>()
            .expect("a formatted message");
        assert!(
            msg.contains("LAZY") && msg.contains("MUL_MAT Q4_K") && msg.contains("FAILED"),
            "{msg}"
        );
    }

    #[test]
    fn comparisons() {
        let ne = [3, 1, 1, 1];
        assert!(matches!(
            compare(&[1.0, 2.0, 3.0], &[1.0, 2.0, 3.0], Check::Exact, &ne),
            Outcome::Passed(_)
        ));
        assert!(matches!(
            compare(&[1.0, 2.0, 3.5], &[1.0, 2.0, 3.0], Check::Exact, &ne),
            Outcome::Failed { .. }
        ));
        let close = Check::Close {
            atol: 0.1,
            rtol: 0.0,
        };
        assert!(matches!(
            compare(&[1.05, 2.0, 3.0], &[1.0, 2.0, 3.0], close, &ne),
            Outcome::Passed(_)
        ));
        assert!(matches!(
            compare(&[f32::NAN, 2.0, 3.0], &[1.0, 2.0, 3.0], close, &ne),
            Outcome::Failed { .. }
        ));
        assert!(matches!(
            compare(&[1.0, 2.0, 3.0], &[1.0, 2.0, 3.01], Check::Nmse(1e-4), &ne),
            Outcome::Passed(_)
        ));
        assert!(matches!(
            compare(&[1.0, 2.0, 4.0], &[1.0, 2.0, 3.0], Check::Nmse(1e-4), &ne),
            Outcome::Failed { .. }
        ));
    }
}
