//! The inputs of a forward graph (tokens or embeddings, positions, output
//! rows) and, per KV cache, its attention mask and the cells the ubatch's K
//! and V go to: one set for the full-attention cache and, when the model has
//! sliding-window layers, one for theirs. Each mask is built once per ubatch
//! and shared by every layer that uses its cache.

use ggml_core::{Graph, TensorId, Type};

use crate::graph::UbatchShape;
use crate::hparams::HParams;
use crate::kv_cache::{Cell, KvCache, Pos, SeqId};
use crate::memory::Memory;

/// Padding of the mask's token dim (ggml's GGML_KQ_MASK_PAD).
pub const KQ_MASK_PAD: usize = 32;

/// The inputs of one KV cache.
#[derive(Clone, Debug)]
pub struct KvInputs {
    /// Causal mask [n_kv, pad(n_tokens)]: F16 with flash attention (V stored
    /// by rows), which ggml reads as F16 whatever the type says; F32 else.
    pub mask: TensorId,
    /// Cell of each token, I64 [n_tokens]: where its K (and V) row goes.
    pub k_idxs: TensorId,
    /// With V stored transposed, per V width `w`: the element index of each
    /// of the ubatch's V values, I64 [w * n_tokens].
    pub v_idxs: Vec<(usize, TensorId)>,
}

impl KvInputs {
    fn new(
        g: &mut Graph,
        hp: &HParams,
        kv: &KvCache,
        n_kv: usize,
        n_tokens: usize,
        swa: bool,
    ) -> KvInputs {
        let sfx = if swa { "_swa" } else { "" };
        let mask_ne = [n_kv, n_tokens.div_ceil(KQ_MASK_PAD) * KQ_MASK_PAD];
        let mask_ty = if kv.v_trans { Type::F32 } else { Type::F16 };
        let mask = g.input(format!("KQ_mask{sfx}"), mask_ty, &mask_ne);
        let k_idxs = g.input(format!("inp_k_idxs{sfx}"), Type::I64, &[n_tokens]);
        let mut v_idxs: Vec<(usize, TensorId)> = Vec::new();
        if kv.v_trans {
            for il in (0..hp.n_layer).filter(|&il| kv.layers[il].is_some()) {
                let w = hp.n_embd_v_gqa(il);
                if !v_idxs.iter().any(|&(x, _)| x == w) {
                    let t = g.input(format!("inp_v_idxs{sfx}_{w}"), Type::I64, &[w * n_tokens]);
                    v_idxs.push((w, t));
                }
            }
        }
        KvInputs {
            mask,
            k_idxs,
            v_idxs,
        }
    }

    /// The V index input for width `w`.
    pub fn v_idx(&self, w: usize) -> Option<TensorId> {
        self.v_idxs.iter().find(|&&(x, _)| x == w).map(|&(_, t)| t)
    }
}

/// The inputs of the recurrent memory: where each sequence set of the
/// ubatch reads its states and writes them back.
#[derive(Clone, Copy, Debug)]
pub struct RsInputs {
    /// Cell each set reads, I32 [n_seqs].
    pub src: TensorId,
    /// Cell each set writes, I64 [n_seqs].
    pub dst: TensorId,
}

/// The graph's inputs, which the context fills after allocation.
#[derive(Clone, Debug)]
pub struct GraphInputs {
    /// Token ids, I32 [n_tokens] (absent with embedding input).
    pub tokens: Option<TensorId>,
    /// Input embeddings, F32 [n_embd, n_tokens].
    pub embd: Option<TensorId>,
    /// Positions, I32 [n_tokens].
    pub pos: TensorId,
    /// Of the full-attention cache (absent when it holds no layer).
    pub kv: Option<KvInputs>,
    /// Of the sliding-window cache (absent without one).
    pub kv_swa: Option<KvInputs>,
    /// Indices of the output rows, I32 [n_outputs] (absent when every token outputs).
    pub out_ids: Option<TensorId>,
    /// Of the recurrent memory (absent without one).
    pub rs: Option<RsInputs>,
}

