//! The cells of a recurrent memory: one state slot per cell, each cell
//! holding the state of the sequences listed in it after its last position.
//! A sequence has at most one cell (its tail); sequences share a cell after
//! a copy until one of them advances, which then moves to a cell of its own
//! (copy on write). Positions cannot be taken back: a state is the sum of
//! everything before it.

use crate::kv_cells::{Pos, SeqId, MAX_SEQ};

/// One state slot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RsCell {
    /// Last position folded into the state (-1: empty).
    pub pos: Pos,
    /// The sequences whose state this is (bit per sequence id).
    pub seqs: u64,
}

impl RsCell {
    /// No sequence holds it.
    pub fn is_empty(&self) -> bool {
        self.seqs == 0
    }
    fn has(&self, s: SeqId) -> bool {
        self.seqs & (1u64 << s) != 0
    }
}

/// Where one sequence set of a ubatch reads its state and writes it back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RsSlot {
    /// The cell the state is read from: its own or the one it shared, or
    /// `dst` for a sequence without a state (whose cell is zeroed first).
    pub src: usize,
    /// The cell the new state goes to.
    pub dst: usize,
    /// The state starts from zeros (a new sequence).
    pub fresh: bool,
}

/// The cells of a recurrent memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RsCells {
    cells: Vec<RsCell>,
    /// Per sequence id: its cell, or -1.
    tails: Vec<i32>,
}

fn bounds(p0: Pos, p1: Pos) -> (Pos, Pos) {
    (p0.max(0), if p1 < 0 { Pos::MAX } else { p1 })
}

impl RsCells {
    /// `size` empty cells (one per sequence the context serves).
    pub fn new(size: usize) -> RsCells {
        RsCells {
            cells: vec![RsCell { pos: -1, seqs: 0 }; size.min(MAX_SEQ)],
            tails: vec![-1; MAX_SEQ],
        }
    }

    /// Number of cells.
    pub fn size(&self) -> usize {
        self.cells.len()
    }

    /// The cells.
    pub fn cells(&self) -> &[RsCell] {
        &self.cells
    }

    /// Cells holding a state.
    pub fn used(&self) -> usize {
        self.cells.iter().filter(|c| !c.is_empty()).count()
    }

    /// The cell of `seq`, if it has a state.
    pub fn tail(&self, seq: SeqId) -> Option<usize> {
        let t = *self.tails.get(usize::try_from(seq).ok()?)?;
        usize::try_from(t).ok()
    }

    fn drop_seq(&mut self, seq: SeqId) {
        if let Some(c) = self.tail(seq) {
            let cell = &mut self.cells[c];
            cell.seqs &= !(1u64 << seq);
            if cell.is_empty() {
                cell.pos = -1;
            }
        }
        self.tails[seq as usize] = -1;
    }

    /// Empties every cell.
    pub fn clear(&mut self) {
        let n = self.cells.len();
        *self = RsCells::new(n);
    }

    /// Removes positions `[p0, p1)` of `seq` (`seq < 0`: of every sequence;
    /// negative bounds are open). A state cannot lose its last positions
    /// while keeping earlier ones: such a removal answers false and changes
    /// nothing, as does a sequence id out of range, or a partial range for
    /// every sequence. Removing everything from some position on that the
    /// state has not reached changes nothing.
    #[must_use]
    pub fn seq_rm(&mut self, seq: SeqId, p0: Pos, p1: Pos) -> bool {
        let (p0, p1) = bounds(p0, p1);
        if seq >= self.cells.len() as SeqId {
            return false;
        }
        if seq >= 0 {
            let Some(c) = self.tail(seq) else {
                return true;
            };
            let pos = self.cells[c].pos;
            if p0 > 0 && p0 <= pos && p1 > pos {
                return false;
            }
            if p0 <= pos && pos < p1 {
                self.drop_seq(seq);
            }
            return true;
        }
        if p0 != p1 && (p0 != 0 || p1 != Pos::MAX) {
            return false;
        }
        for s in 0..MAX_SEQ as SeqId {
            if let Some(c) = self.tail(s) {
                let pos = self.cells[c].pos;
                if p0 <= pos && pos < p1 {
                    self.drop_seq(s);
                }
            }
        }
        true
    }

    /// Makes `dst` share the state of `src` (whatever `dst` had is
    /// dropped). The range is not looked at: a state holds all positions.
    pub fn seq_cp(&mut self, src: SeqId, dst: SeqId) {
        let n = self.cells.len() as SeqId;
        if src == dst || !(0..n).contains(&src) || !(0..n).contains(&dst) {
            return;
        }
        self.drop_seq(dst);
        if let Some(c) = self.tail(src) {
            self.cells[c].seqs |= 1u64 << dst;
            self.tails[dst as usize] = c as i32;
        }
    }

    /// Keeps only `seq`.
    pub fn seq_keep(&mut self, seq: SeqId) {
        for s in 0..MAX_SEQ as SeqId {
            if s != seq {
                self.drop_seq(s);
            }
        }
    }

    /// Shifts the position of `seq`'s state by `delta` when it lies in
    /// `[p0, p1)` (nothing else to move: the state has no positions).
    pub fn seq_add(&mut self, seq: SeqId, p0: Pos, p1: Pos, delta: Pos) {
        let (p0, p1) = bounds(p0, p1);
        if delta == 0 || p0 == p1 {
            return;
        }
        if let Some(c) = self.tail(seq) {
            let cell = &mut self.cells[c];
            if cell.has(seq) && p0 <= cell.pos && cell.pos < p1 {
                cell.pos += delta;
            }
        }
    }

    /// The last position of `seq`'s state, or -1. A state holds no earlier
    /// position, so this is also its smallest one.
    pub fn seq_pos(&self, seq: SeqId) -> Pos {
        self.tail(seq).map_or(-1, |c| self.cells[c].pos)
    }

