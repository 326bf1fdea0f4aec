//! `phi3`: one fused Q/K/V projection (rows: Q, then K, then V) and one
//! fused gate+up projection (rows: gate, then up).

use super::{no_metadata, ArchGen, Block};

/// The generator entry.
pub static GEN: ArchGen = ArchGen {
    name: "phi3",
    rms_eps: 1e-5,
    rope_freq_base: 10_000.0,
    qkv_bias: false,
    metadata: no_metadata,
    block: Some(block),
};

fn block(b: &mut Block<'_>) {
    let (e, kv, ff) = (b.shape.n_embd, b.shape.n_embd_kv(), b.shape.n_ff);
    b.norm("attn_norm", e);
    b.matrix("attn_qkv", e, e + 2 * kv);
    b.matrix("attn_output", e, e);
    b.norm("ffn_norm", e);
    b.matrix("ffn_up", e, 2 * ff);
    b.matrix("ffn_down", ff, e);
}
