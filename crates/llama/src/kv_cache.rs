//! A KV cache: K and V tensors of the layers it serves, each on the layer's
//! device (or the CPU when KV offload is off), and the cells that record the
//! position and sequences of what each slot holds.

use std::collections::BTreeMap;
use std::sync::Arc;

use ggml_core::alloc::PlannedBuffer;
use ggml_core::{Buffer, BufferType, BufferUsage, Device, Placement, TensorDesc, Type};

use crate::error::{LlamaError, Result};
pub use crate::kv_cells::{Cell, KvCells, Pos, SeqId, MAX_SEQ};
use crate::model::{Model, Weight};

/// Layers sharing one buffer type: the type and each layer's K and V
/// descriptors (no V for a model whose values are read from its keys).
type LayerGroup = (
    Arc<dyn BufferType>,
    Vec<(usize, TensorDesc, Option<TensorDesc>)>,
);

/// K and V of one layer.
#[derive(Clone, Debug)]
pub struct KvLayer {
    /// Keys: [n_embd_k_gqa, size].
    pub k: Weight,
    /// Values: [n_embd_v_gqa, size], stored transposed ([size] per value
    /// dim) unless flash attention is on; None when the values are the
    /// first elements of each key row (multi-head latent attention, whose
    /// keys are the compressed latent and a rotary part).
    pub v: Option<Weight>,
}

impl KvLayer {
    /// The V tensor, or an error naming the layer for a K-only cache.
    pub fn v(&self) -> Result<&Weight> {
        self.v.as_ref().ok_or_else(|| {
            LlamaError::Decode(format!(
                "the KV cache of '{}' holds no separate values",
                self.k.desc.name
            ))
        })
    }
}

/// Settings of a cache: its cells, element types and which layers it holds.
#[derive(Clone, Copy, Debug)]
pub struct KvCacheSpec {
    /// Number of cells.
    pub size: usize,
    /// Window of the layers it serves (0: full attention).
    pub n_swa: usize,
    /// Key type.
    pub type_k: Type,
    /// Value type.
    pub type_v: Type,
    /// Store V transposed (attention without flash attention).
    pub v_trans: bool,
    /// Keep each layer's tensors on its device (else in CPU memory).
    pub offload: bool,
    /// Plan only: the buffers are planned ones that hold no memory.
    pub planning: bool,
}

/// One cache.
pub struct KvCache {
    /// Number of cells.
    pub size: usize,
    /// The cells.
    pub cells: KvCells,
    /// Key type.
    pub type_k: Type,
    /// Value type.
    pub type_v: Type,
    /// Whether V is stored transposed.
    pub v_trans: bool,
    /// Per model layer: its tensors, or None when another cache holds it.
    pub layers: Vec<Option<KvLayer>>,
    /// Buffers holding them (one per buffer type).
    pub buffers: Vec<Arc<dyn Buffer>>,
    /// Per buffer type: its name and the bytes of K and of V in its buffer
    /// (each tensor padded to the type's alignment; the two add up to the
    /// buffer's size).
    pub sizes: Vec<(String, usize, usize)>,
}

