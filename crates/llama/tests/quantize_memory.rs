//! llama-quantize's memory stays near one slab of rows, not the size of the
//! model nor of its largest tensor: the heap of an in-process run (this
//! binary counts every allocation) and the peak resident memory of the
//! tool, mapped input pages included. A model of ~100 MB whose two largest
//! tensors take 32 MiB each as F16 is written for the purpose.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, OnceLock};

use gguf::{GgmlType, GgufWriter, Metadata, TensorInfo, Value};
use llama::quantize::{self, ftype::ft, QuantizeParams};
use test_support::{peak_during, CountingAlloc, Rng};

#[global_allocator]
static ALLOCATOR: CountingAlloc = CountingAlloc;

const MIB: usize = 1 << 20;
const N_EMBD: u64 = 1024;
const N_FF: u64 = 2816;
const N_VOCAB: u64 = 16384;
/// Bytes of the largest tensors (token_embd and output as F16).
const LARGEST: usize = (N_EMBD * N_VOCAB * 2) as usize;

/// A llama-shaped F16 model of one layer with a large vocabulary.
fn write_model(path: &Path) {
    let mut md = Metadata::new();
    md.set("general.architecture", "llama");
    md.set("general.name", "quantize-memory");
    md.set("llama.block_count", Value::from(1u32));
    md.set("llama.context_length", Value::from(256u32));
    md.set("llama.embedding_length", Value::from(N_EMBD as u32));
    md.set("llama.feed_forward_length", Value::from(N_FF as u32));
    md.set("llama.attention.head_count", Value::from(8u32));
    md.set("llama.attention.head_count_kv", Value::from(8u32));
    md.set("general.file_type", Value::from(ft::MOSTLY_F16));
    let f16 = GgmlType::F16;
    let f32 = GgmlType::F32;
    let shapes: Vec<(&str, GgmlType, Vec<u64>)> = vec![
        ("token_embd.weight", f16, vec![N_EMBD, N_VOCAB]),
        ("blk.0.attn_norm.weight", f32, vec![N_EMBD]),
        ("blk.0.attn_q.weight", f16, vec![N_EMBD, N_EMBD]),
        ("blk.0.attn_k.weight", f16, vec![N_EMBD, N_EMBD]),
        ("blk.0.attn_v.weight", f16, vec![N_EMBD, N_EMBD]),
        ("blk.0.attn_output.weight", f16, vec![N_EMBD, N_EMBD]),
        ("blk.0.ffn_norm.weight", f32, vec![N_EMBD]),
        ("blk.0.ffn_gate.weight", f16, vec![N_EMBD, N_FF]),
        ("blk.0.ffn_up.weight", f16, vec![N_EMBD, N_FF]),
        ("blk.0.ffn_down.weight", f16, vec![N_FF, N_EMBD]),
        ("output_norm.weight", f32, vec![N_EMBD]),
        ("output.weight", f16, vec![N_EMBD, N_VOCAB]),
    ];
    let infos: Vec<TensorInfo> = shapes
        .iter()
        .map(|(n, t, ne)| TensorInfo::new(*n, *t, ne).unwrap())
        .collect();
    let f = std::fs::File::create(path).unwrap();
    let mut w = GgufWriter::new(BufWriter::with_capacity(MIB, f), &md, &infos).unwrap();
    let mut rng = Rng(44);
    let mut buf = Vec::with_capacity(MIB);
    for (_, ty, ne) in &shapes {
        let mut left: u64 = ne.iter().product();
        while left > 0 {
            let n = left.min(1 << 18);
            buf.clear();
            for _ in 0..n {
                let v = rng.normal() * 0.02;
                if *ty == GgmlType::F16 {
                    buf.extend_from_slice(&half_bits(v).to_le_bytes());
                } else {
                    buf.extend_from_slice(&(1.0 + v).to_le_bytes());
                }
            }
            w.write_tensor_data(&buf).unwrap();
            left -= n;
        }
    }
    w.finish().unwrap().flush().unwrap();
}

fn half_bits(v: f32) -> u16 {
    ggml_core::quants::fp32_to_fp16(v)
}

/// The model, written once for the tests of this binary.
fn model() -> &'static Path {
    static MODEL: OnceLock<PathBuf> = OnceLock::new();
    MODEL.get_or_init(|| {
        let dir = test_support::scratch_dir("llama", "quantize-memory");
        let p = dir.join("model-f16.gguf");
        write_model(&p);
        p
    })
}

