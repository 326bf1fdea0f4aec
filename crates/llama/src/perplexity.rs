//! Perplexity over a token sequence, chunked as llama.cpp's perplexity tool
//! does: each chunk of `n_ctx` tokens is decoded from an empty cache with its
//! first token replaced by BOS, and the second half of the chunk is scored.

use crate::batch::{Batch, Token};
use crate::context::Context;
use crate::error::{LlamaError, Result};

/// The result of [`perplexity`].
#[derive(Clone, Debug, PartialEq)]
pub struct Perplexity {
    /// Running perplexity after each chunk.
    pub chunks: Vec<f64>,
    /// Final estimate.
    pub ppl: f64,
    /// Its standard error.
    pub error: f64,
    /// Number of scored tokens.
    pub count: usize,
}

/// log-softmax of `tok`, with the exponentials summed in f64 as llama.cpp does.
pub fn log_softmax(logits: &[f32], tok: usize) -> f64 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&l| f64::from((l - max).exp())).sum();
    f64::from(logits[tok] - max) - sum.ln()
}

/// Computes the perplexity of `tokens` (tokenized with BOS when the model
/// adds one) in chunks of `n_ctx` tokens, decoding `n_batch` tokens per call;
/// `on_chunk` sees the running value after each chunk.
pub fn perplexity(
    ctx: &mut Context<'_>,
    tokens: &[Token],
    n_ctx: usize,
    n_chunks: Option<usize>,
    mut on_chunk: impl FnMut(usize, f64),
) -> Result<Perplexity> {
    let model = ctx.model();
    let vocab = &model.vocab;
    let n_vocab = model.hparams.n_vocab;
    if n_ctx < 2 || tokens.len() < 2 * n_ctx {
        return Err(LlamaError::InvalidParam(format!(
            "you need at least {} tokens to evaluate perplexity with a context of {n_ctx} (the text has {})",
            2 * n_ctx,
            tokens.len()
        )));
    }
    if n_ctx > ctx.n_ctx() {
        return Err(LlamaError::InvalidParam(format!(
            "chunk size {n_ctx} exceeds the context size {}",
            ctx.n_ctx()
        )));
    }
    let n_batch = ctx.params.n_batch.min(n_ctx);
    let max_chunks = tokens.len() / n_ctx;
    let n_chunk = n_chunks.map_or(max_chunks, |n| n.min(max_chunks));
    let first = n_ctx / 2;
    let bos = if vocab.add_bos() { vocab.bos() } else { None };
    let (mut nll, mut nll2, mut count) = (0f64, 0f64, 0usize);
    let mut chunks = Vec::with_capacity(n_chunk);
    let mut logits: Vec<f32> = Vec::with_capacity((n_ctx - first) * n_vocab);
    for i in 0..n_chunk {
        let start = i * n_ctx;
        let end = start + n_ctx;
        ctx.kv_clear();
        logits.clear();
        let mut j = start;
        while j < end {
            let bs = n_batch.min(end - j);
            let mut b = Batch::new();
            for k in 0..bs {
                let pos = j - start + k;
                let tok = match bos {
                    Some(b) if pos == 0 => b,
                    _ => tokens[j + k],
                };
                b.add(tok, pos as i32, &[0], pos >= first);
            }
            ctx.decode(&b)?;
            if j + bs > start + first {
                logits.extend_from_slice(ctx.logits());
            }
            j += bs;
        }
        // Row r holds position first + r, which predicts the next token.
        for (r, p) in (first..n_ctx - 1).enumerate() {
            let row = &logits[r * n_vocab..(r + 1) * n_vocab];
            let v = -log_softmax(row, tokens[start + p + 1] as usize);
            nll += v;
            nll2 += v * v;
            count += 1;
        }
        let running = (nll / count as f64).exp();
        chunks.push(running);
        on_chunk(i, running);
    }
    let mean = nll / count.max(1) as f64;
    let ppl = mean.exp();
    let var = nll2 / count.max(1) as f64 - mean * mean;
    let error = if var > 0.0 && count > 1 {
        (var / (count - 1) as f64).sqrt() * ppl
    } else {
        0.0
    };
    Ok(Perplexity {
        chunks,
        ppl,
        error,
        count,
    })
}
