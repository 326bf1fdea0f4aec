//! Command-line parsing shared by the tools, with llama.cpp's flag names
//! (which include multi-letter single-dash flags such as `-ngl`).

use std::process::ExitCode;
use std::sync::Arc;

use ggml_core::{registry, Device, Type};

use crate::adapter::AdapterArgs;
use crate::context::{Context, ContextParams};
use crate::error::{LlamaError, Result};
use crate::fit::FitOptions;
use crate::params::{LoadMode, ModelParams};
use crate::sampling::SamplingParams;

/// The exit status of a tool whose work returned `r`: success, or failure
/// after printing the error as `error: ...` on stderr.
pub fn exit_code(r: Result<()>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The error for a flag that no tool knows.
pub fn unknown_argument(flag: &str) -> LlamaError {
    LlamaError::InvalidParam(format!("unknown argument: {flag} (see --help)"))
}

/// The value that follows `flag` in `args`, or an error naming the flag.
pub fn flag_value(args: &mut impl Iterator<Item = String>, flag: &str) -> Result<String> {
    args.next()
        .ok_or_else(|| LlamaError::InvalidParam(format!("{flag} needs a value")))
}

/// Loads the adapters and control vectors of `args` for `model` and
/// applies them to `ctx` (the adapters stay unapplied with
/// `--lora-init-without-apply`).
pub fn apply_adapters(args: &AdapterArgs, ctx: &mut Context<'_>) -> Result<()> {
    if args.is_empty() {
        return Ok(());
    }
    let loaded = args.load(ctx.model())?;
    ctx.set_adapters(loaded.initial_set()?)
}

/// Parameters common to the tools (a subset of llama.cpp's common_params).
#[derive(Clone)]
pub struct CommonArgs {
    /// Model path (`-m`).
    pub model: String,
    /// Prompt (`-p`, or the contents of `-f`).
    pub prompt: Option<String>,
    /// Prompt file (`-f`).
    pub file: Option<String>,
    /// Tokens to generate (`-n`, -1 = until end of generation or context full).
    pub n_predict: i64,
    /// Tokens kept from the prompt on a context shift (`--keep`; -1: the
    /// whole prompt).
    pub n_keep: i64,
    /// `--context-shift`: when the context fills, drop the older half of
    /// what follows the kept tokens and go on (off: stop).
    pub context_shift: bool,
    /// Model parameters.
    pub model_params: ModelParams,
    /// Context parameters.
    pub ctx_params: ContextParams,
    /// Sampling parameters.
    pub sampling: SamplingParams,
    /// `--list-devices` was given.
    pub list_devices: bool,
    /// `-v`: debug logs.
    pub verbose: bool,
    /// `--log-disable`: no logs.
    pub log_disable: bool,
    /// `-e`: process escapes in the prompt.
    pub escape: bool,
    /// `--no-warmup` was given.
    pub no_warmup: bool,
    /// `-cnv` (Some(true)) / `-no-cnv` (Some(false)); None: chat when the
    /// model has a chat template.
    pub conversation: Option<bool>,
    /// `-sys`: system prompt of a conversation.
    pub system_prompt: Option<String>,
    /// `--fit`, `-fitt`, `-fitc`, and which parameters the user set.
    pub fit: FitOptions,
    /// `--lora`, `--lora-scaled`, `--control-vector`, ...
    pub adapters: AdapterArgs,
    /// Arguments this parser did not know, for the tool's own flags.
    pub rest: Vec<String>,
}

impl Default for CommonArgs {
    fn default() -> CommonArgs {
        CommonArgs {
            model: String::new(),
            prompt: None,
            file: None,
            n_predict: -1,
            n_keep: 0,
            context_shift: false,
            // Every layer offloaded, as the library's default; `--fit`
            // brings the count down to what fits.
            model_params: ModelParams::default(),
            ctx_params: ContextParams {
                n_ctx: 4096,
                ..ContextParams::default()
            },
            sampling: SamplingParams::default(),
            list_devices: false,
            verbose: false,
            log_disable: false,
            escape: true,
            no_warmup: false,
            conversation: None,
            system_prompt: None,
            fit: FitOptions::default(),
            adapters: AdapterArgs::default(),
            rest: Vec::new(),
        }
    }
}

fn bad(flag: &str, val: &str, what: &str) -> LlamaError {
    LlamaError::InvalidParam(format!("invalid value '{val}' for {flag}: expected {what}"))
}

fn num<T: std::str::FromStr>(flag: &str, val: &str, what: &str) -> Result<T> {
    val.parse().map_err(|_| bad(flag, val, what))
}

/// Parses a KV cache type name (`f16`, `f32`, `q8_0`, `q4_0`, ...).
pub fn parse_cache_type(flag: &str, val: &str) -> Result<Type> {
    const ALLOWED: [Type; 7] = [
        Type::F32,
        Type::F16,
        Type::BF16,
        Type::Q8_0,
        Type::Q4_0,
        Type::Q4_1,
        Type::Q5_0,
    ];
    Type::from_name(val)
        .filter(|t| ALLOWED.contains(t) || *t == Type::Q5_1 || *t == Type::IQ4_NL)
        .ok_or_else(|| {
            bad(
                flag,
                val,
                "one of f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1",
            )
        })
}

/// Finds devices by a comma-separated list of names (`none` = no GPU).
pub fn parse_devices(val: &str) -> Result<Vec<Arc<dyn Device>>> {
    crate::devices::backend_init();
    if val == "none" {
        return Ok(Vec::new());
    }
    val.split(',')
        .map(|name| {
            registry::device_by_name(name.trim()).ok_or_else(|| {
                let names: Vec<String> = registry::devices()
                    .iter()
                    .map(|d| d.name().to_string())
                    .collect();
                LlamaError::InvalidParam(format!(
                    "invalid device '{name}': available devices are {}",
                    names.join(", ")
                ))
            })
        })
        .collect()
}

/// Replaces the escapes llama.cpp's `-e` (on by default) replaces: `\n`,
/// `\r`, `\t`, `\'`, `\"`, `\\` and `\xHH` (two hex digits, one byte).
/// Any other backslash stays as written, with the character after it.
/// Bytes that `\xHH` leaves outside valid UTF-8 become U+FFFD.
pub fn process_escapes(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' || i + 1 == b.len() {
            out.push(b[i]);
            i += 1;
            continue;
        }
        let c = b[i + 1];
        i += 2;
        match c {
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            b't' => out.push(b'\t'),
            b'\'' | b'"' | b'\\' => out.push(c),
            b'x' if i + 2 <= b.len() && hex_pair(b[i], b[i + 1]).is_some() => {
                out.push(hex_pair(b[i], b[i + 1]).expect("checked"));
                i += 2;
            }
            _ => out.extend_from_slice(&[b'\\', c]),
        }
    }
    match String::from_utf8(out) {
        Ok(s) => s,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    }
}

