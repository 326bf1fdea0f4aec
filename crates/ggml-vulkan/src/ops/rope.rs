//! ROPE: rotary position embeddings, normal and NeoX, with YaRN.

use ggml_core::{Graph, RopeMode, TensorId};

use super::{strides, type_name, ELEMENTWISE_WG};
use crate::backend::VulkanBackend;
use crate::error::{Error, Result};

/// YaRN correction range (ggml_rope_yarn_corr_dims).
fn yarn_corr_dims(
    n_dims: usize,
    n_ctx_orig: usize,
    base: f32,
    beta_fast: f32,
    beta_slow: f32,
) -> [f32; 2] {
    let corr = |n_rot: f32| {
        n_dims as f32 * (n_ctx_orig as f32 / (n_rot * 2.0 * std::f32::consts::PI)).ln()
            / (2.0 * base.ln())
    };
    let start = corr(beta_fast).floor();
    let end = corr(beta_slow).ceil();
    [start.max(0.0), end.min(n_dims as f32 - 1.0)]
}

/// Records ROPE node `id` (normal or NeoX rotation) on `be`.
pub(super) fn record(
    be: &mut VulkanBackend,
    graph: &Graph,
    id: TensorId,
    p: &ggml_core::RopeParams,
) -> Result<()> {
    let n = graph.node(id);
    let d = &n.desc;
    let a = graph.desc(n.src[0]);
    let es = a.ty.type_size();
    let ba = be.bind(graph, n.src[0], es)?;
    let bp = be.bind(graph, n.src[1], 4)?;
    let bf = if n.src.len() > 2 {
        Some(be.bind(graph, n.src[2], 4)?)
    } else {
        None
    };
    let bd = be.bind(graph, id, d.ty.type_size())?;
    let sa = strides(a).unwrap_or_default();
    let sd = strides(d).unwrap_or_default();
    let pairs = (d.n_elements() / 2) as u64;
    let corr = yarn_corr_dims(
        p.n_dims,
        p.n_ctx_orig,
        p.freq_base,
        p.beta_fast,
        p.beta_slow,
    );
    let theta_scale = p.freq_base.powf(-2.0 / p.n_dims as f32);
    let pc: [u32; 22] = [
        u32::try_from(pairs).map_err(|_| Error::Other("rope: too many elements".into()))?,
        a.ne[0] as u32,
        a.ne[1] as u32,
        a.ne[2] as u32,
        sa[1],
        sa[2],
        sa[3],
        sd[1],
        sd[2],
        sd[3],
        ba.off,
        bp.off,
        bf.as_ref().map_or(0, |b| b.off),
        bd.off,
        p.n_dims as u32,
        u32::from(bf.is_some()),
        theta_scale.to_bits(),
        p.freq_scale.to_bits(),
        p.ext_factor.to_bits(),
        p.attn_factor.to_bits(),
        corr[0].to_bits(),
        corr[1].to_bits(),
    ];
    let mode = match p.mode {
        RopeMode::Normal => "normal",
        RopeMode::Neox => "neox",
    };
    let name = format!("rope_{mode}_{}", type_name(a.ty).unwrap_or("f32"));
    be.dispatch(
        &name,
        [Some(&ba), Some(&bp), bf.as_ref()],
        &bd,
        &pc,
        pairs.div_ceil(ELEMENTWISE_WG),
    )
}