impl GraphInputs {
    /// Creates the inputs of a ubatch of `shape` in `g`.
    pub fn new(g: &mut Graph, hp: &HParams, mem: &Memory, shape: UbatchShape) -> GraphInputs {
        let n_tokens = shape.n_tokens;
        let (tokens, embd) = if shape.embd_input {
            (
                None,
                Some(g.input("inp_embd", Type::F32, &[hp.n_embd, n_tokens])),
            )
        } else {
            (Some(g.input("inp_tokens", Type::I32, &[n_tokens])), None)
        };
        let pos = g.input("inp_pos", Type::I32, &[n_tokens]);
        let kv = mem
            .kv()
            .filter(|m| m.base.has_layers())
            .map(|m| KvInputs::new(g, hp, &m.base, shape.n_kv, n_tokens, false));
        let kv_swa = mem
            .kv()
            .and_then(|m| m.swa.as_ref())
            .filter(|c| c.has_layers())
            .map(|c| KvInputs::new(g, hp, c, shape.n_kv_swa, n_tokens, true));
        let rs = mem.rs().map(|_| RsInputs {
            src: g.input("inp_s_src", Type::I32, &[shape.n_seqs]),
            dst: g.input("inp_s_dst", Type::I64, &[shape.n_seqs]),
        });
        let out_ids = (shape.n_outputs < n_tokens)
            .then(|| g.input("inp_out_ids", Type::I32, &[shape.n_outputs]));
        GraphInputs {
            tokens,
            embd,
            pos,
            kv,
            kv_swa,
            out_ids,
            rs,
        }
    }

    /// The inputs of the cache layer `il` attends with.
    pub fn kv_for(&self, hp: &HParams, il: usize) -> Option<&KvInputs> {
        match &self.kv_swa {
            Some(k) if hp.is_swa(il) => Some(k),
            _ => self.kv.as_ref(),
        }
    }
}

/// The bytes of a K index input: the cell of each token.
pub fn k_idx_bytes(slots: &[usize]) -> Vec<u8> {
    slots
        .iter()
        .flat_map(|&c| (c as i64).to_le_bytes())
        .collect()
}

/// The bytes of a V index input for V width `w` in a transposed V cache of
/// `size` cells: value `j` of token `t` goes to element `j * size + cell`.
pub fn v_idx_bytes(slots: &[usize], w: usize, size: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(slots.len() * w * 8);
    for &c in slots {
        for j in 0..w {
            out.extend_from_slice(&((j * size + c) as i64).to_le_bytes());
        }
    }
    out
}

/// The tokens of a ubatch, as the mask sees them.
pub struct MaskTokens<'a> {
    /// Position of each token.
    pub pos: &'a [Pos],
    /// Sequences of each token.
    pub seqs: &'a [Vec<SeqId>],
}

/// Builds a mask [rows][n_kv] (rows >= tokens, extra rows fully masked): a
/// token sees the cells of its sequences at positions not after its own and,
/// with `n_swa`, less than `n_swa` positions before it.
pub fn build_mask(
    cells: &[Cell],
    n_kv: usize,
    rows: usize,
    toks: &MaskTokens<'_>,
    n_swa: Option<usize>,
) -> Vec<f32> {
    let mut mask = vec![f32::NEG_INFINITY; n_kv * rows];
    for (j, (&p, ss)) in toks.pos.iter().zip(toks.seqs).enumerate() {
        let row = &mut mask[j * n_kv..(j + 1) * n_kv];
        for (i, c) in cells[..n_kv].iter().enumerate() {
            if c.is_empty() || c.pos > p || !ss.iter().any(|&s| c.has_seq(s)) {
                continue;
            }
            if let Some(w) = n_swa {
                if (p as i64 - c.pos as i64) >= w as i64 {
                    continue;
                }
            }
            row[i] = 0.0;
        }
    }
    mask
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(pos: Pos) -> Cell {
        Cell {
            pos,
            delta: 0,
            seqs: 1,
        }
    }

    #[test]
    fn window_hides_old_positions() {
        let cells: Vec<Cell> = (0..6).map(cell).collect();
        let seqs = vec![vec![0]];
        let toks = MaskTokens {
            pos: &[5],
            seqs: &seqs,
        };
        let full = build_mask(&cells, 6, 1, &toks, None);
        assert!(full.iter().all(|&x| x == 0.0));
        let swa = build_mask(&cells, 6, 1, &toks, Some(3));
        let seen: Vec<bool> = swa.iter().map(|&x| x == 0.0).collect();
        assert_eq!(seen, [false, false, false, true, true, true]);
    }
}
