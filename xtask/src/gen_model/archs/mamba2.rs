//! `mamba2`: Mamba-2 blocks (no attention, no FFN), inner width twice the
//! embedding in SSM heads of 64 channels, state 128, one group of B and C,
//! convolution of 4, as in the released Mamba-2 models.

use gguf::Metadata;

use super::{ssm, ArchGen, Block};
use crate::gen_model::shape::Shape;

/// The generator entry.
pub static GEN: ArchGen = ArchGen {
    name: "mamba2",
    rms_eps: 1e-5,
    rope_freq_base: 10_000.0,
    qkv_bias: false,
    metadata,
    block: Some(block),
};

fn metadata(s: &Shape, md: &mut Metadata) {
    ssm::no_attention_keys(s, md);
    ssm::metadata(s, md, false);
}

fn block(b: &mut Block<'_>) {
    ssm::mamba2_mixer(b);
}
