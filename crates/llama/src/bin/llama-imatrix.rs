//! llama-imatrix: the importance matrix of a model over a text, with
//! llama.cpp's interface and file formats; also combines matrices
//! (`--in-file`) and prints their statistics (`--show-statistics`).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use llama::cli::{flag_value, unknown_argument, CommonArgs};
use llama::imatrix::{
    run_chunks, statistics_table, Collector, CollectorParams, ImatrixFile, OutputFormat, RunLog,
    RunParams, SharedCollector,
};
use llama::{Context, LlamaError, Model, Result};

const HELP: &str = "usage: llama-imatrix -m MODEL -f TEXT [-o imatrix.gguf] [options]

Runs the model over the text in chunks of -c tokens (default 512) and writes,
for every weight of the layers, the sums of the squared activations that
enter it (per expert for mixture-of-experts weights) and their counts.

  -o, --output FILE          output file (default: imatrix.gguf)
  --output-format {gguf,dat} the GGUF format (default) or the older .dat one
  --output-frequency N       write the output every N chunks (default: 10)
  --save-frequency N         also write FILE.at_N every N chunks (default: 0, never)
  --process-output           also collect output.weight
  --no-ppl / --ppl           do not / do print the perplexity (default: on)
  --chunk N                  skip the first N chunks of the text
  --chunks N                 process at most N chunks (default: -1, all)
  --parse-special            parse special tokens in the text
  --in-file FILE[,FILE]      add an existing matrix (repeatable); without -f,
                             only combine the files into the output
  --show-statistics          print statistics of the one --in-file and exit

Accepts the model and context options of llama-cli (-c, -b, -ub, -t, -ngl, ...).";

/// The options of this tool beyond the common ones.
struct Opts {
    out_file: String,
    format: Option<OutputFormat>,
    out_freq: i32,
    save_freq: i32,
    process_output: bool,
    compute_ppl: bool,
    i_chunk: i64,
    n_chunks: i64,
    parse_special: bool,
    in_files: Vec<String>,
    show_statistics: bool,
}

fn int<T: std::str::FromStr>(flag: &str, v: &str) -> Result<T> {
    v.parse()
        .map_err(|_| LlamaError::InvalidParam(format!("invalid value for {flag}: '{v}'")))
}

fn parse_opts(rest: Vec<String>) -> Result<Option<Opts>> {
    let mut o = Opts {
        out_file: "imatrix.gguf".into(),
        format: None,
        out_freq: 10,
        save_freq: 0,
        process_output: false,
        compute_ppl: true,
        i_chunk: 0,
        n_chunks: -1,
        parse_special: false,
        in_files: Vec::new(),
        show_statistics: false,
    };
    let mut it = rest.into_iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-h" | "--help" => return Ok(None),
            "-o" | "--output" | "--output-file" => o.out_file = flag_value(&mut it, &a)?,
            "--output-format" => o.format = Some(flag_value(&mut it, &a)?.parse()?),
            "-ofreq" | "--output-frequency" => o.out_freq = int(&a, &flag_value(&mut it, &a)?)?,
            "--save-frequency" => o.save_freq = int(&a, &flag_value(&mut it, &a)?)?,
            "--process-output" => o.process_output = true,
            "--ppl" => o.compute_ppl = true,
            "--no-ppl" => o.compute_ppl = false,
            "--chunk" | "--from-chunk" => o.i_chunk = int(&a, &flag_value(&mut it, &a)?)?,
            "--chunks" => o.n_chunks = int(&a, &flag_value(&mut it, &a)?)?,
            "--parse-special" => o.parse_special = true,
            "--show-statistics" => o.show_statistics = true,
            "--in-file" => {
                for f in flag_value(&mut it, &a)?
                    .split(',')
                    .filter(|f| !f.is_empty())
                {
                    if !std::path::Path::new(f).is_file() {
                        return Err(LlamaError::InvalidParam(format!(
                            "failed to open file '{f}' (--in-file)"
                        )));
                    }
                    o.in_files.push(f.to_string());
                }
            }
            _ => return Err(unknown_argument(&a)),
        }
    }
    if o.i_chunk < 0 {
        return Err(LlamaError::InvalidParam(format!(
            "--chunk must not be negative, not {}",
            o.i_chunk
        )));
    }
    Ok(Some(o))
}

/// Prints the running perplexity as llama-imatrix does.
struct Printer;

impl RunLog for Printer {
    fn start(&mut self, n_chunk: usize, n_ctx: usize, n_batch: usize, n_seq: usize) {
        eprintln!(
            "compute_imatrix: computing over {n_chunk} chunks, n_ctx={n_ctx}, batch_size={n_batch}, n_seq={n_seq}"
        );
    }
    fn first_pass(&mut self, secs: f32, n_chunk: usize, n_seq: usize) {
        let mut total = (secs * n_chunk as f32 / n_seq as f32) as i64;
        let mut eta = String::new();
        if total >= 3600 {
            eta = format!("{} hours ", total / 3600);
            total %= 3600;
        }
        eprintln!(
            "compute_imatrix: {secs:.2} seconds per pass - ETA {eta}{:.2} minutes",
            total as f64 / 60.0
        );
    }
    fn chunk(&mut self, i: usize, ppl: f64) {
        let mut out = std::io::stdout().lock();
        let _ = write!(out, "[{i}]{ppl:.4},");
        let _ = out.flush();
    }
}

