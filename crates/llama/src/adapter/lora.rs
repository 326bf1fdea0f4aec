//! LoRA adapters: GGUF files with `general.type = adapter`,
//! `adapter.type = lora` and `adapter.lora.alpha`, whose tensors come in
//! pairs `<base weight>.lora_a` / `.lora_b`. A weight W [n_in, n_out] with
//! a pair gets `W x + s * B (A x)` in every matrix product, with A
//! [n_in, rank] and B [rank, n_out] (experts: a third dimension of
//! n_expert on both), and `s = scale * alpha / rank` (the user's scale
//! alone when alpha is 0). The token embeddings [n_embd, n_vocab] take the
//! pair the other way round: A [rank, n_vocab] is read by rows like the
//! embeddings and B [rank, n_embd] multiplies them. `*_norm.weight`
//! entries (which some converters write) are skipped.
//!
//! Every pair is checked against the base model when the adapter loads
//! (same architecture, both halves present, a base weight of that name,
//! shapes that fit) and placed next to its base weight: on the same device
//! and buffer type, except that weights the CPU stores repacked get plain
//! CPU memory beside them.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::BufReader;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ggml_core::{Buffer, TensorDesc};
use gguf::{GgufFile, Metadata, TensorInfo};

use super::buffers::{buft_next_to, place, Pending, Placed};
use crate::error::{LlamaError, Result};
use crate::model::{Model, Weight};

/// Source of adapter ids: a set of adapters is told apart from another by
/// ids and scales.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// The pair of one base weight.
#[derive(Clone, Debug)]
pub struct LoraWeight {
    /// A: [n_in, rank] (token embeddings: [rank, n_vocab]).
    pub a: Weight,
    /// B: [rank, n_out] (token embeddings: [rank, n_embd]).
    pub b: Weight,
}

impl LoraWeight {
    /// The rank of the pair (B's first dimension).
    pub fn rank(&self) -> usize {
        self.b.desc.ne[0]
    }

    /// The factor of `B (A x)` for the user's `scale` and the adapter's
    /// `alpha`: `scale * alpha / rank`, or `scale` when alpha is 0.
    pub fn scale(&self, alpha: f32, scale: f32) -> f32 {
        if alpha != 0.0 {
            scale * alpha / self.rank() as f32
        } else {
            scale
        }
    }
}

/// A LoRA adapter loaded for one model.
pub struct LoraAdapter {
    id: u64,
    model_id: usize,
    path: String,
    /// `adapter.lora.alpha` (0 when absent).
    pub alpha: f32,
    /// The file's metadata (task name, prompt prefix, ...).
    pub metadata: Metadata,
    pairs: HashMap<String, LoraWeight>,
    buffers: Vec<Arc<dyn Buffer>>,
}

impl std::fmt::Debug for LoraAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoraAdapter")
            .field("path", &self.path)
            .field("alpha", &self.alpha)
            .field("pairs", &self.pairs.len())
            .finish()
    }
}

/// The identity of a model, for adapters loaded against it.
pub(crate) fn model_id(model: &Model) -> usize {
    model as *const Model as usize
}

impl LoraAdapter {
    /// Loads the adapter at `path` for `model`, checking it against the
    /// model, and places its tensors next to their base weights.
    pub fn load(model: &Model, path: impl AsRef<Path>) -> Result<Arc<LoraAdapter>> {
        let path = path.as_ref();
        let label = path.display().to_string();
        let err = |why: String| LlamaError::Adapter {
            path: label.clone(),
            why,
        };
        let file = GgufFile::open(path).map_err(|e| err(e.to_string()))?;
        let reader = File::open(path).map_err(|e| LlamaError::Io {
            path: label.clone(),
            source: e,
        })?;
        let mut reader = BufReader::new(reader);
        Self::from_gguf(model, &file, &label, |info, buf| {
            file.read_tensor_data(&mut reader, info, buf)
                .map_err(|e| err(e.to_string()))
        })
    }

