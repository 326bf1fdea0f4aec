//! Control vectors: GGUF files of F32 tensors `direction.<layer>` [n_embd]
//! (layer 1 and up; layer 0 has none), each file scaled by its strength
//! and summed with the others, added to the output of every layer in a
//! range. Each layer's direction lives on that layer's device.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ggml_core::{Buffer, TensorDesc, Type};
use gguf::GgufFile;

use super::buffers::{place, Pending, Placed};
use super::lora::model_id;
use crate::error::{LlamaError, Result};
use crate::model::{Model, Weight};

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// The directions of one file, scaled: layer -> n_embd values.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Directions {
    /// Width of every direction.
    pub n_embd: usize,
    /// Direction per layer (layers without one are absent).
    pub layers: BTreeMap<usize, Vec<f32>>,
}

impl Directions {
    /// Reads the directions of the control vector file at `path`, scaled by
    /// `strength`.
    pub fn read(path: impl AsRef<Path>, strength: f32) -> Result<Directions> {
        let path = path.as_ref();
        let label = path.display().to_string();
        let err = |why: String| LlamaError::Adapter {
            path: label.clone(),
            why,
        };
        let bytes = std::fs::read(path).map_err(|e| LlamaError::Io {
            path: label.clone(),
            source: e,
        })?;
        let file = GgufFile::from_bytes(&bytes).map_err(|e| err(e.to_string()))?;
        let mut out = Directions::default();
        if file.tensors().is_empty() {
            return Err(err("no direction tensors".into()));
        }
        for info in file.tensors() {
            let name = info.name.as_str();
            let il = name
                .strip_prefix("direction.")
                .and_then(|n| n.parse::<usize>().ok())
                .ok_or_else(|| err(format!("tensor '{name}' is not named direction.<layer>")))?;
            if il == 0 {
                return Err(err(format!("tensor '{name}': layer 0 takes no direction")));
            }
            if info.ty != Type::F32 {
                return Err(err(format!(
                    "tensor '{name}' is {}, expected F32",
                    info.ty.name()
                )));
            }
            if info.dims.len() != 1 && info.dims.iter().skip(1).any(|&d| d != 1) {
                return Err(err(format!(
                    "tensor '{name}' has shape {:?}, expected one dimension",
                    info.dims
                )));
            }
            let n = info.dims.first().copied().unwrap_or(0) as usize;
            if n == 0 {
                return Err(err(format!("tensor '{name}' is empty")));
            }
            if out.n_embd == 0 {
                out.n_embd = n;
            } else if n != out.n_embd {
                return Err(err(format!(
                    "tensor '{name}' has {n} values, the others {}",
                    out.n_embd
                )));
            }
            let data = file
                .tensor_data_in(&bytes, info)
                .map_err(|e| err(e.to_string()))?;
            let dst = out.layers.entry(il).or_insert_with(|| vec![0.0; n]);
            for (d, c) in dst.iter_mut().zip(data.chunks_exact(4)) {
                *d += f32::from_le_bytes([c[0], c[1], c[2], c[3]]) * strength;
            }
        }
        Ok(out)
    }

    /// Adds `other` to these directions (widths must agree).
    pub fn add(&mut self, other: &Directions) -> std::result::Result<(), String> {
        if self.n_embd == 0 {
            *self = other.clone();
            return Ok(());
        }
        if other.n_embd != self.n_embd {
            return Err(format!(
                "directions of {} values do not add to directions of {}",
                other.n_embd, self.n_embd
            ));
        }
        for (il, v) in &other.layers {
            let dst = self.layers.entry(*il).or_insert_with(|| vec![0.0; v.len()]);
            for (d, s) in dst.iter_mut().zip(v) {
                *d += s;
            }
        }
        Ok(())
    }
}

/// A control vector placed for one model: a direction per layer on the
/// layer's device.
pub struct ControlVector {
    id: u64,
    model_id: usize,
    dirs: Vec<Option<Weight>>,
    buffers: Vec<Arc<dyn Buffer>>,
}

impl std::fmt::Debug for ControlVector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlVector")
            .field("layers", &self.dirs.iter().filter(|d| d.is_some()).count())
            .finish()
    }
}

impl ControlVector {
    /// Reads, scales and sums the files `(path, strength)` and places the
    /// result for `model`.
    pub fn load(model: &Model, files: &[(String, f32)]) -> Result<Arc<ControlVector>> {
        let mut sum = Directions::default();
        for (path, strength) in files {
            let d = Directions::read(path, *strength)?;
            sum.add(&d).map_err(|why| LlamaError::Adapter {
                path: path.clone(),
                why,
            })?;
        }
        let label = files
            .iter()
            .map(|f| f.0.as_str())
            .collect::<Vec<_>>()
            .join(",");
        Self::new(model, &sum, &label)
    }

    /// Places `dirs` for `model` (`label` names them in errors).
    pub fn new(model: &Model, dirs: &Directions, label: &str) -> Result<Arc<ControlVector>> {
        let hp = &model.hparams;
        if dirs.n_embd != hp.n_embd {
            return Err(LlamaError::Adapter {
                path: label.to_string(),
                why: format!(
                    "directions of {} values, the model's embeddings have {}",
                    dirs.n_embd, hp.n_embd
                ),
            });
        }
        let mut pending = Vec::new();
        let mut layers = Vec::new();
        for (&il, v) in &dirs.layers {
            if il >= hp.n_layer {
                crate::warn!(
                    "llama_set_adapter_cvec: '{label}': direction for layer {il} ignored, the model has {} layers",
                    hp.n_layer
                );
                continue;
            }
            let data: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
            pending.push(Pending {
                desc: TensorDesc::new(format!("direction.{il}"), Type::F32, &[hp.n_embd]),
                buft: model.layer_device(il).buffer_type(),
                data,
            });
            layers.push(il);
        }
        let Placed {
            weights: placed,
            buffers,
        } = place(pending)?;
        let mut out: Vec<Option<Weight>> = vec![None; hp.n_layer];
        for (il, w) in layers.into_iter().zip(placed) {
            out[il] = Some(w);
        }
        Ok(Arc::new(ControlVector {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            model_id: model_id(model),
            dirs: out,
            buffers,
        }))
    }

    /// A unique id of this placed vector.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// True when it was placed for `model`.
    pub fn belongs_to(&self, model: &Model) -> bool {
        self.model_id == model_id(model)
    }

    /// The direction of layer `il`, if it has one.
    pub fn direction(&self, il: usize) -> Option<&Weight> {
        self.dirs.get(il).and_then(Option::as_ref)
    }

    /// The buffers holding the directions.
    pub fn buffers(&self) -> &[Arc<dyn Buffer>] {
        &self.buffers
    }
}
