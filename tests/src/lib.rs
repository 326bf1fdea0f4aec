//! Shared helpers for the end-to-end tests: finding the fixtures and the
//! devices, reading llama.cpp's expected outputs, decoding, comparing
//! logits, writing model files.

use std::path::{Path, PathBuf};

pub use test_support::fixtures;

pub mod fixture_check;

/// The parsed `expected/<name>.json`.
pub fn expected(fx: &Path, name: &str) -> serde_json::Value {
    let p = fx.join("expected").join(format!("{name}.json"));
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// A JSON array of integers as i32s.
pub fn ids(v: &serde_json::Value) -> Vec<i32> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|x| x.as_i64().unwrap_or_else(|| panic!("not an integer: {x}")) as i32)
        .collect()
}

/// Little-endian f32s of a file.
pub fn read_f32(path: &Path) -> Vec<f32> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

// ------------------------------------------------------------ devices

/// True when `REQUIRE_VULKAN=1`: Vulkan tests fail instead of skipping.
pub fn vulkan_required() -> bool {
    std::env::var("REQUIRE_VULKAN").is_ok_and(|v| v == "1")
}

/// The first Vulkan device, after registering the compiled-in backends.
/// `None` (after printing "skipped: no Vulkan device") when there is none,
/// unless `REQUIRE_VULKAN=1`, which turns absence into a failure.
///
/// Software drivers such as Mesa's lavapipe are only exposed with
/// `GGML_VK_ALLOW_CPU_DEVICES=1` in the environment (CI sets it); the tests
/// read the environment as given and never change it.
pub fn vulkan_device() -> Option<std::sync::Arc<dyn ggml_core::Device>> {
    llama::backend_init();
    let dev =
        ggml_core::registry::backend_by_name("Vulkan").and_then(|r| r.devices().into_iter().next());
    if dev.is_none() {
        assert!(
            !vulkan_required(),
            "REQUIRE_VULKAN=1 but there is no Vulkan device (software drivers need GGML_VK_ALLOW_CPU_DEVICES=1)"
        );
        eprintln!("skipped: no Vulkan device");
    }
    dev
}

/// Model parameters for the CPU alone: no GPU device at all, so that
/// op_offload cannot move large-batch ops to a GPU either.
pub fn cpu_params() -> llama::ModelParams {
    llama::ModelParams {
        devices: Some(Vec::new()),
        n_gpu_layers: 0,
        ..llama::ModelParams::default()
    }
}

/// The context of a comparison with llama.cpp's references: context,
/// batch and micro-batch of `n` tokens, 2 threads, and flash attention
/// off, as llama.cpp made the references.
pub fn reference_ctx(n: usize) -> llama::ContextParams {
    llama::ContextParams {
        n_ctx: n,
        n_batch: n,
        n_ubatch: n,
        n_threads: 2,
        n_threads_batch: 2,
        flash_attn_type: llama::context::FlashAttnType::Disabled,
        ..llama::ContextParams::default()
    }
}

/// The CPU device, after registering the compiled-in backends.
pub fn cpu_device() -> std::sync::Arc<dyn ggml_core::Device> {
    llama::backend_init();
    ggml_core::registry::device_by_kind(ggml_core::DeviceKind::Cpu).expect("a CPU device")
}

// ------------------------------------------------------------ numbers

/// Index of the largest value (the first one on ties), as greedy sampling picks.
pub use test_support::argmax;

/// Largest absolute difference between two equally long slices.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "lengths differ");
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max)
}

/// How far row-major logits `[rows][n_vocab]` are from a reference.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LogitDiff {
    /// Largest absolute difference.
    pub max: f32,
    /// Root mean square of the differences.
    pub rms: f32,
    /// Rows whose argmax agrees.
    pub agree: usize,
}

