//! Quantizing a model file: what llama.cpp's `llama_model_quantize` does,
//! with the same output bytes.
//!
//! [`quantize`] reads a GGUF model (one file or all parts of a split one),
//! chooses each tensor's type ([`mixture`]), and writes the new file tensor
//! by tensor: the tensors in llama.cpp's order (by layer, then by name),
//! the input's key/values with `general.quantization_version` and
//! `general.file_type` set, the split keys dropped and the overrides
//! applied. Each tensor is read from the mapping in slabs of rows
//! (16 MiB of input and output at most); `nthread` threads convert chunks of
//! whole rows to f32 and quantize them (the bytes do not depend on the
//! thread count), the slab is checked and written, and the pages of the
//! input it came from are given back, so memory stays near one slab
//! whatever the size of the model or of its largest tensor.
//!
//! Output goes to a temporary file next to the target, renamed once
//! complete: a failure never leaves a partial file under the output name.

pub mod ftype;
pub mod imatrix;
pub mod mixture;
mod pages;
mod rows;

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use gguf::{GgufModel, GgufWriter, Metadata, TensorInfo, Value};

pub use ftype::{FileType, Ftype, FILE_TYPES};
pub use imatrix::Imatrix;
pub use mixture::{ModelInfo, TensorTypeRule, TypeOptions};

use crate::error::{LlamaError, Result};
use crate::params::{KvOverride, KvOverrideValue};

/// `general.quantization_version` of the files written (ggml's
/// `GGML_QNT_VERSION`).
pub const QUANTIZATION_VERSION: u32 = 2;

/// llama.cpp's default limit of the tensor rows kept in memory at once.
pub const DEFAULT_MAX_BUF_SIZE: usize = 8 << 30;

/// Everything a quantization run is told.
#[derive(Clone, Debug)]
pub struct QuantizeParams {
    /// Threads; 0 takes every core.
    pub nthread: usize,
    /// The type choice (file type, --pure, overrides).
    pub types: TypeOptions,
    /// Quantize tensors that are already quantized.
    pub allow_requantize: bool,
    /// One output file per input file.
    pub keep_split: bool,
    /// Only compute and print the sizes.
    pub dry_run: bool,
    /// The importance matrix, already filtered.
    pub imatrix: Option<Imatrix>,
    /// Key/values set in the output, in order.
    pub kv_overrides: Vec<KvOverride>,
    /// Most bytes of rows held at once for one tensor.
    pub max_buf_size: usize,
}

impl QuantizeParams {
    /// The defaults of llama-quantize for a file type.
    pub fn new(ftype: Ftype) -> QuantizeParams {
        QuantizeParams {
            nthread: 0,
            types: TypeOptions::new(ftype),
            allow_requantize: false,
            keep_split: false,
            dry_run: false,
            imatrix: None,
            kv_overrides: Vec::new(),
            max_buf_size: DEFAULT_MAX_BUF_SIZE,
        }
    }
}

/// What a run did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    /// Bytes of tensor data read.
    pub size_in: u64,
    /// Bytes of tensor data written (or that would be, for a dry run).
    pub size_out: u64,
    /// Tensors whose type fell back because their rows fit no block.
    pub n_fallback: usize,
    /// Whether a dry run found that the real run needs an importance matrix.
    pub needs_imatrix: bool,
    /// The files written.
    pub outputs: Vec<PathBuf>,
}

/// One input tensor in output order.
struct Item<'a> {
    file: usize,
    info: &'a TensorInfo,
    choice: mixture::Choice,
}

