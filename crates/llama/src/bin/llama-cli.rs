//! llama-cli: generate text from a GGUF model.

use std::io::Write;
use std::process::ExitCode;
use std::time::Instant;

use llama::chat::{self, ChatTemplate};
use llama::cli::{print_devices, CommonArgs};
use llama::sampling::SamplerChain;
use llama::speculative::{self, Drafter, Proposer, SpecArgs, SpecType};
use llama::{Batch, Context, LlamaError, Model, Result};

const HELP: &str = "usage: llama-cli -m MODEL [-p PROMPT | -f FILE] [options]

  -m, --model FILE          GGUF model (first part of a split model)
  -p, --prompt TEXT         prompt
  -f, --file FILE           read the prompt from a file
  -n, --n-predict N         tokens to generate (-1 = until end of text or full context)
  -c, --ctx-size N          context size (0 = from the model; default 4096)
  --context-shift           when the context fills, drop half of what follows the kept
                            prompt tokens and go on (default off: stop)
  --keep N                  prompt tokens kept on a context shift (default 0, -1 = all)
  -md, --model-draft FILE   draft model for speculative decoding (same vocabulary)
  --draft-max N             most tokens drafted per step (default 3)
  --draft-min N             fewer drafted tokens are not used (default 0)
  --draft-p-min P           stop drafting at a token less probable than P (default 0)
  -ngld, --n-gpu-layers-draft N  draft model layers on GPUs (default: as -ngl)
  -devd, --device-draft LIST  devices of the draft model (default: as -dev)
  --spec-type TYPE          none, draft-simple (the default with -md) or ngram-simple
                            (prompt lookup, no draft model)
  --spec-ngram-simple-size-n N  n-gram looked up (default 12)
  --spec-ngram-simple-size-m N  most tokens proposed after a match (default 48)
  -b, --batch-size N        logical batch size (default 2048)
  -ub, --ubatch-size N      physical batch size (default 512)
  -t, --threads N           threads (-tb for batches)
  -ngl, --n-gpu-layers N    layers to store on GPUs (default -1: all, fitted)
  -fit, --fit on|off        change the parameters left at their defaults (context,
                            then -ngl) so that the exact memory plan fits every
                            device's free memory less the target (default on)
  -fitt, --fit-target MiB   memory to leave free per device (default 1024)
  -fitc, --fit-ctx N        smallest context --fit may choose (default 4096)
  -sm, --split-mode MODE    none, layer or row
  -mg, --main-gpu N         GPU for split mode none
  -ts, --tensor-split LIST  fraction of the model per GPU, e.g. 3,1
  -dev, --device LIST       devices to use (see --list-devices), or none
      --rpc LIST            RPC servers host:port[,host:port...] (devices RPC0, ...)
  --list-devices            print the available devices and exit
  --fit-print               print the exact memory plan (weights, K, V, compute per
                            device and buffer type) and exit, allocating nothing
  -lm, --load-mode MODE     auto (default: mmap), none, mmap, mlock, mmap+mlock,
                            dio (direct I/O, bypassing the page cache)
  --no-mmap, --mlock        aliases: drop the mapping, lock the weights in RAM
  --check-tensors           validate every tensor's data while loading
  -nr, --no-repack          keep CPU weights in ggml's layout (no repacking)
  -ot, --override-tensor PATTERN=BUFFER_TYPE
  -cmoe, --cpu-moe          keep all mixture-of-experts weights in CPU memory
  -ncmoe, --n-cpu-moe N     keep the expert weights of the first N layers in CPU memory
  --override-kv KEY=TYPE:VALUE
  -ctk, -ctv TYPE           KV cache types (f16 default; f32, q8_0, q4_0)
  -nkvo, --no-kv-offload    keep the KV cache on the CPU
  -fa, --flash-attn on|off|auto  fused attention (default auto: on where every
                            backend supports it)
  --no-op-offload           never move CPU-stored weights' ops to a GPU
  --swa-full                full-size KV cache for sliding-window layers too
                            (else it holds only their windows)
  --temp T, --top-k N, --top-p P, --min-p P, --typical P, --repeat-penalty P,
  --repeat-last-n N, --frequency-penalty P, --presence-penalty P, -s, --seed N
  --grammar TEXT            GBNF grammar the output must follow (llama.cpp's language)
  --grammar-file FILE       read the grammar from a file
  -j, --json-schema SCHEMA  JSON schema the output must follow (converted to a
                            grammar as llama.cpp converts it)
  -jf, --json-schema-file FILE  read the JSON schema from a file
  --lora FILE[,FILE]        apply LoRA adapters (scale 1)
  --lora-scaled FILE:SCALE[,...]  apply LoRA adapters with these scales
  --control-vector FILE[,FILE]  add control vectors to the layer outputs
  --control-vector-scaled FILE:SCALE[,...]  control vectors with strengths
  --control-vector-layer-range START END  layers of the control vectors
                            (inclusive; default 1 to the last)
  -cnv, --conversation      chat (default when the model has a chat template)
  -no-cnv, --no-conversation  complete the prompt instead of chatting
  -sys, --system-prompt TEXT  system message of the chat
  --chat-template NAME|FILE built-in template (chatml, llama3, gemma, ...) or a file
  --jinja, --no-jinja       render the model's template with Jinja (default) or in code
  -v, --verbose; --log-disable";

/// Removes `flag` from `rest`; whether it was there.
fn take_flag(rest: &mut Vec<String>, flag: &str) -> bool {
    let n = rest.len();
    rest.retain(|a| a != flag);
    rest.len() != n
}

fn run() -> Result<()> {
    let args = CommonArgs::parse(std::env::args().skip(1))?;
    if args.rest.iter().any(|a| a == "-h" || a == "--help") {
        println!("{HELP}");
        return Ok(());
    }
    let mut args = args;
    let fit_print = take_flag(&mut args.rest, "--fit-print");
    let chat = chat_flags(&mut args.rest)?;
    let spec = SpecArgs::take(&mut args.rest)?;
    let spec_type = spec.kind()?;
    args.reject_rest()?;
    if args.list_devices {
        print_devices();
        return Ok(());
    }
    if fit_print {
        // The plan of the parameters --fit settles on.
        let plan = args.fit_params()?;
        print!("{plan}");
        return Ok(());
    }
    let path = args.model_path()?.to_string();
    args.fit_params()?;
    let mut mp = args.model_params.clone();
    if !args.log_disable && mp.progress_callback.is_none() {
        use std::io::IsTerminal;
        let total = gguf::GgufModel::open(&path)
            .map(|f| f.tensors().map(|(_, t)| t.size).sum::<u64>())
            .unwrap_or(0);
        mp.progress_callback = Some(llama::progress::load_progress(
            total,
            std::io::stderr().is_terminal(),
        ));
    }
    let model = Model::load(&path, &mp)?;
    let mut ctx = Context::new(&model, args.ctx_params.clone())?;
    llama::cli::apply_adapters(&args.adapters, &mut ctx)?;
    let own_template = model.metadata.get_str(chat::METADATA_KEY).ok();
    let conversation = args
        .conversation
        .unwrap_or(own_template.is_some() || chat.template.is_some());
    if spec_type != SpecType::None && (conversation || args.context_shift) {
        return Err(LlamaError::NotSupported(format!(
            "speculative decoding {}",
            if conversation {
                "in conversation mode (use -no-cnv)"
            } else {
                "with --context-shift"
            }
        )));
    }
    if conversation {
        let template = ChatTemplate::new(
            own_template,
            chat.template.as_deref(),
            chat.jinja,
            &model.vocab,
        )
        .map_err(|e| LlamaError::InvalidParam(e.to_string()))?;
        let mut sampler = SamplerChain::from_params_with_vocab(&args.sampling, &model.vocab)?;
        let system = args.system_prompt.clone().or(args.prompt.clone());
        return chat::conversation::run(
            &mut ctx,
            &template,
            &mut sampler,
            system.as_deref(),
            args.n_predict,
            &mut std::io::stdin().lock(),
            &mut std::io::stdout(),
        );
    }
    let vocab = &model.vocab;
    let prompt = args.prompt.clone().unwrap_or_default();
    let tokens = vocab.tokenize(&prompt, true, true);
    if tokens.is_empty() {
        return Err(LlamaError::InvalidParam(
            "the prompt is empty and the model adds no BOS token".into(),
        ));
    }
    let n_ctx = ctx.n_ctx();
    if tokens.len() > n_ctx.saturating_sub(4) {
        return Err(LlamaError::InvalidParam(format!(
            "prompt is too long ({} tokens, max {})",
            tokens.len(),
            n_ctx.saturating_sub(4)
        )));
    }
    let mut sampler = SamplerChain::from_params_with_vocab(&args.sampling, &model.vocab)?;
    for &t in &tokens {
        sampler.accept_prompt(t);
    }
    let out = std::io::stdout();
    let mut out = out.lock();
    // Echo the prompt as its tokens decode.
    for &t in &tokens {
        out.write_all(&vocab.token_to_piece(t, false)).ok();
    }
    out.flush().ok();

    if spec_type != SpecType::None && ctx.mem.rs().is_some() {
        return Err(LlamaError::NotSupported(
            "speculative decoding with a recurrent target model (it cannot drop rejected drafts)"
                .into(),
        ));
    }
    let draft_model = spec.load_draft(&model, &args.model_params)?;
    let t_start = Instant::now();
    let mut n_past = 0usize;
    for chunk in tokens.chunks(ctx.params.n_batch) {
        ctx.decode(&Batch::get_one(chunk))?;
        n_past += chunk.len();
    }
    // Tokens kept on a context shift: the whole prompt when --keep is
    // negative or longer than it, else --keep and the BOS token.
    let n_keep = if args.n_keep < 0 || args.n_keep as usize > tokens.len() {
        tokens.len()
    } else {
        args.n_keep as usize + usize::from(vocab.add_bos())
    };
    if spec_type != SpecType::None {
        let mut proposer = match &draft_model {
            Some(dm) => Proposer::Model(Box::new(Drafter::new(
                Context::new(dm.as_ref(), args.ctx_params.clone())?,
                spec.params,
            ))),
            None => Proposer::Ngram(spec.ngram),
        };
        let stats = speculative::generate(
            &mut ctx,
            &mut proposer,
            &mut sampler,
            &tokens,
            args.n_predict,
            |t| {
                out.write_all(&vocab.token_to_piece(t, false)).ok();
                out.flush().ok();
            },
        )?;
        writeln!(out).ok();
        let (drafted, accepted) = (stats.n_drafted, stats.n_accepted);
        llama::info!(
            "speculative: {drafted} tokens drafted, {accepted} accepted ({:.1}%)",
            if drafted > 0 {
                100.0 * accepted as f64 / drafted as f64
            } else {
                0.0
            }
        );
        print_perf(&model, &ctx, t_start.elapsed(), stats.n_past);
        return Ok(());
    }
    let mut n_gen = 0i64;
    while args.n_predict < 0 || n_gen < args.n_predict {
        let logits = ctx.logits_ith(-1)?;
        let tok = sampler.sample(logits);
        sampler.try_accept(tok)?;
        if vocab.is_eog(tok) {
            break;
        }
        out.write_all(&vocab.token_to_piece(tok, false)).ok();
        out.flush().ok();
        n_gen += 1;
        if args.n_predict >= 0 && n_gen >= args.n_predict {
            break;
        }
        if n_past + 1 >= n_ctx {
            if !args.context_shift {
                llama::warn!("context full and context shift is disabled => stopping");
                break;
            }
            // Context shift (as llama.cpp): drop half of what follows the
            // kept prompt tokens.
            let n_discard = (n_past - n_keep.min(n_past)) / 2;
            if n_discard == 0 {
                break;
            }
            if !ctx.can_shift() {
                llama::warn!("context full and the KV cache cannot be shifted (sliding-window cache; see --swa-full) => stopping");
                break;
            }
            if !ctx.seq_rm(0, n_keep as i32, (n_keep + n_discard) as i32) {
                llama::warn!("context shift refused by the memory => stopping");
                break;
            }
            ctx.seq_add(
                0,
                (n_keep + n_discard) as i32,
                n_past as i32,
                -(n_discard as i32),
            );
            n_past -= n_discard;
        }
        ctx.decode(&Batch::get_one(&[tok]))?;
        n_past += 1;
    }
    writeln!(out).ok();
    print_perf(&model, &ctx, t_start.elapsed(), n_past);
    Ok(())
}

/// Prints the timings as llama.cpp's `llama_perf_context_print` does.
fn print_perf(model: &Model, ctx: &Context, total: std::time::Duration, n_past: usize) {
    let p = ctx.perf;
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    llama::info!(
        "llama_perf_context_print:        load time = {:10.2} ms",
        ms(model.load_time)
    );
    // Milliseconds per token and tokens per second of `n` tokens in `d`.
    let rates = |d: std::time::Duration, n: usize| {
        let per_token = ms(d) / n.max(1) as f64;
        (per_token, n as f64 / d.as_secs_f64().max(1e-9))
    };
    let (prompt_ms, prompt_tps) = rates(p.t_prompt, p.n_prompt);
    llama::info!(
        "llama_perf_context_print: prompt eval time = {:10.2} ms / {:5} tokens ({prompt_ms:8.2} ms per token, {prompt_tps:8.2} tokens per second)",
        ms(p.t_prompt),
        p.n_prompt,
    );
    let (eval_ms, eval_tps) = rates(p.t_eval, p.n_eval);
    llama::info!(
        "llama_perf_context_print:        eval time = {:10.2} ms / {:5} runs   ({eval_ms:8.2} ms per token, {eval_tps:8.2} tokens per second)",
        ms(p.t_eval),
        p.n_eval,
    );
    llama::info!(
        "llama_perf_context_print:       total time = {:10.2} ms / {:5} tokens",
        ms(total),
        n_past
    );
    llama::info!(
        "llama_perf_context_print:    graphs reused = {:10}",
        p.n_graph_reuses
    );
    llama::info!(
        "llama_perf_context_print:       graph time = {:10.2} ms / {:5} graphs built, compute time = {:10.2} ms",
        ms(p.t_graph),
        p.n_graph_builds,
        ms(p.t_compute)
    );
}

/// Chat template flags of this tool.
struct ChatFlags {
    template: Option<String>,
    jinja: bool,
}

/// Takes `--chat-template` and `--jinja`/`--no-jinja` out of `rest`.
fn chat_flags(rest: &mut Vec<String>) -> Result<ChatFlags> {
    let mut f = ChatFlags {
        template: None,
        jinja: true,
    };
    let mut kept = Vec::new();
    let mut it = std::mem::take(rest).into_iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--chat-template" | "--chat-template-file" => {
                f.template = Some(it.next().ok_or_else(|| {
                    LlamaError::InvalidParam(format!("{a} needs a value (name or file)"))
                })?)
            }
            "--jinja" => f.jinja = true,
            "--no-jinja" => f.jinja = false,
            _ => kept.push(a),
        }
    }
    *rest = kept;
    Ok(f)
}

fn main() -> ExitCode {
    llama::cli::exit_code(run())
}
