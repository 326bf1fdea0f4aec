//! Where a model's weights and KV cache land: every fixture model with
//! n_gpu_layers 0, 2 and all, with mmap on and off; the buffer type of each
//! weight for a few settings (layer counts, tensor overrides, device lists,
//! split modes); the KV cache of each layer on its layer's device.
//!
//! Tests that need a GPU print "skipped: no Vulkan device" without one (or
//! fail with `REQUIRE_VULKAN=1`); Mesa's lavapipe is only exposed with
//! `GGML_VK_ALLOW_CPU_DEVICES=1`.

use std::path::Path;
use std::sync::Arc;

use ggml_core::Device;
use llama::{Context, ContextParams, LlamaError, Model, ModelParams, SplitMode, TensorKind};
use tests::{cpu_device, fixtures, reference_ctx, vulkan_device};

/// Every fixture model file (the split model by its first file).
const MODELS: [&str; 18] = [
    "stories260K.gguf",
    "stories260K-f16.gguf",
    "stories260K-q4_k_m.gguf",
    "tiny-f32.gguf",
    "tiny-f16.gguf",
    "tiny-bf16.gguf",
    "tiny-q8_0.gguf",
    "tiny-q6_k.gguf",
    "tiny-q5_k_m.gguf",
    "tiny-q5_1.gguf",
    "tiny-q5_0.gguf",
    "tiny-q4_k_m.gguf",
    "tiny-q4_1.gguf",
    "tiny-q4_0.gguf",
    "tiny-iq4_nl.gguf",
    "tiny-q3_k_m.gguf",
    "tiny-q2_k.gguf",
    "tiny-q8_0-split-00001-of-00003.gguf",
];

const LAYER_KINDS: [TensorKind; 13] = [
    TensorKind::AttnNorm,
    TensorKind::AttnQ,
    TensorKind::AttnK,
    TensorKind::AttnV,
    TensorKind::AttnOut,
    TensorKind::AttnQBias,
    TensorKind::AttnKBias,
    TensorKind::AttnVBias,
    TensorKind::AttnOutBias,
    TensorKind::FfnNorm,
    TensorKind::FfnGate,
    TensorKind::FfnDown,
    TensorKind::FfnUp,
];

/// A weight, its role, and the buffer type it landed in.
struct Landed {
    name: String,
    kind: TensorKind,
    desc: ggml_core::TensorDesc,
    buft: String,
    /// Its layer, `None` for the input and output tensors.
    layer: Option<usize>,
    read_only: bool,
}

fn landed(m: &Model) -> Vec<Landed> {
    let w = m.weights().expect("weights");
    let one = |w: &llama::Weight, kind, layer| Landed {
        name: w.desc.name.clone(),
        kind,
        desc: w.desc.clone(),
        buft: w.at.buffer.buffer_type().name().to_string(),
        layer,
        read_only: w.at.buffer.is_read_only(),
    };
    let mut out = vec![
        one(&w.tok_embd, TensorKind::TokenEmbd, None),
        one(&w.output_norm, TensorKind::OutputNorm, None),
        one(&w.output, TensorKind::Output, None),
    ];
    out.extend(
        w.rope_freqs
            .iter()
            .map(|r| one(r, TensorKind::RopeFreqs, None)),
    );
    for (il, l) in w.layers.iter().enumerate() {
        out.extend(
            LAYER_KINDS
                .iter()
                .filter_map(|&k| l.get(k).map(|x| one(x, k, Some(il)))),
        );
    }
    out
}

fn load(path: &Path, p: &ModelParams) -> Model {
    Model::load(path, p).unwrap_or_else(|e| panic!("{}: {e} ({p:?})", path.display()))
}

fn params(ngl: i32) -> ModelParams {
    ModelParams {
        n_gpu_layers: ngl,
        ..ModelParams::default()
    }
}

/// `ngl` layers on `gpu` (named explicitly, so that the expected buffer
/// type is that device's whatever else the machine has).
fn on(gpu: &Arc<dyn Device>, ngl: i32) -> ModelParams {
    ModelParams {
        devices: Some(vec![gpu.clone()]),
        ..params(ngl)
    }
}

