//! llama-bench: prompt processing (pp) and text generation (tg) speed.

use std::process::ExitCode;
use std::time::Instant;

use llama::cli::parse_devices;
use llama::stats::mean_std;
use llama::{Batch, Context, ContextParams, LlamaError, LoadMode, Model, ModelParams, Result};

const HELP: &str = "usage: llama-bench -m MODEL [options]

  -m, --model FILE        model (repeatable, or comma-separated)
  -p, --n-prompt LIST     prompt sizes (default 512)
  -n, --n-gen LIST        generation sizes (default 128)
  -t, --threads LIST      threads (default: available cores, at most 4)
  -ngl, --n-gpu-layers LIST   layers on GPUs (default 99)
  -b, --batch-size N      logical batch (default 2048)
  -ub, --ubatch-size N    physical batch (default 512)
  -ctk, -ctv TYPE         KV cache types
  -dev, --device LIST     devices
  -rpc, --rpc LIST        RPC servers host:port[,host:port...]
  -lm, --load-mode MODE   auto (default), none, mmap, mlock, mmap+mlock, dio
  -mmp, --mmap 0|1        alias: memory-map the model or not
  -fa, --flash-attn on|off|auto  fused attention (default auto: on where every backend supports it)
  -ncmoe, --n-cpu-moe N   keep the expert weights of the first N layers in CPU memory
  --swa-full              full-size KV cache for sliding-window layers too
  --repack LIST           repack weights for the CPU's matrix kernels, 0|1
                          (default 1)
  -r, --repetitions N     repetitions (default 5)
  -o, --output md|json    output format (default md)";

fn list<T: std::str::FromStr>(flag: &str, v: &str) -> Result<Vec<T>> {
    v.split(',')
        .map(|x| {
            x.trim()
                .parse()
                .map_err(|_| LlamaError::InvalidParam(format!("invalid value '{x}' for {flag}")))
        })
        .collect()
}

/// Parses a comma-separated list of 0|1 flags.
fn bool_list(flag: &str, v: &str) -> Result<Vec<bool>> {
    v.split(',')
        .map(|x| match x.trim() {
            "0" => Ok(false),
            "1" => Ok(true),
            _ => Err(LlamaError::InvalidParam(format!(
                "invalid value '{x}' for {flag}: expected 0 or 1"
            ))),
        })
        .collect()
}

struct Test {
    model: String,
    n_prompt: usize,
    n_gen: usize,
    n_threads: usize,
    ngl: i32,
    repack: bool,
}

struct Record {
    test: Test,
    model_type: String,
    model_size: u64,
    model_n_params: u64,
    backends: String,
    samples_ns: Vec<u64>,
}

fn run_test(ctx: &mut Context<'_>, n_prompt: usize, n_gen: usize, n_vocab: usize) -> Result<()> {
    ctx.kv_clear();
    let mut rng = 42u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        (rng % n_vocab as u64) as i32
    };
    let n_batch = ctx.params.n_batch;
    let mut done = 0;
    while done < n_prompt {
        let n = n_batch.min(n_prompt - done);
        let toks: Vec<i32> = (0..n).map(|_| next()).collect();
        ctx.decode(&Batch::get_one(&toks))?;
        done += n;
    }
    for _ in 0..n_gen {
        ctx.decode(&Batch::get_one(&[next()]))?;
    }
    Ok(())
}