    /// Checks `file`'s metadata and pairs against `model` and places its
    /// tensors, reading each tensor's bytes with `read`.
    fn from_gguf(
        model: &Model,
        file: &GgufFile,
        label: &str,
        mut read: impl FnMut(&TensorInfo, &mut [u8]) -> Result<()>,
    ) -> Result<Arc<LoraAdapter>> {
        let err = |why: String| LlamaError::Adapter {
            path: label.to_string(),
            why,
        };
        let meta = file.metadata();
        let text = |key: &str| -> Result<String> {
            match meta.get(key) {
                None => Ok(String::new()),
                Some(_) => meta
                    .get_str(key)
                    .map(str::to_string)
                    .map_err(|e| err(format!("{key}: {e}"))),
            }
        };
        let general_type = text("general.type")?;
        if general_type != "adapter" {
            return Err(err(format!(
                "general.type is '{general_type}', expected 'adapter'"
            )));
        }
        let arch = text("general.architecture")?;
        if arch != model.arch.name() {
            return Err(err(format!(
                "the adapter is for architecture '{arch}', the model is '{}'",
                model.arch.name()
            )));
        }
        let adapter_type = text("adapter.type")?;
        if adapter_type != "lora" {
            return Err(err(format!(
                "adapter.type is '{adapter_type}', expected 'lora'"
            )));
        }
        let alpha = match meta.get("adapter.lora.alpha") {
            None => 0.0,
            Some(_) => meta
                .get_f32("adapter.lora.alpha")
                .map_err(|e| err(format!("adapter.lora.alpha: {e}")))?,
        };
        if !alpha.is_finite() {
            return Err(err(format!("adapter.lora.alpha is {alpha}")));
        }

        // Bundle the halves by base name.
        let mut halves: BTreeMap<String, [Option<&TensorInfo>; 2]> = BTreeMap::new();
        for info in file.tensors() {
            let name = info.name.as_str();
            if let Some(base) = name.strip_suffix(".lora_a") {
                halves.entry(base.to_string()).or_default()[0] = Some(info);
            } else if let Some(base) = name.strip_suffix(".lora_b") {
                halves.entry(base.to_string()).or_default()[1] = Some(info);
            } else if name.ends_with("_norm.weight") {
                crate::warn!("llama_adapter_lora_init: '{label}': tensor '{name}' skipped");
            } else {
                return Err(err(format!(
                    "tensor '{name}' is neither a .lora_a nor a .lora_b tensor"
                )));
            }
        }
        if halves.is_empty() {
            return Err(err("the file has no LoRA tensors".into()));
        }

        let weights = model.weights()?;
        let base_by_name = base_weights(model)?;
        let tok_name = weights.tok_embd.desc.name.clone();
        let mut pending = Vec::with_capacity(2 * halves.len());
        let mut names = Vec::with_capacity(halves.len());
        for (base, [a, b]) in &halves {
            let (a, b) = match (a, b) {
                (Some(a), Some(b)) => (*a, *b),
                (Some(_), None) => {
                    return Err(err(format!("'{base}.lora_a' has no '{base}.lora_b'")))
                }
                (None, Some(_)) => {
                    return Err(err(format!("'{base}.lora_b' has no '{base}.lora_a'")))
                }
                (None, None) => unreachable!("a pair has at least one half"),
            };
            let w = base_by_name.get(base.as_str()).copied().ok_or_else(|| {
                err(format!(
                    "tensor '{base}' does not exist in the base model (wrong base model?)"
                ))
            })?;
            let (an, bn) = (dims(a).map_err(&err)?, dims(b).map_err(&err)?);
            check_shapes(base, &w.desc.ne, an, bn, *base == tok_name).map_err(&err)?;
            let buft = buft_next_to(model, w);
            for (info, ne) in [(a, an), (b, bn)] {
                let mut data = vec![0u8; info.size as usize];
                read(info, &mut data)?;
                pending.push(Pending {
                    desc: TensorDesc::new(info.name.clone(), info.ty, &ne),
                    buft: buft.clone(),
                    data,
                });
            }
            names.push(base.clone());
        }
        let Placed {
            weights: placed,
            buffers,
        } = place(pending)?;
        let mut it = placed.into_iter();
        let mut pairs = HashMap::with_capacity(names.len());
        for name in names {
            let (Some(a), Some(b)) = (it.next(), it.next()) else {
                return Err(err("a tensor was not placed".into()));
            };
            pairs.insert(name, LoraWeight { a, b });
        }
        let size: usize = buffers.iter().map(|b| b.size()).sum();
        crate::info!(
            "llama_adapter_lora_init: '{label}': {} pairs, alpha {alpha}, {:.2} MiB",
            pairs.len(),
            size as f64 / 1048576.0
        );
        Ok(Arc::new(LoraAdapter {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            model_id: model_id(model),
            path: label.to_string(),
            alpha,
            metadata: meta.clone(),
            pairs,
            buffers,
        }))
    }

    /// A unique id of this loaded adapter.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The file it was loaded from.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// True when it was loaded for `model`.
    pub fn belongs_to(&self, model: &Model) -> bool {
        self.model_id == model_id(model)
    }

