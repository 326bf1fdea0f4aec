//! Saving and restoring the state of one sequence: a header that names the
//! model (a fingerprint of its metadata and tensor sizes, and its
//! architecture), the tokens the state stands for, then the memory's part
//! ([`Memory::state_seq_write`](crate::memory::Memory::state_seq_write)).
//! A state written by another model is refused before anything changes.
//! A partial state ([`StateParts::RollbackOnly`], what a context
//! checkpoint keeps) starts with its own magic, so that it is never taken
//! for a whole one.

use std::path::Path;

use crate::batch::Token;
use crate::error::{LlamaError, Result};
use crate::kv_cells::SeqId;
use crate::memory::state::StateParts;
use crate::memory::{StateReader, StateWriter};
use crate::model::Model;

use super::Context;

/// First bytes of a sequence state.
pub const STATE_SEQ_MAGIC: &[u8; 4] = b"LRSQ";
/// First bytes of a partial sequence state (a context checkpoint).
pub const STATE_SEQ_PARTIAL_MAGIC: &[u8; 4] = b"LRSP";
/// Version of the layout.
pub const STATE_SEQ_VERSION: u32 = 1;

/// A 64-bit fingerprint of a model: FNV-1a over its architecture, every
/// metadata key and value, and its tensors' element count and size. Two
/// files of the same weights and metadata agree; any other model differs.
pub fn model_fingerprint(model: &Model) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |b: &[u8]| {
        for &x in b {
            h ^= u64::from(x);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    };
    eat(model.arch.name().as_bytes());
    for (k, v) in model.metadata.iter() {
        // Split files differ in these only.
        if k.starts_with("split.") {
            continue;
        }
        eat(k.as_bytes());
        eat(format!("{v:?}").as_bytes());
    }
    eat(&model.n_elements.to_le_bytes());
    eat(&model.size_bytes.to_le_bytes());
    h
}

impl Context<'_> {
    /// The state of `seq` as bytes, with `tokens` (what the caller says the
    /// state holds, e.g. the prompt it decoded).
    pub fn state_seq_get_data(&mut self, seq: SeqId, tokens: &[Token]) -> Result<Vec<u8>> {
        self.state_seq_get_data_parts(seq, tokens, StateParts::All)
    }

    /// The `parts` of the state of `seq` as bytes, with `tokens`.
    pub fn state_seq_get_data_parts(
        &mut self,
        seq: SeqId,
        tokens: &[Token],
        parts: StateParts,
    ) -> Result<Vec<u8>> {
        check_seq(self, seq)?;
        // Pending position shifts go into K first: the state holds
        // rotated keys at their cells' positions.
        if self
            .mem
            .kv()
            .is_some_and(|kv| kv.caches().any(|c| c.cells.has_shift))
        {
            self.apply_k_shift()?;
        }
        let mut w = StateWriter::default();
        w.bytes(magic(parts));
        w.u32(STATE_SEQ_VERSION);
        w.u64(model_fingerprint(self.model));
        w.str(self.model.arch.name());
        w.u32(tokens.len() as u32);
        for &t in tokens {
            w.i32(t);
        }
        self.mem.state_seq_write_parts(seq, &mut w, parts)?;
        Ok(w.buf)
    }

    /// Replaces the state of `seq` by `data` (from
    /// [`Context::state_seq_get_data`]); returns the tokens it holds. A
    /// state of another model, another memory layout or more cells than
    /// there is room for is refused, with `seq` left empty.
    pub fn state_seq_set_data(&mut self, seq: SeqId, data: &[u8]) -> Result<Vec<Token>> {
        self.state_seq_set_data_parts(seq, data, StateParts::All)
    }

    /// Replaces the `parts` of the state of `seq` by those of `data` (from
    /// [`Context::state_seq_get_data_parts`] with the same `parts`); the
    /// other parts stay. Returns the tokens the state holds. A partial state
    /// leaves the full-attention cells of `seq` past its tokens for the
    /// caller to remove.
    pub fn state_seq_set_data_parts(
        &mut self,
        seq: SeqId,
        data: &[u8],
        parts: StateParts,
    ) -> Result<Vec<Token>> {
        check_seq(self, seq)?;
        let mut r = StateReader::new(data);
        let got = r.take(4, "magic")?;
        if got != magic(parts) {
            let msg = if got == magic(StateParts::RollbackOnly) {
                "a partial sequence state (a context checkpoint) is not a whole one"
            } else if got == magic(StateParts::All) {
                "a whole sequence state is not a partial one (a context checkpoint)"
            } else {
                "not a sequence state (bad magic)"
            };
            return Err(LlamaError::State(msg.into()));
        }
        let version = r.u32("version")?;
        if version != STATE_SEQ_VERSION {
            return Err(LlamaError::State(format!(
                "version {version} is not supported (expected {STATE_SEQ_VERSION})"
            )));
        }
        let fp = r.u64("model fingerprint")?;
        let arch = r.str(64, "architecture")?;
        let mine = model_fingerprint(self.model);
        if fp != mine {
            return Err(LlamaError::State(format!(
                "the state was saved by another model ({arch}, fingerprint {fp:016x}); this one is {} ({mine:016x})",
                self.model.arch.name()
            )));
        }
        let n = r.u32("token count")? as usize;
        if n > self.n_ctx() {
            return Err(LlamaError::State(format!(
                "the state holds {n} tokens; the context has {}",
                self.n_ctx()
            )));
        }
        let n_vocab = self.model.hparams.n_vocab as i32;
        let mut tokens = Vec::with_capacity(n);
        for _ in 0..n {
            let t = r.i32("token")?;
            if !(0..n_vocab).contains(&t) {
                return Err(LlamaError::State(format!(
                    "token {t} is outside the vocabulary (0..{n_vocab})"
                )));
            }
            tokens.push(t);
        }
        self.mem.state_seq_read_parts(seq, &mut r, parts)?;
        Ok(tokens)
    }

    /// Writes the state of `seq` with `tokens` to `path`; the bytes written.
    pub fn state_seq_save_file(
        &mut self,
        path: impl AsRef<Path>,
        seq: SeqId,
        tokens: &[Token],
    ) -> Result<usize> {
        let data = self.state_seq_get_data(seq, tokens)?;
        let path = path.as_ref();
        std::fs::write(path, &data).map_err(|source| LlamaError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Ok(data.len())
    }

    /// Reads the state of `seq` from `path`; the tokens it holds and the
    /// bytes read.
    pub fn state_seq_load_file(
        &mut self,
        path: impl AsRef<Path>,
        seq: SeqId,
    ) -> Result<(Vec<Token>, usize)> {
        let path = path.as_ref();
        let data = std::fs::read(path).map_err(|source| LlamaError::Io {
            path: path.display().to_string(),
            source,
        })?;
        let tokens = self.state_seq_set_data(seq, &data).map_err(|e| match e {
            LlamaError::State(m) => LlamaError::State(format!("{}: {m}", path.display())),
            e => e,
        })?;
        Ok((tokens, data.len()))
    }
}

fn magic(parts: StateParts) -> &'static [u8; 4] {
    match parts {
        StateParts::All => STATE_SEQ_MAGIC,
        StateParts::RollbackOnly => STATE_SEQ_PARTIAL_MAGIC,
    }
}

fn check_seq(ctx: &Context<'_>, seq: SeqId) -> Result<()> {
    if seq < 0 || seq as usize >= ctx.params.n_seq_max {
        return Err(LlamaError::InvalidParam(format!(
            "sequence {seq} is outside 0..{}",
            ctx.params.n_seq_max
        )));
    }
    Ok(())
}
