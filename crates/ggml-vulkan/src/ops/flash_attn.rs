//! FLASH_ATTN_EXT: fused attention, one workgroup per query row and head.

use ggml_core::{Graph, TensorId, Type};

use super::{ne, strides, type_name};
use crate::backend::VulkanBackend;
use crate::error::Result;

/// Records FLASH_ATTN_EXT node `id` on `be`: one workgroup per query row
/// and head.
pub(super) fn record(
    be: &mut VulkanBackend,
    graph: &Graph,
    id: TensorId,
    [scale, max_bias, softcap]: [f32; 3],
) -> Result<()> {
    let n = graph.node(id);
    let (q, k, v) = (
        graph.desc(n.src[0]),
        graph.desc(n.src[1]),
        graph.desc(n.src[2]),
    );
    let bq = be.bind(graph, n.src[0], 4)?;
    let bk = be.bind(graph, n.src[1], k.ty.type_size())?;
    let bv = be.bind(graph, n.src[2], v.ty.type_size())?;
    let mask = n.src.get(3).map(|&m| (m, graph.desc(m)));
    let bm = match mask {
        Some((m, md)) => Some(be.bind(graph, m, md.ty.type_size())?),
        None => None,
    };
    let bs = match n.src.get(4) {
        Some(&s) => Some(be.bind(graph, s, 4)?),
        None => None,
    };
    let bd = be.bind(graph, id, 4)?;
    let sq = strides(q).unwrap_or_default();
    let sk = strides(k).unwrap_or_default();
    let sv = strides(v).unwrap_or_default();
    let (sm, mne) = mask.map_or(([0; 4], [1, 1, 1, 1]), |(_, md)| {
        (strides(md).unwrap_or_default(), ne(md))
    });
    let pc: [u32; 32] = [
        q.ne[1] as u32,
        q.ne[2] as u32,
        q.ne[0] as u32,
        v.ne[0] as u32,
        k.ne[1] as u32,
        bq.off,
        bk.off,
        bv.off,
        bm.as_ref().map_or(0, |b| b.off),
        bd.off,
        sq[1],
        sq[2],
        sq[3],
        sk[1],
        sk[2],
        sk[3],
        sv[1],
        sv[2],
        sv[3],
        sm[1],
        sm[2],
        sm[3],
        mne[2],
        mne[3],
        (q.ne[2] / k.ne[2]) as u32,
        (q.ne[3] / k.ne[3]) as u32,
        u32::from(bm.is_some()),
        scale.to_bits(),
        max_bias.to_bits(),
        softcap.to_bits(),
        bs.as_ref().map_or(0, |b| b.off),
        u32::from(bs.is_some()),
    ];
    let mt = mask.map_or(Type::F16, |(_, md)| md.ty);
    let name = format!(
        "flash_attn_{}_{}",
        type_name(k.ty).unwrap_or("f16"),
        type_name(mt).unwrap_or("f16")
    );
    let groups = (q.ne[1] * q.ne[2] * q.ne[3]) as u64;
    be.dispatch_spec(
        &name,
        &[],
        &[Some(&bq), Some(&bk), Some(&bv), bm.as_ref(), bs.as_ref()],
        &bd,
        &pc,
        groups,
    )
}