    /// The pair of the base weight named `name`.
    pub fn get(&self, name: &str) -> Option<&LoraWeight> {
        self.pairs.get(name)
    }

    /// Number of pairs.
    pub fn n_pairs(&self) -> usize {
        self.pairs.len()
    }

    /// The buffers holding its tensors.
    pub fn buffers(&self) -> &[Arc<dyn Buffer>] {
        &self.buffers
    }
}

/// Every weight of the model by its tensor name.
fn base_weights(model: &Model) -> Result<HashMap<&str, &Weight>> {
    let w = model.weights()?;
    let mut map: HashMap<&str, &Weight> = HashMap::new();
    let globals = [Some(&w.tok_embd), Some(&w.output_norm), Some(&w.output)];
    for g in globals.into_iter().flatten() {
        map.entry(g.desc.name.as_str()).or_insert(g);
    }
    for layer in &w.layers {
        for x in layer.iter() {
            map.insert(x.desc.name.as_str(), x);
        }
    }
    Ok(map)
}

/// The dimensions of a tensor as four sizes.
fn dims(info: &TensorInfo) -> std::result::Result<[usize; 4], String> {
    if info.dims.len() > 4 {
        return Err(format!(
            "tensor '{}' has {} dimensions",
            info.name,
            info.dims.len()
        ));
    }
    let mut ne = [1usize; 4];
    for (i, &d) in info.dims.iter().enumerate() {
        ne[i] = usize::try_from(d).map_err(|_| format!("tensor '{}' is too large", info.name))?;
    }
    Ok(ne)
}

/// Checks a pair against its base weight `w`: A [n_in, r(, n_expert)] and
/// B [r, n_out(, n_expert)], or for the token embeddings A [r, n_vocab]
/// and B [r, n_embd].
fn check_shapes(
    base: &str,
    w: &[usize; 4],
    a: [usize; 4],
    b: [usize; 4],
    token_embd: bool,
) -> std::result::Result<(), String> {
    let bad = |what: &str| {
        Err(format!(
            "tensor '{base}' {w:?} does not fit its pair: lora_a {a:?}, lora_b {b:?} ({what})"
        ))
    };
    if a[3] != 1 || b[3] != 1 || w[3] != 1 {
        return bad("four dimensions");
    }
    if token_embd {
        if w[0] != b[1] || w[1] != a[1] {
            return bad("wrong base model?");
        }
        if a[0] != b[0] {
            return bad("ranks differ");
        }
        if a[2] != 1 || b[2] != 1 {
            return bad("the token embeddings take 2-D pairs");
        }
    } else {
        if w[0] != a[0] || w[1] != b[1] {
            return bad("wrong base model?");
        }
        if a[1] != b[0] {
            return bad("lora_a is not transposed or the ranks differ");
        }
        if a[2] != w[2] || b[2] != w[2] {
            return bad("expert counts differ");
        }
    }
    if b[0] == 0 {
        return bad("rank 0");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check_shapes;

    #[test]
    fn shapes_of_pairs() {
        let w = [64, 32, 1, 1];
        assert!(check_shapes("w", &w, [64, 4, 1, 1], [4, 32, 1, 1], false).is_ok());
        // A not transposed
        let e = check_shapes("w", &w, [64, 4, 1, 1], [32, 4, 1, 1], false).unwrap_err();
        assert!(e.contains("'w'"), "{e}");
        // other base sizes
        assert!(check_shapes("w", &w, [32, 4, 1, 1], [4, 32, 1, 1], false).is_err());
        assert!(check_shapes("w", &w, [64, 4, 1, 1], [4, 64, 1, 1], false).is_err());
        // ranks differ
        assert!(check_shapes("w", &w, [64, 4, 1, 1], [8, 32, 1, 1], false).is_err());
        // experts
        let x = [64, 32, 8, 1];
        assert!(check_shapes("x", &x, [64, 4, 8, 1], [4, 32, 8, 1], false).is_ok());
        assert!(check_shapes("x", &x, [64, 4, 1, 1], [4, 32, 8, 1], false).is_err());
        // token embeddings [n_embd 64, n_vocab 512]: swapped pair
        let t = [64, 512, 1, 1];
        assert!(check_shapes("t", &t, [4, 512, 1, 1], [4, 64, 1, 1], true).is_ok());
        assert!(check_shapes("t", &t, [64, 4, 1, 1], [4, 512, 1, 1], true).is_err());
        assert!(check_shapes("t", &t, [4, 512, 1, 1], [8, 64, 1, 1], true).is_err());
    }
}
