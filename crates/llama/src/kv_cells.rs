//! The cells of a KV cache: what each slot holds (position, sequences,
//! pending shift), the search for the slots of a ubatch, and the sequence
//! operations. The cells of a cache that serves sliding-window layers may be
//! reused once their position has left the window of their only sequence,
//! which lets that cache be much smaller than the context.

/// A position in a sequence (llama_pos).
pub type Pos = i32;
/// A sequence id (llama_seq_id).
pub type SeqId = i32;

/// Most sequences a context can hold (bits of a cell's sequence set).
pub const MAX_SEQ: usize = 64;

/// One slot of the cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cell {
    /// Position of the token, or -1 when empty.
    pub pos: Pos,
    /// Pending position shift (applied to K by rope before the next decode).
    pub delta: Pos,
    /// Bit set of sequences the cell belongs to.
    pub seqs: u64,
}

impl Cell {
    /// An empty cell.
    pub const EMPTY: Cell = Cell {
        pos: -1,
        delta: 0,
        seqs: 0,
    };

    /// True when no sequence uses the cell.
    pub fn is_empty(&self) -> bool {
        self.seqs == 0
    }

    /// True when the cell belongs to `seq`.
    pub fn has_seq(&self, seq: SeqId) -> bool {
        (0..MAX_SEQ as i32).contains(&seq) && self.seqs & (1u64 << seq) != 0
    }

    /// The only sequence of the cell, when it has exactly one.
    fn single_seq(&self) -> Option<SeqId> {
        (self.seqs.count_ones() == 1).then(|| self.seqs.trailing_zeros() as SeqId)
    }
}

/// The bit mask of `seq` (negative: every sequence).
fn seq_mask(seq: SeqId) -> u64 {
    if seq < 0 {
        u64::MAX
    } else if (seq as usize) < MAX_SEQ {
        1u64 << seq
    } else {
        0
    }
}

/// Whether `p` lies in `[p0, p1)`, negative bounds being open.
fn in_range(p: Pos, p0: Pos, p1: Pos) -> bool {
    let p0 = p0.max(0);
    let p1 = if p1 < 0 { Pos::MAX } else { p1 };
    p >= p0 && p < p1
}

/// The cells of one cache.
#[derive(Clone, Debug)]
pub struct KvCells {
    cells: Vec<Cell>,
    /// Where the next search for free slots starts.
    pub head: usize,
    /// Number of non-empty cells.
    pub used: usize,
    /// A position shift is pending.
    pub has_shift: bool,
    /// Window of the layers the cells serve (0: full attention, no reuse).
    n_swa: usize,
}

impl KvCells {
    /// `size` empty cells for layers with window `n_swa` (0: none).
    pub fn new(size: usize, n_swa: usize) -> KvCells {
        KvCells {
            cells: vec![Cell::EMPTY; size],
            head: 0,
            used: 0,
            has_shift: false,
            n_swa,
        }
    }

    /// Number of cells.
    pub fn size(&self) -> usize {
        self.cells.len()
    }

    /// The cells.
    pub fn cells(&self) -> &[Cell] {
        &self.cells
    }

    /// The window of the layers the cells serve (0: full attention).
    pub fn n_swa(&self) -> usize {
        self.n_swa
    }

    /// Whether a cell at `pos_cell` is outside the window of a token at
    /// `pos` (never for full attention).
    pub fn is_masked_swa(&self, pos_cell: Pos, pos: Pos) -> bool {
        self.n_swa > 0 && i64::from(pos) - i64::from(pos_cell) >= self.n_swa as i64
    }

    /// Empties every cell (the data stays; masks hide it).
    pub fn clear(&mut self) {
        self.cells.fill(Cell::EMPTY);
        self.head = 0;
        self.used = 0;
        self.has_shift = false;
    }

    /// One past the last non-empty cell.
    pub fn cell_max(&self) -> usize {
        self.cells
            .iter()
            .rposition(|c| !c.is_empty())
            .map_or(0, |i| i + 1)
    }

    /// Largest position of every sequence (-1 where it has none).
    pub fn seq_pos_max_all(&self) -> [Pos; MAX_SEQ] {
        let mut max = [-1; MAX_SEQ];
        for c in self.cells.iter().filter(|c| !c.is_empty()) {
            let mut bits = c.seqs;
            while bits != 0 {
                let s = bits.trailing_zeros() as usize;
                max[s] = max[s].max(c.pos);
                bits &= bits - 1;
            }
        }
        max
    }

    /// Largest position of `seq`, or -1.
    pub fn seq_pos_max(&self, seq: SeqId) -> Pos {
        self.positions_of(seq).max().unwrap_or(-1)
    }

    /// Smallest position of `seq`, or -1.
    pub fn seq_pos_min(&self, seq: SeqId) -> Pos {
        self.positions_of(seq).min().unwrap_or(-1)
    }

