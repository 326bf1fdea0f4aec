//! Batches of tokens (or embeddings) with positions, sequence ids and output
//! flags, as llama_batch.

use crate::kv_cache::{Pos, SeqId};

/// A token id (llama_token).
pub type Token = i32;

/// Input of one decode call.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Batch {
    /// Token ids (empty when `embd` is used).
    pub tokens: Vec<Token>,
    /// Input embeddings, `n_tokens * n_embd` floats, instead of tokens.
    pub embd: Option<Vec<f32>>,
    /// Positions; empty = continue each sequence after its last position.
    pub pos: Vec<Pos>,
    /// Sequences of each token; empty = sequence 0 for all.
    pub seq_ids: Vec<Vec<SeqId>>,
    /// Which tokens produce logits; empty = only the last token.
    pub logits: Vec<bool>,
}

impl Batch {
    /// A batch of `tokens` for sequence 0 that continues it, with logits for
    /// the last token only (llama_batch_get_one).
    pub fn get_one(tokens: &[Token]) -> Batch {
        Batch {
            tokens: tokens.to_vec(),
            ..Batch::default()
        }
    }

    /// An empty batch.
    pub fn new() -> Batch {
        Batch::default()
    }

    /// Appends a token at `pos` in `seqs`, with or without logits.
    pub fn add(&mut self, token: Token, pos: Pos, seqs: &[SeqId], logits: bool) {
        self.tokens.push(token);
        self.pos.push(pos);
        self.seq_ids.push(seqs.to_vec());
        self.logits.push(logits);
    }

    /// Removes every token.
    pub fn clear(&mut self) {
        *self = Batch::default();
    }

    /// Number of tokens (or embedding rows for `n_embd`).
    pub fn n_tokens(&self, n_embd: usize) -> usize {
        match &self.embd {
            Some(e) if n_embd > 0 => e.len() / n_embd,
            _ => self.tokens.len(),
        }
    }
}
