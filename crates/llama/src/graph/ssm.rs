//! The SSM mixers of Mamba and Mamba-2 layers over the recurrent memory.

use ggml_core::TensorId;

use crate::error::{LlamaError, Result};
use crate::graph::Builder;

impl Builder<'_> {
    /// The SSM mixer of recurrent layer `il` on its normed input `x`
    /// [n_embd, n_tokens]: Mamba-1 or Mamba-2 by the model's
    /// `ssm.group_count`.
    pub fn ssm_mixer(&mut self, _x: TensorId, il: usize) -> Result<TensorId> {
        Err(LlamaError::NotSupported(format!(
            "layer {il} of '{}': SSM layers need the SSM_CONV and SSM_SCAN ops, which this build lacks",
            self.hp.arch.name()
        )))
    }
}
