//! `mamba`: Mamba-1 blocks (no attention, no FFN), inner width twice the
//! embedding, state 16, time-step rank ceil(n_embd / 16), convolution of
//! 4, as in the released Mamba models.

use gguf::Metadata;

use super::{ssm, ArchGen, Block};
use crate::gen_model::shape::Shape;

/// The generator entry.
pub static GEN: ArchGen = ArchGen {
    name: "mamba",
    rms_eps: 1e-5,
    rope_freq_base: 10_000.0,
    qkv_bias: false,
    metadata,
    block: Some(block),
};

fn metadata(s: &Shape, md: &mut Metadata) {
    ssm::no_attention_keys(s, md);
    ssm::metadata(s, md, true);
}

fn block(b: &mut Block<'_>) {
    ssm::mamba1_mixer(b);
}
