//! gen-model writes files the gguf reader accepts, with the planned shapes,
//! types and metadata, byte-identical for the same seed; its quantized file
//! types have llama-quantize's per-tensor types (the fixture tests need the
//! fixtures at `$LLAMA_FIXTURES` or `../shared/fixtures` from the workspace
//! root, and are skipped without them unless `REQUIRE_FIXTURES=1`).

mod common;

use std::collections::BTreeMap;

use clap::Parser;
use ggml_core::quants::dequantize_row;
use gguf::{GgmlType, GgufFile};
use xtask::cli::{model_spec, Cli, Command};
use xtask::gen_model::shape::{parse_arch, Preset, ShapeOverrides};
use xtask::gen_model::types::OutType;
use xtask::gen_model::vocab::Vocab;
use xtask::gen_model::{generate, generate_file, ModelSpec, WriteSettings};

use common::{fixtures, spec, temp_dir, tiny_fixture_shape};

fn write(spec: &ModelSpec, settings: &WriteSettings) -> Vec<u8> {
    let (bytes, summary) = generate(spec, settings, Vec::new()).expect("generate");
    assert_eq!(bytes.len() as u64, summary.file_bytes);
    bytes
}

fn stories(ty: &str, seed: u64) -> ModelSpec {
    spec(Preset::Stories260k, ShapeOverrides::default(), ty, seed)
}

fn values(file: &GgufFile, bytes: &[u8], name: &str) -> Vec<f32> {
    let t = file.tensor(name).expect("tensor");
    let data = file.tensor_data_in(bytes, t).expect("data");
    let mut out = vec![0f32; t.n_elements() as usize];
    dequantize_row(t.ty, data, &mut out).expect("dequantize");
    out
}

#[test]
fn stories260k_reads_back() {
    for (ty, want) in [
        ("f32", GgmlType::F32),
        ("q8_0", GgmlType::Q8_0),
        ("q4_k", GgmlType::Q4_K),
    ] {
        let spec = stories(ty, 5);
        let bytes = write(&spec, &WriteSettings::default());
        let f = GgufFile::from_bytes(&bytes).expect("parse");
        assert_eq!(f.tensors().len(), 48, "{ty}");
        let plan = spec.plan().unwrap();
        for (t, p) in f.tensors().iter().zip(&plan) {
            assert_eq!((&t.name, &t.dims, t.ty), (&p.name, &p.dims, p.ty), "{ty}");
        }
        let t = |n: &str| f.tensor(n).expect(n);
        assert_eq!(t("token_embd.weight").dims, vec![64, 512]);
        assert_eq!(t("blk.4.attn_k.weight").dims, vec![64, 32]);
        assert_eq!(t("blk.0.ffn_down.weight").dims, vec![172, 64]);
        assert_eq!(t("blk.0.attn_norm.weight").ty, GgmlType::F32);
        // 64-wide rows fit no K-quant block: q4_k falls back like llama-quantize.
        let embd = t("token_embd.weight").ty;
        let down = t("blk.0.ffn_down.weight").ty;
        match want {
            GgmlType::Q4_K => assert_eq!((embd, down), (GgmlType::Q5_0, GgmlType::F16)),
            GgmlType::Q8_0 => assert_eq!((embd, down), (GgmlType::Q8_0, GgmlType::F16)),
            _ => assert_eq!((embd, down), (want, want)),
        }
        let file_type = match ty {
            "f32" => 0,
            "q8_0" => 7,
            _ => 15,
        };
        assert_eq!(f.get_u32("general.file_type").unwrap(), file_type);
        assert_eq!(f.get_str("general.architecture").unwrap(), "llama");
        assert_eq!(f.get_u32("llama.context_length").unwrap(), 512);
        assert_eq!(f.get_u32("llama.embedding_length").unwrap(), 64);
        assert_eq!(f.get_u32("llama.block_count").unwrap(), 5);
        assert_eq!(f.get_u32("llama.feed_forward_length").unwrap(), 172);
        assert_eq!(f.get_u32("llama.attention.head_count").unwrap(), 8);
        assert_eq!(f.get_u32("llama.attention.head_count_kv").unwrap(), 4);
        assert_eq!(f.get_u32("llama.rope.dimension_count").unwrap(), 8);
        assert_eq!(f.get_f32("llama.rope.freq_base").unwrap(), 10000.0);
        assert_eq!(
            f.get_f32("llama.attention.layer_norm_rms_epsilon").unwrap(),
            1e-5
        );
        assert_eq!(f.get("general.quantization_version").is_some(), ty != "f32");
        assert_eq!(f.alignment(), 32);
        assert_eq!(f.get_str("tokenizer.ggml.model").unwrap(), "llama");
        let tokens = f.get_str_array("tokenizer.ggml.tokens").unwrap();
        assert_eq!(tokens.len(), 512);
        assert_eq!(&tokens[..4], ["<unk>", "<s>", "</s>", "<0x00>"]);
        let types: Vec<i32> = f.get_array("tokenizer.ggml.token_type").unwrap();
        assert_eq!(
            (types[0], types[1], types[2], types[3], types[300]),
            (2, 3, 3, 6, 1)
        );
        let scores: Vec<f32> = f.get_array("tokenizer.ggml.scores").unwrap();
        assert!(scores[259..].windows(2).all(|w| w[0] > w[1]));
        assert_eq!(f.get_u32("tokenizer.ggml.bos_token_id").unwrap(), 1);
        assert_eq!(f.get_u32("tokenizer.ggml.eos_token_id").unwrap(), 2);
        assert_eq!(f.get_u32("tokenizer.ggml.unknown_token_id").unwrap(), 0);
        assert!(f.get_bool("tokenizer.ggml.add_bos_token").unwrap());
    }
}