/// Compares row-major logits `[rows][n_vocab]` with `want`.
pub fn logit_diff(got: &[f32], want: &[f32], n_vocab: usize) -> LogitDiff {
    assert_eq!(got.len(), want.len(), "logits sizes differ");
    let agree = got
        .chunks_exact(n_vocab)
        .zip(want.chunks_exact(n_vocab))
        .filter(|(g, w)| argmax(g) == argmax(w))
        .count();
    let sq: f64 = got
        .iter()
        .zip(want)
        .map(|(a, b)| f64::from(a - b).powi(2))
        .sum();
    LogitDiff {
        max: max_abs_diff(got, want),
        rms: (sq / got.len().max(1) as f64).sqrt() as f32,
        agree,
    }
}

/// Compares row-major logits `[rows][n_vocab]`: the largest absolute
/// difference and the number of rows whose argmax agrees.
pub fn compare_logits(got: &[f32], want: &[f32], n_vocab: usize) -> (f32, usize) {
    let d = logit_diff(got, want, n_vocab);
    (d.max, d.agree)
}

/// Calls the macro `$tests` with one line per fixture model whose
/// teacher-forced logits llama.cpp recorded: `test_name: "expected json
/// name", "model file";`. A test file turns the lines into tests, so that
/// every backend checks the same list; [`logits_tests!`] makes one test a
/// line calling the file's own `check_logits(name, file)`:
///
/// ```ignore
/// use tests::logits_tests;
/// tests::logits_fixtures!(logits_tests);
/// ```
#[macro_export]
macro_rules! logits_fixtures {
    ($tests:ident) => {
        $tests! {
            logits_stories260k: "stories260K", "stories260K.gguf";
            logits_stories260k_f16: "stories260K-f16", "stories260K-f16.gguf";
            logits_stories260k_q4_k_m: "stories260K-q4_k_m", "stories260K-q4_k_m.gguf";
            logits_tiny_f32: "tiny-f32", "tiny-f32.gguf";
            logits_tiny_f16: "tiny-f16", "tiny-f16.gguf";
            logits_tiny_bf16: "tiny-bf16", "tiny-bf16.gguf";
            logits_tiny_q8_0: "tiny-q8_0", "tiny-q8_0.gguf";
            logits_tiny_q8_0_split: "tiny-q8_0-split", "tiny-q8_0-split-00001-of-00003.gguf";
            logits_tiny_q6_k: "tiny-q6_k", "tiny-q6_k.gguf";
            logits_tiny_q5_k_m: "tiny-q5_k_m", "tiny-q5_k_m.gguf";
            logits_tiny_q5_1: "tiny-q5_1", "tiny-q5_1.gguf";
            logits_tiny_q5_0: "tiny-q5_0", "tiny-q5_0.gguf";
            logits_tiny_q4_k_m: "tiny-q4_k_m", "tiny-q4_k_m.gguf";
            logits_tiny_q4_1: "tiny-q4_1", "tiny-q4_1.gguf";
            logits_tiny_q4_0: "tiny-q4_0", "tiny-q4_0.gguf";
            logits_tiny_iq4_nl: "tiny-iq4_nl", "tiny-iq4_nl.gguf";
            logits_tiny_q3_k_m: "tiny-q3_k_m", "tiny-q3_k_m.gguf";
            logits_tiny_q2_k: "tiny-q2_k", "tiny-q2_k.gguf";
        }
    };
}

/// One test a line of [`logits_fixtures!`], calling `check_logits(name,
/// file)` as the invoking file defines it.
#[macro_export]
macro_rules! logits_tests {
    ($($test:ident: $name:expr, $file:expr;)*) => {$(
        #[test]
        fn $test() {
            check_logits($name, $file);
        }
    )*};
}

/// One test a line of [`ppl_fixtures!`], calling `check_perplexity(name,
/// file, ppl_tolerance(name))` as the invoking file defines them.
#[macro_export]
macro_rules! ppl_tests {
    ($($test:ident: $name:expr, $file:expr;)*) => {$(
        #[test]
        fn $test() {
            check_perplexity($name, $file, ppl_tolerance($name));
        }
    )*};
}