impl KvCache {
    /// Allocates a cache of `spec` for the layers of `model` that `holds`
    /// accepts; `label` names it in the log.
    pub fn new(
        model: &Model,
        spec: KvCacheSpec,
        holds: impl Fn(usize) -> bool,
        label: &str,
    ) -> Result<KvCache> {
        let KvCacheSpec {
            size,
            n_swa,
            type_k,
            type_v,
            v_trans,
            offload,
            planning,
        } = spec;
        let hp = &model.hparams;
        // With absorbed multi-head latent attention the values are a view
        // of the keys, as in llama.cpp: the cache holds K only.
        let k_only = hp.mla.is_some_and(|m| m.absorbed);
        if k_only && type_k != type_v {
            return Err(LlamaError::InvalidParam(format!(
                "K cache type {type_k} and V cache type {type_v} differ: multi-head latent \
                 attention reads the values from the K cache"
            )));
        }
        for (what, ty, width) in [
            ("K", type_k, hp.n_embd_head_k),
            ("V", type_v, hp.n_embd_head_v),
        ] {
            if width % ty.block_size() != 0 {
                return Err(LlamaError::InvalidParam(format!(
                    "{what} cache type {ty} needs head width {width} to be a multiple of {}",
                    ty.block_size()
                )));
            }
        }
        if v_trans && type_v.is_quantized() {
            return Err(LlamaError::InvalidParam(format!(
                "V cache type {type_v} needs flash attention (the V cache is stored transposed without it)"
            )));
        }
        // Group layers by buffer type so each gets one buffer.
        let mut descs: BTreeMap<String, LayerGroup> = BTreeMap::new();
        for il in (0..hp.n_layer).filter(|&il| holds(il)) {
            let dev: &Arc<dyn Device> = if offload {
                model.layer_device(il)
            } else {
                &model.cpu
            };
            let buft = dev.buffer_type();
            let k = TensorDesc::new(
                format!("cache_k_l{il}"),
                type_k,
                &[hp.n_embd_k_gqa(il), size],
            );
            let v = (!k_only).then(|| {
                TensorDesc::new(
                    format!("cache_v_l{il}"),
                    type_v,
                    &[hp.n_embd_v_gqa(il), size],
                )
            });
            descs
                .entry(buft.name().to_string())
                .or_insert_with(|| (buft.clone(), Vec::new()))
                .1
                .push((il, k, v));
        }
        let mut layers: Vec<Option<KvLayer>> = vec![None; hp.n_layer];
        let mut buffers = Vec::new();
        let mut sizes = Vec::new();
        for (name, (buft, items)) in descs {
            let align = buft.alignment().max(1);
            let pad = |x: usize| x.div_ceil(align) * align;
            let total: usize = items
                .iter()
                .map(|(_, k, v)| {
                    pad(buft.alloc_size(k)) + v.as_ref().map_or(0, |v| pad(buft.alloc_size(v)))
                })
                .sum();
            let buf = if planning {
                PlannedBuffer::shared(buft.clone(), total, BufferUsage::Compute)
            } else {
                let buf = buft.alloc_buffer(total)?;
                buf.set_usage(BufferUsage::Compute);
                // Empty cells must hold zeros: masked attention still
                // multiplies them.
                buf.clear(0)?;
                buf
            };
            let (mut kb, mut vb) = (0usize, 0usize);
            let (mut kp, mut vp) = (0usize, 0usize);
            let mut off = 0;
            for (il, k, v) in items {
                let ko = off;
                off += pad(buft.alloc_size(&k));
                let vo = off;
                off += v.as_ref().map_or(0, |v| pad(buft.alloc_size(v)));
                kp += vo - ko;
                vp += off - vo;
                kb += k.nbytes();
                vb += v.as_ref().map_or(0, TensorDesc::nbytes);
                layers[il] = Some(KvLayer {
                    k: Weight {
                        desc: k,
                        at: Placement {
                            buffer: buf.clone(),
                            offset: ko,
                        },
                    },
                    v: v.map(|desc| Weight {
                        desc,
                        at: Placement {
                            buffer: buf.clone(),
                            offset: vo,
                        },
                    }),
                });
            }
            crate::info!(
                "llama_kv_cache_init: {name:>10} {label}KV buffer size = {:8.2} MiB (K ({type_k}): {:.2} MiB, V ({type_v}): {:.2} MiB)",
                total as f64 / 1048576.0,
                kb as f64 / 1048576.0,
                vb as f64 / 1048576.0
            );
            sizes.push((name, kp, vp));
            buffers.push(buf);
        }
        Ok(KvCache {
            size,
            cells: KvCells::new(size, n_swa),
            type_k,
            type_v,
            v_trans,
            layers,
            buffers,
            sizes,
        })
    }

    /// Whether the cache holds any layer.
    pub fn has_layers(&self) -> bool {
        self.layers.iter().any(Option::is_some)
    }

    /// K and V of layer `il`.
    pub fn layer(&self, il: usize) -> Result<&KvLayer> {
        self.layers
            .get(il)
            .and_then(Option::as_ref)
            .ok_or_else(|| LlamaError::Decode(format!("KV cache holds no layer {il}")))
    }

    /// Cells attended by the next ubatch: a prefix reaching past the last
    /// used cell, padded to `pad`.
    pub fn n_kv(&self, pad: usize) -> usize {
        let used = self.cells.cell_max().div_ceil(pad) * pad;
        self.size.min(pad.max(used))
    }

    /// Bytes of K and V.
    pub fn size_bytes(&self) -> usize {
        self.layers
            .iter()
            .flatten()
            .map(|l| l.k.desc.nbytes() + l.v.as_ref().map_or(0, |v| v.desc.nbytes()))
            .sum()
    }
}