/// The byte of `\\x` followed by `a` and `b`, as llama.cpp reads it (C's
/// `strtol` in base 16 that must take both characters): two hex digits, or
/// one after a sign or a space.
fn hex_pair(a: u8, b: u8) -> Option<u8> {
    let d = (b as char).to_digit(16)? as i32;
    let v = match a {
        b'+' | b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c => d,
        b'-' => -d,
        _ => (a as char).to_digit(16)? as i32 * 16 + d,
    };
    Some(v as u8)
}

/// A thread count: 0 or less means the default (the machine's cores).
/// The grammar of the JSON schema `text` given to `flag`.
fn schema_grammar(flag: &str, text: &str) -> Result<String> {
    let schema: serde_json::Value = serde_json::from_str(text)
        .map_err(|e| LlamaError::InvalidParam(format!("{flag}: not valid JSON: {e}")))?;
    crate::json_schema::json_schema_to_grammar(&schema)
        .map_err(|e| LlamaError::InvalidParam(format!("{flag}: {e}")))
}

fn threads(flag: &str, v: &str) -> Result<usize> {
    let n: i64 = num(flag, v, "an integer")?;
    Ok(if n <= 0 {
        crate::context::default_n_threads()
    } else {
        n as usize
    })
}

impl CommonArgs {
    /// Parses `args` (without the program name).
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<CommonArgs> {
        let mut a = CommonArgs::default();
        let mut it = args.into_iter();
        while let Some(flag) = it.next() {
            let mut val = |what: &str| -> Result<String> {
                it.next().ok_or_else(|| {
                    LlamaError::InvalidParam(format!("{flag} needs a value ({what})"))
                })
            };
            match flag.as_str() {
                "-m" | "--model" => a.model = val("path")?,
                "-p" | "--prompt" => a.prompt = Some(val("text")?),
                "-f" | "--file" => {
                    let path = val("path")?;
                    let text = std::fs::read_to_string(&path).map_err(|source| LlamaError::Io {
                        path: path.clone(),
                        source,
                    })?;
                    // As llama.cpp: the file's one trailing newline is not
                    // part of the prompt.
                    let text = text.strip_suffix('\n').unwrap_or(&text).to_string();
                    a.prompt = Some(text);
                    a.file = Some(path);
                }
                "-n" | "--n-predict" | "--predict" => {
                    a.n_predict = num(&flag, &val("int")?, "an integer")?
                }
                "--keep" => a.n_keep = num(&flag, &val("int")?, "an integer")?,
                "--context-shift" => a.context_shift = true,
                "--no-context-shift" => a.context_shift = false,
                "-fit" | "--fit" => {
                    a.fit.enabled = match val("on|off")?.as_str() {
                        "on" | "1" | "true" => true,
                        "off" | "0" | "false" => false,
                        v => return Err(bad(&flag, v, "on or off")),
                    }
                }
                "-fitt" | "--fit-target" => {
                    let v = val("MiB")?;
                    let mib: usize = num(&flag, &v, "a number of MiB (one for every device)")?;
                    a.fit.margin = mib.saturating_mul(1 << 20);
                }
                "-fitc" | "--fit-ctx" => {
                    a.fit.min_ctx = num(&flag, &val("int")?, "a non-negative integer")?
                }
                "-v" | "--verbose" | "--log-verbose" => a.verbose = true,
                "--log-disable" => a.log_disable = true,
                "-e" | "--escape" => a.escape = true,
                "--no-escape" => a.escape = false,
                "--no-warmup" => a.no_warmup = true,
                "-cnv" | "--conversation" => a.conversation = Some(true),
                "-no-cnv" | "--no-conversation" => a.conversation = Some(false),
                "-sys" | "--system-prompt" => a.system_prompt = Some(val("text")?),
                _ => {
                    let handled = a.model_flag(&flag, &mut val)?
                        || a.context_flag(&flag, &mut val)?
                        || a.sampling_flag(&flag, &mut val)?
                        || a.adapters.flag(&flag, &mut val)?;
                    if !handled {
                        a.rest.push(flag);
                    }
                }
            }
        }
        if a.escape {
            // From -p or -f alike, as llama.cpp does.
            if let Some(p) = &a.prompt {
                a.prompt = Some(process_escapes(p));
            }
        }
        if a.log_disable {
            crate::log::set_level(crate::log::Level::Off);
        } else if a.verbose {
            crate::log::set_level(crate::log::Level::Debug);
        }
        Ok(a)
    }

