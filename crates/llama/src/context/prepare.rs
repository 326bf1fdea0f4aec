//! Checking a batch against the context and filling in its defaults.

use crate::batch::Batch;
use crate::context::{Context, PoolingType};
use crate::error::{LlamaError, Result};
use crate::kv_cache::{Pos, SeqId};
use crate::memory::SeqMemory;

/// Positions, sequences and output flags of a checked batch.
pub(super) type Prepared = (Vec<Pos>, Vec<Vec<SeqId>>, Vec<bool>);

impl Context<'_> {
    /// Checks a batch and fills in defaults (positions, sequences, outputs).
    pub(super) fn prepare(&self, batch: &Batch) -> Result<Prepared> {
        let hp = &self.model.hparams;
        let n = batch.n_tokens(hp.n_embd);
        if n == 0 {
            return Err(LlamaError::Batch("the batch is empty".into()));
        }
        if let Some(e) = &batch.embd {
            if e.len() % hp.n_embd != 0 {
                return Err(LlamaError::Batch(format!(
                    "embeddings have {} floats, not a multiple of n_embd = {}",
                    e.len(),
                    hp.n_embd
                )));
            }
        } else {
            let n_vocab = self.model.vocab.n_tokens() as i32;
            if let Some((i, t)) = batch
                .tokens
                .iter()
                .enumerate()
                .find(|(_, &t)| t < 0 || t >= n_vocab)
            {
                return Err(LlamaError::Batch(format!(
                    "token {i} has id {t}, outside the vocabulary (0..{n_vocab})"
                )));
            }
        }
        if n > self.params.n_batch {
            return Err(LlamaError::Batch(format!(
                "{n} tokens exceed n_batch = {}; split the input or raise n_batch",
                self.params.n_batch
            )));
        }
        let check_len = |what: &str, len: usize| -> Result<()> {
            if len != 0 && len != n {
                return Err(LlamaError::Batch(format!(
                    "{what} has {len} entries for {n} tokens"
                )));
            }
            Ok(())
        };
        check_len("pos", batch.pos.len())?;
        check_len("seq_ids", batch.seq_ids.len())?;
        check_len("logits", batch.logits.len())?;
        let seqs: Vec<Vec<SeqId>> = if batch.seq_ids.is_empty() {
            vec![vec![0]; n]
        } else {
            batch.seq_ids.clone()
        };
        for (i, ss) in seqs.iter().enumerate() {
            if ss.is_empty() {
                return Err(LlamaError::Batch(format!(
                    "token {i} belongs to no sequence"
                )));
            }
            if let Some(&s) = ss
                .iter()
                .find(|&&s| s < 0 || s as usize >= self.params.n_seq_max)
            {
                return Err(LlamaError::Batch(format!(
                    "token {i} has sequence id {s}, but n_seq_max = {}",
                    self.params.n_seq_max
                )));
            }
        }
        let last: Vec<Pos> = self.mem.seq_pos_max_all()[..self.params.n_seq_max].to_vec();
        let pos: Vec<Pos> = if batch.pos.is_empty() {
            let mut next: Vec<Pos> = last.iter().map(|p| p + 1).collect();
            seqs.iter()
                .map(|ss| {
                    let p = next[ss[0] as usize];
                    for &s in ss {
                        next[s as usize] = p + 1;
                    }
                    p
                })
                .collect()
        } else {
            batch.pos.clone()
        };
        // Positions must increase within each sequence and follow what the
        // cache already holds.
        let mut last = last;
        for (i, (&p, ss)) in pos.iter().zip(&seqs).enumerate() {
            if p < 0 {
                return Err(LlamaError::Batch(format!(
                    "token {i} has negative position {p}"
                )));
            }
            for &s in ss {
                if p <= last[s as usize] {
                    return Err(LlamaError::Batch(format!(
                        "token {i} has position {p} in sequence {s}, which already reaches position {}: positions must increase",
                        last[s as usize]
                    )));
                }
                last[s as usize] = p;
            }
        }
        let mut outs = if batch.logits.is_empty() {
            let mut v = vec![false; n];
            v[n - 1] = true;
            v
        } else {
            batch.logits.clone()
        };
        if self.params.embeddings && self.params.pooling != PoolingType::None {
            outs = vec![true; n];
        }
        if n > self.params.n_ctx {
            return Err(LlamaError::Batch(format!(
                "{n} tokens do not fit the context of {} tokens",
                self.params.n_ctx
            )));
        }
        Ok((pos, seqs, outs))
    }
}