fn run() -> Result<()> {
    let mut models: Vec<String> = Vec::new();
    let (mut pp, mut tg) = (vec![512usize], vec![128usize]);
    let mut threads = vec![llama::context::default_n_threads()];
    let mut ngls = vec![99i32];
    let (mut reps, mut json) = (5usize, false);
    let mut cp = ContextParams::default();
    let mut devices = None;
    let mut load_mode = LoadMode::Auto;
    let mut repacks = vec![true];
    let mut n_cpu_moe = 0usize;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut val = || llama::cli::flag_value(&mut it, &a);
        match a.as_str() {
            "-m" | "--model" => models.extend(val()?.split(',').map(String::from)),
            "-p" | "--n-prompt" => pp = list(&a, &val()?)?,
            "-n" | "--n-gen" => tg = list(&a, &val()?)?,
            "-t" | "--threads" => threads = list(&a, &val()?)?,
            "-ngl" | "--n-gpu-layers" => ngls = list(&a, &val()?)?,
            "-b" | "--batch-size" => cp.n_batch = list(&a, &val()?)?[0],
            "-ub" | "--ubatch-size" => cp.n_ubatch = list(&a, &val()?)?[0],
            "-ctk" | "--cache-type-k" => cp.type_k = llama::cli::parse_cache_type(&a, &val()?)?,
            "-ctv" | "--cache-type-v" => cp.type_v = llama::cli::parse_cache_type(&a, &val()?)?,
            "-dev" | "--device" => devices = Some(parse_devices(&val()?)?),
            "-rpc" | "--rpc" => llama::devices::add_rpc_servers(&val()?)?,
            "-r" | "--repetitions" => reps = list(&a, &val()?)?[0],
            "-lm" | "--load-mode" => load_mode = val()?.parse()?,
            "-mmp" | "--mmap" => {
                load_mode = LoadMode::from_flags(bool_list(&a, &val()?)?[0], load_mode.use_mlock())
            }
            "-fa" | "--flash-attn" => cp.flash_attn_type = val()?.parse()?,
            "--swa-full" => cp.swa_full = true,
            "--repack" => repacks = bool_list(&a, &val()?)?,
            "-ncmoe" | "--n-cpu-moe" => {
                n_cpu_moe = val()?
                    .parse()
                    .map_err(|_| LlamaError::InvalidParam(format!("{a}: expected one count")))?
            }
            "-o" | "--output" => {
                json = match val()?.as_str() {
                    "json" => true,
                    "md" => false,
                    o => {
                        return Err(LlamaError::InvalidParam(format!(
                            "invalid output format '{o}': md or json"
                        )))
                    }
                }
            }
            "-h" | "--help" => {
                println!("{HELP}");
                return Ok(());
            }
            _ => return Err(llama::cli::unknown_argument(&a)),
        }
    }
    if models.is_empty() {
        return Err(LlamaError::InvalidParam(
            "no model given: use -m FILE.gguf".into(),
        ));
    }
    if threads.contains(&0) || reps == 0 {
        return Err(LlamaError::InvalidParam(
            "threads and repetitions must be positive".into(),
        ));
    }
    llama::log::set_level(llama::log::Level::Warn);
    let mut records = Vec::new();
    let show_repack = repacks.iter().any(|&r| !r);
    for m in &models {
        for (&ngl, &repack) in ngls
            .iter()
            .flat_map(|n| repacks.iter().map(move |r| (n, r)))
        {
            let mp = ModelParams {
                n_gpu_layers: ngl,
                devices: devices.clone(),
                load_mode,
                use_extra_bufts: repack,
                tensor_buft_overrides: llama::TensorBuftOverride::n_cpu_moe(n_cpu_moe),
                ..ModelParams::default()
            };
            let model = Model::load(m, &mp)?;
            let backends = if model.plan.n_offloaded > 0 {
                model
                    .devices
                    .iter()
                    .map(|d| d.name().to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            } else {
                "CPU".to_string()
            };
            for &nt in &threads {
                let tests: Vec<(usize, usize)> = pp
                    .iter()
                    .filter(|&&p| p > 0)
                    .map(|&p| (p, 0))
                    .chain(tg.iter().filter(|&&n| n > 0).map(|&n| (0, n)))
                    .collect();
                for (n_prompt, n_gen) in tests {
                    let params = ContextParams {
                        n_ctx: (n_prompt + n_gen).max(1),
                        n_threads: nt,
                        n_threads_batch: nt,
                        ..cp.clone()
                    };
                    let mut ctx = Context::new(&model, params)?;
                    let n_vocab = model.hparams.n_vocab;
                    let samples = time_test(&mut ctx, n_prompt, n_gen, n_vocab, reps)?;
                    let rec = Record {
                        test: Test {
                            model: m.clone(),
                            n_prompt,
                            n_gen,
                            n_threads: nt,
                            ngl,
                            repack,
                        },
                        model_type: model.desc(),
                        model_size: model.size_bytes,
                        model_n_params: model.n_elements,
                        backends: backends.clone(),
                        samples_ns: samples,
                    };
                    if !json {
                        if records.is_empty() {
                            print_header(show_repack);
                        }
                        print_row(&rec, show_repack);
                    }
                    records.push(rec);
                }
            }
        }
    }
    if json {
        let items: Vec<String> = records.iter().map(json_record).collect();
        println!("[\n{}\n]", items.join(",\n"));
    }
    Ok(())
}