/// The buffer type a weight should be in: the GPU's for offloaded layers
/// (the last `ngl`, counting the output as the layer after the last) when
/// the GPU can run the op that reads the weight (else the CPU's, as
/// llama.cpp falls back), the CPU's for the others and always for the
/// token embeddings.
fn expected_buft(l: &Landed, m: &Model, ngl: usize, gpu: Option<&Arc<dyn Device>>) -> String {
    let Some(gpu) = gpu else {
        return cpu_only_buft(l, m);
    };
    let n_layer = m.hparams.n_layer;
    let layer = match l.layer {
        Some(il) => il,
        None if l.kind == TensorKind::TokenEmbd => return "CPU".into(),
        None => n_layer,
    };
    let start = n_layer.saturating_sub(ngl);
    let offloaded = layer >= start && layer < start + ngl;
    let gpu_runs = llama::placement::probe_graph(l.kind, &l.desc, &m.hparams)
        .is_none_or(|p| gpu.supports_op(&p.graph, p.node));
    if offloaded && gpu_runs {
        gpu.buffer_type().name().into()
    } else {
        "CPU".into()
    }
}

/// The buffer type of a weight of a model without GPUs: the CPU's
/// repacked type when it takes the weight for its op, else the CPU's.
fn cpu_only_buft(l: &Landed, m: &Model) -> String {
    let probe = llama::placement::probe_graph(l.kind, &l.desc, &m.hparams);
    cpu_device()
        .extra_buffer_types()
        .into_iter()
        .find(|b| {
            probe
                .as_ref()
                .is_none_or(|p| b.supports_weight(&p.graph, p.node, p.weight))
        })
        .map_or("CPU".into(), |b| b.name().to_string())
}

#[test]
fn every_model_loads_with_any_layer_count_and_mmap_setting() {
    let Some(fx) = fixtures() else { return };
    llama::backend_init();
    // Without a GPU the models still load, on the CPU.
    let gpu_dev =
        ggml_core::registry::backend_by_name("Vulkan").and_then(|r| r.devices().into_iter().next());
    if gpu_dev.is_none() {
        assert!(
            !tests::vulkan_required(),
            "REQUIRE_VULKAN=1 but there is no Vulkan device"
        );
        eprintln!("no Vulkan device: checking CPU placement only");
    }
    for file in MODELS {
        let path = fx.join("models").join(file);
        for ngl in [0, 2, 99] {
            for use_mmap in [true, false] {
                let p = ModelParams {
                    load_mode: llama::LoadMode::from_flags(use_mmap, false),
                    devices: gpu_dev.clone().map(|d| vec![d]),
                    ..params(ngl)
                };
                let m = load(&path, &p);
                let n_layer = m.hparams.n_layer;
                let ngl_eff = (ngl as usize).min(n_layer + 1);
                let all = landed(&m);
                assert_eq!(all.len(), if file.starts_with("tiny") { 39 } else { 48 });
                let what = format!("{file}, ngl {ngl}, mmap {use_mmap}");
                for l in &all {
                    let want = expected_buft(l, &m, ngl_eff, gpu_dev.as_ref());
                    assert_eq!(l.buft, want, "{what}: {}", l.name);
                    // CPU weights are used in place from the mapping with
                    // mmap, read into memory of their own without.
                    if l.buft == "CPU" {
                        assert_eq!(l.read_only, use_mmap, "{what}: {}", l.name);
                    }
                }
                let n_gpu = all.iter().filter(|l| !l.buft.starts_with("CPU")).count();
                let n_repacked = all.iter().filter(|l| l.buft == "CPU_REPACK").count();
                assert_eq!(
                    m.stats.bytes_repacked > 0,
                    n_repacked > 0,
                    "{what}: {} bytes repacked for {n_repacked} weights",
                    m.stats.bytes_repacked
                );
                assert_eq!(
                    m.stats.bytes_uploaded > 0,
                    n_gpu > 0,
                    "{what}: {} bytes uploaded for {n_gpu} GPU weights",
                    m.stats.bytes_uploaded
                );
                if !use_mmap {
                    assert_eq!(m.stats.bytes_mapped, 0, "{what}");
                }
            }
        }
    }
}

