//! `mamba2`: Mamba-2. Every layer is an RMS pre-norm and a Mamba-2 mixer
//! (one input projection to z, x, B, C and a dt per head, causal
//! depthwise convolution over x, B and C, the scan with a scalar decay per
//! head and B and C shared within groups, a skip by D, gating by SiLU(z),
//! a grouped RMS norm and the output projection) with a residual add.

use ggml_core::{RopeMode, TensorId};

use crate::arch::{recr, req, TensorKind::*, TensorSpec};
use crate::error::Result;
use crate::graph::Builder;
use crate::hparams::{HParams, MetaView};
use crate::models::{ArchDef, HEAD};

/// The tensors of a Mamba-2 mixer (with its pre-norm).
pub const MAMBA2_MIXER: &[TensorSpec] = &[
    req(AttnNorm),
    recr(SsmIn),
    recr(SsmConv1d),
    recr(SsmConv1dBias),
    recr(SsmDtBias),
    recr(SsmA),
    recr(SsmD),
    recr(SsmNorm),
    recr(SsmOut),
];

/// The registry entry.
pub static DEF: ArchDef = ArchDef {
    name: "mamba2",
    rope_mode: RopeMode::Normal,
    tensors: &[HEAD, MAMBA2_MIXER],
    load_hparams,
    build,
};

fn load_hparams(hp: &mut HParams, meta: &MetaView<'_>) -> Result<()> {
    hp.load_ssm(meta, true)
}

fn build(b: &mut Builder<'_>) -> Result<(TensorId, TensorId)> {
    ssm_decoder(b)
}

/// Pre-norm blocks of the SSM mixer of the model (Mamba-1 or Mamba-2 by
/// its `ssm.group_count`), each added to the residual stream, then the
/// output head.
pub fn ssm_decoder(b: &mut Builder<'_>) -> Result<(TensorId, TensorId)> {
    let hp = b.hp;
    let (mut inp_l, _) = b.inp_embd()?;
    for il in 0..hp.n_layer {
        let cur = b.rms_norm(inp_l, AttnNorm, il)?;
        let cur = b.ssm_mixer(cur, il)?;
        let (cur, res) = b.last_layer_rows(il, cur, inp_l)?;
        inp_l = b.g.add_op(cur, res)?;
        inp_l = b.layer_out(inp_l, il)?;
    }
    b.output_head(inp_l, 0.0)
}