/// The tests of this binary run one at a time, so that the heap counted
/// during one is its own.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn params(ftype: u32, max_buf_size: Option<usize>) -> QuantizeParams {
    let mut p = QuantizeParams::new(ftype);
    p.nthread = 2;
    if let Some(m) = max_buf_size {
        p.max_buf_size = m;
    }
    p
}

#[test]
fn peak_heap_is_bounded_by_a_slab_not_the_largest_tensor() {
    let _serial = serial();
    let input = model();
    let out = input.with_file_name("heap-q4_k_m.gguf");
    for ftype in [ft::MOSTLY_Q4_K_M, ft::MOSTLY_IQ4_XS] {
        let mut log = Vec::new();
        let mut res = None;
        let peak = peak_during(|| {
            res = Some(quantize::quantize(
                input,
                &out,
                &params(ftype, None),
                &mut log,
            ));
        });
        res.unwrap().unwrap();
        eprintln!("ftype {ftype}: peak heap {peak} bytes, largest tensor {LARGEST} bytes");
        // A slab of output (16 MiB at most), each thread's f32 rows, the
        // writer's buffer and the model's header. The largest tensor alone
        // is 32 MiB, 64 MiB as f32.
        assert!(
            peak < 24 * MIB,
            "ftype {ftype}: peak heap {peak} bytes, expected below {}",
            24 * MIB
        );
    }
    let _ = std::fs::remove_file(&out);
}

#[test]
fn the_slab_size_does_not_change_the_bytes() {
    let _serial = serial();
    let input = model();
    let a = input.with_file_name("slab-default.gguf");
    let b = input.with_file_name("slab-small.gguf");
    let mut log = Vec::new();
    quantize::quantize(input, &a, &params(ft::MOSTLY_IQ4_XS, None), &mut log).unwrap();
    // Slabs of a few rows, cut inside the chunks of the default split.
    quantize::quantize(
        input,
        &b,
        &params(ft::MOSTLY_IQ4_XS, Some(50_000)),
        &mut log,
    )
    .unwrap();
    let (x, y) = (std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
    assert!(x == y, "a small --max-buffer-size gave other bytes");
    let _ = std::fs::remove_file(&a);
    let _ = std::fs::remove_file(&b);
}

/// Runs the tool and returns its peak resident memory in bytes (the
/// kernel's `ru_maxrss`: heap, stacks, code and the mapped input pages).
#[cfg(target_os = "linux")]
// The child is reaped by `wait4` below, which also gives its rusage.
#[allow(clippy::zombie_processes)]
fn peak_rss_of_tool(args: &[&str]) -> usize {
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_llama-quantize"))
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("llama-quantize starts");
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: rusage is plain old data, all zeros is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child, writing into the two locals above;
    // the `Child` is not waited on again (dropping it does not wait).
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(r, pid, "wait4: {}", std::io::Error::last_os_error());
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "llama-quantize {args:?} failed ({status:#x})"
    );
    usage.ru_maxrss as usize * 1024
}

#[cfg(target_os = "linux")]
#[test]
fn peak_resident_memory_of_the_tool_stays_below_the_largest_tensor_twice() {
    let _serial = serial();
    let input = model();
    let out = input.with_file_name("rss.gguf");
    let model_bytes = std::fs::metadata(input).unwrap().len() as usize;
    for ty in ["Q4_K_M", "IQ4_XS"] {
        let rss = peak_rss_of_tool(&[input.to_str().unwrap(), out.to_str().unwrap(), ty, "2"]);
        eprintln!(
            "{ty}: peak RSS {} MiB, model {} MiB, largest tensor {} MiB",
            rss / MIB,
            model_bytes / MIB,
            LARGEST / MIB
        );
        // The acceptance bound is twice the largest tensor plus a fixed
        // amount; the run holds a slab of output, a slab of mapped input
        // and the program itself. Keeping every input page resident (the
        // whole model, ~100 MiB) or the largest tensor as f32 (64 MiB)
        // goes past it.
        let bound = LARGEST + 32 * MIB;
        assert!(
            rss < bound,
            "{ty}: peak RSS {rss} bytes, expected below {bound}"
        );
    }
    let _ = std::fs::remove_file(&out);
}