    /// The positions of the cells `seq` uses, in cell order.
    fn positions_of(&self, seq: SeqId) -> impl Iterator<Item = Pos> + '_ {
        self.cells
            .iter()
            .filter(move |c| c.has_seq(seq))
            .map(|c| c.pos)
    }

    /// Sorted positions of `seq`.
    pub fn seq_positions(&self, seq: SeqId) -> Vec<Pos> {
        let mut v: Vec<Pos> = self.positions_of(seq).collect();
        v.sort_unstable();
        v
    }

    /// Finds a cell for each of `n` tokens, not necessarily adjacent: an
    /// empty cell, or one whose only sequence has moved so far past it that
    /// no later token of that sequence can see it. The search starts at
    /// `head` (or at 0 when enough cells before `head` are free) and wraps.
    pub fn find_slot(&self, n: usize) -> Option<Vec<usize>> {
        let size = self.size();
        if n == 0 || n > size {
            return None;
        }
        let pos_max = if self.n_swa > 0 {
            self.seq_pos_max_all()
        } else {
            [-1; MAX_SEQ]
        };
        let mut cur = if self.head > self.used + 2 * n {
            0
        } else {
            self.head
        };
        let mut found = Vec::with_capacity(n);
        let mut tested = 0;
        while tested < size {
            if cur >= size {
                cur = 0;
            }
            let c = &self.cells[cur];
            let usable = c.is_empty()
                || c.single_seq()
                    .is_some_and(|s| self.is_masked_swa(c.pos, pos_max[s as usize] + 1));
            if usable {
                found.push(cur);
                if found.len() == n {
                    return Some(found);
                }
            }
            cur += 1;
            tested += 1;
        }
        None
    }

    /// Records tokens at `pos` of sequences `seqs` in cells `slots` (from
    /// [`KvCells::find_slot`]). A reused cell takes its sequence's older
    /// positions with it, so every sequence keeps one unbroken run of
    /// positions.
    pub fn apply(&mut self, slots: &[usize], pos: &[Pos], seqs: &[Vec<SeqId>]) {
        let mut max_rm = [-1 as Pos; MAX_SEQ];
        for ((&i, &p), ss) in slots.iter().zip(pos).zip(seqs) {
            let c = self.cells[i];
            if !c.is_empty() {
                if let Some(s) = c.single_seq() {
                    max_rm[s as usize] = max_rm[s as usize].max(c.pos);
                }
                self.release(i, u64::MAX);
            }
            let c = &mut self.cells[i];
            c.pos = p;
            c.delta = 0;
            for &s in ss {
                if (0..MAX_SEQ as SeqId).contains(&s) {
                    c.seqs |= 1u64 << s;
                }
            }
            if !c.is_empty() {
                self.used += 1;
            }
        }
        for (s, &m) in max_rm.iter().enumerate() {
            if m < 0 {
                continue;
            }
            let min = self.seq_pos_min(s as SeqId);
            if min >= 0 && min <= m {
                self.seq_rm(s as SeqId, min, m + 1);
            }
        }
        if let Some(&last) = slots.last() {
            self.head = if last + 1 >= self.size() { 0 } else { last + 1 };
        }
    }

    fn release(&mut self, i: usize, mask: u64) -> bool {
        let c = &mut self.cells[i];
        let was = !c.is_empty();
        c.seqs &= !mask;
        if was && c.is_empty() {
            c.pos = -1;
            c.delta = 0;
            self.used -= 1;
            return true;
        }
        false
    }

    fn lower_head(&mut self, freed: Option<usize>) {
        if let Some(i) = freed {
            if i < self.head {
                self.head = i;
            }
        }
    }

    /// Removes positions `[p0, p1)` of `seq` (`seq < 0`: every sequence;
    /// negative bounds are open).
    pub fn seq_rm(&mut self, seq: SeqId, p0: Pos, p1: Pos) {
        let mask = seq_mask(seq);
        let mut first = None;
        for i in 0..self.size() {
            let c = self.cells[i];
            if c.seqs & mask != 0 && in_range(c.pos, p0, p1) && self.release(i, mask) {
                first.get_or_insert(i);
            }
        }
        self.lower_head(first);
    }

    /// Adds `dst` to the cells of `src` in `[p0, p1)`.
    pub fn seq_cp(&mut self, src: SeqId, dst: SeqId, p0: Pos, p1: Pos) {
        if src == dst || src < 0 || dst < 0 {
            return;
        }
        let (sm, dm) = (seq_mask(src), seq_mask(dst));
        for c in self.cells.iter_mut() {
            if c.seqs & sm != 0 && in_range(c.pos, p0, p1) {
                c.seqs |= dm;
            }
        }
    }

    /// Keeps only `seq`.
    pub fn seq_keep(&mut self, seq: SeqId) {
        let keep = seq_mask(seq);
        let mut first = None;
        for i in 0..self.size() {
            if self.release(i, !keep) {
                first.get_or_insert(i);
            }
        }
        self.lower_head(first);
    }

    /// Shifts positions `[p0, p1)` of `seq` by `delta`; cells that move below
    /// zero are removed. K is re-rotated before the next decode.
    pub fn seq_add(&mut self, seq: SeqId, p0: Pos, p1: Pos, delta: Pos) {
        if delta == 0 || seq < 0 {
            return;
        }
        let mask = seq_mask(seq);
        let mut first = None;
        for i in 0..self.size() {
            let c = self.cells[i];
            if c.seqs & mask != 0 && in_range(c.pos, p0, p1) {
                self.has_shift = true;
                let cell = &mut self.cells[i];
                cell.pos += delta;
                cell.delta += delta;
                if cell.pos < 0 && self.release(i, u64::MAX) {
                    first.get_or_insert(i);
                }
            }
        }
        self.head = first.unwrap_or(0);
    }

    /// Forgets the pending shifts (after K was re-rotated).
    pub fn reset_shift(&mut self) {
        for c in self.cells.iter_mut() {
            c.delta = 0;
        }
        self.has_shift = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seqs(n: usize, s: SeqId) -> Vec<Vec<SeqId>> {
        vec![vec![s]; n]
    }

    #[test]
    fn cells_and_sequences() {
        let mut kv = KvCells::new(8, 0);
        let slots = kv.find_slot(3).unwrap();
        assert_eq!(slots, [0, 1, 2]);
        kv.apply(&slots, &[0, 1, 2], &seqs(3, 0));
        assert_eq!(kv.used, 3);
        assert_eq!(kv.find_slot(5).unwrap(), [3, 4, 5, 6, 7]);
        assert_eq!(kv.find_slot(6), None);
        kv.seq_cp(0, 1, 1, 3);
        assert!(kv.cells()[1].has_seq(1) && !kv.cells()[0].has_seq(1));
        kv.seq_rm(0, 2, -1);
        assert!(kv.cells()[2].has_seq(1) && !kv.cells()[2].has_seq(0));
        assert_eq!(kv.used, 3);
        kv.seq_keep(1);
        assert_eq!(kv.used, 2);
        assert_eq!(kv.seq_pos_max(1), 2);
        assert_eq!(kv.seq_pos_min(1), 1);
        kv.seq_add(1, 0, -1, -2);
        assert!(kv.has_shift);
        assert_eq!(kv.used, 1);
        assert_eq!(kv.cells()[2].pos, 0);
        assert_eq!(kv.cells()[2].delta, -2);
        assert_eq!(kv.cell_max(), 3);
        kv.clear();
        assert_eq!(kv.used, 0);
        assert_eq!(kv.cell_max(), 0);
    }

    #[test]
    fn full_attention_cells_are_never_reused() {
        let mut kv = KvCells::new(4, 0);
        let s = kv.find_slot(4).unwrap();
        kv.apply(&s, &[0, 1, 2, 3], &seqs(4, 0));
        assert_eq!(kv.find_slot(1), None);
    }

    #[test]
    fn window_cells_are_reused_in_a_ring() {
        // Window 3: a token at p sees p-2..=p.
        let mut kv = KvCells::new(6, 3);
        let mut next = 0;
        for _ in 0..5 {
            let s = kv.find_slot(2).expect("slot");
            kv.apply(&s, &[next, next + 1], &seqs(2, 0));
            next += 2;
            // The window of the next token is always whole.
            let have = kv.seq_positions(0);
            for p in (next - 2).max(0)..next {
                assert!(have.contains(&p), "{p} missing from {have:?}");
            }
            assert_eq!(kv.seq_pos_max(0), next - 1);
        }
        assert_eq!(kv.used, 6);
        // Positions stay one unbroken run.
        let have = kv.seq_positions(0);
        assert!(have.windows(2).all(|w| w[1] == w[0] + 1), "{have:?}");
    }

    #[test]
    fn shared_cells_are_not_reused() {
        let mut kv = KvCells::new(4, 1);
        let s = kv.find_slot(2).unwrap();
        kv.apply(&s, &[0, 1], &[vec![0, 1], vec![0, 1]]);
        let s = kv.find_slot(2).unwrap();
        kv.apply(&s, &[2, 3], &seqs(2, 0));
        // Cells 0 and 1 belong to two sequences: only 2 and 3 can be taken.
        assert_eq!(kv.find_slot(3), None);
        kv.seq_rm(1, -1, -1);
        assert_eq!(kv.find_slot(4).unwrap().len(), 4);
    }
}
