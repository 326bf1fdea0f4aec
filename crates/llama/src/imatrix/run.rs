//! Running a model over a text for its importance matrix, chunked as
//! llama.cpp's llama-imatrix does: chunks of `n_ctx` tokens, `n_seq` of
//! them side by side in one batch (as many as `n_batch` holds, each its own
//! sequence), each decoded from an empty cache with its first token
//! replaced by BOS; every token asks for logits, so that the whole graph
//! runs, and the second half of each chunk is scored for the perplexity.

use crate::batch::{Batch, Token};
use crate::context::Context;
use crate::error::{LlamaError, Result};
use crate::perplexity::log_softmax;

/// How the text is cut.
#[derive(Clone, Copy, Debug)]
pub struct RunParams {
    /// Tokens per chunk.
    pub n_ctx: usize,
    /// Tokens per decode call.
    pub n_batch: usize,
    /// Most chunks (`None`: all).
    pub n_chunks: Option<usize>,
    /// Chunks skipped at the start.
    pub i_chunk: usize,
    /// Score the chunks.
    pub compute_ppl: bool,
}

/// What a run reports as it goes.
pub trait RunLog {
    /// The chunks about to be run: `n_chunk` chunks of `n_ctx` tokens,
    /// `n_batch` tokens and `n_seq` chunks per decode.
    fn start(&mut self, n_chunk: usize, n_ctx: usize, n_batch: usize, n_seq: usize) {
        let _ = (n_chunk, n_ctx, n_batch, n_seq);
    }
    /// The first pass took `secs`.
    fn first_pass(&mut self, secs: f32, n_chunk: usize, n_seq: usize) {
        let _ = (secs, n_chunk, n_seq);
    }
    /// The running perplexity after chunk `i` (from 1).
    fn chunk(&mut self, i: usize, ppl: f64) {
        let _ = (i, ppl);
    }
}

/// The perplexity over the scored tokens.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RunResult {
    /// Chunks run.
    pub n_chunk: usize,
    /// Perplexity and its error (when scored and defined).
    pub ppl: Option<(f64, f64)>,
}

/// Runs `ctx` over `tokens` (tokenized with BOS when the model adds one);
/// the context's eval observer sees every graph.
pub fn run_chunks(
    ctx: &mut Context<'_>,
    tokens: &[Token],
    p: &RunParams,
    log: &mut dyn RunLog,
) -> Result<RunResult> {
    let n_ctx = p.n_ctx;
    if n_ctx == 0 {
        return Err(LlamaError::InvalidParam(
            "the imatrix tool needs a context size above 0".into(),
        ));
    }
    let mut tokens = tokens;
    if p.i_chunk > 0 {
        if (p.i_chunk + 2) * n_ctx >= tokens.len() {
            return Err(LlamaError::InvalidParam(format!(
                "there will be not enough tokens left after removing {} chunks",
                p.i_chunk
            )));
        }
        tokens = &tokens[p.i_chunk * n_ctx..];
    }
    if tokens.len() < 2 * n_ctx {
        return Err(LlamaError::InvalidParam(format!(
            "you need at least {} tokens for a context of {n_ctx} tokens; the text tokenizes to only {} tokens",
            2 * n_ctx,
            tokens.len()
        )));
    }
    let model = ctx.model();
    let vocab = &model.vocab;
    let n_vocab = model.hparams.n_vocab;
    let bos = if vocab.add_bos() { vocab.bos() } else { None };
    let n_chunk_max = tokens.len() / n_ctx;
    let n_chunk = p.n_chunks.map_or(n_chunk_max, |n| n.min(n_chunk_max));
    let n_batch = p.n_batch.max(1);
    let num_batches = n_ctx.div_ceil(n_batch);
    let n_seq = (n_batch / n_ctx).max(1);
    if n_seq * n_ctx > ctx.n_ctx() {
        return Err(LlamaError::InvalidParam(format!(
            "{n_seq} chunks of {n_ctx} tokens do not fit the context of {}",
            ctx.n_ctx()
        )));
    }
    log.start(n_chunk, n_ctx, n_batch, n_seq);
    let first = n_ctx / 2;
    let (mut nll, mut nll2, mut count) = (0f64, 0f64, 0usize);
    let mut logits: Vec<f32> = Vec::new();
    let mut i = 0;
    while i < n_chunk {
        let start = i * n_ctx;
        let end = start + n_ctx;
        let n_seq_batch = n_seq.min(n_chunk - i);
        let t0 = std::time::Instant::now();
        ctx.kv_clear();
        logits.clear();
        for j in 0..num_batches {
            let batch_start = start + j * n_batch;
            let batch_size = n_batch.min(end - batch_start);
            let mut b = Batch::new();
            for seq in 0..n_seq_batch {
                let seq_start = batch_start + seq * n_ctx;
                for k in 0..batch_size {
                    let tok = match bos {
                        Some(bos) if j == 0 && k == 0 => bos,
                        _ => tokens[seq_start + k],
                    };
                    b.add(tok, (j * n_batch + k) as i32, &[seq as i32], true);
                }
            }
            ctx.decode(&b)?;
            if p.compute_ppl && num_batches > 1 {
                logits.extend_from_slice(&ctx.logits()[..batch_size * n_vocab]);
            }
        }
        if i == 0 {
            log.first_pass(t0.elapsed().as_secs_f32(), n_chunk, n_seq);
        }
        if p.compute_ppl {
            for seq in 0..n_seq_batch {
                let all: &[f32] = if num_batches > 1 {
                    &logits
                } else {
                    &ctx.logits()[seq * n_ctx * n_vocab..(seq + 1) * n_ctx * n_vocab]
                };
                let toks = &tokens[start + seq * n_ctx..start + (seq + 1) * n_ctx];
                for r in first..n_ctx - 1 {
                    let row = &all[r * n_vocab..(r + 1) * n_vocab];
                    let v = -log_softmax(row, toks[r + 1] as usize);
                    nll += v;
                    nll2 += v * v;
                }
                count += n_ctx - first - 1;
                log.chunk(i + seq + 1, (nll / count as f64).exp());
            }
        }
        i += n_seq;
    }
    let ppl = if p.compute_ppl && count > 1 {
        let mean = nll / count as f64;
        let ppl = mean.exp();
        let var = nll2 / count as f64 - mean * mean;
        (var > 0.0).then(|| (ppl, (var / (count - 1) as f64).sqrt() * ppl))
    } else {
        None
    };
    Ok(RunResult { n_chunk, ppl })
}