fn weight_bytes(w: &llama::Weight) -> Vec<u8> {
    let mut b = vec![0u8; w.desc.nbytes()];
    w.at.buffer
        .get_tensor(w.at.offset, &mut b)
        .expect("read weight");
    b
}

#[test]
fn split_model_loads_as_one() {
    let Some(fx) = fixtures() else { return };
    // Weights in ggml's layout, to compare their bytes.
    let p = ModelParams {
        use_extra_bufts: false,
        ..params(0)
    };
    let whole = load(&fx.join("models/tiny-q8_0.gguf"), &p);
    let split = load(&fx.join("models/tiny-q8_0-split-00001-of-00003.gguf"), &p);
    assert_eq!(split.hparams.n_layer, whole.hparams.n_layer);
    assert_eq!(split.n_elements, whole.n_elements);
    let (a, b) = (landed(&whole), landed(&split));
    assert_eq!(b.len(), 39);
    let (wa, wb) = (whole.weights().unwrap(), split.weights().unwrap());
    assert_eq!(weight_bytes(&wa.tok_embd), weight_bytes(&wb.tok_embd));
    assert_eq!(weight_bytes(&wa.output), weight_bytes(&wb.output));
    for il in 0..whole.hparams.n_layer {
        for k in LAYER_KINDS {
            if let (Some(x), Some(y)) = (wa.layers[il].get(k), wb.layers[il].get(k)) {
                assert_eq!(weight_bytes(x), weight_bytes(y), "{}", x.desc.name);
            }
        }
    }
    // Three files, three mappings, each weight used in place.
    assert!(b.iter().all(|l| l.buft == "CPU" && l.read_only));
    assert_eq!(split.stats.bytes_mapped, whole.stats.bytes_mapped);
    assert_eq!(a.len(), b.len());
}

/// Buffer type per weight name, for the stories260K checks.
fn buft_of(m: &Model) -> Vec<(String, String)> {
    landed(m).into_iter().map(|l| (l.name, l.buft)).collect()
}

fn check_layers<'a>(m: &Model, what: &str, want: impl Fn(&str) -> &'a str) {
    for (name, buft) in buft_of(m) {
        assert_eq!(buft, want(&name), "{what}: {name}");
    }
}

/// The layer of a `blk.N.` tensor name.
fn layer_of(name: &str) -> Option<usize> {
    name.strip_prefix("blk.")?.split('.').next()?.parse().ok()
}

#[test]
fn stories260k_weights_by_layer_count() {
    let Some(fx) = fixtures() else { return };
    let Some(gpu) = vulkan_device() else { return };
    let g = gpu.buffer_type().name().to_string();
    assert_eq!(g, gpu.name(), "a device's buffer type carries its name");
    let path = fx.join("models/stories260K.gguf");

    let m = load(&path, &on(&gpu, 0));
    check_layers(&m, "ngl 0", |_| "CPU");
    assert!(landed(&m).iter().all(|l| l.read_only), "ngl 0: mapped");
    assert_eq!(m.stats.bytes_uploaded, 0);
    assert_eq!(m.plan.n_offloaded, 0);

    let gpu_name = g.as_str();
    // ngl 2: the last two of the five layers; the output stays on the CPU.
    let m = load(&path, &on(&gpu, 2));
    check_layers(&m, "ngl 2", |n| match layer_of(n) {
        Some(il) if il >= 3 => gpu_name,
        _ => "CPU",
    });
    assert_eq!((m.plan.n_offloaded, m.plan.output_offloaded), (2, false));
    // ngl 5 = n_layer: every repeating layer, not the output.
    let m = load(&path, &on(&gpu, 5));
    check_layers(&m, "ngl 5", |n| match layer_of(n) {
        Some(_) => gpu_name,
        None => "CPU",
    });
    assert_eq!((m.plan.n_offloaded, m.plan.output_offloaded), (5, false));
    // ngl 6 and above: the output too; the embeddings never.
    for ngl in [6, 99, -1] {
        let m = load(&path, &on(&gpu, ngl));
        check_layers(&m, &format!("ngl {ngl}"), |n| {
            if n == "token_embd.weight" {
                "CPU"
            } else {
                gpu_name
            }
        });
        assert_eq!((m.plan.n_offloaded, m.plan.output_offloaded), (5, true));
        assert!(m.stats.bytes_uploaded > 0);
    }
}

