//! `gen-model`: GGUF models with deterministic random weights.
//!
//! The header (metadata and every tensor info) is written first; then each
//! tensor is generated, quantized and written in chunks of rows, so memory
//! stays at a few chunks whatever the model size. Rows are independent
//! random streams (see [`rng`]) and are computed in parallel.
//!
//! Quantized file types give each weight the type llama-quantize would
//! (see [`mixture`]): `--type q4_k_m` writes the Q4_K_M mixture, with
//! Q6_K attn_v, ffn_down and output weights where llama.cpp puts them.
//! A pure type ([`OutType::pure`], `--pure`) keeps every 2-D weight in the
//! base type. Rows that do not fit a type's block fall back to another
//! type, as llama-quantize's do (the rules are the llama crate's, shared
//! with the `llama-quantize` tool).

pub mod archs;
pub mod mixture;
pub mod moe;
pub mod plan;
pub mod rng;
pub mod shape;
pub mod types;
pub mod vocab;

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use ggml_core::quants;
use gguf::{GgmlType, GgufWriter, Metadata, TensorInfo};
use rayon::prelude::*;

use crate::error::{Error, Result};
use plan::TensorPlan;
use rng::{row_seed, tensor_key, Xoshiro256pp};
use shape::{Preset, Shape, ShapeOverrides};
use types::OutType;
use vocab::Vocab;

/// Default bytes of tensor data generated and written at a time.
pub const DEFAULT_CHUNK_BYTES: usize = 8 << 20;

/// `general.quantization_version` written into quantized files (ggml's
/// current `GGML_QNT_VERSION`).
const QUANTIZATION_VERSION: u32 = 2;

/// Everything that decides the bytes of a generated model.
#[derive(Clone, Debug)]
pub struct ModelSpec {
    /// Hyperparameters.
    pub shape: Shape,
    /// Tokenizer keys; `vocab.n_vocab` must equal `shape.n_vocab`.
    pub vocab: Vocab,
    /// File type: the base type of the 2-D weights, its mixture unless
    /// pure, and `general.file_type`.
    pub ty: OutType,
    /// Random seed.
    pub seed: u64,
    /// `general.name`.
    pub name: String,
    /// `general.alignment`, when not the default.
    pub alignment: Option<u32>,
    /// Mixture-of-experts layers instead of dense FFNs.
    pub experts: Option<moe::Experts>,
}

/// How the model is written (nothing here changes its bytes).
#[derive(Clone, Debug)]
pub struct WriteSettings {
    /// Bytes of tensor data generated before each write.
    pub chunk_bytes: usize,
    /// Print one line per tensor and each fall-back to stderr.
    pub verbose: bool,
}

impl Default for WriteSettings {
    fn default() -> WriteSettings {
        WriteSettings {
            chunk_bytes: DEFAULT_CHUNK_BYTES,
            verbose: false,
        }
    }
}

/// What was written.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    /// Number of tensors.
    pub n_tensors: usize,
    /// Number of parameters.
    pub n_params: u64,
    /// Bytes of the whole file.
    pub file_bytes: u64,
    /// Tensors per storage type.
    pub type_counts: BTreeMap<String, usize>,
    /// Tensors stored in another type than asked for: (name, asked, stored).
    pub fallbacks: Vec<(String, GgmlType, GgmlType)>,
}

