//! The interactive chat loop of `llama-cli -cnv`: each user line is added
//! to the conversation, the part of the rendered prompt that is new is
//! decoded, and the reply streams to the terminal. Ctrl-C stops a reply
//! (and quits at the prompt); `/exit` or end of input quits.

use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, Ordering};

use super::{ChatTemplate, Message};
use crate::batch::Batch;
use crate::context::Context;
use crate::error::{LlamaError, Result};
use crate::sampling::SamplerChain;

/// Set by Ctrl-C while a reply is generated.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);
/// Whether a reply is being generated (Ctrl-C then stops it, else quits).
static GENERATING: AtomicBool = AtomicBool::new(false);

#[cfg(unix)]
extern "C" fn on_sigint(_: libc::c_int) {
    if GENERATING.load(Ordering::SeqCst) {
        INTERRUPTED.store(true, Ordering::SeqCst);
    } else {
        // SAFETY: write and _exit are async-signal-safe; the buffer is a
        // static byte string.
        unsafe {
            libc::write(1, b"\n".as_ptr().cast(), 1);
            libc::_exit(130);
        }
    }
}

fn install_handler() {
    #[cfg(unix)]
    // SAFETY: the handler only touches atomics and async-signal-safe calls.
    unsafe {
        libc::signal(libc::SIGINT, on_sigint as *const () as libc::sighandler_t);
    }
}

/// Runs the conversation on `ctx` (sequence 0) until `/exit` or end of input.
/// `n_predict` bounds each reply (-1: until end of generation or full context).
pub fn run(
    ctx: &mut Context<'_>,
    template: &ChatTemplate,
    sampler: &mut SamplerChain,
    system: Option<&str>,
    n_predict: i64,
    input: &mut dyn BufRead,
    out: &mut dyn Write,
) -> Result<()> {
    install_handler();
    let model = ctx.model();
    let vocab = &model.vocab;
    let n_ctx = ctx.n_ctx();
    let mut messages: Vec<Message> = system
        .map(|s| vec![Message::new("system", s)])
        .unwrap_or_default();
    let render = |m: &[Message], add: bool| {
        template
            .apply(m, add, None)
            .map_err(|e| LlamaError::InvalidParam(e.to_string()))
    };
    let mut shown = String::new();
    let mut n_past = 0usize;
    let io = |e: std::io::Error| LlamaError::InvalidParam(format!("terminal: {e}"));
    loop {
        write!(out, "\n> ").map_err(io)?;
        out.flush().map_err(io)?;
        let mut line = String::new();
        if input.read_line(&mut line).map_err(io)? == 0 {
            writeln!(out).map_err(io)?;
            return Ok(());
        }
        let line = line.trim_end_matches(['\n', '\r']);
        if line == "/exit" {
            return Ok(());
        }
        if line.is_empty() {
            continue;
        }
        messages.push(Message::new("user", line));
        let full = render(&messages, true)?;
        // Only what the new message adds to the text already decoded; when
        // the template rewrote earlier turns, start over.
        let delta = match full.strip_prefix(shown.as_str()) {
            Some(d) => d,
            None => {
                // Removing a whole sequence always succeeds.
                let _ = ctx.seq_rm(0, -1, -1);
                sampler.reset();
                n_past = 0;
                &full
            }
        };
        let tokens = vocab.tokenize(delta, n_past == 0, true);
        if n_past + tokens.len() + 1 > n_ctx {
            writeln!(out, "\n[context full: {} of {n_ctx} tokens used]", n_past).map_err(io)?;
            return Ok(());
        }
        for &t in &tokens {
            sampler.accept_prompt(t);
        }
        // Each reply follows the grammar (if any) from its start.
        sampler.restart_grammar();
        for chunk in tokens.chunks(ctx.params.n_batch.max(1)) {
            let mut b = Batch::new();
            for &t in chunk {
                b.add(t, n_past as i32, &[0], false);
                n_past += 1;
            }
            if let Some(last) = b.logits.last_mut() {
                *last = true;
            }
            ctx.decode(&b)?;
        }
        INTERRUPTED.store(false, Ordering::SeqCst);
        GENERATING.store(true, Ordering::SeqCst);
        let mut reply = Vec::new();
        let mut n_gen = 0i64;
        let res = (|| -> Result<()> {
            while n_predict < 0 || n_gen < n_predict {
                if INTERRUPTED.load(Ordering::SeqCst) {
                    break;
                }
                let tok = sampler.sample(ctx.logits_ith(-1)?);
                sampler.try_accept(tok)?;
                if vocab.is_eog(tok) {
                    break;
                }
                let piece = vocab.token_to_piece(tok, false);
                out.write_all(&piece).map_err(io)?;
                out.flush().map_err(io)?;
                reply.extend_from_slice(&piece);
                n_gen += 1;
                if n_past + 1 >= n_ctx {
                    break;
                }
                let mut b = Batch::new();
                b.add(tok, n_past as i32, &[0], true);
                ctx.decode(&b)?;
                n_past += 1;
            }
            Ok(())
        })();
        GENERATING.store(false, Ordering::SeqCst);
        res?;
        writeln!(out).map_err(io)?;
        let reply = String::from_utf8_lossy(&reply).into_owned();
        shown = format!("{full}{reply}");
        messages.push(Message::new("assistant", reply));
    }
}
