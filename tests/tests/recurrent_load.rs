//! Mamba, Mamba-2 and Granite 4 hybrid files: the fixtures load with their
//! recurrent layers where llama.cpp puts them, and wrong files (a missing
//! SSM tensor, a zero state size, head counts that do not divide, a
//! per-layer array of the wrong length) are clear errors naming the key or
//! tensor.

use std::path::{Path, PathBuf};

use gguf::{GgufFile, GgufWriter, Metadata, TensorInfo, Value};
use llama::Model;
use tests::{cpu_params, fixtures, scratch_dir};

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

fn model(name: &str) -> Option<PathBuf> {
    Some(fixtures()?.join(format!("models/tiny-{name}.gguf")))
}

#[test]
fn fixtures_load_with_their_recurrent_layers() {
    let cases: &[(&str, &[bool], usize, usize)] = &[
        ("mamba-f32", &[true, true], 3 * 128, 16 * 128),
        ("mamba-q8_0", &[true, true], 3 * 128, 16 * 128),
        ("mamba2-f32", &[true, true], 3 * 192, 16 * 128),
        ("mamba2-q8_0", &[true, true], 3 * 192, 16 * 128),
        (
            "granitehybrid-f32",
            &[true, true, false, true],
            3 * 160,
            16 * 128,
        ),
        (
            "granitehybrid-q8_0",
            &[true, true, false, true],
            3 * 160,
            16 * 128,
        ),
    ];
    for &(name, layers, n_r, n_s) in cases {
        let Some(p) = model(name) else { return };
        let m = Model::load(&p, &cpu_params()).unwrap_or_else(|e| panic!("{name}: {e}"));
        let hp = &m.hparams;
        assert_eq!(hp.recurrent_layers, layers, "{name}");
        assert_eq!((hp.n_embd_r(), hp.n_embd_s()), (n_r, n_s), "{name}");
        assert_eq!(hp.ssm_d_conv, 4, "{name}");
    }
    let Some(p) = model("granitehybrid-f32") else {
        return;
    };
    let m = Model::load(&p, &cpu_params()).expect("load");
    let hp = &m.hparams;
    assert_eq!(
        (hp.n_head(2), hp.n_head_kv(2), hp.n_embd_head_k),
        (4, 2, 16)
    );
    assert_eq!((hp.n_expert, hp.n_ff_exp(0), hp.n_ff_shexp), (8, 32, 64));
    assert!(!hp.use_rope);
    assert_eq!(
        (hp.f_embedding_scale, hp.f_residual_scale, hp.f_logit_scale),
        (12.0, 0.5, 8.0)
    );
    assert_eq!(hp.f_attention_scale, 0.0625);
}

#[test]
fn missing_ssm_tensor_is_named() {
    let Some(src) = model("mamba2-f32") else {
        return;
    };
    let p = rewrite(&src, "rs-missing-conv", |_, t| {
        t.retain(|x| x.0 != "blk.1.ssm_conv1d.weight")
    });
    let e = load_err(&p);
    assert!(e.contains("blk.1.ssm_conv1d.weight"), "{e}");

    let Some(src) = model("mamba-f32") else {
        return;
    };
    let p = rewrite(&src, "rs-missing-a", |_, t| {
        t.retain(|x| x.0 != "blk.0.ssm_a")
    });
    let e = load_err(&p);
    assert!(e.contains("blk.0.ssm_a"), "{e}");
}

#[test]
fn hybrid_layers_need_their_own_tensors_only() {
    let Some(src) = model("granitehybrid-f32") else {
        return;
    };
    // An attention layer without its query projection.
    let p = rewrite(&src, "rs-missing-q", |_, t| {
        t.retain(|x| x.0 != "blk.2.attn_q.weight")
    });
    let e = load_err(&p);
    assert!(e.contains("blk.2.attn_q.weight"), "{e}");
    // A recurrent layer without its SSM output projection.
    let p = rewrite(&src, "rs-missing-out", |_, t| {
        t.retain(|x| x.0 != "blk.3.ssm_out.weight")
    });
    let e = load_err(&p);
    assert!(e.contains("blk.3.ssm_out.weight"), "{e}");
    // Turning layer 2 recurrent leaves its attention tensors unread.
    let p = rewrite(&src, "rs-all-recurrent", |m, _| {
        m.set("granitehybrid.attention.head_count_kv", vec![0u32, 0, 0, 0]);
    });
    let e = load_err(&p);
    assert!(e.contains("blk.2."), "{e}");
}

