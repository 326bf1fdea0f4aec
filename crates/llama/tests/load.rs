//! Loading: placement, mmap and read paths, and every bad-input case giving a
//! clear error.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::{fixtures, scratch};
use gguf::{GgufFile, GgufWriter, Value};
use llama::{LlamaError, LoadMode, Model, ModelParams};

fn stories(fx: &std::path::Path) -> std::path::PathBuf {
    fx.join("models/stories260K.gguf")
}

/// The kinds of weight a repeating layer may hold.
const LAYER_KINDS: [llama::TensorKind; 13] = {
    use llama::TensorKind::*;
    [
        AttnNorm,
        AttnQ,
        AttnK,
        AttnV,
        AttnOut,
        AttnQBias,
        AttnKBias,
        AttnVBias,
        AttnOutBias,
        FfnNorm,
        FfnGate,
        FfnDown,
        FfnUp,
    ]
};

/// Every weight of a model (the output twice when tied to the embeddings).
fn all_weights(w: &llama::Weights) -> Vec<&llama::Weight> {
    let mut v = vec![&w.tok_embd, &w.output_norm, &w.output];
    v.extend(&w.rope_freqs);
    for l in &w.layers {
        v.extend(LAYER_KINDS.iter().filter_map(|&k| l.get(k)));
    }
    v
}

/// The default parameters in ggml's layout (`use_extra_bufts: false`) and
/// with the default placement, where the CPU may store weights repacked.
fn both_layouts() -> [ModelParams; 2] {
    [false, true].map(|use_extra_bufts| ModelParams {
        use_extra_bufts,
        ..ModelParams::default()
    })
}

/// With mmap the CPU's weights are used in place from the mapping; without
/// it they are read into host buffers; the weights hold the same bytes
/// either way. Weights repacked for the CPU's matrix kernels (without a
/// GPU, for the types its ISA packs) cannot be read back, so the bytes are
/// compared with ggml's layout (`use_extra_bufts: false`), and with the
/// default placement the repacked weights are the same either way and
/// every other weight is compared.
#[test]
fn loads_with_and_without_mmap() {
    let Some(fx) = fixtures() else { return };
    for base in both_layouts() {
        let use_extra_bufts = base.use_extra_bufts;
        let m = Model::load(stories(&fx), &base).expect("mmap load");
        assert_eq!(m.hparams.n_layer, 5);
        assert_eq!(m.hparams.n_ctx_train, 512);
        assert!(
            m.stats.bytes_mapped > 0,
            "weights should be used in place from the mapping"
        );
        assert_eq!(m.stats.bytes_read, 0);
        let w = m.weights().unwrap();
        assert_eq!(w.layers.len(), 5);
        let p = ModelParams {
            load_mode: LoadMode::None,
            ..base
        };
        let m2 = Model::load(stories(&fx), &p).expect("read load");
        assert_eq!(m2.stats.bytes_mapped, 0);
        assert_eq!(m2.stats.bytes_read, m.stats.bytes_mapped);
        assert_eq!(m2.stats.bytes_repacked, m.stats.bytes_repacked);
        if !use_extra_bufts {
            assert_eq!(m.stats.bytes_repacked, 0);
        }
        let w2 = m2.weights().unwrap();
        // The CPU's extra buffer types store weights in layouts of their own.
        llama::backend_init();
        let extra: Vec<String> = ggml_core::registry::device_by_kind(ggml_core::DeviceKind::Cpu)
            .expect("a CPU device")
            .extra_buffer_types()
            .iter()
            .map(|b| b.name().to_string())
            .collect();
        let (mut seen, mut compared) = (0, 0);
        for (a, b) in all_weights(w).into_iter().zip(all_weights(w2)) {
            let (ba, bb) = (a.at.buffer.buffer_type(), b.at.buffer.buffer_type());
            assert_eq!(a.desc.name, b.desc.name);
            assert_eq!(ba.name(), bb.name(), "{}", a.desc.name);
            seen += 1;
            if extra.iter().any(|e| e == ba.name()) {
                assert!(use_extra_bufts, "{} repacked", a.desc.name);
                continue;
            }
            let mut x = vec![0u8; a.desc.nbytes()];
            let mut y = vec![0u8; b.desc.nbytes()];
            a.at.buffer.get_tensor(a.at.offset, &mut x).unwrap();
            b.at.buffer.get_tensor(b.at.offset, &mut y).unwrap();
            assert_eq!(x, y, "{}", a.desc.name);
            compared += 1;
        }
        // Every weight without repacking; at least the norms with it.
        assert!(compared >= 2 + 2 * w.layers.len(), "{compared} compared");
        if !use_extra_bufts {
            assert_eq!(compared, seen, "every weight compared");
        }
    }
}

#[test]
fn split_model_loads_as_one() {
    let Some(fx) = fixtures() else { return };
    let m = Model::load(
        fx.join("models/tiny-q8_0-split-00001-of-00003.gguf"),
        &ModelParams::default(),
    )
    .expect("split");
    assert_eq!(m.hparams.n_layer, 4);
    assert!(m.weights().is_ok());
}

