//! llama-perplexity: perplexity of a model over a text file, chunked like
//! llama.cpp's tool (the second half of each chunk is scored).

use std::io::Write;
use std::process::ExitCode;

use llama::cli::CommonArgs;
use llama::perplexity::perplexity;
use llama::{Context, LlamaError, Model, Result};

const HELP: &str = "usage: llama-perplexity -m MODEL -f FILE [-c N] [-b N] [--chunks N] [options]

Scores the text in chunks of -c tokens, each decoded from an empty cache with
its first token replaced by BOS; the second half of each chunk is scored.
Prints the running perplexity [1]x,[2]y,... and the final estimate.
Accepts the model and context options of llama-cli.";

fn run() -> Result<()> {
    let mut args = CommonArgs::parse(std::env::args().skip(1))?;
    if args.rest.iter().any(|a| a == "-h" || a == "--help") {
        println!("{HELP}");
        return Ok(());
    }
    let mut n_chunks: i64 = -1;
    let mut rest = std::mem::take(&mut args.rest).into_iter();
    while let Some(a) = rest.next() {
        match a.as_str() {
            "--chunks" => {
                let v = llama::cli::flag_value(&mut rest, &a)?;
                n_chunks = v
                    .parse()
                    .map_err(|_| LlamaError::InvalidParam(format!("invalid --chunks '{v}'")))?;
            }
            _ => return Err(llama::cli::unknown_argument(&a)),
        }
    }
    let path = args.model_path()?.to_string();
    let text = args
        .prompt
        .clone()
        .ok_or_else(|| LlamaError::InvalidParam("no text given: use -f FILE".into()))?;
    // llama.cpp strips one trailing newline from the file.
    let text = text.strip_suffix('\n').unwrap_or(&text).to_string();
    let mut cp = args.ctx_params.clone();
    if args.ctx_params.n_ctx == 4096 && !std::env::args().any(|a| a == "-c" || a == "--ctx-size") {
        cp.n_ctx = 512;
    }
    let n_ctx = cp.n_ctx;
    if n_ctx == 0 {
        return Err(LlamaError::InvalidParam(
            "-c must be positive for perplexity".into(),
        ));
    }
    // The context is the chunk length of the measure: --fit keeps it.
    args.fit.ctx_set = true;
    args.ctx_params.n_ctx = n_ctx;
    args.fit_params()?;
    let model = Model::load(&path, &args.model_params)?;
    let tokens = model.vocab.tokenize(&text, true, false);
    cp.n_batch = cp.n_batch.min(n_ctx);
    cp.n_ubatch = cp.n_ubatch.min(cp.n_batch);
    let n_batch = cp.n_batch;
    let mut ctx = Context::new(&model, cp)?;
    llama::cli::apply_adapters(&args.adapters, &mut ctx)?;
    let n_chunk = tokens.len() / n_ctx;
    let n_chunk = if n_chunks < 0 {
        n_chunk
    } else {
        (n_chunks as usize).min(n_chunk)
    };
    eprintln!(
        "perplexity: calculating perplexity over {n_chunk} chunks, n_ctx={n_ctx}, batch_size={n_batch}, n_seq=1"
    );
    let out = std::io::stdout();
    let mut out = out.lock();
    let res = perplexity(&mut ctx, &tokens, n_ctx, Some(n_chunk), |i, v| {
        write!(out, "[{}]{v:.4},", i + 1).ok();
        out.flush().ok();
    })?;
    writeln!(out).ok();
    writeln!(
        out,
        "Final estimate: PPL = {:.4} +/- {:.5}",
        res.ppl, res.error
    )
    .ok();
    Ok(())
}

fn main() -> ExitCode {
    llama::cli::exit_code(run())
}