impl Summary {
    /// `Q4_0 x155, F32 x45`.
    pub fn types_line(&self) -> String {
        let mut v: Vec<_> = self.type_counts.iter().collect();
        v.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        v.iter()
            .map(|(t, n)| format!("{t} x{n}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// `Q4_K -> Q5_0 x32, Q4_K -> F16 x5`, empty without fall-backs.
    pub fn fallbacks_line(&self) -> String {
        let mut counts: BTreeMap<(GgmlType, GgmlType), usize> = BTreeMap::new();
        for &(_, want, got) in &self.fallbacks {
            *counts.entry((want, got)).or_default() += 1;
        }
        let v: Vec<String> = counts
            .iter()
            .map(|((w, g), n)| format!("{w} -> {g} x{n}"))
            .collect();
        v.join(", ")
    }
}

impl ModelSpec {
    /// The spec of `preset` with `overrides`, in `ty`, with a synthetic
    /// SentencePiece vocabulary of the model's size, dense and at the
    /// default alignment.
    pub fn synthetic(
        preset: Preset,
        overrides: &ShapeOverrides,
        ty: OutType,
        seed: u64,
        name: impl Into<String>,
    ) -> Result<ModelSpec> {
        let shape = Shape::resolve(preset, overrides)?;
        Ok(ModelSpec {
            vocab: Vocab::synthetic_spm(shape.n_vocab)?,
            shape,
            ty,
            seed,
            name: name.into(),
            alignment: None,
            experts: None,
        })
    }

    /// The metadata, with llama.cpp's key names.
    pub fn metadata(&self) -> Result<Metadata> {
        let s = &self.shape;
        if self.vocab.n_vocab != s.n_vocab {
            return Err(Error::Usage(format!(
                "the vocabulary has {} tokens but the model {} rows",
                self.vocab.n_vocab, s.n_vocab
            )));
        }
        let arch = s.arch.name();
        let mut md = Metadata::new();
        md.set("general.architecture", arch);
        md.set("general.name", self.name.as_str());
        md.set("general.file_type", self.ty.file_type);
        if self.ty.is_quantized() {
            md.set("general.quantization_version", QUANTIZATION_VERSION);
        }
        if let Some(a) = self.alignment {
            md.set(gguf::KEY_ALIGNMENT, a);
        }
        let k = |name: &str| format!("{arch}.{name}");
        md.set(k("context_length"), s.n_ctx);
        md.set(k("embedding_length"), s.n_embd);
        md.set(k("block_count"), s.n_layer);
        md.set(k("feed_forward_length"), s.n_ff);
        md.set(k("attention.head_count"), s.n_head);
        md.set(k("attention.head_count_kv"), s.n_head_kv);
        md.set(k("attention.layer_norm_rms_epsilon"), s.rms_eps);
        md.set(k("rope.dimension_count"), s.head_dim());
        md.set(k("rope.freq_base"), s.rope_freq_base);
        md.set(k("vocab_size"), s.n_vocab);
        if let Some(gen) = archs::generator(s.arch) {
            (gen.metadata)(s, &mut md);
        }
        for (key, value) in &self.vocab.keys {
            md.set(key.as_str(), value.clone());
        }
        if let Some(x) = &self.experts {
            x.edit_metadata(&mut md, s);
        }
        md.alignment()?;
        Ok(md)
    }

    /// The tensors to write.
    pub fn plan(&self) -> Result<Vec<TensorPlan>> {
        let dense = plan::plan(&self.shape, self.ty)?;
        match &self.experts {
            Some(x) => x.edit_plan(dense, &self.shape, self.ty),
            None => Ok(dense),
        }
    }

    /// The `general.architecture` written.
    pub fn arch_name(&self) -> &'static str {
        match &self.experts {
            Some(x) => x.arch_name(&self.shape),
            None => self.shape.arch.name(),
        }
    }
}

/// Writes the model described by `spec` to `out` and returns `out` with a
/// summary. Memory use is bounded by `settings.chunk_bytes` plus one row of
/// f32 per worker thread, plus the header.
pub fn generate<W: Write>(
    spec: &ModelSpec,
    settings: &WriteSettings,
    out: W,
) -> Result<(W, Summary)> {
    let md = spec.metadata()?;
    let plan = spec.plan()?;
    for t in &plan {
        if !quants::can_quantize(t.ty) {
            return Err(Error::Unavailable(format!(
                "ggml-core has no quantizer for {} (needed for '{}')",
                t.ty, t.name
            )));
        }
    }
    let infos = plan
        .iter()
        .map(|t| TensorInfo::new(t.name.clone(), t.ty, &t.dims))
        .collect::<gguf::Result<Vec<_>>>()?;
    let mut summary = Summary {
        n_tensors: plan.len(),
        ..Summary::default()
    };
    let mut w = GgufWriter::new(out, &md, &infos)?;
    // Every tensor, the last included, is padded to the alignment.
    let alignment = md.alignment()?;
    summary.file_bytes = match w.tensors().last() {
        Some(t) => gguf::align_up(w.data_offset() + t.offset + t.size, alignment)
            .ok_or_else(|| Error::Usage("the model's size overflows u64".into()))?,
        None => w.data_offset(),
    };
    let mut buf = Vec::new();
    for (i, t) in plan.iter().enumerate() {
        if let Some(want) = t.wanted {
            summary.fallbacks.push((t.name.clone(), want, t.ty));
        }
        if settings.verbose {
            let dims: Vec<String> = t.dims.iter().map(u64::to_string).collect();
            let why = t
                .fallback_reason()
                .map(|r| format!("  ({r})"))
                .unwrap_or_default();
            eprintln!(
                "[{:>4}/{}] {:<28} {:<7} {}{why}",
                i + 1,
                plan.len(),
                t.name,
                t.ty.to_string(),
                dims.join(" x ")
            );
        }
        write_tensor(&mut w, t, spec.seed, settings.chunk_bytes, &mut buf)?;
        summary.n_params += t.dims.iter().product::<u64>();
        *summary.type_counts.entry(t.ty.to_string()).or_default() += 1;
    }
    Ok((w.finish()?, summary))
}

/// Generates, quantizes and writes one tensor, `chunk_bytes` at a time.
fn write_tensor<W: Write>(
    w: &mut GgufWriter<W>,
    t: &TensorPlan,
    seed: u64,
    chunk_bytes: usize,
    buf: &mut Vec<u8>,
) -> Result<()> {
    let too_big = || Error::Usage(format!("tensor '{}' is too large for this machine", t.name));
    let ne0 = usize::try_from(t.dims[0]).map_err(|_| too_big())?;
    let n_rows = usize::try_from(t.n_rows()).map_err(|_| too_big())?;
    let row_bytes = quants::row_size(t.ty, ne0)?;
    let rows_per_chunk = (chunk_bytes / row_bytes.max(1)).clamp(1, n_rows.max(1));
    buf.resize(rows_per_chunk * row_bytes, 0);
    let key = tensor_key(seed, &t.name);
    let mut row0 = 0;
    while row0 < n_rows {
        let n = rows_per_chunk.min(n_rows - row0);
        let chunk = &mut buf[..n * row_bytes];
        chunk
            .par_chunks_mut(row_bytes)
            .enumerate()
            .try_for_each_init(
                || vec![0f32; ne0],
                |row, (i, dst)| {
                    let mut rng = Xoshiro256pp::new(row_seed(key, (row0 + i) as u64));
                    rng.fill_normal(row, t.init.mean, t.init.std);
                    quants::quantize_row(t.ty, row, dst)
                },
            )?;
        w.write_tensor_data(chunk)?;
        row0 += n;
    }
    // Give a large chunk buffer back once a big tensor is done, so the
    // next (smaller) tensors do not keep it alive.
    if buf.capacity() > 2 * chunk_bytes.max(row_bytes) {
        *buf = Vec::new();
    }
    Ok(())
}

/// Writes the model to `path` through a temporary file next to it, renamed
/// into place once complete: an interrupted run leaves no truncated model.
pub fn generate_file(spec: &ModelSpec, settings: &WriteSettings, path: &Path) -> Result<Summary> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".partial");
    let tmp = PathBuf::from(tmp);
    let file = File::create(&tmp).map_err(|e| Error::io(&tmp, e))?;
    let result = generate(spec, settings, BufWriter::with_capacity(1 << 20, file)).and_then(
        |(w, summary)| {
            // No fsync: the file is reproducible from its flags, and waiting
            // for a slow disk to take gigabytes can double the run time.
            w.into_inner()
                .map_err(|e| Error::io(&tmp, e.into_error()))?;
            Ok(summary)
        },
    );
    match result {
        Ok(summary) => {
            std::fs::rename(&tmp, path).map_err(|e| Error::io(path, e))?;
            Ok(summary)
        }
        Err(e) => {
            // The partial file is useless; the original error matters more
            // than a failure to remove it.
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}