fn show_statistics(o: &Opts, chunk_size: usize) -> Result<()> {
    let [file] = o.in_files.as_slice() else {
        return Err(LlamaError::InvalidParam(
            "a single imatrix file is required to compute tensor statistics (--in-file)".into(),
        ));
    };
    let mut c = Collector::new(params(o, chunk_size, None));
    c.load(&ImatrixFile::read(std::path::Path::new(file))?)?;
    let mut skipped = Vec::new();
    let table = statistics_table(file, c.entries(), &mut skipped).map_err(LlamaError::InvalidParam);
    for s in skipped {
        eprintln!("compute_statistics: {s}");
    }
    eprint!("{}", table?);
    eprintln!();
    Ok(())
}

fn params(o: &Opts, chunk_size: usize, prompt_file: Option<String>) -> CollectorParams {
    let format = o.format.unwrap_or(OutputFormat::Gguf);
    CollectorParams {
        chunk_size,
        process_output: o.process_output,
        out_freq: o.out_freq,
        save_freq: o.save_freq,
        out_file: PathBuf::from(&o.out_file),
        format,
        prompt_file,
    }
}

fn run() -> Result<()> {
    // llama-imatrix reads the text as it is: no escape processing unless -e.
    let args = std::iter::once("--no-escape".to_string()).chain(std::env::args().skip(1));
    let mut args = CommonArgs::parse(args)?;
    let Some(o) = parse_opts(std::mem::take(&mut args.rest))? else {
        println!("{HELP}");
        return Ok(());
    };
    if !args.fit.ctx_set {
        args.ctx_params.n_ctx = 512;
    }
    let n_ctx = args.ctx_params.n_ctx;
    // Chunks of n_ctx tokens side by side: as many sequences as a batch holds.
    let n_seq = (args.ctx_params.n_batch / n_ctx.max(1)).max(1);
    let chunk_size = n_ctx;
    if o.show_statistics {
        return show_statistics(&o, chunk_size);
    }
    if n_ctx == 0 {
        return Err(LlamaError::InvalidParam(
            "the imatrix tool requires --ctx-size above 0".into(),
        ));
    }
    if o.format.is_none() && !o.out_file.ends_with(".gguf") {
        eprintln!(
            "save_imatrix: saving imatrix using GGUF format with a different suffix than .gguf"
        );
        eprintln!("save_imatrix: if you want the previous imatrix format, use --output-format dat");
    }
    let prompt_file = args.prompt.as_ref().and(args.file.clone());
    let collector = SharedCollector::new(Collector::new(params(&o, chunk_size, prompt_file)));
    for f in &o.in_files {
        eprintln!("main : loading imatrix from '{f}'");
        let file = ImatrixFile::read(std::path::Path::new(f))?;
        collector
            .lock()
            .load(&file)
            .map_err(|e| LlamaError::InvalidParam(format!("failed to load {f}: {e}")))?;
    }
    let Some(text) = args.prompt.clone() else {
        eprintln!("No prompt provided; combining precomputed matrices only.");
        if o.in_files.is_empty() {
            return Err(LlamaError::InvalidParam(
                "no prompt provided (-f) and no precomputed matrices (--in-file) to combine".into(),
            ));
        }
        eprintln!("main : saving imatrix to '{}'", o.out_file);
        return collector.lock().save(None);
    };
    let mut cp = args.ctx_params.clone();
    cp.n_ctx = n_seq * n_ctx;
    cp.n_seq_max = n_seq;
    cp.n_batch = cp.n_batch.min(cp.n_ctx);
    cp.n_ubatch = cp.n_ubatch.min(cp.n_batch);
    args.fit.ctx_set = true;
    args.ctx_params.n_ctx = cp.n_ctx;
    args.fit_params()?;
    let model = Model::load(args.model_path()?, &args.model_params)?;
    collector.lock().check_model(&model)?;
    let n_ctx_train = model.hparams.n_ctx_train;
    if cp.n_ctx > n_ctx_train {
        eprintln!(
            "main: model was trained on only {n_ctx_train} context tokens ({} specified)",
            cp.n_ctx
        );
    }
    let n_batch = cp.n_batch;
    let mut ctx = Context::new(&model, cp)?;
    llama::cli::apply_adapters(&args.adapters, &mut ctx)?;
    ctx.set_eval_observer(Some(collector.observer()));
    eprintln!("compute_imatrix: tokenizing the input ..");
    let tokens = model.vocab.tokenize(&text, true, o.parse_special);
    let rp = RunParams {
        n_ctx,
        n_batch,
        n_chunks: usize::try_from(o.n_chunks).ok(),
        i_chunk: o.i_chunk as usize,
        compute_ppl: o.compute_ppl,
    };
    let r = run_chunks(&mut ctx, &tokens, &rp, &mut Printer);
    ctx.set_eval_observer(None);
    if let Some(e) = collector.lock().take_error() {
        return Err(e);
    }
    let r = r?;
    println!();
    if let Some((ppl, err)) = r.ppl {
        println!("Final estimate: PPL = {ppl:.4} +/- {err:.5}");
    } else if o.compute_ppl {
        println!("Unexpected negative standard deviation of log(prob)");
    }
    collector.lock().save(None)?;
    eprintln!(
        "main: stored collected data after {} chunks in {}",
        collector.lock().last_chunk(),
        o.out_file
    );
    Ok(())
}

fn main() -> ExitCode {
    llama::cli::exit_code(run())
}
