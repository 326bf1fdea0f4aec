//! Command-line flags of `llama-server`: the model and context flags the
//! tools share, plus the server's own, with llama.cpp's names.

use std::time::Duration;

use llama::chat::tools::ReasoningFormat;
use llama::cli::CommonArgs;
use llama::speculative::SpecArgs;
use llama::{LlamaError, PoolingType, Result};

use crate::engine::CacheConfig;
use std::path::PathBuf;

/// Parsed flags.
#[derive(Clone)]
pub struct ServerArgs {
    /// Model, context and sampling flags.
    pub common: CommonArgs,
    /// Address to listen on.
    pub host: String,
    /// Port (0 = any free one).
    pub port: u16,
    /// Slots (`-np`).
    pub n_parallel: usize,
    /// `--api-key`.
    pub api_key: Option<String>,
    /// `--metrics`.
    pub metrics: bool,
    /// `-to`, seconds.
    pub timeout: Duration,
    /// `--chat-template`.
    pub chat_template: Option<String>,
    /// Jinja rendering of the model's template (`--jinja`, default on;
    /// `--no-jinja` recognises it and renders it in code).
    pub jinja: bool,
    /// `--embeddings`, with `--pooling`.
    pub embeddings: Option<PoolingType>,
    /// `-a/--alias`: the model name in responses.
    pub alias: Option<String>,
    /// `--reasoning-format`: where a reply's reasoning goes.
    pub reasoning_format: ReasoningFormat,
    /// `--slot-prompt-similarity`, `--cache-reuse`, `--context-shift`.
    pub cache: CacheConfig,
    /// `--slot-save-path`: the directory `/slots` actions save to and
    /// restore from (none: the actions are refused).
    pub slot_save_path: Option<PathBuf>,
    /// `--spm-infill`: `/infill` prompts in suffix-prefix-middle order.
    pub spm_infill: bool,
    /// Speculative decoding: `-md`, `--draft-max`, `--draft-min`,
    /// `--draft-p-min`, `-ngld`, `-devd`, `--spec-type`, ...
    pub spec: SpecArgs,
}

/// Usage text.
pub const HELP: &str = "usage: llama-server -m MODEL [options]

server:
  --host HOST               address to listen on (default 127.0.0.1)
  --port PORT               port (default 8080)
  -np, --parallel N         parallel slots sharing the context (default 1)
  -c, --ctx-size N          context size, split among the slots (default 4096)
  --api-key KEY             require this key on every endpoint but /health
  --api-key-file FILE       read the key from a file
  --metrics                 serve Prometheus metrics at /metrics
  -to, --timeout N          read timeout and longest wait for a token, seconds (default 600)
  --chat-template NAME|FILE built-in template (chatml, llama3, gemma, ...), a file, or Jinja text
  --jinja, --no-jinja       render the model's template with Jinja (default on), or by
                            recognising it as a built-in one
  --embeddings              serve /v1/embeddings
  --pooling mean|cls|last   pooling of embeddings (default mean)
  -a, --alias NAME          model name in responses (default: the file name)
  --reasoning-format FMT    where reasoning (<think> blocks, gpt-oss analysis) goes: auto or
                            deepseek (reasoning_content), none (left in content)
                            (default auto; deepseek-legacy is not supported)
  -sps, --slot-prompt-similarity F
                            a request goes to the free slot whose cached prompt shares more
                            than this fraction of its prompt (default 0.1, 0 = off)
  --cache-reuse N           reuse cached chunks of at least N tokens after the common prefix
                            by shifting them (default 0 = off; attention memories only)
  --context-shift           when a slot's context fills, drop old tokens after n_keep and go
                            on (default off: generation stops); --no-context-shift
  --keep N                  prompt tokens kept on a context shift (default 0, -1 = all)
  -ctxcp, --ctx-checkpoints, --swa-checkpoints N
                            most context checkpoints a slot keeps for a sliding-window or
                            recurrent memory, which cannot drop a suffix (default 32, 0 = off)
  -cms, --checkpoint-min-step N
                            once a slot's checkpoints are full, those closer than N tokens
                            to an earlier one go first (default 8192, 0 = no minimum)
  --slot-save-path DIR      directory for /slots/{id}?action=save|restore
  --spm-infill              /infill prompts in suffix-prefix-middle order