#[test]
fn zero_state_size_is_named() {
    for name in ["mamba-f32", "mamba2-f32", "granitehybrid-f32"] {
        let Some(src) = model(name) else { return };
        let arch = name.trim_end_matches("-f32");
        let key = format!("{arch}.ssm.state_size");
        let p = rewrite(&src, &format!("rs-state0-{arch}"), |m, _| {
            m.set(key.as_str(), Value::U32(0));
        });
        let e = load_err(&p);
        assert!(e.contains(&key), "{e}");
    }
}

#[test]
fn heads_that_do_not_divide_are_named() {
    let Some(src) = model("mamba2-f32") else {
        return;
    };
    // 128 inner channels do not split into 3 heads.
    let p = rewrite(&src, "rs-heads3", |m, _| {
        m.set("mamba2.ssm.time_step_rank", Value::U32(3));
    });
    let e = load_err(&p);
    assert!(e.contains("mamba2.ssm.time_step_rank"), "{e}");
    // Nor into 3 groups.
    let p = rewrite(&src, "rs-groups3", |m, _| {
        m.set("mamba2.ssm.group_count", Value::U32(3));
    });
    let e = load_err(&p);
    assert!(e.contains("mamba2.ssm.group_count"), "{e}");

    let Some(src) = model("granitehybrid-f32") else {
        return;
    };
    let p = rewrite(&src, "rs-kv3", |m, _| {
        m.set("granitehybrid.attention.head_count_kv", vec![0u32, 0, 3, 0]);
    });
    let e = load_err(&p);
    assert!(e.contains("n_head_kv = 3"), "{e}");
}

#[test]
fn per_layer_array_of_wrong_length_is_named() {
    let Some(src) = model("granitehybrid-f32") else {
        return;
    };
    let p = rewrite(&src, "rs-kv-len", |m, _| {
        m.set("granitehybrid.attention.head_count_kv", vec![0u32, 0, 2]);
    });
    let e = load_err(&p);
    assert!(
        e.contains("granitehybrid.attention.head_count_kv") && e.contains("per layer"),
        "{e}"
    );
}

#[test]
fn inner_width_other_than_twice_the_embedding_is_refused() {
    let Some(src) = model("mamba-f32") else {
        return;
    };
    let p = rewrite(&src, "rs-expand", |m, _| {
        m.set("mamba.ssm.inner_size", Value::U32(192));
    });
    let e = load_err(&p);
    assert!(e.contains("mamba.ssm.inner_size"), "{e}");
}

#[test]
fn per_head_weights_are_placed_whatever_the_head_count() {
    let Some(src) = model("mamba2-f32") else {
        return;
    };
    let m = Model::load(&src, &cpu_params()).expect("load");
    // 48 heads (Granite 4.0 H Tiny) do not divide a probe of 512 tokens.
    for (kind, ne) in [
        (llama::TensorKind::SsmD, [1usize, 48]),
        (llama::TensorKind::SsmNorm, [96, 3]),
    ] {
        let desc = ggml_core::TensorDesc::new("w", ggml_core::Type::F32, &ne);
        assert!(
            llama::placement::probe_graph(kind, &desc, &m.hparams).is_some(),
            "{kind:?} {ne:?}"
        );
    }
}