#[test]
fn weights_follow_the_planned_distribution_in_every_type() {
    let f32_bytes = write(&stories("f32", 9), &WriteSettings::default());
    let reference = GgufFile::from_bytes(&f32_bytes).unwrap();
    let embd = values(&reference, &f32_bytes, "token_embd.weight");
    let n = embd.len() as f32;
    let mean = embd.iter().sum::<f32>() / n;
    let std = (embd.iter().map(|x| (x - mean).powi(2)).sum::<f32>() / n).sqrt();
    assert!(
        mean.abs() < 0.1 && (std - 4.0).abs() < 0.1,
        "token_embd mean {mean} std {std}"
    );
    let norm = values(&reference, &f32_bytes, "blk.0.attn_norm.weight");
    assert!(norm.iter().all(|&x| (x - 1.0).abs() < 0.6));
    // Same seed, other type: the same values up to quantization error.
    for (ty, tol) in [
        ("f16", 0.002),
        ("bf16", 0.01),
        ("q8_0", 0.01),
        ("q4_0", 0.15),
    ] {
        let bytes = write(&stories(ty, 9), &WriteSettings::default());
        let f = GgufFile::from_bytes(&bytes).unwrap();
        for name in ["token_embd.weight", "blk.0.attn_q.weight", "output.weight"] {
            let want = values(&reference, &f32_bytes, name);
            let got = values(&f, &bytes, name);
            let amax = want.iter().fold(0f32, |m, x| m.max(x.abs()));
            let err = want
                .iter()
                .zip(&got)
                .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
            assert!(
                err <= tol * amax,
                "{ty} {name}: max error {err}, amax {amax}"
            );
        }
    }
}

#[test]
fn same_seed_same_bytes_whatever_the_chunking() {
    let a = write(&stories("q4_0", 3), &WriteSettings::default());
    let b = write(&stories("q4_0", 3), &WriteSettings::default());
    assert!(a == b, "two runs differ");
    let small = WriteSettings {
        chunk_bytes: 1,
        verbose: false,
    };
    let c = write(&stories("q4_0", 3), &small);
    assert!(a == c, "chunk size changed the bytes");
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    let d = pool.install(|| write(&stories("q4_0", 3), &small));
    assert!(a == d, "thread count changed the bytes");
    let e = write(&stories("q4_0", 4), &WriteSettings::default());
    assert_eq!(a.len(), e.len());
    assert!(a != e, "another seed gave the same bytes");
}

