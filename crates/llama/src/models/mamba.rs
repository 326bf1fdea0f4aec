//! `mamba`: Mamba-1. Every layer is an RMS pre-norm and a selective SSM
//! mixer (input projection to x and z, causal depthwise convolution,
//! projections of x to dt, B and C, the selective scan, gating by SiLU(z),
//! output projection) with a residual add; no attention, no FFN. The
//! mixer's state lives in the recurrent memory.

use ggml_core::{RopeMode, TensorId};

use crate::arch::{recr, req, TensorKind::*, TensorSpec};
use crate::error::Result;
use crate::graph::Builder;
use crate::hparams::{HParams, MetaView};
use crate::models::{ArchDef, HEAD};

/// A Mamba-1 layer.
const LAYER: &[TensorSpec] = &[
    req(AttnNorm),
    recr(SsmIn),
    recr(SsmConv1d),
    recr(SsmConv1dBias),
    recr(SsmX),
    recr(SsmDt),
    recr(SsmDtBias),
    recr(SsmA),
    recr(SsmD),
    recr(SsmOut),
];

/// The registry entry.
pub static DEF: ArchDef = ArchDef {
    name: "mamba",
    rope_mode: RopeMode::Normal,
    tensors: &[HEAD, LAYER],
    load_hparams,
    build,
};

fn load_hparams(hp: &mut HParams, meta: &MetaView<'_>) -> Result<()> {
    hp.load_ssm(meta, false)?;
    hp.require_ssm_expand_2()
}

/// Pre-norm SSM blocks, then the output head.
pub fn build(b: &mut Builder<'_>) -> Result<(TensorId, TensorId)> {
    crate::models::mamba2::ssm_decoder(b)
}
