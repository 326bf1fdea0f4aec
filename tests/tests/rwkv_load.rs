//! RWKV-6 and RWKV-7 files: the fixtures load with their states sized as
//! llama.cpp sizes them, and wrong files (a head size that does not divide
//! the width, a token shift count the graphs do not take, a missing or
//! misshapen tensor, a missing key) are clear errors naming the key or
//! tensor.

use std::path::PathBuf;

use gguf::Value;
use llama::Model;
use tests::{cpu_params, fixtures, load_err, rewrite};

fn model(name: &str) -> Option<PathBuf> {
    Some(fixtures()?.join(format!("models/tiny-{name}.gguf")))
}

#[test]
fn fixtures_load_with_their_state_sizes() {
    for (name, n_layer) in [
        ("rwkv6-f32", 3),
        ("rwkv6-q8_0", 3),
        ("rwkv7-f32", 2),
        ("rwkv7-q8_0", 2),
    ] {
        let Some(p) = model(name) else { return };
        let m = Model::load(&p, &cpu_params()).unwrap_or_else(|e| panic!("{name}: {e}"));
        let hp = &m.hparams;
        assert_eq!(hp.recurrent_layers, vec![true; n_layer], "{name}");
        assert_eq!(
            (hp.n_embd_r(), hp.n_embd_s()),
            (2 * 128, 64 * 128),
            "{name}"
        );
        assert_eq!(hp.rwkv.head_size, 64, "{name}");
        assert_eq!(hp.f_norm_eps, 1e-5, "{name}");
    }
    let Some(p) = model("rwkv6-f32") else { return };
    let m = Model::load(&p, &cpu_params()).expect("load");
    let r = &m.hparams.rwkv;
    assert_eq!(
        (
            r.time_mix_extra_dim,
            r.time_decay_extra_dim,
            r.rescale_every_n_layers
        ),
        (16, 32, 2)
    );
    let Some(p) = model("rwkv7-f32") else { return };
    let m = Model::load(&p, &cpu_params()).expect("load");
    let r = &m.hparams.rwkv;
    assert_eq!(
        (
            r.n_lora_decay,
            r.n_lora_iclr,
            r.n_lora_value_res_mix,
            r.n_lora_gate
        ),
        (8, 8, 8, 16)
    );
}

#[test]
fn head_sizes_that_do_not_divide_the_width_are_named() {
    for arch in ["rwkv6", "rwkv7"] {
        let Some(src) = model(&format!("{arch}-f32")) else {
            return;
        };
        let key = format!("{arch}.wkv.head_size");
        for hs in [0u32, 48, 256] {
            let p = rewrite(&src, &format!("rwkv-hs{hs}-{arch}"), |m, _| {
                m.set(key.as_str(), Value::U32(hs));
            });
            let e = load_err(&p);
            assert!(e.contains(&key) && e.contains(&hs.to_string()), "{e}");
        }
    }
}

#[test]
fn token_shift_counts_other_than_two_are_refused_by_name() {
    let Some(src) = model("rwkv7-f32") else {
        return;
    };
    let p = rewrite(&src, "rwkv-shift3", |m, _| {
        m.set("rwkv7.token_shift_count", Value::U32(3));
    });
    let e = load_err(&p);
    assert!(
        e.contains("rwkv7.token_shift_count") && e.contains("not supported"),
        "{e}"
    );
}

#[test]
fn missing_keys_are_named() {
    let Some(src) = model("rwkv6-f32") else {
        return;
    };
    for key in [
        "rwkv6.attention.layer_norm_epsilon",
        "rwkv6.time_mix_extra_dim",
        "rwkv6.wkv.head_size",
    ] {
        let p = rewrite(&src, &format!("rwkv-no-{key}"), |m, _| {
            m.remove(key);
        });
        let e = load_err(&p);
        assert!(e.contains(key), "{key}: {e}");
    }
    let Some(src) = model("rwkv7-f32") else {
        return;
    };
    let key = "rwkv7.attention.decay_lora_rank";
    let p = rewrite(&src, "rwkv-no-decay-rank", |m, _| {
        m.remove(key);
    });
    let e = load_err(&p);
    assert!(e.contains(key), "{e}");
}

#[test]
fn missing_tensors_are_named() {
    for (name, tensor) in [
        ("rwkv6-f32", "blk.2.time_mix_first.weight"),
        ("rwkv6-f32", "token_embd_norm.bias"),
        ("rwkv6-f32", "blk.0.channel_mix_receptance.weight"),
        ("rwkv7-f32", "blk.1.time_mix_k_k.weight"),
        ("rwkv7-f32", "output_norm.bias"),
        ("rwkv7-f32", "blk.0.attn_norm_2.bias"),
    ] {
        let Some(src) = model(name) else { return };
        let p = rewrite(&src, &format!("rwkv-missing-{tensor}"), |_, t| {
            t.retain(|x| x.0 != tensor)
        });
        let e = load_err(&p);
        assert!(e.contains(tensor), "{tensor}: {e}");
    }
}

#[test]
fn misshapen_tensors_are_named() {
    let Some(src) = model("rwkv7-f32") else {
        return;
    };
    // A gate projection of rank 8 where the key says 16.
    let p = rewrite(&src, "rwkv-gate-rank", |_, t| {
        for x in t.iter_mut().filter(|x| x.0 == "blk.1.time_mix_g1.weight") {
            x.1 = vec![128, 8];
            x.3.truncate(128 * 8 * 4);
        }
    });
    let e = load_err(&p);
    assert!(
        e.contains("blk.1.time_mix_g1.weight") && e.contains("shape"),
        "{e}"
    );
    let Some(src) = model("rwkv6-f32") else {
        return;
    };
    // Six fused lerps where RWKV-6 has five.
    let p = rewrite(&src, "rwkv-lerp6", |_, t| {
        for x in t
            .iter_mut()
            .filter(|x| x.0 == "blk.0.time_mix_lerp_fused.weight")
        {
            x.1 = vec![128, 1, 1, 6];
            x.3.extend(vec![0u8; 128 * 4]);
        }
    });
    let e = load_err(&p);
    assert!(e.contains("blk.0.time_mix_lerp_fused.weight"), "{e}");
}
