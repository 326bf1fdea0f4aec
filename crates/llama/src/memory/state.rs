//! The state of one sequence as bytes, and back: what a memory holds for a
//! sequence (llama.cpp's `state_seq_get_data` / `state_seq_set_data`).
//!
//! - A KV cache writes the positions of the sequence's cells, then per layer
//!   its K rows and its V rows, one row per cell. V is written per cell
//!   whether or not the cache stores it transposed, so a state saved with
//!   flash attention reads back without it and the other way round. A
//!   sliding-window cache follows the full-attention one.
//! - A recurrent memory writes the sequence's last position, then per
//!   recurrent layer its convolution and SSM state rows.
//! - A hybrid memory writes both.
//!
//! A partial state ([`StateParts::RollbackOnly`], llama.cpp's
//! `LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY`) holds only the parts that cannot
//! give back positions once they moved on: the sliding-window cache of an
//! attention memory and the recurrent states. Reading one replaces those
//! parts and leaves the full-attention cache as it is (it can drop any
//! suffix); that is what a context checkpoint keeps.
//!
//! Reading checks everything against the memory (kind, layers, types, row
//! sizes, room) before it changes anything; the sequence is emptied first
//! and stays empty when the state is refused.

use crate::error::{LlamaError, Result};
use crate::kv_cache::KvCache;
use crate::kv_cells::{Pos, SeqId};
use crate::kv_memory::KvMemory;
use crate::memory::{Memory, RecurrentMemory, SeqMemory};
use crate::model::Weight;
use ggml_core::Type;

fn bad(msg: impl Into<String>) -> LlamaError {
    LlamaError::State(msg.into())
}

/// Little-endian bytes being written.
#[derive(Default)]
pub struct StateWriter {
    /// What has been written.
    pub buf: Vec<u8>,
}

impl StateWriter {
    /// Appends a u32.
    pub fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    /// Appends an i32.
    pub fn i32(&mut self, v: i32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    /// Appends a u64.
    pub fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    /// Appends raw bytes.
    pub fn bytes(&mut self, b: &[u8]) {
        self.buf.extend_from_slice(b);
    }
    /// Appends a string with its length.
    pub fn str(&mut self, s: &str) {
        self.u32(s.len() as u32);
        self.bytes(s.as_bytes());
    }
}

/// Little-endian bytes being read; running short is an error naming what
/// was being read.
pub struct StateReader<'a> {
    buf: &'a [u8],
}

impl<'a> StateReader<'a> {
    /// A reader over `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        StateReader { buf }
    }
    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.buf.len()
    }
    /// The next `n` bytes.
    pub fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        if self.buf.len() < n {
            return Err(bad(format!(
                "truncated: {what} needs {n} bytes, {} left",
                self.buf.len()
            )));
        }
        let (a, b) = self.buf.split_at(n);
        self.buf = b;
        Ok(a)
    }
    /// A u32.
    pub fn u32(&mut self, what: &str) -> Result<u32> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    /// An i32.
    pub fn i32(&mut self, what: &str) -> Result<i32> {
        Ok(self.u32(what)? as i32)
    }
    /// A u64.
    pub fn u64(&mut self, what: &str) -> Result<u64> {
        let b = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    /// A string written by [`StateWriter::str`] (at most `max` bytes).
    pub fn str(&mut self, max: usize, what: &str) -> Result<String> {
        let n = self.u32(what)? as usize;
        if n > max {
            return Err(bad(format!("{what}: length {n} is larger than {max}")));
        }
        let b = self.take(n, what)?;
        String::from_utf8(b.to_vec()).map_err(|_| bad(format!("{what} is not UTF-8")))
    }
}

/// Kinds of memory, as the state records them.
const KIND_ATTENTION: u32 = 1;
const KIND_RECURRENT: u32 = 2;
const KIND_HYBRID: u32 = 3;
/// The V type of a layer whose cache holds no separate values (multi-head
/// latent attention reads them from the keys).
const NO_V: u32 = u32::MAX;

/// Which parts of a sequence's memory a state holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StateParts {
    /// Everything.
    All,
    /// Only what cannot give back positions: the sliding-window cache and
    /// the recurrent states (llama.cpp's `PARTIAL_ONLY`).
    RollbackOnly,
}