#[test]
fn truncated_file_is_a_bounds_error() {
    let Some(fx) = fixtures() else { return };
    let bytes = std::fs::read(stories(&fx)).unwrap();
    let dir = scratch("trunc");
    let p = dir.join("t.gguf");
    std::fs::write(&p, &bytes[..bytes.len() - 1000]).unwrap();
    let e = Model::load(&p, &ModelParams::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("is not within the file bounds"), "{e}");
    assert!(e.contains("output.weight"), "{e}");
}

#[test]
fn check_tensors_names_the_bad_tensor() {
    let Some(fx) = fixtures() else { return };
    let src = stories(&fx);
    let f = GgufFile::open(&src).unwrap();
    let info = f.tensor("blk.1.attn_q.weight").unwrap().clone();
    let off = f.tensor_file_offset(&info) as usize;
    drop(f);
    let mut bytes = std::fs::read(&src).unwrap();
    bytes[off + 40..off + 44].copy_from_slice(&f32::NAN.to_le_bytes());
    let dir = scratch("nan");
    let p = dir.join("nan.gguf");
    std::fs::write(&p, &bytes).unwrap();
    assert!(
        Model::load(&p, &ModelParams::default()).is_ok(),
        "without check_tensors the data is not inspected"
    );
    for use_mmap in [true, false] {
        let params = ModelParams {
            check_tensors: true,
            load_mode: LoadMode::from_flags(use_mmap, false),
            ..ModelParams::default()
        };
        let e = Model::load(&p, &params).unwrap_err();
        assert!(matches!(e, LlamaError::TensorData { .. }), "{e}");
        assert!(e.to_string().contains("blk.1.attn_q.weight"), "{e}");
    }
}

fn with_metadata(
    fx: &std::path::Path,
    name: &str,
    edit: impl FnOnce(&mut gguf::Metadata),
) -> std::path::PathBuf {
    let f = GgufFile::open(stories(fx)).unwrap();
    let mut md = f.metadata().clone();
    edit(&mut md);
    let dir = scratch(name);
    let p = dir.join("m.gguf");
    f.save_with_metadata(&p, &md).unwrap();
    p
}