    /// Gives each sequence set of a ubatch (`sets[s]`: its ids, the first
    /// one leading; `last_pos[s]`: the position it reaches) the cell it
    /// reads and the cell it writes, and records the new positions. A set
    /// that owns its cell alone updates it in place; one that shared it, or
    /// had none, takes an empty cell. Ids after the first lose the state
    /// they had (they join the first's). None when no cell is free.
    pub fn place(&mut self, sets: &[Vec<SeqId>], last_pos: &[Pos]) -> Option<Vec<RsSlot>> {
        let n = self.cells.len() as SeqId;
        if sets.iter().flatten().any(|&s| !(0..n).contains(&s)) {
            return None;
        }
        let mut out = Vec::with_capacity(sets.len());
        for (ids, &last) in sets.iter().zip(last_pos) {
            let lead = *ids.first()?;
            for &s in &ids[1..] {
                if s != lead {
                    self.drop_seq(s);
                }
            }
            let slot = match self.tail(lead) {
                Some(c) if self.cells[c].seqs == 1u64 << lead => RsSlot {
                    src: c,
                    dst: c,
                    fresh: false,
                },
                tail => {
                    let dst = self.cells.iter().position(RsCell::is_empty)?;
                    self.drop_seq(lead);
                    match tail {
                        Some(c) => RsSlot {
                            src: c,
                            dst,
                            fresh: false,
                        },
                        None => RsSlot {
                            src: dst,
                            dst,
                            fresh: true,
                        },
                    }
                }
            };
            let cell = &mut self.cells[slot.dst];
            cell.pos = last;
            cell.seqs = ids.iter().fold(0u64, |m, &s| m | (1u64 << s));
            for &s in ids {
                self.tails[s as usize] = slot.dst as i32;
            }
            out.push(slot);
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(cells: &mut RsCells, seq: SeqId, pos: Pos) -> RsSlot {
        cells.place(&[vec![seq]], &[pos]).unwrap()[0]
    }

    #[test]
    fn a_new_sequence_starts_from_zeros_then_updates_in_place() {
        let mut c = RsCells::new(4);
        let s = one(&mut c, 0, 4);
        assert!(s.fresh);
        assert_eq!(s.src, s.dst);
        assert_eq!(c.seq_pos(0), 4);
        let t = one(&mut c, 0, 8);
        assert_eq!(
            t,
            RsSlot {
                src: s.dst,
                dst: s.dst,
                fresh: false
            }
        );
        assert_eq!(c.used(), 1);
    }

    #[test]
    fn removing_a_tail_answers_false_and_changes_nothing() {
        let mut c = RsCells::new(2);
        one(&mut c, 0, 9);
        let before = c.clone();
        assert!(!c.seq_rm(0, 5, -1));
        assert!(!c.seq_rm(0, 9, 10));
        assert_eq!(c, before);
        // Past the state: nothing to remove.
        assert!(c.seq_rm(0, 10, -1));
        assert_eq!(c, before);
        // Everything: the state goes.
        assert!(c.seq_rm(0, 0, -1));
        assert_eq!(c.seq_pos(0), -1);
        assert_eq!(c.used(), 0);
        // Out of range.
        assert!(!c.seq_rm(2, 0, -1));
    }

    #[test]
    fn all_sequences_only_all_or_nothing() {
        let mut c = RsCells::new(2);
        one(&mut c, 0, 3);
        one(&mut c, 1, 5);
        assert!(!c.seq_rm(-1, 2, -1));
        assert!(c.seq_rm(-1, 4, 4));
        assert_eq!(c.used(), 2);
        assert!(c.seq_rm(-1, -1, -1));
        assert_eq!(c.used(), 0);
    }

    #[test]
    fn a_copy_shares_the_state_until_one_advances() {
        let mut c = RsCells::new(3);
        let s0 = one(&mut c, 0, 4);
        c.seq_cp(0, 1);
        assert_eq!(c.seq_pos(1), 4);
        assert_eq!(c.tail(1), Some(s0.dst));
        assert_eq!(c.used(), 1);
        // Sequence 1 moves to a cell of its own, starting from the shared state.
        let s1 = one(&mut c, 1, 5);
        assert_eq!(s1.src, s0.dst);
        assert_ne!(s1.dst, s0.dst);
        assert!(!s1.fresh);
        // Sequence 0 now owns its cell again.
        let s0b = one(&mut c, 0, 5);
        assert_eq!((s0b.src, s0b.dst), (s0.dst, s0.dst));
        assert_eq!(c.used(), 2);
    }

    #[test]
    fn keep_and_add() {
        let mut c = RsCells::new(3);
        one(&mut c, 0, 4);
        one(&mut c, 1, 6);
        c.seq_cp(1, 2);
        c.seq_keep(1);
        assert_eq!(c.seq_pos(0), -1);
        assert_eq!(c.seq_pos(2), -1);
        assert_eq!(c.seq_pos(1), 6);
        assert_eq!(c.used(), 1);
        c.seq_add(1, 0, -1, -3);
        assert_eq!(c.seq_pos(1), 3);
        c.seq_add(1, 4, -1, 10);
        assert_eq!(c.seq_pos(1), 3);
    }

    #[test]
    fn a_set_of_several_ids_shares_one_new_state() {
        let mut c = RsCells::new(3);
        one(&mut c, 1, 2);
        let s = c.place(&[vec![0, 1]], &[0]).unwrap()[0];
        assert!(s.fresh);
        assert_eq!(c.tail(0), c.tail(1));
        assert_eq!(c.used(), 1);
        assert!(c.place(&[vec![3]], &[0]).is_none());
    }
}