impl Memory {
    /// Appends the state of `seq` (its cells and their data) to `w`.
    pub fn state_seq_write(&self, seq: SeqId, w: &mut StateWriter) -> Result<()> {
        self.state_seq_write_parts(seq, w, StateParts::All)
    }

    /// Appends the `parts` of the state of `seq` to `w`.
    pub fn state_seq_write_parts(
        &self,
        seq: SeqId,
        w: &mut StateWriter,
        parts: StateParts,
    ) -> Result<()> {
        let all = parts == StateParts::All;
        match self {
            Memory::Attention(kv) => {
                w.u32(KIND_ATTENTION);
                if all {
                    write_kv(kv, seq, w)
                } else {
                    write_swa(kv, seq, w)
                }
            }
            Memory::Recurrent(rs) => {
                w.u32(KIND_RECURRENT);
                write_rs(rs, seq, w)
            }
            Memory::Hybrid(h) => {
                w.u32(KIND_HYBRID);
                if all {
                    write_kv(&h.attn, seq, w)?;
                }
                write_rs(&h.rs, seq, w)
            }
        }
    }

    /// Replaces the state of `seq` by the one `r` holds. Everything is
    /// checked before the memory changes; when the state is refused `seq`
    /// is left empty.
    pub fn state_seq_read(&mut self, seq: SeqId, r: &mut StateReader<'_>) -> Result<()> {
        self.state_seq_read_parts(seq, r, StateParts::All)
    }

    /// Replaces the `parts` of the state of `seq` by those `r` holds (the
    /// other parts stay). Everything is checked before the memory changes;
    /// when the state is refused `seq` is left empty.
    pub fn state_seq_read_parts(
        &mut self,
        seq: SeqId,
        r: &mut StateReader<'_>,
        parts: StateParts,
    ) -> Result<()> {
        let all = parts == StateParts::All;
        let kind = r.u32("memory kind")?;
        let (want, name) = match self {
            Memory::Attention(_) => (KIND_ATTENTION, "an attention KV cache"),
            Memory::Recurrent(_) => (KIND_RECURRENT, "a recurrent memory"),
            Memory::Hybrid(_) => (KIND_HYBRID, "a hybrid memory"),
        };
        if kind != want {
            return Err(bad(format!(
                "the state is of memory kind {kind}, this context has {name}"
            )));
        }
        let kv = match self.kv() {
            Some(kv) if all => Some(KvState::parse(kv, r)?),
            Some(kv) if kind == KIND_ATTENTION => Some(KvState::parse_swa(kv, r)?),
            // A hybrid memory's partial state holds no attention part.
            _ => None,
        };
        let rs = match self.rs() {
            Some(rs) => Some(RsState::parse(rs, r)?),
            None => None,
        };
        if r.remaining() != 0 {
            return Err(bad(format!(
                "{} bytes left after the memory state",
                r.remaining()
            )));
        }
        // Removing a whole sequence always succeeds.
        if all {
            let _ = self.seq_rm(seq, -1, -1);
        } else {
            // Only the parts the state holds are replaced.
            if let Some(swa) = self.kv_mut().and_then(|kv| kv.swa.as_mut()) {
                swa.cells.seq_rm(seq, -1, -1);
            }
            if let Some(rs) = self.rs_mut() {
                let _ = rs.cells.seq_rm(seq, -1, -1);
            }
        }
        let res = (|| {
            if let (Some(st), Some(mem)) = (&kv, self.kv_mut()) {
                st.apply(mem, seq)?;
            }
            if let (Some(st), Some(mem)) = (&rs, self.rs_mut()) {
                st.apply(mem, seq)?;
            }
            Ok(())
        })();
        if res.is_err() {
            let _ = self.seq_rm(seq, -1, -1);
        }
        res
    }
}

/// Cells of `seq` in `cache`, by position.
fn seq_cells(cache: &KvCache, seq: SeqId) -> Vec<(usize, Pos)> {
    let mut v: Vec<(usize, Pos)> = cache
        .cells
        .cells()
        .iter()
        .enumerate()
        .filter(|(_, c)| c.has_seq(seq))
        .map(|(i, c)| (i, c.pos))
        .collect();
    v.sort_unstable_by_key(|&(_, p)| p);
    v
}

fn write_kv(mem: &KvMemory, seq: SeqId, w: &mut StateWriter) -> Result<()> {
    write_cache(&mem.base, seq, w)?;
    write_swa(mem, seq, w)
}