#[test]
fn tensor_overrides() {
    let Some(fx) = fixtures() else { return };
    let Some(gpu) = vulkan_device() else { return };
    let gpu_buft = gpu.buffer_type().name().to_string();
    let gpu_name = gpu_buft.as_str();
    let path = fx.join("models/stories260K.gguf");

    // ffn_.*=CPU with everything offloaded: every FFN tensor (norm included,
    // the pattern matches it) stays on the CPU.
    let p = ModelParams {
        tensor_buft_overrides: vec!["ffn_.*=CPU".parse().unwrap()],
        ..on(&gpu, 99)
    };
    let m = load(&path, &p);
    check_layers(&m, "ffn_.*=CPU", |n| {
        if n.contains("ffn_") || n == "token_embd.weight" {
            "CPU"
        } else {
            gpu_name
        }
    });

    // blk\.0\.=Vulkan0 with nothing offloaded: layer 0 goes to the GPU.
    let p = ModelParams {
        tensor_buft_overrides: vec![format!("blk\\.0\\.={gpu_name}").parse().unwrap()],
        ..on(&gpu, 0)
    };
    let m = load(&path, &p);
    check_layers(&m, "blk.0.=GPU", |n| {
        if layer_of(n) == Some(0) {
            gpu_name
        } else {
            "CPU"
        }
    });

    // An unknown buffer type is named in the error.
    let p = ModelParams {
        tensor_buft_overrides: vec!["ffn_.*=NoSuchGpu".parse().unwrap()],
        ..on(&gpu, 99)
    };
    let e = Model::load(&path, &p).unwrap_err().to_string();
    assert!(e.contains("unknown buffer type 'NoSuchGpu'"), "{e}");
}

#[test]
fn device_lists_and_split_modes() {
    let Some(fx) = fixtures() else { return };
    let Some(gpu) = vulkan_device() else { return };
    let path = fx.join("models/stories260K.gguf");
    let gpu_name = gpu.buffer_type().name().to_string();

    // An explicit empty list (`-dev none`): everything on the CPU.
    let p = ModelParams {
        devices: Some(Vec::new()),
        ..params(99)
    };
    let m = load(&path, &p);
    assert!(m.devices.is_empty());
    assert!(m.is_cpu_only());
    // No GPU: the weights the CPU's repacked type takes are repacked.
    for l in landed(&m) {
        assert_eq!(l.buft, cpu_only_buft(&l, &m), "-dev none: {}", l.name);
    }
    let p = ModelParams {
        use_extra_bufts: false,
        ..p
    };
    check_layers(&load(&path, &p), "-dev none --no-repack", |_| "CPU");

    // The CPU in the list counts as no GPU.
    let p = ModelParams {
        devices: Some(vec![cpu_device()]),
        ..params(99)
    };
    assert!(load(&path, &p).is_cpu_only());

    let one: Vec<Arc<dyn Device>> = vec![gpu.clone()];
    // Split mode none keeps main_gpu only.
    let p = ModelParams {
        devices: Some(one.clone()),
        split_mode: SplitMode::None,
        main_gpu: 0,
        ..params(99)
    };
    let m = load(&path, &p);
    assert_eq!(m.devices.len(), 1);
    assert!(
        buft_of(&m)
            .iter()
            .all(|(n, b)| (n == "token_embd.weight") == (b == "CPU")
                && (b == "CPU" || *b == gpu_name))
    );

    // main_gpu out of range: an error naming the device count.
    let p = ModelParams {
        devices: Some(one.clone()),
        split_mode: SplitMode::None,
        main_gpu: 1,
        ..params(99)
    };
    let e = Model::load(&path, &p).unwrap_err();
    assert!(matches!(e, LlamaError::InvalidParam(_)), "{e:?}");
    let e = e.to_string();
    assert!(
        e.contains("main_gpu = 1") && e.contains("there are 1 devices"),
        "{e}"
    );

    // Row split is refused clearly.
    let p = ModelParams {
        devices: Some(one),
        split_mode: SplitMode::Row,
        ..params(99)
    };
    let e = Model::load(&path, &p).unwrap_err();
    assert!(matches!(e, LlamaError::NotSupported(_)), "{e:?}");
    assert!(e.to_string().contains("not supported yet"), "{e}");
    assert!(e.to_string().contains("row"), "{e}");
}

