//! `rwkv7`: RWKV-7 blocks with the low-rank sizes of the released
//! 0.1B-0.4B models (decay 64, in-context learning rate 64, value residual
//! 32, gate 128), heads of 64, the squared-ReLU channel mix of `--n-ff`.

use gguf::Metadata;

use super::rwkv::{self, LERP};
use super::{ArchGen, Block};
use crate::gen_model::plan::Init;
use crate::gen_model::shape::Shape;

/// Rank of the decay projection.
pub const DECAY_RANK: u32 = 64;
/// Rank of the in-context learning rate projection.
pub const ICLR_RANK: u32 = 64;
/// Rank of the value residual mix.
pub const VALUE_RES_RANK: u32 = 32;
/// Rank of the output gate.
pub const GATE_RANK: u32 = 128;

/// The generator entry.
pub static GEN: ArchGen = ArchGen {
    name: "rwkv7",
    rms_eps: 1e-5,
    rope_freq_base: 10_000.0,
    qkv_bias: false,
    metadata,
    block: Some(block),
};

fn metadata(s: &Shape, md: &mut Metadata) {
    rwkv::metadata(s, md);
    let k = |name: &str| format!("rwkv7.{name}");
    md.set(k("attention.decay_lora_rank"), DECAY_RANK);
    md.set(k("attention.iclr_lora_rank"), ICLR_RANK);
    md.set(k("attention.value_residual_mix_lora_rank"), VALUE_RES_RANK);
    md.set(k("attention.gate_lora_rank"), GATE_RANK);
}

/// Small vectors around 0 (biases of the low-rank projections, the key
/// scales' offsets).
const SMALL: Init = Init {
    mean: 0.0,
    std: 0.3,
};
/// Key scales around 1.
const KEY_SCALE: Init = Init {
    mean: 1.0,
    std: 0.1,
};

fn block(b: &mut Block<'_>) {
    let e = b.shape.n_embd;
    rwkv::outer(b);
    rwkv::layer_norm(b, "attn_norm");
    b.raw("time_mix_lerp_fused.weight", &[e, 1, 1, 6], LERP);
    let value_rank = if b.il == 0 { ICLR_RANK } else { VALUE_RES_RANK };
    for (name, rank) in [
        ("w", DECAY_RANK),
        ("a", ICLR_RANK),
        ("v", value_rank),
        ("g", GATE_RANK),
    ] {
        if name != "g" {
            b.raw(&format!("time_mix_{name}0.weight"), &[e], SMALL);
        }
        rwkv::low_rank(b, &format!("time_mix_{name}1"), e, rank);
        rwkv::low_rank(b, &format!("time_mix_{name}2"), rank, e);
    }
    b.raw("time_mix_k_k.weight", &[e], KEY_SCALE);
    b.raw("time_mix_k_a.weight", &[e], KEY_SCALE);
    b.raw("time_mix_r_k.weight", &[e], SMALL);
    b.matrix("time_mix_key", e, e);
    b.matrix("time_mix_value", e, e);
    b.matrix("time_mix_receptance", e, e);
    rwkv::wkv_out(b);
    rwkv::channel_mix(b, false);
}