/// The sliding-window part of a KV memory: a flag, then the cache.
fn write_swa(mem: &KvMemory, seq: SeqId, w: &mut StateWriter) -> Result<()> {
    match &mem.swa {
        Some(swa) => {
            w.u32(1);
            write_cache(swa, seq, w)
        }
        None => {
            w.u32(0);
            Ok(())
        }
    }
}

/// Bytes of one cell's row of a tensor [width, cells].
fn row_bytes(w: &Weight) -> usize {
    w.desc.nb[1]
}

/// Reads the rows of `cells` from a tensor stored one row per cell.
fn read_rows(w: &Weight, cells: &[usize], out: &mut StateWriter) -> Result<()> {
    let row = row_bytes(w);
    let mut buf = vec![0u8; row];
    for &c in cells {
        w.at.buffer.get_tensor(w.at.offset + c * row, &mut buf)?;
        out.bytes(&buf);
    }
    Ok(())
}

/// Reads the per-cell rows of a V tensor stored transposed ([cells] per
/// value element).
fn read_rows_transposed(
    v: &Weight,
    size: usize,
    cells: &[usize],
    out: &mut StateWriter,
) -> Result<()> {
    let esz = v.desc.ty.type_size();
    let width = v.desc.ne[0];
    let mut all = vec![0u8; width * size * esz];
    v.at.buffer.get_tensor(v.at.offset, &mut all)?;
    for &c in cells {
        for j in 0..width {
            let at = (j * size + c) * esz;
            out.bytes(&all[at..at + esz]);
        }
    }
    Ok(())
}

fn write_cache(cache: &KvCache, seq: SeqId, w: &mut StateWriter) -> Result<()> {
    let cells = seq_cells(cache, seq);
    w.u32(cells.len() as u32);
    for &(_, p) in &cells {
        w.i32(p);
    }
    let idx: Vec<usize> = cells.iter().map(|&(i, _)| i).collect();
    let layers: Vec<(usize, &crate::kv_cache::KvLayer)> = cache
        .layers
        .iter()
        .enumerate()
        .filter_map(|(il, l)| l.as_ref().map(|l| (il, l)))
        .collect();
    w.u32(layers.len() as u32);
    for (il, l) in layers {
        w.u32(il as u32);
        w.u32(l.k.desc.ty.id());
        w.u64(row_bytes(&l.k) as u64);
        read_rows(&l.k, &idx, w)?;
        // A cache without separate values (multi-head latent attention)
        // writes no V rows.
        let Some(v) = &l.v else {
            w.u32(NO_V);
            w.u64(0);
            continue;
        };
        w.u32(v.desc.ty.id());
        let v_row = v.desc.ty.row_size(v.desc.ne[0] as u64).unwrap_or(0) as usize;
        w.u64(v_row as u64);
        if cache.v_trans {
            read_rows_transposed(v, cache.size, &idx, w)?;
        } else {
            read_rows(v, &idx, w)?;
        }
    }
    Ok(())
}

/// One cache's part of a state, parsed and checked.
struct CacheState {
    pos: Vec<Pos>,
    /// Per layer: its index, K rows and V rows (one per cell, in order).
    layers: Vec<(usize, Vec<u8>, Vec<u8>)>,
}

struct KvState {
    /// None in a partial state.
    base: Option<CacheState>,
    swa: Option<CacheState>,
}

fn type_name(id: u32) -> String {
    if id == NO_V {
        return "absent".to_string();
    }
    Type::from_u32(id).map_or_else(|| format!("type {id}"), |t| t.name().to_string())
}

