//! llama.cpp's outputs on the gpt-oss fixtures (attention sinks, sliding
//! window on even layers, Q/K/V/O biases, a biased mixture of experts with
//! the clamped SwiGLU, YaRN): greedy bytes and perplexity on the CPU with
//! flash attention on and off, on a Vulkan device with every layer, one
//! layer and the experts kept in CPU memory (`--cpu-moe`); and files that
//! lack what gpt-oss needs, refused with the name of the tensor or key.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ggml_core::Device;
use gguf::{GgufFile, GgufWriter, Metadata, TensorInfo, Value};
use llama::context::FlashAttnType;
use llama::params::TensorBuftOverride;
use llama::{Context, ContextParams, Model, ModelParams};
use tests::fixture_check::{check_greedy_in, check_ppl_in};
use tests::{cpu_params, expected, fixtures, llama_cpp_spread, scratch_dir};

fn ctx_params(n_ctx: usize, fa: bool) -> ContextParams {
    ContextParams {
        n_ctx,
        n_batch: n_ctx,
        n_ubatch: n_ctx,
        n_threads: 2,
        n_threads_batch: 2,
        flash_attn_type: if fa {
            FlashAttnType::Enabled
        } else {
            FlashAttnType::Disabled
        },
        ..ContextParams::default()
    }
}

fn check_ppl(model: &Model, exp: &serde_json::Value, rel_tol: f64, fa: bool, what: &str) {
    // Flash attention off is one of llama.cpp's spread settings.
    let tol = if fa {
        rel_tol
    } else {
        rel_tol.max(1.5 * llama_cpp_spread(&exp["perplexity"]))
    };
    check_ppl_in(model, exp, |n_ctx| ctx_params(n_ctx, fa), tol, what);
}

/// Greedy bytes and perplexity of fixture `name` loaded with `params`.
fn fixture(name: &str, params: &ModelParams, what: &str) {
    let Some(fx) = fixtures() else { return };
    let exp = expected(&fx, name);
    let path = fx.join("models").join(format!("{name}.gguf"));
    let model = Model::load(&path, params).unwrap_or_else(|e| panic!("{name}: {e}"));
    let tol = if name.ends_with("f32") { 1e-3 } else { 1e-2 };
    for fa in [true, false] {
        let what = format!("{name} {what}, flash attention {fa}");
        check_greedy_in(&model, &exp, ctx_params(512, fa), &what);
        check_ppl(&model, &exp, tol, fa, &what);
    }
}

#[test]
fn gpt_oss_f32_cpu() {
    fixture("tiny-gpt-oss-f32", &cpu_params(), "CPU");
}

#[test]
fn gpt_oss_q8_0_cpu() {
    fixture("tiny-gpt-oss-q8_0", &cpu_params(), "CPU");
}

fn gpu_params(gpu: &Arc<dyn Device>, ngl: i32, cpu_moe: bool) -> ModelParams {
    ModelParams {
        devices: Some(vec![gpu.clone()]),
        n_gpu_layers: ngl,
        tensor_buft_overrides: if cpu_moe {
            vec![TensorBuftOverride::cpu_moe()]
        } else {
            Vec::new()
        },
        ..ModelParams::default()
    }
}

fn on_vulkan(name: &str, ngl: i32, cpu_moe: bool) {
    let Some(gpu) = tests::vulkan_device() else {
        return;
    };
    let what = format!("Vulkan, {ngl} layers, cpu-moe {cpu_moe}");
    fixture(name, &gpu_params(&gpu, ngl, cpu_moe), &what);
}

#[test]
fn gpt_oss_f32_vulkan_all_layers() {
    on_vulkan("tiny-gpt-oss-f32", 99, false);
}

#[test]
fn gpt_oss_q8_0_vulkan_all_layers() {
    on_vulkan("tiny-gpt-oss-q8_0", 99, false);
}

#[test]
fn gpt_oss_f32_vulkan_one_layer() {
    on_vulkan("tiny-gpt-oss-f32", 1, false);
}

