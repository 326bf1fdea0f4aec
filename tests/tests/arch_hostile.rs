//! Files of a known architecture that are wrong: a missing or misshaped
//! tensor, a bad sliding-window setting, hyperparameters whose products
//! overflow, expert counts that disagree with the tensors or each other.
//! Each must be a clear error naming the key or tensor, never a panic.

use std::path::PathBuf;

use gguf::Value;
use tests::{fixtures, load_err, rewrite};

fn gemma3() -> Option<PathBuf> {
    Some(fixtures()?.join("models/tiny-gemma3-f32.gguf"))
}

#[test]
fn missing_tensor_is_named() {
    let Some(src) = gemma3() else { return };
    let p = rewrite(&src, "missing", |_, t| {
        t.retain(|x| x.0 != "blk.2.attn_q_norm.weight")
    });
    let e = load_err(&p);
    assert!(e.contains("blk.2.attn_q_norm.weight"), "{e}");
}

#[test]
fn misshaped_tensor_is_named() {
    let Some(src) = gemma3() else { return };
    let p = rewrite(&src, "misshaped", |_, t| {
        let x = t
            .iter_mut()
            .find(|x| x.0 == "blk.1.post_ffw_norm.weight")
            .expect("tensor");
        let half = x.1[0] / 2;
        x.1 = vec![half];
        x.3.truncate(half as usize * 4);
    });
    let e = load_err(&p);
    assert!(
        e.contains("blk.1.post_ffw_norm.weight") && e.contains("shape"),
        "{e}"
    );
}

#[test]
fn swa_pattern_of_wrong_length_is_named() {
    let Some(src) = gemma3() else { return };
    let p = rewrite(&src, "pattern", |m, _| {
        m.set(
            "gemma3.attention.sliding_window_pattern",
            vec![true, false, true],
        );
    });
    let e = load_err(&p);
    assert!(
        e.contains("gemma3.attention.sliding_window_pattern") && e.contains("per layer"),
        "{e}"
    );
}

#[test]
fn zero_window_is_named() {
    let Some(src) = gemma3() else { return };
    let p = rewrite(&src, "window0", |m, _| {
        m.set("gemma3.attention.sliding_window", Value::U32(0));
    });
    let e = load_err(&p);
    assert!(e.contains("gemma3.attention.sliding_window"), "{e}");
}

#[test]
fn overflowing_head_width_is_an_error() {
    let Some(src) = gemma3() else { return };
    let p = rewrite(&src, "overflow", |m, _| {
        m.set("gemma3.attention.key_length", Value::U64(u64::MAX / 2));
        m.set("gemma3.attention.value_length", Value::U64(u64::MAX / 2));
    });
    let e = load_err(&p);
    assert!(e.contains("too large") || e.contains("head"), "{e}");
}

fn qwen3moe() -> Option<PathBuf> {
    Some(fixtures()?.join("models/tiny-qwen3moe-f32.gguf"))
}

fn llama_moe() -> Option<PathBuf> {
    Some(fixtures()?.join("models/tiny-llama-moe-f32.gguf"))
}

#[test]
fn expert_count_disagreeing_with_tensors_is_named() {
    let Some(src) = qwen3moe() else { return };
    let p = rewrite(&src, "moe_count", |m, _| {
        m.set("qwen3moe.expert_count", Value::U32(6));
    });
    let e = load_err(&p);
    assert!(
        e.contains("blk.0.ffn_gate_inp.weight") && e.contains("qwen3moe.expert_count = 6"),
        "{e}"
    );
}

#[test]
fn expert_width_disagreeing_with_tensors_is_named() {
    let Some(src) = qwen3moe() else { return };
    let p = rewrite(&src, "moe_width", |m, _| {
        m.set("qwen3moe.expert_feed_forward_length", Value::U32(32));
    });
    let e = load_err(&p);
    assert!(
        e.contains("ffn_gate_exps.weight") && e.contains("expert_feed_forward_length = 32"),
        "{e}"
    );
}

#[test]
fn expert_used_count_out_of_range_is_named() {
    let Some(src) = qwen3moe() else { return };
    for (n, tag) in [(0u32, "moe_used0"), (9, "moe_used9")] {
        let p = rewrite(&src, tag, |m, _| {
            m.set("qwen3moe.expert_used_count", Value::U32(n));
        });
        let e = load_err(&p);
        assert!(
            e.contains(&format!("qwen3moe.expert_used_count = {n}"))
                && e.contains("qwen3moe.expert_count = 8"),
            "{e}"
        );
    }
}

#[test]
fn huge_expert_count_is_an_error() {
    let Some(src) = llama_moe() else { return };
    let p = rewrite(&src, "moe_huge", |m, _| {
        m.set("llama.expert_count", Value::U64(u64::MAX / 3));
    });
    let e = load_err(&p);
    assert!(
        e.contains("llama.expert_count") && e.contains("limit"),
        "{e}"
    );
}

#[test]
fn qwen3moe_without_experts_is_named() {
    let Some(src) = qwen3moe() else { return };
    let p = rewrite(&src, "moe_none", |m, _| {
        m.set("qwen3moe.expert_count", Value::U32(0));
        m.set("qwen3moe.expert_used_count", Value::U32(0));
    });
    let e = load_err(&p);
    assert!(e.contains("qwen3moe.expert_count"), "{e}");
}

#[test]
fn experts_in_a_dense_architecture_are_refused() {
    let Some(src) = qwen3moe() else { return };
    let p = rewrite(&src, "moe_dense_arch", |m, _| {
        m.set("general.architecture", "qwen3".to_string());
        let keys: Vec<String> = m
            .keys()
            .filter(|k| k.starts_with("qwen3moe."))
            .map(String::from)
            .collect();
        for k in keys {
            let v = m.get(&k).cloned().expect("value");
            m.set(k.replacen("qwen3moe.", "qwen3.", 1), v);
        }
    });
    let e = load_err(&p);
    assert!(
        e.contains("qwen3") && e.contains("mixture-of-experts") && e.contains("expert_count"),
        "{e}"
    );
}

#[test]
fn llama_moe_missing_router_is_named() {
    let Some(src) = llama_moe() else { return };
    let p = rewrite(&src, "moe_router", |_, t| {
        t.retain(|x| x.0 != "blk.1.ffn_gate_inp.weight")
    });
    let e = load_err(&p);
    assert!(e.contains("blk.1.ffn_gate_inp.weight"), "{e}");
}

/// The older Mixtral files keep one matrix per expert; they are refused
/// with a message that names the layout.
#[test]
fn split_expert_layout_is_named() {
    let Some(src) = llama_moe() else { return };
    let p = rewrite(&src, "moe_split", |_, t| {
        let i = t
            .iter()
            .position(|x| x.0 == "blk.0.ffn_gate_exps.weight")
            .expect("tensor");
        let (_, dims, ty, data) = t.remove(i);
        let per = data.len() / dims[2] as usize;
        for e in 0..dims[2] as usize {
            t.push((
                format!("blk.0.ffn_gate.{e}.weight"),
                dims[..2].to_vec(),
                ty,
                data[e * per..(e + 1) * per].to_vec(),
            ));
        }
    });
    let e = load_err(&p);
    assert!(
        e.contains("blk.0.ffn_gate.0.weight") && e.contains("split"),
        "{e}"
    );
}