impl CacheState {
    fn parse(cache: &KvCache, r: &mut StateReader<'_>, label: &str) -> Result<CacheState> {
        let n = r.u32("cell count")? as usize;
        if n > cache.size {
            return Err(bad(format!(
                "the state holds {n} cells; the {label} KV cache has {}",
                cache.size
            )));
        }
        let mut pos = Vec::with_capacity(n);
        for _ in 0..n {
            let p = r.i32("cell position")?;
            if p < 0 {
                return Err(bad(format!("negative cell position {p}")));
            }
            pos.push(p);
        }
        let n_layers = r.u32("layer count")? as usize;
        let mine: Vec<usize> = (0..cache.layers.len())
            .filter(|&il| cache.layers[il].is_some())
            .collect();
        if n_layers != mine.len() {
            return Err(bad(format!(
                "the state has {n_layers} layers in its {label} KV cache; this model has {}",
                mine.len()
            )));
        }
        let mut layers = Vec::with_capacity(n_layers);
        for &il in &mine {
            let got = r.u32("layer index")? as usize;
            if got != il {
                return Err(bad(format!(
                    "the state has layer {got} where this model has layer {il}"
                )));
            }
            let l = cache.layer(il)?;
            let k_ty = r.u32("K type")?;
            let k_row = r.u64("K row size")? as usize;
            if k_ty != l.k.desc.ty.id() || k_row != row_bytes(&l.k) {
                return Err(bad(format!(
                    "layer {il}: the state's K is {} with rows of {k_row} bytes; the cache's is {} with {}",
                    type_name(k_ty),
                    l.k.desc.ty,
                    row_bytes(&l.k)
                )));
            }
            let k = r.take(k_row * n, "K rows")?.to_vec();
            let v_ty = r.u32("V type")?;
            let v_row = r.u64("V row size")? as usize;
            let (want_ty, want_v) = match &l.v {
                Some(v) => (
                    v.desc.ty.id(),
                    v.desc.ty.row_size(v.desc.ne[0] as u64).unwrap_or(0) as usize,
                ),
                None => (NO_V, 0),
            };
            if v_ty != want_ty || v_row != want_v {
                let cache_v = match &l.v {
                    Some(v) => format!("{} with {want_v}", v.desc.ty),
                    None => "no separate values".to_string(),
                };
                return Err(bad(format!(
                    "layer {il}: the state's V is {} with rows of {v_row} bytes; the cache's is {cache_v}",
                    type_name(v_ty),
                )));
            }
            let v = r.take(v_row * n, "V rows")?.to_vec();
            layers.push((il, k, v));
        }
        Ok(CacheState { pos, layers })
    }

    /// Stores the cells in free cells of `cache` for `seq`.
    fn apply(&self, cache: &mut KvCache, seq: SeqId, label: &str) -> Result<()> {
        let n = self.pos.len();
        if n == 0 {
            return Ok(());
        }
        let slots = cache.cells.find_slot(n).ok_or_else(|| {
            bad(format!(
                "no room in the {label} KV cache for {n} cells ({} of {} used)",
                cache.cells.used, cache.size
            ))
        })?;
        let seqs = vec![vec![seq]; n];
        cache.cells.apply(&slots, &self.pos, &seqs);
        for (il, k, v) in &self.layers {
            let l = cache.layer(*il)?;
            write_rows(&l.k, &slots, k)?;
            let Some(lv) = &l.v else { continue };
            if cache.v_trans {
                write_rows_transposed(lv, cache.size, &slots, v)?;
            } else {
                write_rows(lv, &slots, v)?;
            }
        }
        Ok(())
    }
}

/// Writes one row per cell of `cells` from `data`.
fn write_rows(w: &Weight, cells: &[usize], data: &[u8]) -> Result<()> {
    let row = row_bytes(w);
    for (i, &c) in cells.iter().enumerate() {
        w.at.buffer
            .set_tensor(w.at.offset + c * row, &data[i * row..(i + 1) * row])?;
    }
    Ok(())
}

fn write_rows_transposed(v: &Weight, size: usize, cells: &[usize], data: &[u8]) -> Result<()> {
    let esz = v.desc.ty.type_size();
    let width = v.desc.ne[0];
    let mut all = vec![0u8; width * size * esz];
    v.at.buffer.get_tensor(v.at.offset, &mut all)?;
    for (i, &c) in cells.iter().enumerate() {
        for j in 0..width {
            let src = (i * width + j) * esz;
            let dst = (j * size + c) * esz;
            all[dst..dst + esz].copy_from_slice(&data[src..src + esz]);
        }
    }
    v.at.buffer.set_tensor(v.at.offset, &all)?;
    Ok(())
}

impl KvState {
    fn parse(mem: &KvMemory, r: &mut StateReader<'_>) -> Result<KvState> {
        let base = CacheState::parse(&mem.base, r, "full-attention")?;
        Ok(KvState {
            base: Some(base),
            ..KvState::parse_swa(mem, r)?
        })
    }

