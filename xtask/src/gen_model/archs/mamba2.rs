//! `mamba2`: Mamba-2 blocks (no attention, no FFN). The shape's `n_head`
//! is the number of SSM heads (`ssm.time_step_rank`); the inner width is
//! twice the embedding, the state 128 per head channel, one group of B and
//! C, a convolution of 4, as in the released Mamba-2 models. Keys as
//! llama.cpp's converter writes them: `feed_forward_length` and
//! `attention.head_count` 0, no rope keys.

use gguf::Metadata;

use super::{ArchGen, Block};
use crate::gen_model::mixture::Role;
use crate::gen_model::plan::{Init, TensorPlan, NORM};
use crate::gen_model::shape::Shape;

/// State size per channel.
const D_STATE: u32 = 128;
/// Convolution width.
const D_CONV: u32 = 4;
/// Groups of B and C.
const N_GROUP: u32 = 1;

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
    let k = |name: &str| format!("mamba2.{name}");
    md.set(k("feed_forward_length"), 0u32);
    md.set(k("attention.head_count"), 0u32);
    md.remove(&k("attention.head_count_kv"));
    md.remove(&k("rope.dimension_count"));
    md.remove(&k("rope.freq_base"));
    md.set(k("ssm.conv_kernel"), D_CONV);
    md.set(k("ssm.inner_size"), 2 * s.n_embd);
    md.set(k("ssm.state_size"), D_STATE);
    md.set(k("ssm.time_step_rank"), s.n_head);
    md.set(k("ssm.group_count"), N_GROUP);
}

/// An F32 tensor `name` of `dims` drawn from `init`.
fn f32_tensor(b: &mut Block<'_>, name: String, dims: &[u32], init: Init) {
    b.out.push(TensorPlan {
        name,
        dims: dims.iter().map(|&d| u64::from(d)).collect(),
        ty: gguf::GgmlType::F32,
        init,
        wanted: None,
    });
}

fn block(b: &mut Block<'_>) {
    let e = b.shape.n_embd;
    let n_head = b.shape.n_head;
    let d_inner = 2 * e;
    let conv_dim = d_inner + 2 * N_GROUP * D_STATE;
    let il = b.il;
    let n = |s: &str| format!("blk.{il}.{s}");
    b.norm("attn_norm", e);
    b.matrix("ssm_in", Role::Ssm, e, d_inner + conv_dim + n_head);
    let conv = Init {
        mean: 0.0,
        std: 1.0 / (D_CONV as f32).sqrt(),
    };
    f32_tensor(b, n("ssm_conv1d.weight"), &[D_CONV, conv_dim], conv);
    let bias = Init {
        mean: 0.0,
        std: 0.1,
    };
    f32_tensor(b, n("ssm_conv1d.bias"), &[conv_dim], bias);
    // softplus(-3) = 0.05: steps of the size trained models take.
    let dt = Init {
        mean: -3.0,
        std: 0.5,
    };
    f32_tensor(b, n("ssm_dt.bias"), &[n_head], dt);
    // A = -exp(A_log) lies in [-16, -1] in trained models; 8 standard
    // deviations from 0, so that no state grows.
    let a = Init {
        mean: -4.0,
        std: 0.5,
    };
    f32_tensor(b, n("ssm_a"), &[1, n_head], a);
    f32_tensor(b, n("ssm_d"), &[1, n_head], NORM);
    f32_tensor(b, n("ssm_norm.weight"), &[d_inner / N_GROUP, N_GROUP], NORM);
    b.matrix("ssm_out", Role::Ssm, d_inner, e);
}
