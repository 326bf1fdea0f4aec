//! llama-quantize: write a model in another type, with llama.cpp's
//! interface and the same output bytes.
//!
//! `llama-quantize [options] IN.gguf [OUT.gguf] TYPE [nthreads]`; see
//! `--help` for the options and the type list.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use llama::quantize::{self, FileType, Imatrix, QuantizeParams, TensorTypeRule};
use llama::{KvOverride, KvOverrideValue, LlamaError, Result};

const USAGE: &str = "usage: llama-quantize [--help] [--allow-requantize] [--leave-output-tensor] [--pure] [--imatrix] [--include-weights]
       [--exclude-weights] [--output-tensor-type] [--token-embedding-type] [--tensor-type] [--tensor-type-file]
       [--keep-split] [--override-kv] [--dry-run] [--max-buffer-size]
       model-f32.gguf [model-quant.gguf] type [nthreads]

  --allow-requantize
                                      allow requantizing tensors that have already been quantized
                                      WARNING: this can severely reduce quality compared to quantizing
                                               from 16bit or 32bit!
  --leave-output-tensor
                                      leave output.weight un(re)quantized
                                      increases model size but may also increase quality, especially when requantizing
  --pure
                                      disable k-quant mixtures and quantize all tensors to the same type
  --imatrix file_name
                                      use data in file_name as importance matrix for quant optimizations
  --include-weights tensor_name
                                      use importance matrix for this/these tensor(s)
  --exclude-weights tensor_name
                                      do not use importance matrix for this/these tensor(s)
  --output-tensor-type ggml_type
                                      use this ggml_type for the output.weight tensor
  --token-embedding-type ggml_type
                                      use this ggml_type for the token embeddings tensor
  --tensor-type tensor_name=ggml_type
                                      quantize this tensor to this ggml_type
                                      this is an advanced option to selectively quantize tensors. may be specified multiple times.
                                      example: --tensor-type attn_q=q8_0
  --tensor-type-file tensor_types.txt
                                      list of tensors to quantize to a specific ggml_type
                                      this is an advanced option to selectively quantize a long list of tensors.
                                      the file should use the same format as above, separated by spaces or newlines.
  --keep-split
                                      generate quantized model in the same shards as input
  --override-kv KEY=TYPE:VALUE
                                      override model metadata by key in the quantized model. may be specified multiple times.
                                      WARNING: this is an advanced option, use with care.
  --dry-run
                                      calculate and show the final quantization size without performing quantization
                                      example: llama-quantize --dry-run model-f32.gguf Q4_K
  --max-buffer-size MiB
                                      max amount of tensor rows kept in memory while quantizing one tensor (default: 8192)
                                      lower it to quantize models with very large tensors on a machine with little RAM

note: --include-weights and --exclude-weights cannot be used together

-----------------------------------------------------------------------------
 allowed quantization types
-----------------------------------------------------------------------------
";

fn usage() -> String {
    format!("{USAGE}\n{}", FileType::help_list())
}

fn bad(msg: impl Into<String>) -> LlamaError {
    LlamaError::InvalidParam(msg.into())
}

/// What the command line asks for.
struct Args {
    params: QuantizeParams,
    imatrix_file: Option<String>,
    include: Vec<String>,
    exclude: Vec<String>,
    input: String,
    output: Option<String>,
    file_type: FileType,
}

fn parse(argv: Vec<String>) -> Result<Option<Args>> {
    let mut params = QuantizeParams::new(0);
    let (mut imatrix_file, mut include, mut exclude) = (None, Vec::new(), Vec::new());
    let mut it = argv.into_iter().peekable();
    while let Some(a) = it.next_if(|a| a.starts_with("--")) {
        let mut val = || llama::cli::flag_value(&mut it, &a);
        let opts = &mut params.types;
        match a.as_str() {
            "--help" => return Ok(None),
            "--leave-output-tensor" => opts.quantize_output_tensor = false,
            "--output-tensor-type" => {
                opts.output_tensor_type = Some(quantize::mixture::parse_ggml_type(&val()?)?)
            }
            "--token-embedding-type" => {
                opts.token_embedding_type = Some(quantize::mixture::parse_ggml_type(&val()?)?)
            }
            "--tensor-type" => opts.tensor_types.push(TensorTypeRule::parse(&val()?)?),
            "--tensor-type-file" => {
                let p = val()?;
                let text = std::fs::read_to_string(&p).map_err(|source| LlamaError::Io {
                    path: p.clone(),
                    source,
                })?;
                for rule in text.split_whitespace() {
                    opts.tensor_types.push(TensorTypeRule::parse(rule)?);
                }
            }
            "--prune-layers" => {
                return Err(LlamaError::NotSupported("--prune-layers".into()));
            }
            "--override-kv" => {
                let o: KvOverride = val()?.parse()?;
                params.kv_overrides.push(o);
            }
            "--dry-run" => params.dry_run = true,
            "--allow-requantize" => params.allow_requantize = true,
            "--pure" => opts.pure = true,
            "--imatrix" => imatrix_file = Some(val()?),
            "--include-weights" => include.push(val()?),
            "--exclude-weights" => exclude.push(val()?),
            "--keep-split" => params.keep_split = true,
            "--max-buffer-size" => {
                let v = val()?;
                let mib: usize = v
                    .parse()
                    .ok()
                    .filter(|&m| m > 0)
                    .ok_or_else(|| bad(format!("invalid --max-buffer-size '{v}'")))?;
                params.max_buf_size = mib
                    .checked_mul(1 << 20)
                    .ok_or_else(|| bad(format!("--max-buffer-size {v} is too large")))?;
            }
            _ => return Err(llama::cli::unknown_argument(&a)),
        }
    }
    if !include.is_empty() && !exclude.is_empty() {
        return Err(bad(
            "--include-weights and --exclude-weights cannot be used together",
        ));
    }
    let rest: Vec<String> = it.collect();
    if rest.len() < 2 {
        return Err(bad(
            "bad arguments: expected IN.gguf [OUT.gguf] TYPE [nthreads] (see --help)",
        ));
    }
    let input = rest[0].clone();
    let (output, file_type, next) = match FileType::parse(&rest[1]) {
        Some(t) => (None, t, 2),
        None => {
            let t = rest.get(2).ok_or_else(|| bad("missing ftype"))?;
            let ft = FileType::parse(t).ok_or_else(|| {
                bad(format!(
                    "invalid ftype '{t}' (see --help for the list of types)"
                ))
            })?;
            (Some(rest[1].clone()), ft, 3)
        }
    };
    if let Some(n) = rest.get(next) {
        params.nthread = n
            .parse::<usize>()
            .map_err(|e| bad(format!("invalid nthread '{n}' ({e})")))?;
    }
    if let Some(extra) = rest.get(next + 1) {
        return Err(bad(format!("unexpected argument '{extra}'")));
    }
    params.types.ftype = file_type.ftype;
    params.types.only_copy = file_type.is_copy();
    Ok(Some(Args {
        params,
        imatrix_file,
        include,
        exclude,
        input,
        output,
        file_type,
    }))
}