    /// Applies a model, device or loading flag; false when `flag` is not one of them.
    fn model_flag(
        &mut self,
        flag: &str,
        val: &mut dyn FnMut(&str) -> Result<String>,
    ) -> Result<bool> {
        let a = self;
        match flag {
            "-ngl" | "--gpu-layers" | "--n-gpu-layers" => {
                a.model_params.n_gpu_layers = num(flag, &val("int")?, "an integer")?;
                a.fit.ngl_set = true;
            }
            "-sm" | "--split-mode" => a.model_params.split_mode = val("none|layer|row")?.parse()?,
            "-mg" | "--main-gpu" => {
                a.model_params.main_gpu = num(flag, &val("int")?, "an integer")?
            }
            "-ts" | "--tensor-split" => {
                let v = val("list")?;
                a.model_params.tensor_split = v
                    .split([',', '/'])
                    .map(|x| num::<f32>(flag, x, "a list of numbers like 3,1"))
                    .collect::<Result<_>>()?;
            }
            "-dev" | "--device" => a.model_params.devices = Some(parse_devices(&val("list")?)?),
            "--rpc" => crate::devices::add_rpc_servers(&val("host:port,...")?)?,
            "--list-devices" => a.list_devices = true,
            "-lm" | "--load-mode" => {
                a.model_params.load_mode = val("auto|none|mmap|mlock|mmap+mlock|dio")?.parse()?
            }
            "--no-mmap" => a.model_params.load_mode = a.model_params.load_mode.without_mmap()?,
            "--mmap" => {
                a.model_params.load_mode =
                    LoadMode::from_flags(true, a.model_params.load_mode.use_mlock())
            }
            "-nr" | "--no-repack" => a.model_params.use_extra_bufts = false,
            "--repack" => a.model_params.use_extra_bufts = true,
            "--mlock" => a.model_params.load_mode = a.model_params.load_mode.with_mlock()?,
            "--check-tensors" => a.model_params.check_tensors = true,
            "-ot" | "--override-tensor" => {
                for part in val("PATTERN=BUFT")?.split(',') {
                    a.model_params.tensor_buft_overrides.push(part.parse()?);
                }
            }
            "-cmoe" | "--cpu-moe" => a
                .model_params
                .tensor_buft_overrides
                .push(crate::params::TensorBuftOverride::cpu_moe()),
            "-ncmoe" | "--n-cpu-moe" => {
                let n: usize = num(flag, &val("N")?, "a non-negative integer")?;
                a.model_params
                    .tensor_buft_overrides
                    .extend(crate::params::TensorBuftOverride::n_cpu_moe(n));
            }
            "--override-kv" => a
                .model_params
                .kv_overrides
                .push(val("KEY=TYPE:VALUE")?.parse()?),
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Applies a context, batch, thread, KV cache or rope flag; false when `flag` is not one of them.
    fn context_flag(
        &mut self,
        flag: &str,
        val: &mut dyn FnMut(&str) -> Result<String>,
    ) -> Result<bool> {
        let a = self;
        match flag {
            "-c" | "--ctx-size" => {
                a.ctx_params.n_ctx = num(flag, &val("int")?, "a non-negative integer")?;
                a.fit.ctx_set = true;
            }
            "-b" | "--batch-size" => {
                a.ctx_params.n_batch = num(flag, &val("int")?, "a positive integer")?
            }
            "-ub" | "--ubatch-size" => {
                a.ctx_params.n_ubatch = num(flag, &val("int")?, "a positive integer")?
            }
            "-t" | "--threads" => {
                let n = threads(flag, &val("int")?)?;
                a.ctx_params.n_threads = n;
                a.ctx_params.n_threads_batch = n;
            }
            "-tb" | "--threads-batch" => {
                a.ctx_params.n_threads_batch = threads(flag, &val("int")?)?
            }
            "-ctk" | "--cache-type-k" => {
                a.ctx_params.type_k = parse_cache_type(flag, &val("type")?)?
            }
            "-ctv" | "--cache-type-v" => {
                a.ctx_params.type_v = parse_cache_type(flag, &val("type")?)?
            }
            "-nkvo" | "--no-kv-offload" => a.ctx_params.offload_kqv = false,
            "--no-op-offload" => a.ctx_params.op_offload = false,
            "--swa-full" => a.ctx_params.swa_full = true,
            "-fa" | "--flash-attn" => a.ctx_params.flash_attn_type = val("on|off|auto")?.parse()?,
            "--rope-freq-base" => {
                a.ctx_params.rope_freq_base = num(flag, &val("float")?, "a number")?
            }
            "--rope-freq-scale" => {
                a.ctx_params.rope_freq_scale = num(flag, &val("float")?, "a number")?
            }
            "--yarn-orig-ctx" => {
                a.ctx_params.yarn_orig_ctx = num(flag, &val("int")?, "an integer")?
            }
            "--yarn-ext-factor" => {
                a.ctx_params.yarn_ext_factor = num(flag, &val("float")?, "a number")?
            }
            "--yarn-attn-factor" => {
                a.ctx_params.yarn_attn_factor = num(flag, &val("float")?, "a number")?
            }
            "--yarn-beta-fast" => {
                a.ctx_params.yarn_beta_fast = num(flag, &val("float")?, "a number")?
            }
            "--yarn-beta-slow" => {
                a.ctx_params.yarn_beta_slow = num(flag, &val("float")?, "a number")?
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Applies a sampling flag; false when `flag` is not one of them.
    fn sampling_flag(
        &mut self,
        flag: &str,
        val: &mut dyn FnMut(&str) -> Result<String>,
    ) -> Result<bool> {
        let a = self;
        match flag {
            "--temp" => a.sampling.temp = num(flag, &val("float")?, "a number")?,
            "--top-k" => a.sampling.top_k = num(flag, &val("int")?, "an integer")?,
            "--top-p" => a.sampling.top_p = num(flag, &val("float")?, "a number")?,
            "--min-p" => a.sampling.min_p = num(flag, &val("float")?, "a number")?,
            "--typical" => a.sampling.typ_p = num(flag, &val("float")?, "a number")?,
            "--repeat-penalty" => {
                a.sampling.penalty_repeat = num(flag, &val("float")?, "a number")?
            }
            "--repeat-last-n" => a.sampling.penalty_last_n = num(flag, &val("int")?, "an integer")?,
            "--frequency-penalty" => {
                a.sampling.penalty_freq = num(flag, &val("float")?, "a number")?
            }
            "--presence-penalty" => {
                a.sampling.penalty_present = num(flag, &val("float")?, "a number")?
            }
            "-s" | "--seed" => a.sampling.seed = num(flag, &val("int")?, "an unsigned integer")?,
            "--grammar" => a.sampling.grammar = val("GBNF text")?,
            "--grammar-file" => {
                let path = val("file")?;
                a.sampling.grammar =
                    std::fs::read_to_string(&path).map_err(|source| LlamaError::Io {
                        path: path.clone(),
                        source,
                    })?;
            }
            "-j" | "--json-schema" => {
                let text = val("JSON schema")?;
                a.sampling.grammar = schema_grammar(flag, &text)?;
            }
            "-jf" | "--json-schema-file" => {
                let path = val("file")?;
                let text = std::fs::read_to_string(&path).map_err(|source| LlamaError::Io {
                    path: path.clone(),
                    source,
                })?;
                a.sampling.grammar = schema_grammar(flag, &text)?;
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Errors on arguments no parser knew.
    pub fn reject_rest(&self) -> Result<()> {
        match self.rest.first() {
            Some(f) => Err(unknown_argument(f)),
            None => Ok(()),
        }
    }

    /// Applies `--fit` to the model and context parameters (see
    /// [`crate::fit`]): only what the user left at its default changes.
    pub fn fit_params(&mut self) -> Result<crate::memory_plan::MemoryPlan> {
        let path = std::path::PathBuf::from(self.model_path()?);
        crate::fit::fit_params(
            &path,
            &mut self.model_params,
            &mut self.ctx_params,
            &self.fit,
        )
    }

    /// The model path, or an error saying `-m` is needed.
    pub fn model_path(&self) -> Result<&str> {
        if self.model.is_empty() {
            return Err(LlamaError::InvalidParam(
                "no model given: use -m FILE.gguf".into(),
            ));
        }
        Ok(&self.model)
    }
}

/// Prints every registered device with its memory (`--list-devices`).
pub fn print_devices() {
    crate::devices::backend_init();
    println!("Available devices:");
    for line in registry::device_lines() {
        println!("  {line}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<CommonArgs> {
        CommonArgs::parse(s.split_whitespace().map(String::from))
    }

    #[test]
    fn flags() {
        let a = parse("-m x.gguf -p hi -n 5 -c 128 -ub 7 -ngl 99 -ctk f32 --temp 0 -s 42 -nkvo")
            .unwrap();
        assert_eq!(a.model, "x.gguf");
        assert_eq!(a.n_predict, 5);
        assert_eq!(a.ctx_params.n_ctx, 128);
        assert_eq!(a.ctx_params.n_ubatch, 7);
        assert_eq!(a.model_params.n_gpu_layers, 99);
        assert!(a.fit.ngl_set && a.fit.ctx_set && a.fit.enabled);
        assert_eq!(a.ctx_params.type_k, Type::F32);
        assert!(!a.ctx_params.offload_kqv);
        assert!(!a.ctx_params.swa_full);
        assert!(parse("--swa-full").unwrap().ctx_params.swa_full);
        assert!(!a.context_shift);
        let cs = parse("--context-shift --keep -1").unwrap();
        assert!(cs.context_shift && cs.n_keep == -1);
        assert!(
            !parse("--context-shift --no-context-shift")
                .unwrap()
                .context_shift
        );
        assert!(parse("--keep x").is_err());
        assert!(parse("-c").is_err());
        assert!(parse("-c abc").is_err());
        assert!(parse("-ctk q9").is_err());
        assert!(parse("-sm diagonal").is_err());
        let moe = parse("-ncmoe 3 -cmoe")
            .unwrap()
            .model_params
            .tensor_buft_overrides;
        assert_eq!(moe.len(), 4);
        assert!(moe[2].pattern.is_match("blk.2.ffn_up_exps.weight"));
        assert!(moe[3].pattern.is_match("blk.40.ffn_down_exps.weight"));
        assert!(moe.iter().all(|o| o.buft == "CPU"));
        assert!(parse("--n-cpu-moe -1").is_err());
        assert!(parse("--n-cpu-moe").is_err());
        use crate::context::FlashAttnType;
        assert_eq!(
            parse("-fa off").unwrap().ctx_params.flash_attn_type,
            FlashAttnType::Disabled
        );
        assert_eq!(
            parse("-fa on").unwrap().ctx_params.flash_attn_type,
            FlashAttnType::Enabled
        );
        assert_eq!(
            parse("").unwrap().ctx_params.flash_attn_type,
            FlashAttnType::Auto
        );
        let e = match parse("-fa maybe") {
            Err(e) => e.to_string(),
            Ok(_) => panic!("-fa maybe was accepted"),
        };
        assert!(e.contains("maybe") && e.contains("auto"), "{e}");
        assert_eq!(parse("--bogus").unwrap().rest, vec!["--bogus".to_string()]);
        assert_eq!(process_escapes("a\\nb\\\\"), "a\nb\\");
        assert_eq!(process_escapes("\\r\\t\\'\\\""), "\r\t'\"");
        // Unknown escapes, \0 included, and a final backslash stay.
        assert_eq!(process_escapes("\\0\\q\\"), "\\0\\q\\");
        // \xHH is one byte; UTF-8 may be spelled byte by byte.
        assert_eq!(process_escapes("\\x41\\xe4\\xbd\\xa0"), "A\u{4f60}");
        assert_eq!(process_escapes("\\x4g\\x4"), "\\x4g\\x4");
        assert_eq!(process_escapes("\\xff"), "\u{fffd}");
        assert_eq!(process_escapes("\\x 9\\x+a\\x-1"), "\t\n\u{fffd}");
    }

    #[test]
    fn prompt_files_lose_one_newline_and_take_escapes() {
        let dir = std::env::temp_dir().join(format!("cli-prompt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("p.txt");
        std::fs::write(&f, "a\\tb\n\n").unwrap();
        let path = f.to_str().unwrap();
        assert_eq!(
            parse(&format!("-f {path}")).unwrap().prompt.as_deref(),
            Some("a\tb\n")
        );
        let a = parse(&format!("-f {path} --no-escape")).unwrap();
        assert_eq!(a.prompt.as_deref(), Some("a\\tb\n"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn fit_flags_and_defaults() {
        let a = parse("").unwrap();
        assert_eq!(a.model_params.n_gpu_layers, -1);
        assert_eq!(a.fit, FitOptions::default());
        assert_eq!(a.fit.margin, 1024 << 20);
        assert_eq!(a.fit.min_ctx, 4096);
        let a = parse("-fit off -fitt 300 -fitc 512").unwrap();
        assert!(!a.fit.enabled && !a.fit.ctx_set && !a.fit.ngl_set);
        assert_eq!((a.fit.margin, a.fit.min_ctx), (300 << 20, 512));
        assert!(parse("--fit maybe").is_err());
        assert!(parse("-fitt 1,2").is_err());
        assert!(parse("-fitc x").is_err());
    }

    #[test]
    fn load_mode_flags_and_aliases() {
        let mode = |s: &str| parse(s).map(|a| a.model_params.load_mode);
        assert_eq!(mode("").unwrap(), LoadMode::Auto);
        assert_eq!(mode("-lm dio").unwrap(), LoadMode::Dio);
        assert_eq!(mode("--load-mode mmap+mlock").unwrap(), LoadMode::MmapMlock);
        assert_eq!(mode("--no-mmap").unwrap(), LoadMode::None);
        assert_eq!(mode("--mlock").unwrap(), LoadMode::MmapMlock);
        assert_eq!(mode("--no-mmap --mlock").unwrap(), LoadMode::Mlock);
        assert_eq!(mode("--mlock --no-mmap").unwrap(), LoadMode::Mlock);
        assert_eq!(mode("-lm none --mmap").unwrap(), LoadMode::Mmap);
        assert_eq!(mode("-lm dio -lm none").unwrap(), LoadMode::None);
        for bad in ["-lm", "-lm fast", "-lm dio --mlock", "-lm dio --no-mmap"] {
            assert!(mode(bad).is_err(), "{bad} was accepted");
        }
    }
}
