//! `rwkv6`: RWKV-6 blocks with the sizes of the released models (five
//! data-dependent lerps of width 32, a decay projection of 64), heads of
//! 64, the residual stream halved every 6 layers, the channel mix of
//! `--n-ff` with its receptance.

use gguf::Metadata;

use super::rwkv::{self, LERP};
use super::{ArchGen, Block};
use crate::gen_model::plan::Init;
use crate::gen_model::shape::Shape;

/// Width of each data-dependent lerp's projection.
pub const TIME_MIX_EXTRA_DIM: u32 = 32;
/// Width of the decay projection.
pub const TIME_DECAY_EXTRA_DIM: u32 = 64;
/// The residual stream is halved after every this many layers.
pub const RESCALE_EVERY: u32 = 6;

/// The generator entry.
pub static GEN: ArchGen = ArchGen {
    name: "rwkv6",
    rms_eps: 1e-5,
    rope_freq_base: 10_000.0,
    qkv_bias: false,
    metadata,
    block: Some(block),
};

fn metadata(s: &Shape, md: &mut Metadata) {
    rwkv::metadata(s, md);
    let k = |name: &str| format!("rwkv6.{name}");
    md.set(k("time_mix_extra_dim"), TIME_MIX_EXTRA_DIM);
    md.set(k("time_decay_extra_dim"), TIME_DECAY_EXTRA_DIM);
    md.set(k("rescale_every_n_layers"), RESCALE_EVERY);
}

/// Decay offsets: exp(-exp(x)) of x around -1 keeps most of the state.
const DECAY: Init = Init {
    mean: -1.0,
    std: 0.5,
};
/// The bonus of the current token.
const BONUS: Init = Init {
    mean: 0.0,
    std: 0.3,
};

fn block(b: &mut Block<'_>) {
    let e = b.shape.n_embd;
    let (x, d) = (TIME_MIX_EXTRA_DIM, TIME_DECAY_EXTRA_DIM);
    rwkv::outer(b);
    rwkv::layer_norm(b, "attn_norm");
    b.raw("time_mix_lerp_x.weight", &[e, 1, 1], LERP);
    rwkv::low_rank(b, "time_mix_w1", e, 5 * x);
    let std = 1.0 / (x as f32).sqrt();
    b.raw("time_mix_w2.weight", &[x, e, 5], Init { mean: 0.0, std });
    b.raw("time_mix_lerp_fused.weight", &[e, 1, 1, 5], LERP);
    b.raw(
        "time_mix_first.weight",
        &[rwkv::HEAD_SIZE, e / rwkv::HEAD_SIZE],
        BONUS,
    );
    b.raw("time_mix_decay.weight", &[e], DECAY);
    rwkv::low_rank(b, "time_mix_decay_w1", e, d);
    rwkv::low_rank(b, "time_mix_decay_w2", d, e);
    b.matrix("time_mix_key", e, e);
    b.matrix("time_mix_value", e, e);
    b.matrix("time_mix_receptance", e, e);
    b.matrix("time_mix_gate", e, e);
    rwkv::wkv_out(b);
    rwkv::channel_mix(b, true);
}