#[test]
fn lfm2_loads_its_convolution_and_attention_layers() {
    for name in ["lfm2-f32", "lfm2-q8_0"] {
        let Some(p) = model(name) else { return };
        let m = Model::load(&p, &cpu_params()).unwrap_or_else(|e| panic!("{name}: {e}"));
        let hp = &m.hparams;
        assert_eq!(
            hp.recurrent_layers,
            [true, true, false, true, false],
            "{name}"
        );
        // l_cache 3: two inputs of each of the 64 channels per sequence.
        assert_eq!((hp.ssm_d_conv, hp.n_embd_r(), hp.n_embd_s()), (3, 128, 0));
        assert_eq!(
            (hp.n_head(2), hp.n_head_kv(2), hp.n_embd_head_k),
            (4, 2, 16)
        );
        let w = m.weights().expect("weights");
        assert_eq!(w.output_norm.desc.name, "token_embd_norm.weight");
    }
}

#[test]
fn lfm2_bad_convolution_sizes_are_named() {
    let Some(src) = model("lfm2-f32") else {
        return;
    };
    // A cache length the kernels were not written for.
    let p = rewrite(&src, "lfm2-lcache4", |m, _| {
        m.set("lfm2.shortconv.l_cache", Value::U32(4));
    });
    let e = load_err(&p);
    assert!(e.contains("blk.0.shortconv.conv.weight"), "{e}");
    // No previous input to keep.
    let p = rewrite(&src, "lfm2-lcache1", |m, _| {
        m.set("lfm2.shortconv.l_cache", Value::U32(1));
    });
    let e = load_err(&p);
    assert!(e.contains("lfm2.shortconv.l_cache"), "{e}");
    // The key missing.
    let p = rewrite(&src, "lfm2-lcache-missing", |m, _| {
        m.remove("lfm2.shortconv.l_cache");
    });
    let e = load_err(&p);
    assert!(e.contains("lfm2.shortconv.l_cache"), "{e}");
    // A kernel of the wrong width in one layer.
    let p = rewrite(&src, "lfm2-conv-shape", |_, t| {
        for x in t
            .iter_mut()
            .filter(|x| x.0 == "blk.3.shortconv.conv.weight")
        {
            x.1 = vec![2, 64];
            x.3.truncate(2 * 64 * 4);
        }
    });
    let e = load_err(&p);
    assert!(e.contains("blk.3.shortconv.conv.weight"), "{e}");
}

#[test]
fn lfm2_layer_list_of_the_wrong_length_is_named() {
    let Some(src) = model("lfm2-f32") else {
        return;
    };
    let p = rewrite(&src, "lfm2-kv-len", |m, _| {
        m.set("lfm2.attention.head_count_kv", vec![0u32, 0, 2, 0]);
    });
    let e = load_err(&p);
    assert!(
        e.contains("lfm2.attention.head_count_kv") && e.contains("per layer"),
        "{e}"
    );
    // Every layer attention: no convolution layer, and the convolution
    // tensors unread.
    let p = rewrite(&src, "lfm2-no-conv", |m, _| {
        m.set("lfm2.attention.head_count_kv", vec![2u32, 2, 2, 2, 2]);
    });
    let e = load_err(&p);
    assert!(e.contains("lfm2.attention.head_count_kv"), "{e}");
    // Layer 2 turned into a convolution has none of its tensors.
    let p = rewrite(&src, "lfm2-conv-missing", |m, _| {
        m.set("lfm2.attention.head_count_kv", vec![0u32, 0, 0, 0, 2]);
    });
    let e = load_err(&p);
    assert!(e.contains("blk.2.shortconv"), "{e}");
    // The final norm missing.
    let p = rewrite(&src, "lfm2-no-final-norm", |_, t| {
        t.retain(|x| x.0 != "token_embd_norm.weight")
    });
    let e = load_err(&p);
    assert!(e.contains("token_embd_norm.weight"), "{e}");
    // A sliding window is refused by name.
    let p = rewrite(&src, "lfm2-swa", |m, _| {
        m.set("lfm2.attention.sliding_window", Value::U32(128));
    });
    let e = load_err(&p);
    assert!(e.contains("lfm2.attention.sliding_window"), "{e}");
}
