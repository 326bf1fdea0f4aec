//! The inputs of a forward graph (tokens or embeddings, positions, output
//! rows) and its attention masks: one for full-attention layers and, when the
//! model has sliding-window layers, one for those. Each mask is built once
//! per ubatch and shared by every layer that uses it.

use ggml_core::{Graph, TensorId, Type};

use crate::graph::UbatchShape;
use crate::hparams::HParams;
use crate::kv_cache::{Cell, Pos, SeqId};

/// Padding of the mask's token dim (ggml's GGML_KQ_MASK_PAD).
pub const KQ_MASK_PAD: usize = 32;

/// The graph's inputs, which the context fills after allocation.
#[derive(Clone, Copy, Debug)]
pub struct GraphInputs {
    /// Token ids, I32 [n_tokens] (absent with embedding input).
    pub tokens: Option<TensorId>,
    /// Input embeddings, F32 [n_embd, n_tokens].
    pub embd: Option<TensorId>,
    /// Positions, I32 [n_tokens].
    pub pos: TensorId,
    /// Causal mask of full-attention layers, [n_kv, pad(n_tokens)]: F16 for
    /// flash attention (which ggml reads as F16), F32 otherwise.
    pub kq_mask: TensorId,
    /// Causal mask of sliding-window layers (absent without such layers).
    pub kq_mask_swa: Option<TensorId>,
    /// Indices of the output rows, I32 [n_outputs] (absent when every token outputs).
    pub out_ids: Option<TensorId>,
}

impl GraphInputs {
    /// Creates the inputs of a ubatch of `shape` in `g`, with masks of
    /// type `mask_ty`.
    pub fn new(g: &mut Graph, hp: &HParams, shape: UbatchShape, mask_ty: Type) -> GraphInputs {
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
        let mask_ne = [shape.n_kv, n_tokens.div_ceil(KQ_MASK_PAD) * KQ_MASK_PAD];
        let kq_mask = g.input("KQ_mask", mask_ty, &mask_ne);
        let kq_mask_swa = hp
            .has_swa()
            .then(|| g.input("KQ_mask_swa", mask_ty, &mask_ne));
        let out_ids = (shape.n_outputs < n_tokens)
            .then(|| g.input("inp_out_ids", Type::I32, &[shape.n_outputs]));
        GraphInputs {
            tokens,
            embd,
            pos,
            kq_mask,
            kq_mask_swa,
            out_ids,
        }
    }

    /// The mask layer `il` attends with.
    pub fn mask_for(&self, hp: &HParams, il: usize) -> TensorId {
        match self.kq_mask_swa {
            Some(m) if hp.is_swa(il) => m,
            _ => self.kq_mask,
        }
    }
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