/// Times `reps` runs of a test (nanoseconds each), after a warm-up run as
/// llama.cpp's: the whole prompt (so that the compute buffers are touched
/// once before timing) and one generated token.
fn time_test(
    ctx: &mut Context<'_>,
    n_prompt: usize,
    n_gen: usize,
    n_vocab: usize,
    reps: usize,
) -> Result<Vec<u64>> {
    run_test(ctx, n_prompt, usize::from(n_gen > 0), n_vocab)?;
    let mut samples = Vec::new();
    for _ in 0..reps {
        let t = Instant::now();
        run_test(ctx, n_prompt, n_gen, n_vocab)?;
        samples.push(t.elapsed().as_nanos() as u64);
    }
    Ok(samples)
}

/// The header of the markdown table.
fn print_header(show_repack: bool) {
    let (h, l) = if show_repack {
        (" repack |", " -----: |")
    } else {
        ("", "")
    };
    println!("| model                          |       size |     params | backend    | threads | ngl |{h}          test |                  t/s |");
    println!("| ------------------------------ | ---------: | ---------: | ---------- | ------: | --: |{l} ------------: | -------------------: |");
}

fn ts(r: &Record) -> Vec<f64> {
    let n = (r.test.n_prompt + r.test.n_gen) as f64;
    r.samples_ns.iter().map(|&ns| n * 1e9 / ns as f64).collect()
}

fn print_row(r: &Record, show_repack: bool) {
    let (avg, sd) = mean_std(&ts(r));
    let test = if r.test.n_prompt > 0 {
        format!("pp{}", r.test.n_prompt)
    } else {
        format!("tg{}", r.test.n_gen)
    };
    let size = format!("{:.2} MiB", r.model_size as f64 / 1048576.0);
    let params = format!("{:.2} M", r.model_n_params as f64 / 1e6);
    let repack = if show_repack {
        format!(" {:>6} |", u8::from(r.test.repack))
    } else {
        String::new()
    };
    println!(
        "| {:<30} | {:>10} | {:>10} | {:<10} | {:>7} | {:>3} |{repack} {:>13} | {:>20} |",
        r.model_type,
        size,
        params,
        r.backends,
        r.test.n_threads,
        r.test.ngl,
        test,
        format!("{avg:.2} ± {sd:.2}")
    );
}

fn json_str(s: &str) -> String {
    let mut o = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

fn json_record(r: &Record) -> String {
    let tsv = ts(r);
    let (avg_ts, sd_ts) = mean_std(&tsv);
    let ns: Vec<f64> = r.samples_ns.iter().map(|&x| x as f64).collect();
    let (avg_ns, sd_ns) = mean_std(&ns);
    let join = |v: Vec<String>| v.join(", ");
    format!(
        "  {{\n    \"model_filename\": {},\n    \"model_type\": {},\n    \"model_size\": {},\n    \"model_n_params\": {},\n    \"backends\": {},\n    \"n_threads\": {},\n    \"n_gpu_layers\": {},\n    \"repack\": {},\n    \"n_prompt\": {},\n    \"n_gen\": {},\n    \"avg_ns\": {:.0},\n    \"stddev_ns\": {:.0},\n    \"avg_ts\": {:.6},\n    \"stddev_ts\": {:.6},\n    \"samples_ns\": [ {} ],\n    \"samples_ts\": [ {} ]\n  }}",
        json_str(&r.test.model),
        json_str(&r.model_type),
        r.model_size,
        r.model_n_params,
        json_str(&r.backends),
        r.test.n_threads,
        r.test.ngl,
        r.test.repack,
        r.test.n_prompt,
        r.test.n_gen,
        avg_ns,
        sd_ns,
        avg_ts,
        sd_ts,
        join(r.samples_ns.iter().map(|x| x.to_string()).collect()),
        join(tsv.iter().map(|x| format!("{x:.6}")).collect())
    )
}

fn main() -> ExitCode {
    llama::cli::exit_code(run())
}