#[test]
fn every_type_writes() {
    // 256-wide rows so that every type, K-quants included, is used as asked.
    let o = ShapeOverrides {
        n_embd: Some(256),
        n_ff: Some(512),
        n_layer: Some(1),
        n_vocab: Some(300),
        ..Default::default()
    };
    for name in OutType::names() {
        // Pure: every 2-D weight in the base type.
        let mut spec = spec(Preset::Stories260k, o.clone(), name, 1);
        spec.ty = spec.ty.pure();
        let bytes = write(&spec, &WriteSettings::default());
        let f = GgufFile::from_bytes(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(f.get_u32("general.file_type").unwrap(), spec.ty.file_type);
        for t in f.tensors() {
            let want = if t.dims.len() == 1 {
                GgmlType::F32
            } else {
                spec.ty.ty
            };
            assert_eq!(t.ty, want, "{name} --pure {}", t.name);
            let v = values(&f, &bytes, &t.name);
            assert!(v.iter().all(|x| x.is_finite()), "{name} {}", t.name);
        }

        // The mixture: as planned, with the output in Q6_K for every
        // quantized type but Q8_0.
        spec.ty = name.parse().unwrap();
        let bytes = write(&spec, &WriteSettings::default());
        let f = GgufFile::from_bytes(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(f.get_u32("general.file_type").unwrap(), spec.ty.file_type);
        let plan = spec.plan().unwrap();
        assert_eq!(f.tensors().len(), plan.len());
        for (t, p) in f.tensors().iter().zip(&plan) {
            assert_eq!((&t.name, t.ty), (&p.name, p.ty), "{name}");
            assert!(p.wanted.is_none(), "{name} {}: fall-back", p.name);
            let v = values(&f, &bytes, &t.name);
            assert!(v.iter().all(|x| x.is_finite()), "{name} {}", t.name);
        }
        let output = f.tensor("output.weight").unwrap().ty;
        // MXFP4_MOE quantizes the experts only; the rest is Q8_0.
        let dense = match spec.ty.ty {
            GgmlType::MXFP4 => GgmlType::Q8_0,
            t => t,
        };
        let want = match dense {
            GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 | GgmlType::Q8_0 => dense,
            _ => GgmlType::Q6_K,
        };
        assert_eq!(output, want, "{name} output.weight");
        assert_eq!(f.tensor("blk.0.attn_q.weight").unwrap().ty, dense);
    }
}

/// Every tensor's type by name (the fixtures order their tensors otherwise).
fn types_by_name(f: &GgufFile) -> BTreeMap<String, GgmlType> {
    f.tensors().iter().map(|t| (t.name.clone(), t.ty)).collect()
}

#[test]
fn stories260k_q4_k_m_has_llama_quantizes_types() {
    let Some(dir) = fixtures() else { return };
    let real = GgufFile::open(dir.join("models/stories260K-q4_k_m.gguf")).unwrap();
    let bytes = write(&stories("q4_k_m", 1), &WriteSettings::default());
    let ours = GgufFile::from_bytes(&bytes).unwrap();
    assert_eq!(types_by_name(&ours), types_by_name(&real));
    assert_eq!(
        ours.get_u32("general.file_type").unwrap(),
        real.get_u32("general.file_type").unwrap()
    );
}

#[test]
fn pure_types_match_llama_quantize_pure() {
    let Some(dir) = fixtures() else { return };
    // The shape of the tiny-* fixtures, quantized with `llama-quantize --pure`.
    let o = tiny_fixture_shape();
    for ty in [
        "f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_k", "q3_k_m", "q4_k_m",
        "q5_k_m", "q6_k", "iq4_nl",
    ] {
        let real = GgufFile::open(dir.join(format!("models/tiny-{ty}.gguf"))).unwrap();
        let mut spec = spec(Preset::Stories260k, o.clone(), ty, 1);
        spec.ty = spec.ty.pure();
        let plan = spec.plan().unwrap();
        let ours: BTreeMap<String, GgmlType> =
            plan.iter().map(|t| (t.name.clone(), t.ty)).collect();
        assert_eq!(ours, types_by_name(&real), "{ty}");
        assert_eq!(
            spec.ty.file_type,
            real.get_u32("general.file_type").unwrap(),
            "{ty}"
        );
        // Without --pure a quantized file differs from llama-quantize's pure
        // one (its output.weight at least), but for Q8_0 and Q6_K, whose
        // rules change nothing at these widths.
        let mixed = spec.ty.name.parse::<OutType>().unwrap();
        if mixed.is_quantized() && !matches!(mixed.ty, GgmlType::Q8_0 | GgmlType::Q6_K) {
            let mut m = spec.clone();
            m.ty = mixed;
            assert!(
                m.plan().unwrap() != plan,
                "{ty}: the mixture changed nothing"
            );
        }
    }
}

#[test]
fn pure_flag() {
    let parse = |args: &[&str]| {
        let mut argv = vec!["xtask", "gen-model", "--out", "unused.gguf"];
        argv.extend_from_slice(args);
        match Cli::try_parse_from(argv).map(|c| c.command) {
            Ok(Command::GenModel(a)) => model_spec(&a).unwrap(),
            other => panic!("parsed as {other:?}"),
        }
    };
    let mixed = parse(&["--type", "q4_k_m", "--n-embd", "256", "--n-ff", "512"]);
    let pure = parse(&[
        "--type", "q4_k_m", "--pure", "--n-embd", "256", "--n-ff", "512",
    ]);
    assert!(!mixed.ty.pure && pure.ty.pure);
    assert_eq!(pure.ty.file_type, 15, "--pure keeps general.file_type");
    let count = |spec: &ModelSpec| {
        let (_, summary) = generate(spec, &WriteSettings::default(), Vec::new()).unwrap();
        summary.types_line()
    };
    // stories260k at 256 wide: 5 layers, attn_v and ffn_down of layers 2
    // and 4 (use_more_bits) and the output in Q6_K.
    assert_eq!(count(&mixed), "Q4_K x32, F32 x11, Q6_K x5");
    assert_eq!(count(&pure), "Q4_K x37, F32 x11");
}

#[test]
fn qwen2_shape() {
    let o = ShapeOverrides {
        n_embd: Some(128),
        n_head: Some(4),
        n_head_kv: Some(2),
        n_ff: Some(256),
        n_layer: Some(2),
        n_vocab: Some(1000),
        ..Default::default()
    };
    let spec = spec(Preset::Qwen2_0_5b, o, "q8_0", 2);
    let bytes = write(&spec, &WriteSettings::default());
    let f = GgufFile::from_bytes(&bytes).unwrap();
    assert!(
        f.tensor("output.weight").is_none(),
        "qwen2-0.5b ties its output"
    );
    let bias = f.tensor("blk.1.attn_k.bias").expect("k bias");
    assert_eq!((bias.ty, bias.dims.clone()), (GgmlType::F32, vec![64]));
    assert_eq!(f.tensors().len(), 1 + 12 * 2 + 1);
    assert_eq!(f.get_str("general.architecture").unwrap(), "qwen2");
    assert_eq!(
        f.get_f32("qwen2.attention.layer_norm_rms_epsilon").unwrap(),
        1e-6
    );
    assert_eq!(f.get_f32("qwen2.rope.freq_base").unwrap(), 1e6);
    assert_eq!(f.get_u32("qwen2.context_length").unwrap(), 32768);
}

#[test]
fn vocab_from_another_file_and_cli_checks() {
    let dir = temp_dir("vocab-from");
    let src = dir.join("src.gguf");
    let mut s = spec(Preset::Stories260k, ShapeOverrides::default(), "f32", 1);
    s.vocab = Vocab::synthetic_spm(300).unwrap();
    s.shape.n_vocab = 300;
    generate_file(&s, &WriteSettings::default(), &src).unwrap();
    assert!(!dir.join("src.gguf.partial").exists());

    let parse = |args: &[&str]| {
        let mut argv = vec!["xtask", "gen-model"];
        argv.extend_from_slice(args);
        match Cli::try_parse_from(argv).map(|c| c.command) {
            Ok(Command::GenModel(a)) => Ok(a),
            Ok(other) => panic!("parsed as {other:?}"),
            Err(e) => Err(e.to_string()),
        }
    };
    let out = dir.join("out.gguf");
    let (src_s, out_s) = (src.to_str().unwrap(), out.to_str().unwrap());
    let args = parse(&["--vocab-from", src_s, "--n-layer", "1", "--out", out_s]).unwrap();
    let spec = model_spec(&args).unwrap();
    assert_eq!(spec.shape.n_vocab, 300);
    generate_file(&spec, &WriteSettings::default(), &out).unwrap();
    let a = GgufFile::open(&src).unwrap();
    let b = GgufFile::open(&out).unwrap();
    let keys = |f: &GgufFile| {
        f.metadata()
            .iter()
            .filter(|(k, _)| k.starts_with("tokenizer."))
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(keys(&a), keys(&b));
    assert_eq!(b.tensor("token_embd.weight").unwrap().dims, vec![64, 300]);

    let conflict = parse(&["--vocab-from", src_s, "--n-vocab", "512", "--out", out_s]).unwrap();
    let e = model_spec(&conflict).unwrap_err().to_string();
    assert!(
        e.contains("--n-vocab 512") && e.contains("300 tokens"),
        "{e}"
    );
    let missing = parse(&["--vocab-from", "/nonexistent.gguf", "--out", out_s]).unwrap();
    assert!(model_spec(&missing).is_err());

    // Bad flags are errors, never panics.
    assert!(parse(&["--type", "q9_9", "--out", out_s]).is_err());
    assert!(parse(&["--n-embd", "-3", "--out", out_s]).is_err());
    assert!(parse(&["--preset", "gpt-5", "--out", out_s]).is_err());
    assert!(parse(&[]).is_err(), "--out is required");
    let odd_heads = parse(&["--n-head", "3", "--out", out_s]).unwrap();
    assert!(model_spec(&odd_heads)
        .unwrap_err()
        .to_string()
        .contains("--n-head 3"));
    let tiny_vocab = parse(&["--n-vocab", "100", "--out", out_s]).unwrap();
    assert!(model_spec(&tiny_vocab)
        .unwrap_err()
        .to_string()
        .contains("259"));
    let align = parse(&["--alignment", "48", "--out", out_s]).unwrap();
    assert!(model_spec(&align).is_err());
    let align = parse(&["--alignment", "64", "--out", out_s]).unwrap();
    let spec = model_spec(&align).unwrap();
    let bytes = write(&spec, &WriteSettings::default());
    assert_eq!(GgufFile::from_bytes(&bytes).unwrap().alignment(), 64);
    let arch = parse(&["--arch", "qwen2", "--out", out_s]).unwrap();
    assert_eq!(
        model_spec(&arch).unwrap().shape.arch,
        parse_arch("qwen2").unwrap()
    );

    std::fs::remove_dir_all(&dir).unwrap();
}