    /// The sliding-window part alone (a partial state).
    fn parse_swa(mem: &KvMemory, r: &mut StateReader<'_>) -> Result<KvState> {
        let has_swa = r.u32("sliding-window flag")? != 0;
        let swa = match (&mem.swa, has_swa) {
            (Some(c), true) => Some(CacheState::parse(c, r, "sliding-window")?),
            (None, false) => None,
            (Some(_), false) => {
                return Err(bad(
                    "the state has no sliding-window cache; this model needs one",
                ))
            }
            (None, true) => {
                return Err(bad(
                    "the state has a sliding-window cache; this model has none",
                ))
            }
        };
        Ok(KvState { base: None, swa })
    }

    fn apply(&self, mem: &mut KvMemory, seq: SeqId) -> Result<()> {
        if let Some(base) = &self.base {
            base.apply(&mut mem.base, seq, "full-attention")?;
        }
        if let (Some(st), Some(c)) = (&self.swa, mem.swa.as_mut()) {
            st.apply(c, seq, "sliding-window")?;
        }
        Ok(())
    }
}

fn write_rs(mem: &RecurrentMemory, seq: SeqId, w: &mut StateWriter) -> Result<()> {
    let cell = mem.cells.tail(seq);
    w.i32(mem.cells.seq_pos(seq));
    let layers: Vec<(usize, &crate::memory::RsLayer)> = mem
        .layers
        .iter()
        .enumerate()
        .filter_map(|(il, l)| l.as_ref().map(|l| (il, l)))
        .collect();
    w.u32(layers.len() as u32);
    let Some(cell) = cell else {
        return Ok(());
    };
    for (il, l) in layers {
        w.u32(il as u32);
        for t in [&l.r, &l.s] {
            w.u64(row_bytes(t) as u64);
            read_rows(t, &[cell], w)?;
        }
    }
    Ok(())
}

struct RsState {
    pos: Pos,
    /// Per layer: its index, the convolution row and the SSM row.
    layers: Vec<(usize, Vec<u8>, Vec<u8>)>,
}

impl RsState {
    fn parse(mem: &RecurrentMemory, r: &mut StateReader<'_>) -> Result<RsState> {
        let pos = r.i32("recurrent position")?;
        let n_layers = r.u32("recurrent layer count")? as usize;
        let mine: Vec<usize> = (0..mem.layers.len())
            .filter(|&il| mem.layers[il].is_some())
            .collect();
        if n_layers != mine.len() {
            return Err(bad(format!(
                "the state has {n_layers} recurrent layers; this model has {}",
                mine.len()
            )));
        }
        let mut layers = Vec::new();
        if pos < 0 {
            return Ok(RsState { pos, layers });
        }
        for &il in &mine {
            let got = r.u32("recurrent layer index")? as usize;
            if got != il {
                return Err(bad(format!(
                    "the state has recurrent layer {got} where this model has layer {il}"
                )));
            }
            let Some(l) = mem.layer(il) else {
                return Err(bad(format!("no recurrent layer {il}")));
            };
            let mut rows = Vec::with_capacity(2);
            for (t, what) in [(&l.r, "convolution"), (&l.s, "SSM")] {
                let n = r.u64("state row size")? as usize;
                if n != row_bytes(t) {
                    return Err(bad(format!(
                        "layer {il}: the state's {what} rows have {n} bytes; this model's {}",
                        row_bytes(t)
                    )));
                }
                rows.push(r.take(n, "state row")?.to_vec());
            }
            let s = rows.pop().unwrap_or_default();
            let c = rows.pop().unwrap_or_default();
            layers.push((il, c, s));
        }
        Ok(RsState { pos, layers })
    }

    fn apply(&self, mem: &mut RecurrentMemory, seq: SeqId) -> Result<()> {
        if self.pos < 0 {
            return Ok(());
        }
        let slot = mem
            .cells
            .place(&[vec![seq]], &[self.pos])
            .and_then(|v| v.first().copied())
            .ok_or_else(|| {
                bad(format!(
                    "no free recurrent state cell for sequence {seq} ({} of {} used)",
                    mem.cells.used(),
                    mem.cells.size()
                ))
            })?;
        for (il, c, s) in &self.layers {
            let Some(l) = mem.layer(*il) else {
                return Err(bad(format!("no recurrent layer {il}")));
            };
            write_rows(&l.r, &[slot.dst], c)?;
            write_rows(&l.s, &[slot.dst], s)?;
        }
        Ok(())
    }
}