fn io_err(path: &Path, source: std::io::Error) -> LlamaError {
    LlamaError::Io {
        path: path.display().to_string(),
        source,
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / 1024.0 / 1024.0
}

/// llama.cpp's `llama_format_tensor_shape`.
fn shape(ne: [u64; 4]) -> String {
    format!("{:6}, {:6}, {:6}, {:6}", ne[0], ne[1], ne[2], ne[3])
}

/// Applies llama.cpp's output key/values to the input's.
fn output_metadata(input: &Metadata, ftype: Ftype, overrides: &[KvOverride]) -> Metadata {
    let mut md = input.clone();
    let put = |md: &mut Metadata, key: &str, v: Value| {
        // ggml's setters remove the key and append it.
        md.remove(key);
        md.set(key, v);
    };
    put(
        &mut md,
        "general.quantization_version",
        Value::from(QUANTIZATION_VERSION),
    );
    put(&mut md, "general.file_type", Value::from(ftype));
    for k in [
        gguf::KEY_SPLIT_NO,
        gguf::KEY_SPLIT_COUNT,
        gguf::KEY_SPLIT_TENSORS_COUNT,
    ] {
        md.remove(k);
    }
    for o in overrides {
        let v = match &o.value {
            KvOverrideValue::Float(f) => Value::from(*f as f32),
            // llama.cpp writes integer overrides as u32 of the magnitude.
            KvOverrideValue::Int(i) => Value::from(i.unsigned_abs() as u32),
            KvOverrideValue::Bool(b) => Value::from(*b),
            KvOverrideValue::Str(s) => Value::from(s.as_str()),
        };
        put(&mut md, &o.key, v);
    }
    md
}

/// The output files of a run: `out`, or with `keep_split` and `n_split`
/// parts `out-0000i-of-0000n.gguf` (`out` given without `.gguf`).
fn output_paths(out: &Path, keep_split: bool, n_split: usize) -> Result<Vec<PathBuf>> {
    if !keep_split {
        return Ok(vec![out.to_path_buf()]);
    }
    let prefix = out.to_str().ok_or_else(|| {
        LlamaError::InvalidParam(format!("output path '{}' is not UTF-8", out.display()))
    })?;
    Ok((0..n_split)
        .map(|i| PathBuf::from(gguf::split_path(prefix, i as u32, n_split as u32)))
        .collect())
}

/// A file written under a temporary name, renamed by [`Staged::commit`]
/// and removed if dropped before.
struct Staged {
    tmp: PathBuf,
    dest: PathBuf,
    done: bool,
}

impl Staged {
    fn new(dest: &Path) -> Staged {
        let mut name = dest.file_name().unwrap_or_default().to_os_string();
        name.push(format!(".quantize-{}.tmp", std::process::id()));
        Staged {
            tmp: dest.with_file_name(name),
            dest: dest.to_path_buf(),
            done: false,
        }
    }

    fn commit(&mut self) -> Result<()> {
        std::fs::rename(&self.tmp, &self.dest).map_err(|e| io_err(&self.dest, e))?;
        self.done = true;
        Ok(())
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.done {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// Quantizes `input` into `output` as llama.cpp's llama-quantize does,
/// writing its log lines (a line per tensor) to `log`.
pub fn quantize(
    input: &Path,
    output: &Path,
    params: &QuantizeParams,
    log: &mut dyn Write,
) -> Result<Summary> {
    let opts = &params.types;
    let default_type = ftype::default_type(opts.ftype)?;
    let model = GgufModel::open(input).map_err(|e| {
        LlamaError::InvalidParam(format!("failed to read model '{}': {e}", input.display()))
    })?;
    let mut types = opts.clone();
    types.has_imatrix = params.imatrix.is_some();
    // llama.cpp's order: by layer then name, or by file and offset when
    // the parts are kept.
    let mut list: Vec<(usize, &TensorInfo)> = model.tensors().collect();
    let n_tensors = list.len();
    let n_elements: u64 = list.iter().map(|(_, t)| t.n_elements()).sum();
    list.sort_by(|a, b| mixture::tensor_order(&a.1.name, &b.1.name));
    let file_type = if opts.only_copy {
        // COPY keeps the input's file type.
        match model.metadata().get_uint("general.file_type") {
            Ok(v) => v as u32,
            Err(_) => ftype::guess(list.iter().map(|(_, t)| t.ty)),
        }
    } else {
        opts.ftype
    };
    if params.keep_split {
        list.sort_by_key(|(f, t)| (*f, t.offset));
    }
    let md = output_metadata(model.metadata(), file_type, &params.kv_overrides);
    let info = ModelInfo::from_metadata(&md)?;

    if let Some(im) = &params.imatrix {
        writeln!(
            log,
            "\nllama_model_quantize_impl: have importance matrix data with {} entries",
            im.entries.len()
        )
        .ok();
        im.check_finite()?;
    }

    let refs: Vec<mixture::TensorRef<'_>> = list
        .iter()
        .map(|(_, t)| mixture::TensorRef {
            name: &t.name,
            ne: TensorInfo::ne(t),
            ty: t.ty,
        })
        .collect();
    let mut mix = mixture::Mixture::new(&info, &types, refs.iter().map(|r| r.name));
    let mut items = Vec::with_capacity(list.len());
    let mut needs_imatrix = false;
    for ((file, t), r) in list.iter().zip(&refs) {
        let choice = mix.choose(r, default_type)?;
        for w in &choice.warnings {
            writeln!(log, "{w}").ok();
        }
        if params.imatrix.is_none() && choice.allows_quantization && choice.requires_imatrix {
            if params.dry_run {
                needs_imatrix = true;
            } else {
                return Err(LlamaError::InvalidParam(format!(
                    "this quantization requires an importance matrix (--imatrix): \
                     tensor {} would be {}",
                    t.name,
                    choice.ty.name()
                )));
            }
        }
        items.push(Item {
            file: *file,
            info: t,
            choice,
        });
    }

    let n_split = if params.keep_split {
        items.iter().map(|it| it.file + 1).max().unwrap_or(1)
    } else {
        1
    };
    let paths = output_paths(output, params.keep_split, n_split)?;

    // The tensor list and key/values of each output file.
    let mut decls: Vec<Vec<TensorInfo>> = vec![Vec::new(); n_split];
    for it in &items {
        let ne = it.info.ne();
        let n_dims = mixture::TensorRef {
            name: &it.info.name,
            ne,
            ty: it.info.ty,
        }
        .n_dims();
        let t =
            TensorInfo::new(it.info.name.clone(), it.choice.ty, &ne[..n_dims]).map_err(|e| {
                LlamaError::Tensor(format!(
                    "tensor '{}' as {}: {e}",
                    it.info.name, it.choice.ty
                ))
            })?;
        let split = if params.keep_split { it.file } else { 0 };
        decls[split].push(t);
    }

    let pool = rows::Pool::new(params.nthread)?;
    let mut size_in = 0u64;
    let mut size_out = 0u64;
    let mut staged: Vec<Staged> = Vec::new();
    let mut writer: Option<GgufWriter<BufWriter<File>>> = None;
    let mut cur_split = usize::MAX;
    let mut work = rows::Buffers::default();

    for (idx, it) in items.iter().enumerate() {
        let t = it.info;
        let split = if params.keep_split { it.file } else { 0 };
        if !params.dry_run && split != cur_split {
            if let Some(w) = writer.take() {
                finish(w, staged.last().map(|s| s.dest.as_path()))?;
            }
            // Only the first part carries the model's key/values; the
            // others hold the split keys alone, as llama.cpp writes them.
            let mut smd = if split == 0 {
                md.clone()
            } else {
                Metadata::new()
            };
            if n_split > 1 {
                for (k, v) in [
                    (gguf::KEY_SPLIT_NO, Value::from(split as u16)),
                    (gguf::KEY_SPLIT_COUNT, Value::from(n_split as u16)),
                    (
                        gguf::KEY_SPLIT_TENSORS_COUNT,
                        Value::from(items.len() as i32),
                    ),
                ] {
                    smd.remove(k);
                    smd.set(k, v);
                }
            }
            let st = Staged::new(&paths[split]);
            let f = File::create(&st.tmp).map_err(|e| io_err(&paths[split], e))?;
            staged.push(st);
            writer = Some(
                GgufWriter::new(BufWriter::with_capacity(1 << 20, f), &smd, &decls[split])
                    .map_err(|e| {
                        LlamaError::InvalidParam(format!("{}: {e}", paths[split].display()))
                    })?,
            );
            cur_split = split;
        }
        write!(
            log,
            "[{:4}/{:4}] {:<36} - [{}], type = {:>6}, ",
            idx + 1,
            n_tensors,
            t.name,
            shape(t.ne()),
            t.ty.name()
        )
        .ok();
        let new_type = it.choice.ty;
        let convert = t.ty != new_type;
        let ne = t.ne();
        let n_rows = ne[1] * ne[2] * ne[3];
        let new_size = if convert {
            new_type
                .row_size(ne[0])
                .and_then(|r| r.checked_mul(n_rows))
                .ok_or_else(|| {
                    LlamaError::Tensor(format!("tensor '{}': size as {new_type} overflows", t.name))
                })?
        } else {
            t.size
        };
        size_in += t.size;
        size_out += new_size;
        if params.dry_run {
            if convert {
                writeln!(
                    log,
                    "size = {:8.2} MiB -> {:8.2} MiB ({})",
                    mib(t.size),
                    mib(new_size),
                    new_type.name()
                )
                .ok();
                needs_imatrix |= it.choice.requires_imatrix;
            } else {
                writeln!(log, "size = {:8.3} MiB", mib(t.size)).ok();
            }
            continue;
        }
        let w = writer
            .as_mut()
            .ok_or_else(|| LlamaError::InvalidParam("internal: no output file open".into()))?;
        let data = model
            .tensor_data(it.file, t)
            .map_err(|e| LlamaError::Tensor(format!("tensor '{}': {e}", t.name)))?;
        let dest = &staged[staged.len() - 1].dest;
        let werr = |e: gguf::Error| LlamaError::InvalidParam(format!("{}: {e}", dest.display()));
        let pages = pages::Pages::of(&model, it.file);
        if !convert {
            writeln!(log, "size = {:8.3} MiB", mib(t.size)).ok();
            for part in data.chunks(rows::SLAB_BYTES) {
                w.write_tensor_data(part).map_err(werr)?;
                pages.release(part);
            }
            continue;
        }
        let imatrix = lookup_imatrix(params.imatrix.as_ref(), t, log)?;
        if imatrix.is_none() && it.choice.requires_imatrix {
            return Err(LlamaError::InvalidParam(format!(
                "missing importance matrix for tensor {} in a very low-bit quantization ({})",
                t.name,
                new_type.name()
            )));
        }
        if t.ty.is_quantized() && !params.allow_requantize {
            return Err(LlamaError::InvalidParam(format!(
                "requantizing from type {} is disabled (tensor {}); use --allow-requantize",
                t.ty.name(),
                t.name
            )));
        }
        write!(log, "converting to {} .. ", new_type.name()).ok();
        log.flush().ok();
        let job = rows::Job {
            name: &t.name,
            src_type: t.ty,
            dst_type: new_type,
            n_per_row: ne[0] as usize,
            rows_per_expert: ne[1] as usize,
            n_rows: n_rows as usize,
            imatrix,
            max_buf_size: params.max_buf_size,
        };
        let written = pool.convert(
            &job,
            data,
            &mut work,
            &mut |chunk| w.write_tensor_data(chunk).map_err(werr),
            &|slab| pages.release(slab),
        )?;
        if written != new_size {
            return Err(LlamaError::Tensor(format!(
                "tensor '{}': wrote {written} bytes, expected {new_size}",
                t.name
            )));
        }
        writeln!(
            log,
            "size = {:8.2} MiB -> {:8.2} MiB",
            mib(t.size),
            mib(new_size)
        )
        .ok();
    }
    if let Some(w) = writer.take() {
        finish(w, staged.last().map(|s| s.dest.as_path()))?;
    }
    // Every part is complete: only now do they take their names.
    for s in &mut staged {
        s.commit()?;
    }

    let bpw = |b: u64| b as f64 * 8.0 / n_elements.max(1) as f64;
    writeln!(
        log,
        "llama_model_quantize_impl: model size  = {:8.2} MiB ({:.2} BPW)",
        mib(size_in),
        bpw(size_in)
    )
    .ok();
    writeln!(
        log,
        "llama_model_quantize_impl: quant size  = {:8.2} MiB ({:.2} BPW)",
        mib(size_out),
        bpw(size_out)
    )
    .ok();
    if params.imatrix.is_none() && params.dry_run && needs_imatrix {
        writeln!(log, "llama_model_quantize_impl: WARNING: dry run completed successfully, but actually completing this quantization will require an imatrix!").ok();
    }
    if mix.n_fallback > 0 {
        writeln!(
            log,
            "llama_model_quantize_impl: WARNING: {} of {} tensor(s) required fallback quantization",
            mix.n_fallback, n_tensors
        )
        .ok();
    }
    Ok(Summary {
        size_in,
        size_out,
        n_fallback: mix.n_fallback,
        needs_imatrix,
        outputs: if params.dry_run { Vec::new() } else { paths },
    })
}

/// Completes one output file and flushes it to disk.
fn finish(w: GgufWriter<BufWriter<File>>, path: Option<&Path>) -> Result<()> {
    let p = path.unwrap_or(Path::new("output"));
    let buf = w
        .finish()
        .map_err(|e| LlamaError::InvalidParam(format!("{}: {e}", p.display())))?;
    let f = buf.into_inner().map_err(|e| io_err(p, e.into_error()))?;
    f.sync_all().map_err(|e| io_err(p, e))
}

/// The importance-matrix values of tensor `t`, checked against its shape.
fn lookup_imatrix<'a>(
    im: Option<&'a Imatrix>,
    t: &TensorInfo,
    log: &mut dyn Write,
) -> Result<Option<&'a [f32]>> {
    let Some(im) = im else { return Ok(None) };
    let Some(v) = im.entries.get(&t.name) else {
        writeln!(
            log,
            "\n====== llama_model_quantize_impl: did not find weights for {}",
            t.name
        )
        .ok();
        return Ok(None);
    };
    let ne = t.ne();
    let want = ne[0] * ne[2];
    if v.len() as u64 == want {
        return Ok(Some(v));
    }
    writeln!(
        log,
        "\n====== llama_model_quantize_impl: imatrix size {} is different from tensor size {want} for {}",
        v.len(),
        t.name
    )
    .ok();
    if t.name == "token_embd.weight" || t.name == "per_layer_token_embd.weight" {
        return Ok(None);
    }
    Err(LlamaError::InvalidParam(format!(
        "imatrix size {} is different from tensor size {want} for {}: is the importance matrix of another model?",
        v.len(),
        t.name
    )))
}