/// Like [`logits_fixtures!`], for the fixture models whose perplexity over
/// `texts/story.txt` llama.cpp recorded: `test_name: "expected json name",
/// "model file";`.
#[macro_export]
macro_rules! ppl_fixtures {
    ($tests:ident) => {
        $tests! {
            ppl_stories260k: "stories260K", "stories260K.gguf";
            ppl_stories260k_f16: "stories260K-f16", "stories260K-f16.gguf";
            ppl_stories260k_q4_k_m: "stories260K-q4_k_m", "stories260K-q4_k_m.gguf";
            ppl_tiny_f32: "tiny-f32", "tiny-f32.gguf";
            ppl_tiny_f16: "tiny-f16", "tiny-f16.gguf";
            ppl_tiny_bf16: "tiny-bf16", "tiny-bf16.gguf";
            ppl_tiny_q8_0: "tiny-q8_0", "tiny-q8_0.gguf";
            ppl_tiny_q6_k: "tiny-q6_k", "tiny-q6_k.gguf";
            ppl_tiny_q5_k_m: "tiny-q5_k_m", "tiny-q5_k_m.gguf";
            ppl_tiny_q5_1: "tiny-q5_1", "tiny-q5_1.gguf";
            ppl_tiny_q5_0: "tiny-q5_0", "tiny-q5_0.gguf";
            ppl_tiny_q4_k_m: "tiny-q4_k_m", "tiny-q4_k_m.gguf";
            ppl_tiny_q4_1: "tiny-q4_1", "tiny-q4_1.gguf";
            ppl_tiny_q4_0: "tiny-q4_0", "tiny-q4_0.gguf";
            ppl_tiny_iq4_nl: "tiny-iq4_nl", "tiny-iq4_nl.gguf";
            ppl_tiny_q3_k_m: "tiny-q3_k_m", "tiny-q3_k_m.gguf";
            ppl_tiny_q2_k: "tiny-q2_k", "tiny-q2_k.gguf";
        }
    };
}

// ------------------------------------------------------------ decoding

/// Greedy generation: decodes `prompt` as one batch, then `n` tokens one per
/// decode call, each the argmax of the previous logits (as llama-cli
/// `--temp 0` does). Returns the generated ids.
pub fn greedy(ctx: &mut llama::Context<'_>, prompt: &[i32], n: usize) -> Vec<i32> {
    ctx.decode(&llama::Batch::get_one(prompt))
        .expect("prompt decode");
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let tok = argmax(ctx.logits_ith(-1).expect("logits")) as i32;
        out.push(tok);
        if out.len() < n {
            ctx.decode(&llama::Batch::get_one(&[tok]))
                .expect("token decode");
        }
    }
    out
}

/// Decodes `tokens` as one batch at positions 0.. with logits for every
/// token; returns them row-major `[tokens][n_vocab]`.
pub fn teacher_forced_logits(ctx: &mut llama::Context<'_>, tokens: &[i32]) -> Vec<f32> {
    let mut b = llama::Batch::new();
    for (i, &t) in tokens.iter().enumerate() {
        b.add(t, i as i32, &[0], true);
    }
    ctx.decode(&b).expect("decode");
    ctx.logits().to_vec()
}

// ------------------------------------------------------------ model files

/// A fresh scratch directory for one test (under the system's temporary
/// directory, named after the process and `name`).
pub fn scratch_dir(name: &str) -> PathBuf {
    test_support::scratch_dir("llama-e2e", name)
}