#[test]
fn unknown_architecture_is_named() {
    let Some(fx) = fixtures() else { return };
    let p = with_metadata(&fx, "arch", |md| {
        md.set("general.architecture", "mamba9");
    });
    let e = Model::load(&p, &ModelParams::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown model architecture: 'mamba9'"), "{e}");
}

#[test]
fn kv_override_is_visible_and_checked() {
    let Some(fx) = fixtures() else { return };
    let params = ModelParams {
        kv_overrides: vec!["llama.context_length=int:256".parse().unwrap()],
        vocab_only: true,
        ..ModelParams::default()
    };
    let m = Model::load(stories(&fx), &params).unwrap();
    assert_eq!(m.hparams.n_ctx_train, 256);
    assert!(m.weights().is_err());
    let bad = ModelParams {
        kv_overrides: vec!["llama.feed_forward_length=int:100".parse().unwrap()],
        ..ModelParams::default()
    };
    let e = Model::load(stories(&fx), &bad).unwrap_err().to_string();
    assert!(
        e.contains("blk.0.ffn_gate.weight") && e.contains("[64, 100]") && e.contains("[64, 172]"),
        "{e}"
    );
    let gqa = ModelParams {
        kv_overrides: vec!["llama.attention.head_count_kv=int:3".parse().unwrap()],
        ..ModelParams::default()
    };
    let e = Model::load(stories(&fx), &gqa).unwrap_err().to_string();
    assert!(
        e.contains("n_head_kv = 3 does not divide n_head = 8"),
        "{e}"
    );
    let typed = ModelParams {
        kv_overrides: vec!["llama.context_length=str:big".parse().unwrap()],
        ..ModelParams::default()
    };
    assert!(Model::load(stories(&fx), &typed).is_err());
}

#[test]
fn missing_and_extra_tensors() {
    let Some(fx) = fixtures() else { return };
    let f = GgufFile::open(stories(&fx)).unwrap();
    let keep: Vec<_> = f
        .tensors()
        .iter()
        .filter(|t| t.name != "blk.2.ffn_up.weight")
        .cloned()
        .collect();
    let dir = scratch("missing");
    let p = dir.join("m.gguf");
    let mut w = GgufWriter::new(std::fs::File::create(&p).unwrap(), f.metadata(), &keep).unwrap();
    for t in &keep {
        w.write_tensor(&t.name, f.tensor_data(t).unwrap()).unwrap();
    }
    w.finish().unwrap();
    let e = Model::load(&p, &ModelParams::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("missing tensor 'blk.2.ffn_up.weight'"), "{e}");
    // A layer count below the tensors leaves tensors unused.
    let fewer = ModelParams {
        kv_overrides: vec!["llama.block_count=int:4".parse().unwrap()],
        ..ModelParams::default()
    };
    let e = Model::load(stories(&fx), &fewer).unwrap_err().to_string();
    assert!(e.contains("wrong number of tensors"), "{e}");
}

#[test]
fn cancel_from_progress_callback() {
    let Some(fx) = fixtures() else { return };
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let params = ModelParams {
        load_mode: LoadMode::None,
        progress_callback: Some(Arc::new(move |_| c.fetch_add(1, Ordering::Relaxed) < 3)),
        ..ModelParams::default()
    };
    let e = Model::load(stories(&fx), &params).unwrap_err();
    assert!(matches!(e, LlamaError::Cancelled), "{e}");
    assert_eq!(calls.load(Ordering::Relaxed), 4);
    // Progress reaches 1.0 on a full load.
    let last = Arc::new(std::sync::Mutex::new(0f32));
    let l = last.clone();
    let params = ModelParams {
        progress_callback: Some(Arc::new(move |f| {
            *l.lock().unwrap() = f;
            true
        })),
        ..ModelParams::default()
    };
    Model::load(stories(&fx), &params).unwrap();
    assert_eq!(*last.lock().unwrap(), 1.0);
}

/// A dry run plans the memory of every buffer type as the load allocates
/// it, and allocates nothing; in ggml's layout the plan is the file's
/// tensor bytes (repacked weights take their own, larger layout).
#[test]
fn dry_run_plans_without_allocating() {
    let Some(fx) = fixtures() else { return };
    for params in both_layouts() {
        let use_extra_bufts = params.use_extra_bufts;
        let m = Model::load(
            stories(&fx),
            &ModelParams {
                dry_run: true,
                ..params.clone()
            },
        )
        .unwrap();
        assert!(m.weights().is_err());
        assert_eq!(m.stats.bytes_mapped + m.stats.bytes_read, 0);
        // Read into buffers of the planned types (a mapped load names its
        // buffer `CPU_Mapped` instead).
        let read = ModelParams {
            load_mode: LoadMode::None,
            ..params.clone()
        };
        let loaded = Model::load(stories(&fx), &read).unwrap();
        // The same buffer types, each holding the planned bytes and at most
        // the alignment padding between its tensors.
        let mut slack: std::collections::BTreeMap<String, usize> = Default::default();
        for wt in all_weights(loaded.weights().unwrap()) {
            let bt = wt.at.buffer.buffer_type();
            *slack.entry(bt.name().to_string()).or_default() += bt.alignment();
        }
        assert_eq!(
            m.memory_plan.keys().collect::<Vec<_>>(),
            loaded.memory_plan.keys().collect::<Vec<_>>()
        );
        for (buft, &planned) in &m.memory_plan {
            let got = loaded.memory_plan[buft];
            assert!(
                planned <= got && got <= planned + slack[buft],
                "{buft}: planned {planned} bytes, allocated {got}"
            );
        }
        let total: usize = m.memory_plan.values().sum();
        if !use_extra_bufts {
            assert_eq!(total as u64, m.size_bytes);
        }
    }
}

#[test]
fn tensor_overrides() {
    let Some(fx) = fixtures() else { return };
    let p = ModelParams {
        tensor_buft_overrides: vec!["ffn_.*=NoSuchBuffer".parse().unwrap()],
        ..ModelParams::default()
    };
    let e = Model::load(stories(&fx), &p).unwrap_err().to_string();
    assert!(e.contains("unknown buffer type 'NoSuchBuffer'"), "{e}");
    let p = ModelParams {
        tensor_buft_overrides: vec!["ffn_.*=CPU".parse().unwrap()],
        ..ModelParams::default()
    };
    let m = Model::load(stories(&fx), &p).unwrap();
    let w = m.weights().unwrap();
    let up = w.layers[0].get(llama::TensorKind::FfnUp).unwrap();
    assert_eq!(up.at.buffer.buffer_type().name(), "CPU");
}

#[test]
fn row_split_is_reported_as_unsupported_with_gpus() {
    llama::backend_init();
    let gpus: Vec<_> = ggml_core::registry::devices()
        .into_iter()
        .filter(|d| d.kind() != ggml_core::DeviceKind::Cpu)
        .collect();
    let Some(fx) = fixtures() else { return };
    let p = ModelParams {
        split_mode: llama::SplitMode::Row,
        n_gpu_layers: 99,
        ..ModelParams::default()
    };
    let r = Model::load(stories(&fx), &p);
    if gpus.is_empty() {
        assert!(r.is_ok(), "without GPUs the split mode does not matter");
    } else {
        let e = r.unwrap_err().to_string();
        assert!(e.contains("split_mode row is not supported yet"), "{e}");
        let p = ModelParams {
            split_mode: llama::SplitMode::None,
            main_gpu: gpus.len() as i32,
            ..ModelParams::default()
        };
        let e = Model::load(stories(&fx), &p).unwrap_err().to_string();
        assert!(
            e.contains(&format!("there are {} devices", gpus.len())),
            "{e}"
        );
    }
}

#[test]
fn wrong_metadata_type_names_key() {
    let Some(fx) = fixtures() else { return };
    let p = with_metadata(&fx, "mdtype", |md| {
        md.set("llama.block_count", Value::from("five"));
    });
    let e = Model::load(&p, &ModelParams::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("llama.block_count"), "{e}");
}