/// llama.cpp's default output name: `ggml-model-TYPE.gguf` next to the
/// input.
fn default_output(input: &str, ty: &str, keep_split: bool) -> String {
    let dir = input.rfind(['/', '\\']).map_or("", |i| &input[..=i]);
    let mut out = format!("{dir}ggml-model-{ty}");
    if !keep_split {
        out.push_str(".gguf");
    }
    out
}

/// Loads the importance matrix and adds the `quantize.imatrix.*` keys the
/// output records.
fn load_imatrix(args: &mut Args) -> Result<()> {
    let Some(file) = args.imatrix_file.clone() else {
        return Ok(());
    };
    let mut im = Imatrix::load(Path::new(&file))?;
    if !im.datasets.is_empty() {
        let list: Vec<String> = im.datasets.iter().map(|d| format!("'{d}'")).collect();
        println!("load_imatrix: imatrix datasets=[{}]", list.join(", "));
    }
    println!(
        "load_imatrix: loaded {} importance matrix entries from {file} computed on {} chunks",
        im.entries.len(),
        im.chunk_count
    );
    im.filter(&args.include, &args.exclude);
    if im.entries.is_empty() {
        return Ok(());
    }
    println!(
        "prepare_imatrix: have {} importance matrix entries",
        im.entries.len()
    );
    let clip = |s: &str| {
        let mut end = s.len().min(127);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s[..end].to_string()
    };
    let kv = &mut args.params.kv_overrides;
    kv.push(KvOverride {
        key: "quantize.imatrix.file".into(),
        value: KvOverrideValue::Str(clip(&file)),
    });
    if let Some(ds) = im.datasets.first() {
        kv.push(KvOverride {
            key: "quantize.imatrix.dataset".into(),
            value: KvOverrideValue::Str(clip(ds)),
        });
    }
    kv.push(KvOverride {
        key: "quantize.imatrix.entries_count".into(),
        value: KvOverrideValue::Int(im.entries.len() as i64),
    });
    if im.chunk_count > 0 {
        kv.push(KvOverride {
            key: "quantize.imatrix.chunks_count".into(),
            value: KvOverrideValue::Int(im.chunk_count),
        });
    }
    args.params.imatrix = Some(im);
    Ok(())
}

/// Whether two paths name the same existing file.
fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    }
}

fn run() -> Result<()> {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if argv.is_empty() {
        println!("{}", usage());
        return Err(bad("no arguments given"));
    }
    let Some(mut args) = parse(argv)? else {
        println!("{}", usage());
        return Ok(());
    };
    load_imatrix(&mut args)?;
    let keep_split = args.params.keep_split;
    let output = match &args.output {
        Some(o) if keep_split => o.strip_suffix(".gguf").unwrap_or(o).to_string(),
        Some(o) => o.clone(),
        None => default_output(&args.input, args.file_type.name, keep_split),
    };
    let (input, output) = (PathBuf::from(&args.input), PathBuf::from(&output));
    if !args.params.dry_run && same_file(&input, &output) {
        return Err(bad(format!(
            "input and output files are the same: '{}'",
            input.display()
        )));
    }
    let mut line = if args.params.dry_run {
        format!(
            "llama_quantize: calculating quantization size for '{}' as {}",
            input.display(),
            args.file_type.name
        )
    } else {
        format!(
            "llama_quantize: quantizing '{}' to '{}' as {}",
            input.display(),
            output.display(),
            args.file_type.name
        )
    };
    if args.params.nthread > 0 {
        line.push_str(&format!(" using {} threads", args.params.nthread));
    }
    eprintln!("{line}");
    let t0 = std::time::Instant::now();
    let stderr = std::io::stderr();
    let mut log = stderr.lock();
    let r = quantize::quantize(&input, &output, &args.params, &mut log);
    log.flush().ok();
    drop(log);
    r.map_err(|e| {
        bad(format!(
            "failed to quantize model from '{}': {e}",
            input.display()
        ))
    })?;
    let ms = t0.elapsed().as_secs_f64() * 1000.0;
    println!();
    println!("llama_quantize: quantize time = {ms:8.2} ms");
    println!("llama_quantize:    total time = {ms:8.2} ms");
    Ok(())
}

fn main() -> ExitCode {
    llama::cli::exit_code(run())
}
