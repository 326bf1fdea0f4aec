//! `gen-lora` and `gen-control-vector`: random LoRA adapters of any rank
//! for a base model, and random control vectors, for tests and benches.
//!
//! An adapter has a pair for every weight of the base whose name is
//! `blk.<n>.<target>.weight` (or `token_embd.weight` for the target
//! `token_embd`): A [n_in, rank] and B [rank, n_out] (experts: with the
//! base's third dimension), the token embeddings the other way round
//! (A [rank, n_vocab], B [rank, n_embd]), as llama.cpp reads them. The
//! values are N(0, a_std) and N(0, b_std), every tensor from its own
//! stream of the seed, so a file depends on its flags alone.

use std::fs::File;
use std::io::BufWriter;
use std::path::Path;

use gguf::{GgmlType, GgufFile, GgufWriter, Metadata, TensorInfo};

use crate::error::{Error, Result};
use crate::gen_model::rng::{tensor_key, Xoshiro256pp};

/// What `gen-lora` writes.
#[derive(Clone, Debug)]
pub struct LoraSpec {
    /// Rank of every pair.
    pub rank: usize,
    /// `adapter.lora.alpha` (0: the user's scale alone).
    pub alpha: f32,
    /// Weight names without `blk.<n>.` and `.weight` (`attn_q`,
    /// `ffn_down_exps`, `token_embd`, `output`, ...); `all` takes every
    /// matrix of the layers.
    pub targets: Vec<String>,
    /// Standard deviation of A.
    pub a_std: f32,
    /// Standard deviation of B.
    pub b_std: f32,
    /// Seed.
    pub seed: u64,
}

/// What was written.
#[derive(Clone, Debug)]
pub struct LoraSummary {
    /// Pairs written.
    pub n_pairs: usize,
    /// Architecture of the base.
    pub arch: String,
}

fn normal(seed: u64, name: &str, n: usize, std: f32) -> Vec<u8> {
    let mut rng = Xoshiro256pp::new(tensor_key(seed, name));
    let mut v = vec![0.0f32; n];
    rng.fill_normal(&mut v, 0.0, std);
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn write_gguf(out: &Path, meta: &Metadata, tensors: &[(TensorInfo, Vec<u8>)]) -> Result<()> {
    let file = File::create(out).map_err(|e| Error::Io {
        path: out.to_path_buf(),
        source: e,
    })?;
    let infos: Vec<TensorInfo> = tensors.iter().map(|t| t.0.clone()).collect();
    let mut w = GgufWriter::new(BufWriter::new(file), meta, &infos)?;
    for (info, data) in tensors {
        w.write_tensor(&info.name, data)?;
    }
    w.finish()?;
    Ok(())
}

/// The target of a base tensor name: `attn_q` of `blk.3.attn_q.weight`.
fn target_of(name: &str) -> Option<&str> {
    if name == "token_embd.weight" {
        return Some("token_embd");
    }
    if name == "output.weight" {
        return Some("output");
    }
    let rest = name.strip_prefix("blk.")?;
    let (layer, rest) = rest.split_once('.')?;
    layer.parse::<usize>().ok()?;
    rest.strip_suffix(".weight")
}

/// Writes a random adapter for the model at `base` to `out`.
pub fn generate_lora(base: &Path, spec: &LoraSpec, out: &Path) -> Result<LoraSummary> {
    if spec.rank == 0 {
        return Err(Error::Usage("--rank must be at least 1".into()));
    }
    if spec.targets.is_empty() {
        return Err(Error::Usage("--targets names no weight".into()));
    }
    let file = GgufFile::open(base)?;
    let arch = file
        .metadata()
        .get_str("general.architecture")
        .map_err(|e| Error::Usage(format!("{}: {e}", base.display())))?
        .to_string();
    let all = spec.targets.iter().any(|t| t == "all");
    let r = spec.rank as u64;
    let mut tensors = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for info in file.tensors() {
        let Some(target) = target_of(&info.name) else {
            continue;
        };
        let named = spec.targets.iter().any(|t| t == target);
        let matrix = info.dims.len() >= 2 && !target.ends_with("_norm") && target != "token_embd";
        if !(named || (all && matrix)) {
            continue;
        }
        seen.insert(target.to_string());
        let d = |i: usize| info.dims.get(i).copied().unwrap_or(1);
        let (a_dims, b_dims): (Vec<u64>, Vec<u64>) = if target == "token_embd" {
            (vec![r, d(1)], vec![r, d(0)])
        } else if info.dims.len() == 3 {
            (vec![d(0), r, d(2)], vec![r, d(1), d(2)])
        } else if info.dims.len() == 2 {
            (vec![d(0), r], vec![r, d(1)])
        } else {
            return Err(Error::Usage(format!(
                "'{}' has shape {:?}: not a matrix",
                info.name, info.dims
            )));
        };
        for (suffix, dims, std) in [
            ("lora_a", a_dims, spec.a_std),
            ("lora_b", b_dims, spec.b_std),
        ] {
            let name = format!("{}.{suffix}", info.name);
            let n = dims.iter().product::<u64>() as usize;
            let data = normal(spec.seed, &name, n, std);
            tensors.push((TensorInfo::new(name, GgmlType::F32, &dims)?, data));
        }
    }
    for t in &spec.targets {
        if t != "all" && !seen.contains(t) {
            return Err(Error::Usage(format!(
                "--targets {t}: the base model has no such weight"
            )));
        }
    }
    let mut meta = Metadata::new();
    meta.set("general.architecture", arch.as_str());
    meta.set("general.type", "adapter");
    meta.set("general.name", format!("random LoRA rank {}", spec.rank));
    meta.set("adapter.type", "lora");
    meta.set("adapter.lora.alpha", spec.alpha);
    write_gguf(out, &meta, &tensors)?;
    Ok(LoraSummary {
        n_pairs: tensors.len() / 2,
        arch,
    })
}

/// Writes a random control vector: `direction.<il>` [n_embd] F32 for the
/// layers 1..n_layer of the model at `base`, N(0, std).
pub fn generate_control_vector(base: &Path, std: f32, seed: u64, out: &Path) -> Result<usize> {
    let file = GgufFile::open(base)?;
    let meta = file.metadata();
    let arch = meta
        .get_str("general.architecture")
        .map_err(|e| Error::Usage(format!("{}: {e}", base.display())))?
        .to_string();
    let key = |k: &str| format!("{arch}.{k}");
    let n_embd = meta
        .get_uint(&key("embedding_length"))
        .map_err(|e| Error::Usage(format!("{}: {e}", base.display())))?;
    let n_layer = meta
        .get_uint(&key("block_count"))
        .map_err(|e| Error::Usage(format!("{}: {e}", base.display())))?;
    let mut tensors = Vec::new();
    for il in 1..n_layer {
        let name = format!("direction.{il}");
        let data = normal(seed, &name, n_embd as usize, std);
        tensors.push((TensorInfo::new(name, GgmlType::F32, &[n_embd])?, data));
    }
    let mut m = Metadata::new();
    m.set("general.architecture", "controlvector");
    m.set("controlvector.model_hint", arch.as_str());
    m.set(
        "controlvector.layer_count",
        (n_layer.saturating_sub(1)) as u32,
    );
    write_gguf(out, &m, &tensors)?;
    Ok(tensors.len())
}
