//! Qwen3.5 files: the fixtures load with their DeltaNet layers where
//! llama.cpp puts them, and wrong files (a recurrent-layer list of the
//! wrong length, `rope.dimension_sections` missing or leaving rotated
//! pairs to the fourth position component, head counts that do not
//! divide, V heads of another width than the state) are clear errors
//! naming the key.

use std::path::{Path, PathBuf};

use gguf::{Metadata, Value};
use llama::Model;
use tests::{cpu_params, fixtures, load_err};

/// Copies `src` to a scratch file after `edit` changes its metadata.
fn rewrite(src: &Path, name: &str, edit: impl FnOnce(&mut Metadata)) -> PathBuf {
    tests::rewrite(src, name, |m, _| edit(m))
}

fn model(name: &str) -> Option<PathBuf> {
    Some(fixtures()?.join(format!("models/tiny-{name}.gguf")))
}

#[test]
fn fixtures_load_with_their_delta_net_layers() {
    let cases: &[(&str, &[bool])] = &[
        ("qwen35-f32", &[true, true, true, false]),
        ("qwen35-q8_0", &[true, true, true, false]),
        ("qwen35moe-f32", &[true, false, true, false]),
        ("qwen35moe-q8_0", &[true, false, true, false]),
    ];
    for &(name, layers) in cases {
        let Some(p) = model(name) else { return };
        let m = Model::load(&p, &cpu_params()).unwrap_or_else(|e| panic!("{name}: {e}"));
        let hp = &m.hparams;
        assert_eq!(hp.recurrent_layers, layers, "{name}");
        // Conv state: 3 inputs of q, k and v (2 * 32 + 64 channels);
        // delta-rule state: 4 V heads of 16 x 16.
        assert_eq!(
            (hp.n_embd_r(), hp.n_embd_s()),
            (3 * 128, 4 * 16 * 16),
            "{name}"
        );
        assert_eq!((hp.n_rot, hp.n_embd_head_k), (8, 32), "{name}");
    }
}

#[test]
fn the_interval_stands_in_for_a_missing_layer_list() {
    let Some(src) = model("qwen35moe-f32") else {
        return;
    };
    let p = rewrite(&src, "q35-interval", |m| {
        m.remove("qwen35moe.attention.recurrent_layers");
    });
    let m = Model::load(&p, &cpu_params()).expect("load");
    assert_eq!(m.hparams.recurrent_layers, [true, false, true, false]);
    let p = rewrite(&src, "q35-interval0", |m| {
        m.remove("qwen35moe.attention.recurrent_layers");
        m.set("qwen35moe.full_attention_interval", Value::U32(0));
    });
    let e = load_err(&p);
    assert!(e.contains("qwen35moe.full_attention_interval"), "{e}");
    // Interval 4 makes layer 1 recurrent: its DeltaNet tensors are missing.
    let p = rewrite(&src, "q35-interval4", |m| {
        m.remove("qwen35moe.attention.recurrent_layers");
        m.set("qwen35moe.full_attention_interval", Value::U32(4));
    });
    let e = load_err(&p);
    assert!(e.contains("blk.1."), "{e}");
}

#[test]
fn recurrent_layer_list_of_wrong_length_is_named() {
    let Some(src) = model("qwen35-f32") else {
        return;
    };
    let p = rewrite(&src, "q35-recr-len", |m| {
        m.set("qwen35.attention.recurrent_layers", vec![true, true, false]);
    });
    let e = load_err(&p);
    assert!(
        e.contains("qwen35.attention.recurrent_layers") && e.contains("per layer"),
        "{e}"
    );
    let p = rewrite(&src, "q35-recr-type", |m| {
        m.set("qwen35.attention.recurrent_layers", Value::U32(3));
    });
    let e = load_err(&p);
    assert!(e.contains("qwen35.attention.recurrent_layers"), "{e}");
}

#[test]
fn rope_sections_are_required_and_checked() {
    let Some(src) = model("qwen35-f32") else {
        return;
    };
    let key = "qwen35.rope.dimension_sections";
    let p = rewrite(&src, "q35-no-sections", |m| {
        m.remove(key);
    });
    let e = load_err(&p);
    assert!(e.contains(key) && e.contains("not found"), "{e}");
    // Three sections of one pair each: the third rotated pair would take
    // the fourth component.
    let p = rewrite(&src, "q35-sections-short", |m| {
        m.set(key, vec![1i32, 1, 0, 1]);
    });
    let e = load_err(&p);
    assert!(e.contains(key) && e.contains("not supported"), "{e}");
    let p = rewrite(&src, "q35-sections-empty", |m| {
        m.set(key, vec![0i32, 0, 0, 0]);
    });
    let e = load_err(&p);
    assert!(e.contains(key), "{e}");
    // Sections of other sizes that still cover every pair load.
    let p = rewrite(&src, "q35-sections-other", |m| {
        m.set(key, vec![4i32, 4, 4, 0]);
    });
    assert!(Model::load(&p, &cpu_params()).is_ok());
}

#[test]
fn heads_that_do_not_divide_are_named() {
    let Some(src) = model("qwen35-f32") else {
        return;
    };
    for (key, v) in [
        ("qwen35.ssm.group_count", 3u32),
        ("qwen35.ssm.time_step_rank", 3),
        ("qwen35.attention.head_count_kv", 3),
    ] {
        let p = rewrite(&src, &format!("q35-{key}"), |m| {
            m.set(key, Value::U32(v));
        });
        let e = load_err(&p);
        let named =
            e.contains(key) || (key.ends_with("head_count_kv") && e.contains("n_head_kv = 3"));
        assert!(named, "{key}: {e}");
    }
    // V heads 16 wide against a state of 8.
    let p = rewrite(&src, "q35-state8", |m| {
        m.set("qwen35.ssm.state_size", Value::U32(8));
    });
    let e = load_err(&p);
    assert!(e.contains("qwen35.ssm.state_size"), "{e}");
}