#[test]
fn kv_cache_follows_the_layers() {
    let Some(fx) = fixtures() else { return };
    let Some(gpu) = vulkan_device() else { return };
    let gpu_name = gpu.buffer_type().name().to_string();
    let m = load(&fx.join("models/stories260K.gguf"), &on(&gpu, 2));
    for offload_kqv in [true, false] {
        let cp = ContextParams {
            offload_kqv,
            ..reference_ctx(64)
        };
        let ctx = Context::new(&m, cp).expect("context");
        assert!(ctx.kv().expect("a KV cache").swa.is_none());
        for il in 0..5 {
            let l = ctx
                .kv()
                .expect("a KV cache")
                .layer(il)
                .expect("cache layer");
            let want = if offload_kqv && il >= 3 {
                gpu_name.as_str()
            } else {
                "CPU"
            };
            for (what, t) in [("k", &l.k), ("v", l.v().expect("V cache"))] {
                assert_eq!(
                    t.at.buffer.buffer_type().name(),
                    want,
                    "offload_kqv {offload_kqv}: layer {il} {what}"
                );
            }
        }
    }
}

#[test]
fn repacked_weights_load_with_and_without_mmap() {
    let Some(fx) = fixtures() else { return };
    if cpu_device().extra_buffer_types().is_empty() {
        eprintln!("skipped: this CPU stores nothing repacked");
        return;
    }
    let path = fx.join("models/tiny-q4_0.gguf");
    let logits = |p: &ModelParams| {
        let m = load(&path, p);
        let n = landed(&m).iter().filter(|l| l.buft == "CPU_REPACK").count();
        assert!(n > 0, "nothing repacked ({p:?})");
        assert!(m.stats.bytes_repacked > 0 && m.stats.bytes_uploaded == 0);
        let cp = ContextParams {
            n_ctx: 32,
            n_threads: 2,
            n_threads_batch: 2,
            // llama.cpp made these references with flash attention off.
            flash_attn_type: llama::context::FlashAttnType::Disabled,
            ..ContextParams::default()
        };
        let mut ctx = Context::new(&m, cp).expect("context");
        tests::teacher_forced_logits(&mut ctx, &[1, 5, 9, 200, 7])
    };
    let mapped = logits(&tests::cpu_params());
    for check_tensors in [false, true] {
        let p = ModelParams {
            load_mode: llama::LoadMode::None,
            check_tensors,
            ..tests::cpu_params()
        };
        assert_eq!(
            logits(&p),
            mapped,
            "mmap off, check_tensors {check_tensors}"
        );
    }

    // A weight the repacked type cannot hold, sent there by an override:
    // an error naming the tensor and the type.
    let p = ModelParams {
        tensor_buft_overrides: vec!["token_embd=CPU_REPACK".parse().unwrap()],
        ..tests::cpu_params()
    };
    let e = Model::load(&path, &p).unwrap_err().to_string();
    assert!(
        e.contains("token_embd.weight") && e.contains("CPU_REPACK"),
        "{e}"
    );
}