#[test]
fn gpt_oss_q8_0_vulkan_one_layer() {
    on_vulkan("tiny-gpt-oss-q8_0", 1, false);
}

#[test]
fn gpt_oss_f32_vulkan_cpu_moe() {
    on_vulkan("tiny-gpt-oss-f32", 99, true);
}

#[test]
fn gpt_oss_q8_0_vulkan_cpu_moe() {
    on_vulkan("tiny-gpt-oss-q8_0", 99, true);
}

/// llama.cpp's greedy bytes (llama-completion, 32 tokens at temperature 0
/// after "Once upon a time", the same with -t 1 or 2, -b 1 and -fa off)
/// on the F32 fixture quantized by its llama-quantize to MXFP4_MOE (MXFP4
/// experts, every other matrix Q8_0), which `llama::quantize` writes byte
/// for byte.
const MXFP4_MOE_GREEDY_HEX: &str = "ef9d208e20736177196d76657220766572795d4763d4d412656e41206c6974746c65206d207520736f3a206b2076657279e280932062652076657279a59d20766572795a6b65";

/// The F32 fixture quantized to MXFP4_MOE by the llama crate's quantizer
/// (into a scratch folder of the caller's `name`).
fn mxfp4_moe_model(name: &str) -> Option<PathBuf> {
    let src = gpt_oss()?;
    let dst = scratch_dir(name).join("model.gguf");
    let params = llama::quantize::QuantizeParams {
        nthread: 2,
        ..llama::quantize::QuantizeParams::new(llama::quantize::ftype::ft::MOSTLY_MXFP4_MOE)
    };
    llama::quantize::quantize(&src, &dst, &params, &mut std::io::sink()).expect("quantize");
    let f = GgufFile::open(&dst).expect("open");
    let mxfp4 = f
        .tensors()
        .iter()
        .filter(|t| t.ty == gguf::GgmlType::MXFP4)
        .map(|t| t.name.clone())
        .collect::<Vec<_>>();
    assert_eq!(mxfp4.len(), 6, "{mxfp4:?}");
    assert!(
        mxfp4.iter().all(|n| n.contains("_exps.weight")),
        "{mxfp4:?}"
    );
    Some(dst)
}

/// Greedy ids and, at each step, the margin of the best logit over the
/// second, decoding `prompt` then `n` tokens.
fn greedy_margins(model: &Model, prompt: &[i32], n: usize, fa: bool) -> (Vec<i32>, Vec<f32>) {
    let mut ctx = Context::new(model, ctx_params(512, fa)).expect("context");
    ctx.decode(&llama::Batch::get_one(prompt))
        .expect("prompt decode");
    let (mut ids, mut margins) = (Vec::new(), Vec::new());
    for i in 0..n {
        let l = ctx.logits_ith(-1).expect("logits");
        let best = tests::argmax(l);
        let second = l
            .iter()
            .enumerate()
            .filter(|&(j, _)| j != best)
            .map(|(_, &v)| v)
            .fold(f32::NEG_INFINITY, f32::max);
        margins.push(l[best] - second);
        ids.push(best as i32);
        let mut b = llama::Batch::new();
        b.add(best as i32, (prompt.len() + i) as i32, &[0], true);
        ctx.decode(&b).expect("decode");
    }
    (ids, margins)
}