speculative decoding (each slot drafts for itself; greedy replies are unchanged):
  -md, --model-draft FILE   draft model (same vocabulary as the model)
  --draft-max N             most tokens drafted per step (default 3)
  --draft-min N             fewer drafted tokens are not used (default 0)
  --draft-p-min P           stop drafting at a token less probable than P (default 0)
  -ngld, --n-gpu-layers-draft N  draft model layers on GPUs (default: as -ngl)
  -devd, --device-draft LIST  devices of the draft model (default: as -dev)
  --spec-type TYPE          none, draft-simple (the default with -md) or ngram-simple
                            (prompt lookup, no draft model)
  --spec-ngram-simple-size-n N  n-gram looked up (default 12)
  --spec-ngram-simple-size-m N  most tokens proposed after a match (default 48)

model, context and sampling flags are those of llama-cli (-ngl, -lm, -t, -b, -ub,
-ctk, -ctv, -dev, --temp, --top-k, --top-p, --min-p, -s, ...).";

impl ServerArgs {
    /// Parses `args` (without the program name).
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<ServerArgs> {
        let mut common = CommonArgs::parse(args)?;
        let spec = SpecArgs::take(&mut common.rest)?;
        let mut a = ServerArgs {
            host: "127.0.0.1".into(),
            port: 8080,
            n_parallel: 1,
            api_key: None,
            metrics: false,
            timeout: Duration::from_secs(600),
            chat_template: None,
            jinja: true,
            embeddings: None,
            alias: None,
            reasoning_format: ReasoningFormat::Auto,
            cache: CacheConfig {
                context_shift: common.context_shift,
                ..CacheConfig::default()
            },
            slot_save_path: None,
            spm_infill: false,
            spec,
            common: CommonArgs {
                rest: Vec::new(),
                ..common.clone()
            },
        };
        let mut embeddings = false;
        let mut pooling = PoolingType::Mean;
        let mut it = common.rest.into_iter();
        while let Some(flag) = it.next() {
            let mut val = |what: &str| -> Result<String> {
                it.next().ok_or_else(|| {
                    LlamaError::InvalidParam(format!("{flag} needs a value ({what})"))
                })
            };
            let bad = |v: &str, what: &str| {
                LlamaError::InvalidParam(format!("invalid value '{v}' for {flag}: expected {what}"))
            };
            match flag.as_str() {
                "--host" => a.host = val("address")?,
                "--port" => {
                    let v = val("port")?;
                    a.port = v.parse().map_err(|_| bad(&v, "a port number"))?;
                }
                "-np" | "--parallel" => {
                    let v = val("int")?;
                    a.n_parallel = v
                        .parse()
                        .ok()
                        .filter(|&n| n >= 1)
                        .ok_or_else(|| bad(&v, "an integer >= 1"))?;
                }
                "--api-key" => a.api_key = Some(val("key")?),
                "--api-key-file" => {
                    let p = val("path")?;
                    let text = std::fs::read_to_string(&p).map_err(|source| LlamaError::Io {
                        path: p.clone(),
                        source,
                    })?;
                    a.api_key = text
                        .lines()
                        .next()
                        .map(|l| l.trim().to_string())
                        .filter(|k| !k.is_empty());
                }
                "--metrics" => a.metrics = true,
                "-to" | "--timeout" => {
                    let v = val("seconds")?;
                    let s: u64 = v
                        .parse()
                        .ok()
                        .filter(|&s| s > 0)
                        .ok_or_else(|| bad(&v, "seconds > 0"))?;
                    a.timeout = Duration::from_secs(s);
                }
                "--chat-template" | "--chat-template-file" => {
                    a.chat_template = Some(val("name or file")?)
                }
                "--jinja" => a.jinja = true,
                "--no-jinja" => a.jinja = false,
                "--embedding" | "--embeddings" => embeddings = true,
                "--pooling" => {
                    let v = val("type")?;
                    pooling = match v.as_str() {
                        "mean" => PoolingType::Mean,
                        "cls" => PoolingType::Cls,
                        "last" => PoolingType::Last,
                        _ => return Err(bad(&v, "mean, cls or last")),
                    };
                }
                "-a" | "--alias" => a.alias = Some(val("name")?),
                "--reasoning-format" => {
                    let v = val("format")?;
                    a.reasoning_format = ReasoningFormat::from_name(&v)
                        .map_err(|e| LlamaError::InvalidParam(format!("{flag}: {e}")))?;
                }
                "-sps" | "--slot-prompt-similarity" => {
                    let v = val("fraction")?;
                    a.cache.slot_prompt_similarity = v
                        .parse::<f32>()
                        .ok()
                        .filter(|x| (0.0..=1.0).contains(x))
                        .ok_or_else(|| bad(&v, "a number in [0, 1]"))?;
                }
                "--cache-reuse" => {
                    let v = val("int")?;
                    a.cache.cache_reuse = v.parse().map_err(|_| bad(&v, "an integer >= 0"))?;
                }
                "-ctxcp" | "--ctx-checkpoints" | "--swa-checkpoints" => {
                    let v = val("int")?;
                    a.cache.ctx_checkpoints = v.parse().map_err(|_| bad(&v, "an integer >= 0"))?;
                }
                "-cms" | "--checkpoint-min-step" => {
                    let v = val("int")?;
                    a.cache.checkpoint_min_step =
                        v.parse().map_err(|_| bad(&v, "an integer >= 0"))?;
                }
                "--slot-save-path" => {
                    let v = val("directory")?;
                    let dir = PathBuf::from(&v);
                    if !dir.is_dir() {
                        return Err(LlamaError::InvalidParam(format!(
                            "{flag}: '{v}' is not a directory"
                        )));
                    }
                    a.slot_save_path = Some(dir);
                }
                "--spm-infill" => a.spm_infill = true,
                "--cont-batching" | "-cb" => {}
                _ => return Err(llama::cli::unknown_argument(&flag)),
            }
        }
        if embeddings {
            a.embeddings = Some(pooling);
        }
        Ok(a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<ServerArgs> {
        ServerArgs::parse(s.split_whitespace().map(String::from))
    }

    #[test]
    fn flags() {
        let a = parse("-m x.gguf --port 9000 -np 4 --api-key k --metrics -to 5 --no-jinja --embeddings --pooling last -c 256").unwrap();
        assert_eq!(
            (a.port, a.n_parallel, a.metrics, a.jinja),
            (9000, 4, true, false)
        );
        assert_eq!(a.api_key.as_deref(), Some("k"));
        assert_eq!(a.timeout, Duration::from_secs(5));
        assert_eq!(a.embeddings, Some(PoolingType::Last));
        assert_eq!(a.common.ctx_params.n_ctx, 256);
        assert_eq!(a.reasoning_format, ReasoningFormat::Auto);
        let n = parse("-m x.gguf --reasoning-format none").unwrap();
        assert_eq!(n.reasoning_format, ReasoningFormat::None);
        assert_eq!(n.cache, CacheConfig::default());
        assert!(n.slot_save_path.is_none());
        let dir = std::env::temp_dir();
        let c = parse(&format!(
            "-m x.gguf -sps 0.5 --cache-reuse 256 --context-shift --keep -1 -ctxcp 3 -cms 64 --slot-save-path {}",
            dir.display()
        ))
        .unwrap();
        assert_eq!(
            c.cache,
            CacheConfig {
                slot_prompt_similarity: 0.5,
                cache_reuse: 256,
                context_shift: true,
                ctx_checkpoints: 3,
                checkpoint_min_step: 64,
            }
        );
        assert_eq!(c.common.n_keep, -1);
        assert_eq!(c.slot_save_path.as_deref(), Some(dir.as_path()));
        let d = parse(
            "-m x.gguf -md d.gguf --draft-max 6 --draft-min 1 --draft-p-min 0.25 -ngld 0 -np 2",
        )
        .unwrap();
        assert_eq!(d.spec.model.as_deref(), Some("d.gguf"));
        assert_eq!((d.spec.params.n_max, d.spec.params.n_min), (6, 1));
        assert_eq!(d.spec.params.p_min, 0.25);
        assert_eq!((d.spec.n_gpu_layers, d.n_parallel), (Some(0), 2));
        let g = parse("-m x.gguf --spec-type ngram-simple --spec-ngram-simple-size-n 4").unwrap();
        assert_eq!(g.spec.ngram.size_n, 4);
        for bad in [
            "-np 0",
            "--port x",
            "-to 0",
            "--pooling max",
            "--reasoning-format think",
            "--reasoning-format deepseek-legacy",
            "--bogus",
            "--port",
            "-sps 2",
            "--cache-reuse -1",
            "--ctx-checkpoints -1",
            "-cms x",
            "--slot-save-path /nonexistent/dir",
            "--draft-max -2",
            "--draft-p-min 1.5",
            "--spec-type draft-simple",
            "--spec-type ngram-cache",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