/// Writes a copy of the single-file model `src` to `dst` with each tensor
/// converted to the type `to(name, type)` returns: its values dequantized
/// to F32 (exactly, as ggml does) and, for other types, quantized again row
/// by row with ggml's reference quantizer. Metadata is copied unchanged.
pub fn write_converted(
    src: &Path,
    dst: &Path,
    to: impl Fn(&str, gguf::GgmlType) -> gguf::GgmlType,
) {
    let f = gguf::GgufFile::open(src).unwrap_or_else(|e| panic!("{}: {e}", src.display()));
    let mut infos = Vec::new();
    let mut datas = Vec::new();
    for t in f.tensors() {
        let ty = to(&t.name, t.ty);
        let data = f.tensor_data(t).expect("tensor data");
        let data = if ty == t.ty {
            data.to_vec()
        } else {
            let ne0 = t.dims[0] as usize;
            let (src_row, dst_row) = (
                ggml_core::quants::row_size(t.ty, ne0).expect("row size"),
                ggml_core::quants::row_size(ty, ne0).expect("row size"),
            );
            let mut row = vec![0f32; ne0];
            let mut out = vec![0u8; data.len() / src_row * dst_row];
            for (s, d) in data
                .chunks_exact(src_row)
                .zip(out.chunks_exact_mut(dst_row))
            {
                ggml_core::quants::dequantize_row(t.ty, s, &mut row).expect("dequantize");
                if ty == gguf::GgmlType::F32 {
                    d.copy_from_slice(
                        &row.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<_>>(),
                    );
                } else {
                    ggml_core::quants::quantize_row(ty, &row, d).expect("quantize");
                }
            }
            out
        };
        infos.push(gguf::TensorInfo::new(t.name.clone(), ty, &t.dims).expect("tensor info"));
        datas.push(data);
    }
    let file = std::fs::File::create(dst).unwrap_or_else(|e| panic!("{}: {e}", dst.display()));
    let mut w = gguf::GgufWriter::new(file, f.metadata(), &infos).expect("writer");
    for (t, d) in infos.iter().zip(&datas) {
        w.write_tensor(&t.name, d).expect("write tensor");
    }
    w.finish().expect("finish");
}

/// A tensor of a rewritten file: name, dims, type, raw bytes.
pub type RawTensor = (String, Vec<u64>, gguf::GgmlType, Vec<u8>);

/// Copies the single-file model `src` to a scratch file (named after
/// `name`) after `edit` changes its metadata and tensors; returns the new
/// path. The tool of the hostile-file tests: one wrong key or tensor each.
pub fn rewrite(
    src: &Path,
    name: &str,
    edit: impl FnOnce(&mut gguf::Metadata, &mut Vec<RawTensor>),
) -> PathBuf {
    let f = gguf::GgufFile::open(src).unwrap_or_else(|e| panic!("{}: {e}", src.display()));
    let mut meta = f.metadata().clone();
    let mut tensors: Vec<RawTensor> = f
        .tensors()
        .iter()
        .map(|t| {
            let d = f.tensor_data(t).expect("tensor data").to_vec();
            (t.name.clone(), t.dims.to_vec(), t.ty, d)
        })
        .collect();
    edit(&mut meta, &mut tensors);
    let dst = scratch_dir(name).join("model.gguf");
    let infos: Vec<gguf::TensorInfo> = tensors
        .iter()
        .map(|(n, dims, ty, _)| gguf::TensorInfo::new(n.clone(), *ty, dims).expect("tensor info"))
        .collect();
    let file = std::fs::File::create(&dst).unwrap_or_else(|e| panic!("{}: {e}", dst.display()));
    let mut w = gguf::GgufWriter::new(file, &meta, &infos).expect("writer");
    for (n, _, _, d) in &tensors {
        w.write_tensor(n, d).expect("write tensor");
    }
    w.finish().expect("finish");
    dst
}

/// The error loading `path` on the CPU gives; panics when it loads.
pub fn load_err(path: &Path) -> String {
    match llama::Model::load(path, &cpu_params()) {
        Ok(_) => panic!("{} loaded", path.display()),
        Err(e) => e.to_string(),
    }
}

/// The largest change llama.cpp's own perplexity showed across the
/// settings recorded in a fixture's `llama_cpp_spread` (0 without any):
/// the tolerance of quantized fixtures scales with it.
pub fn llama_cpp_spread(perplexity: &serde_json::Value) -> f64 {
    perplexity["llama_cpp_spread"]
        .as_object()
        .map(|o| {
            o.values()
                .filter_map(|v| v.as_f64())
                .fold(0.0, |a: f64, v| a.max(v.abs()))
        })
        .unwrap_or(0.0)
}