/// The hex of the bytes of `ids`.
fn hex_of(model: &Model, ids: &[i32]) -> String {
    ids.iter()
        .flat_map(|&t| model.vocab.token_to_piece(t, false))
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A step whose best logit leads the second by less than this, with
/// flash attention on or off, is a near-tie: another backend's rounding
/// may pick the other token there.
const NEAR_TIE: f32 = 0.05;

#[test]
fn gpt_oss_mxfp4_moe_cpu() {
    let Some(path) = mxfp4_moe_model("gpt-oss-mxfp4-cpu") else {
        return;
    };
    let model = Model::load(&path, &cpu_params()).expect("load");
    let prompt = model.vocab.tokenize("Once upon a time", true, false);
    for fa in [true, false] {
        let (ids, _) = greedy_margins(&model, &prompt, 32, fa);
        assert_eq!(
            hex_of(&model, &ids),
            MXFP4_MOE_GREEDY_HEX,
            "MXFP4_MOE on the CPU, flash attention {fa}"
        );
    }
}

/// Every layer offloaded, so that the GPU's shaders read the MXFP4
/// experts: llama.cpp's greedy tokens up to the first near-tie of the
/// CPU's path (which is llama.cpp's), with flash attention on and off.
#[test]
fn gpt_oss_mxfp4_moe_vulkan_all_layers() {
    let Some(gpu) = tests::vulkan_device() else {
        return;
    };
    let Some(path) = mxfp4_moe_model("gpt-oss-mxfp4-vulkan") else {
        return;
    };
    let cpu = Model::load(&path, &cpu_params()).expect("load");
    let prompt = cpu.vocab.tokenize("Once upon a time", true, false);
    let (want, on) = greedy_margins(&cpu, &prompt, 32, true);
    let (_, off) = greedy_margins(&cpu, &prompt, 32, false);
    assert_eq!(hex_of(&cpu, &want), MXFP4_MOE_GREEDY_HEX);
    let clear = (0..want.len())
        .find(|&i| on[i].min(off[i]) < NEAR_TIE)
        .unwrap_or(want.len());
    assert!(clear >= 24, "a near-tie at step {clear} already");
    let gpu_model = Model::load(&path, &gpu_params(&gpu, 99, false)).expect("load");
    for fa in [true, false] {
        let (got, _) = greedy_margins(&gpu_model, &prompt, 32, fa);
        eprintln!(
            "MXFP4_MOE on Vulkan, flash attention {fa}: {} of {} tokens as llama.cpp (near-tie from step {clear})",
            got.iter().zip(&want).take_while(|(a, b)| a == b).count(),
            want.len()
        );
        assert_eq!(
            got[..clear],
            want[..clear],
            "MXFP4_MOE on Vulkan, flash attention {fa}: greedy ids before step {clear}"
        );
    }
}

/// A tensor to write: name, dims, raw bytes.
type Tensor = (String, Vec<u64>, gguf::GgmlType, Vec<u8>);

/// Copies `src` to a scratch file after `edit` changes its metadata and
/// tensors; returns the new path.
fn rewrite(src: &Path, name: &str, edit: impl FnOnce(&mut Metadata, &mut Vec<Tensor>)) -> PathBuf {
    let f = GgufFile::open(src).expect("open");
    let mut meta = f.metadata().clone();
    let mut tensors: Vec<Tensor> = f
        .tensors()
        .iter()
        .map(|t| {
            let d = f.tensor_data(t).expect("data").to_vec();
            (t.name.clone(), t.dims.to_vec(), t.ty, d)
        })
        .collect();
    edit(&mut meta, &mut tensors);
    let dst = scratch_dir(name).join("model.gguf");
    let infos: Vec<TensorInfo> = tensors
        .iter()
        .map(|(n, dims, ty, _)| TensorInfo::new(n.clone(), *ty, dims).expect("info"))
        .collect();
    let file = std::fs::File::create(&dst).expect("create");
    let mut w = GgufWriter::new(file, &meta, &infos).expect("writer");
    for (n, _, _, d) in &tensors {
        w.write_tensor(n, d).expect("write");
    }
    w.finish().expect("finish");
    dst
}

fn load_err(path: &Path) -> String {
    match Model::load(path, &cpu_params()) {
        Ok(_) => panic!("{} loaded", path.display()),
        Err(e) => e.to_string(),
    }
}

fn gpt_oss() -> Option<PathBuf> {
    Some(fixtures()?.join("models/tiny-gpt-oss-f32.gguf"))
}

#[test]
fn missing_sinks_are_named() {
    let Some(src) = gpt_oss() else { return };
    let p = rewrite(&src, "gpt-oss-no-sinks", |_, t| {
        t.retain(|x| x.0 != "blk.1.attn_sinks.weight")
    });
    let e = load_err(&p);
    assert!(e.contains("blk.1.attn_sinks.weight"), "{e}");
}

#[test]
fn sinks_of_the_wrong_length_are_named() {
    let Some(src) = gpt_oss() else { return };
    let p = rewrite(&src, "gpt-oss-short-sinks", |_, t| {
        let x = t
            .iter_mut()
            .find(|x| x.0 == "blk.0.attn_sinks.weight")
            .expect("sinks");
        x.1 = vec![3];
        x.3.truncate(12);
    });
    let e = load_err(&p);
    assert!(e.contains("blk.0.attn_sinks.weight"), "{e}");
}

#[test]
fn missing_expert_bias_is_named() {
    let Some(src) = gpt_oss() else { return };
    let p = rewrite(&src, "gpt-oss-no-down-bias", |_, t| {
        t.retain(|x| x.0 != "blk.0.ffn_down_exps.bias")
    });
    let e = load_err(&p);
    assert!(e.contains("blk.0.ffn_down_exps.bias"), "{e}");
}

#[test]
fn missing_sliding_window_is_named() {
    let Some(src) = gpt_oss() else { return };
    let p = rewrite(&src, "gpt-oss-no-window", |m, _| {
        m.remove("gpt-oss.attention.sliding_window");
    });
    let e = load_err(&p);
    assert!(e.contains("gpt-oss.attention.sliding_window"), "{e}");
}

#[test]
fn zero_experts_are_refused() {
    let Some(src) = gpt_oss() else { return };
    let p = rewrite(&src, "gpt-oss-no-experts", |m, _| {
        m.set("gpt-oss.expert_count", Value::U32(0));
    });
    let e = load_err(&p);
    assert!(e.contains("gpt-oss.expert_count"), "{e}");
}

/// A GGUF file (version 3, no metadata) of one tensor `name` of type `ty`
/// (ggml's type id) and row length `ne0`, with `data` after the header.
fn one_tensor_file(name: &str, ty: u32, ne0: u64, data: &[u8]) -> PathBuf {
    let mut b = Vec::new();
    b.extend_from_slice(b"GGUF");
    b.extend_from_slice(&3u32.to_le_bytes());
    b.extend_from_slice(&1u64.to_le_bytes()); // tensors
    b.extend_from_slice(&0u64.to_le_bytes()); // metadata pairs
    b.extend_from_slice(&(name.len() as u64).to_le_bytes());
    b.extend_from_slice(name.as_bytes());
    b.extend_from_slice(&1u32.to_le_bytes()); // dimensions
    b.extend_from_slice(&ne0.to_le_bytes());
    b.extend_from_slice(&ty.to_le_bytes());
    b.extend_from_slice(&0u64.to_le_bytes()); // data offset
    while b.len() % 32 != 0 {
        b.push(0);
    }
    b.extend_from_slice(data);
    let dst = scratch_dir(&format!("mxfp4-{ne0}")).join("model.gguf");
    std::fs::write(&dst, b).expect("write");
    dst
}

/// MXFP4 rows hold whole 32-element blocks of 17 bytes: a row of 48
/// elements is refused, naming the tensor and the block size.
#[test]
fn mxfp4_rows_of_partial_blocks_are_named() {
    const MXFP4: u32 = 39;
    let p = one_tensor_file("blk.0.ffn_up_exps.weight", MXFP4, 48, &[0u8; 34]);
    let e = load_err(&p);
    assert!(
        e.contains("blk.0.ffn_up_exps.weight") && e.contains("block size 32"),
        "{e}"
    );
    // The same file with whole blocks is a valid GGUF (refused for its
    // missing architecture, not its tensor).
    let p = one_tensor_file("blk.0.ffn_up_exps.weight", MXFP4, 64, &[0u8; 34]);
    let e = load_err(&p);
    assert!(!e.contains("block size"), "{e}");
}
