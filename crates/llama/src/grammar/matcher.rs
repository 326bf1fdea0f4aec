//! The pushdown matcher of llama.cpp's grammars: a set of stacks of
//! positions in the rules, each ending at a terminal, advanced by the code
//! points (or token ids) a token brings, and the test of candidate tokens
//! against them (`llama_grammar_advance_stack`, `_accept`,
//! `_reject_candidates`).

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use super::rules::{Element, ElementKind as K, Grammar};
use super::utf8::{self, PartialUtf8};

/// A fast hasher for stacks (short lists of small integers): a
/// multiply-rotate mix per word, as FxHash does. Stacks come from the
/// grammar, so hash flooding is not a concern here.
#[derive(Default)]
struct StackHasher(u64);

impl Hasher for StackHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.add(u64::from(b));
        }
    }

    fn write_u32(&mut self, v: u32) {
        self.add(u64::from(v));
    }

    fn write_u64(&mut self, v: u64) {
        self.add(v);
    }

    fn write_usize(&mut self, v: usize) {
        self.add(v as u64);
    }
}

impl StackHasher {
    fn add(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

type StackSet = HashSet<Stack, BuildHasherDefault<StackHasher>>;
type StackMap<V> = HashMap<Stack, V, BuildHasherDefault<StackHasher>>;

/// The stacks each stack advances to (by [`advance_stack`]), remembered
/// across passes over the candidates and accepted tokens: the same stack
/// comes back at every code point of a string or a repetition, and its
/// expansion depends on the grammar alone. Bounded: it starts afresh past
/// [`AdvanceCache::MAX_ENTRIES`] stacks.
#[derive(Debug, Default)]
pub struct AdvanceCache {
    map: StackMap<Arc<[Stack]>>,
    key: Stack,
}

impl AdvanceCache {
    /// The most stacks remembered.
    pub const MAX_ENTRIES: usize = 4096;

    /// The stacks that `stack` with its top replaced by `next` (dropped
    /// when `next` ends an alternative) advances to.
    fn advance_pop_push(&mut self, g: &Grammar, stack: &[u32], next: u32) -> Arc<[Stack]> {
        self.key.clear();
        self.key.extend_from_slice(&stack[..stack.len() - 1]);
        if !ends(g, next) {
            self.key.push(next);
        }
        if let Some(found) = self.map.get(self.key.as_slice()) {
            return Arc::clone(found);
        }
        let mut out = Vec::new();
        advance_stack(g, self.key.clone(), &mut out);
        let out: Arc<[Stack]> = out.into();
        if self.map.len() >= Self::MAX_ENTRIES {
            self.map.clear();
        }
        self.map.insert(self.key.clone(), Arc::clone(&out));
        out
    }
}

/// One stack: positions (indices into the grammar's element list), the
/// top last.
pub type Stack = Vec<u32>;

/// A candidate token being matched: where it is in the caller's list, its
/// id, its code points, how many of them are consumed, and the cut code
/// point at its end.
#[derive(Debug, Clone, Copy)]
pub struct Candidate<'a> {
    /// Index in the caller's candidate list.
    pub index: usize,
    /// The token id.
    pub id: i32,
    /// The token's whole code points.
    pub cps: &'a [u32],
    /// How many of `cps` are consumed.
    pub pos: usize,
    /// The code point left cut at the end of the token.
    pub partial: PartialUtf8,
}

impl Candidate<'_> {
    fn at_end(&self) -> bool {
        self.pos >= self.cps.len()
    }

    fn current(&self) -> u32 {
        self.cps[self.pos]
    }
}

fn elem(g: &Grammar, pos: u32) -> Element {
    g.elements[pos as usize]
}

/// Whether the element at `pos` ends an alternative.
fn ends(g: &Grammar, pos: u32) -> bool {
    elem(g, pos).ends_sequence()
}

/// Expands `stack` into the stacks that end at a terminal (or are empty:
/// the grammar may end there), appending the new ones to `out`.
pub fn advance_stack(g: &Grammar, stack: Stack, out: &mut Vec<Stack>) {
    let mut todo = vec![stack];
    let mut seen = StackSet::default();
    while let Some(cur) = todo.pop() {
        if seen.contains(&cur) {
            continue;
        }
        let Some(&top) = cur.last() else {
            if !out.contains(&cur) {
                out.push(cur.clone());
            }
            seen.insert(cur);
            continue;
        };
        let e = elem(g, top);
        match e.kind {
            K::RuleRef => {
                let mut sub = g.rule_starts[e.value as usize];
                loop {
                    let mut next = Stack::with_capacity(cur.len() + 1);
                    next.extend_from_slice(&cur[..cur.len() - 1]);
                    if !ends(g, top + 1) {
                        next.push(top + 1);
                    }
                    if !ends(g, sub) {
                        next.push(sub);
                    }
                    todo.push(next);
                    while !ends(g, sub) {
                        sub += 1;
                    }
                    if elem(g, sub).kind == K::Alt {
                        sub += 1;
                    } else {
                        break;
                    }
                }
            }
            K::Char | K::CharNot | K::CharAny | K::Token | K::TokenNot => {
                if !out.contains(&cur) {
                    out.push(cur.clone());
                }
            }
            // A stack never rests on the end of an alternative or inside a
            // class; the parser makes no such grammar.
            K::End | K::Alt | K::CharAlt | K::CharRngUpper => {}
        }
        seen.insert(cur);
    }
}

/// Whether `chr` fits the character item at `pos`, and the position after
/// the item.
pub fn match_char(g: &Grammar, mut pos: u32, chr: u32) -> (bool, u32) {
    let first = elem(g, pos);
    let positive = matches!(first.kind, K::Char | K::CharAny);
    let mut found = false;
    loop {
        let e = elem(g, pos);
        let next = elem(g, pos + 1);
        if next.kind == K::CharRngUpper {
            found = found || (e.value <= chr && chr <= next.value);
            pos += 2;
        } else if e.kind == K::CharAny {
            found = true;
            pos += 1;
        } else {
            found = found || e.value == chr;
            pos += 1;
        }
        if elem(g, pos).kind != K::CharAlt {
            break;
        }
    }
    (found == positive, pos)
}

/// The code points below 128 that the character item at `pos` takes, one
/// bit each, and the position after the item: [`match_char`] for ASCII at
/// the cost of one walk over the item.
pub(super) fn ascii_class(g: &Grammar, mut pos: u32) -> (u128, u32) {
    fn span(lo: u32, hi: u32) -> u128 {
        if lo > 127 || lo > hi {
            return 0;
        }
        let width = hi.min(127) - lo + 1;
        (u128::MAX >> (128 - width)) << lo
    }
    let positive = matches!(elem(g, pos).kind, K::Char | K::CharAny);
    let mut mask = 0u128;
    loop {
        let e = elem(g, pos);
        let next = elem(g, pos + 1);
        if next.kind == K::CharRngUpper {
            mask |= span(e.value, next.value);
            pos += 2;
        } else if e.kind == K::CharAny {
            mask = u128::MAX;
            pos += 1;
        } else {
            mask |= span(e.value, e.value);
            pos += 1;
        }
        if elem(g, pos).kind != K::CharAlt {
            break;
        }
    }
    (if positive { mask } else { !mask }, pos)
}

/// Whether some completion of the cut code point `partial` could fit the
/// character item at `pos`.
pub fn match_partial_char(g: &Grammar, mut pos: u32, partial: PartialUtf8) -> bool {
    let positive = matches!(elem(g, pos).kind, K::Char | K::CharAny);
    let value = partial.value;
    let n_remain = partial.n_remain;
    // Invalid sequence, or an overlong 7-bit code point.
    if n_remain < 0 || (n_remain == 1 && value < 2) {
        return false;
    }
    let shift = (n_remain * 6) as u32;
    let mut low = value << shift;
    let high = low | ((1u32 << shift) - 1);
    if low == 0 {
        if n_remain == 2 {
            low = 1 << 11;
        } else if n_remain == 3 {
            low = 1 << 16;
        }
    }
    loop {
        let e = elem(g, pos);
        let next = elem(g, pos + 1);
        if next.kind == K::CharRngUpper {
            if e.value <= high && low <= next.value {
                return positive;
            }
            pos += 2;
        } else if e.kind == K::CharAny {
            return true;
        } else {
            if low <= e.value && e.value <= high {
                return positive;
            }
            pos += 1;
        }
        if elem(g, pos).kind != K::CharAlt {
            break;
        }
    }
    !positive
}

/// Whether `token` fits the token item `e`.
pub fn match_token(e: Element, token: i32) -> bool {
    match e.kind {
        K::Token => e.value == token as u32,
        K::TokenNot => e.value != token as u32,
        _ => false,
    }
}

/// Advances `stack` over the code point `chr`, adding the stacks that
/// accept it to `out` (a stack at a token item takes no code point).
fn accept_chr(
    g: &Grammar,
    stack: &[u32],
    chr: u32,
    out: &mut Distinct,
    cache: &mut AdvanceCache,
) -> Result<(), TooManyStacks> {
    let Some(&top) = stack.last() else {
        return Ok(());
    };
    if elem(g, top).is_token() {
        return Ok(());
    }
    let (ok, after) = match_char(g, top, chr);
    if ok {
        for s in cache.advance_pop_push(g, stack, after).iter() {
            out.push(s)?;
        }
    }
    Ok(())
}

/// The most stacks a matcher keeps alive. Each one costs time at every
/// token and candidate; grammars written for generation keep a handful,
/// and only deeply nested ambiguous repetitions (`x+++…`) multiply them
/// with every token, which would otherwise stall generation.
pub const MAX_STACKS: usize = 10_000;

/// A token would leave more than [`MAX_STACKS`] stacks alive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooManyStacks;

/// Stacks in their first-seen order, each once, at most [`MAX_STACKS`].
#[derive(Default)]
struct Distinct {
    list: Vec<Stack>,
    seen: StackSet,
}

impl Distinct {
    fn push(&mut self, s: &[u32]) -> Result<(), TooManyStacks> {
        if self.seen.contains(s) {
            return Ok(());
        }
        if self.list.len() >= MAX_STACKS {
            return Err(TooManyStacks);
        }
        self.seen.insert(s.to_vec());
        self.list.push(s.to_vec());
        Ok(())
    }
}

/// The candidates that no stack of `stacks` accepts, with the stack
/// expansions remembered in `cache` (which must only ever have seen
/// grammar `g`).
pub fn reject_candidates<'a>(
    g: &Grammar,
    stacks: &[Stack],
    candidates: Vec<Candidate<'a>>,
    cache: &mut AdvanceCache,
) -> Vec<Candidate<'a>> {
    if candidates.is_empty() {
        return candidates;
    }
    let Some((first, rest)) = stacks.split_first() else {
        return candidates;
    };
    let mut rejects = reject_for_stack(g, first, &candidates, cache);
    for s in rest {
        if rejects.is_empty() {
            break;
        }
        rejects = reject_for_stack(g, s, &rejects, cache);
    }
    rejects
}

/// The candidates that `stack` does not accept.
fn reject_for_stack<'a>(
    g: &Grammar,
    stack: &[u32],
    candidates: &[Candidate<'a>],
    cache: &mut AdvanceCache,
) -> Vec<Candidate<'a>> {
    let mut rejects = Vec::with_capacity(candidates.len());
    let Some(&top) = stack.last() else {
        // The grammar is complete: only what brings nothing more fits.
        rejects.extend(
            candidates
                .iter()
                .filter(|t| !t.at_end() || t.partial.n_remain != 0),
        );
        return rejects;
    };
    let top_elem = elem(g, top);
    if top_elem.is_token() {
        for t in candidates {
            if t.at_end() {
                if t.partial.n_remain != 0 {
                    rejects.push(*t);
                }
            } else if !match_token(top_elem, t.id) {
                rejects.push(*t);
            }
        }
        return rejects;
    }
    let (ascii, after) = ascii_class(g, top);
    let takes = |c: u32| {
        if c < 128 {
            ascii >> c & 1 != 0
        } else {
            match_char(g, top, c).0
        }
    };
    let mut next = Vec::with_capacity(candidates.len());
    for t in candidates {
        if t.at_end() {
            if t.partial.n_remain != 0 && !match_partial_char(g, top, t.partial) {
                rejects.push(*t);
            }
        } else if takes(t.current()) {
            next.push(Candidate {
                pos: t.pos + 1,
                ..*t
            });
        } else {
            rejects.push(*t);
        }
    }
    if next.is_empty() {
        return rejects;
    }
    let next_stacks = cache.advance_pop_push(g, stack, after);
    for t in reject_candidates(g, &next_stacks, next, cache) {
        rejects.push(Candidate {
            pos: t.pos - 1,
            ..t
        });
    }
    rejects
}

/// The stacks a grammar starts with: one per alternative of its root rule,
/// advanced to their terminals.
pub fn initial_stacks(g: &Grammar) -> Vec<Stack> {
    let mut stacks = Vec::new();
    let mut pos = g.rule_starts[g.root as usize];
    loop {
        let mut stack = Stack::new();
        if !ends(g, pos) {
            stack.push(pos);
        }
        advance_stack(g, stack, &mut stacks);
        while !ends(g, pos) {
            pos += 1;
        }
        if elem(g, pos).kind == K::Alt {
            pos += 1;
        } else {
            break;
        }
    }
    stacks
}

/// The matcher's state: the live stacks and the code point cut by the end
/// of the last token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MatchState {
    /// The live stacks; an empty stack means the grammar may end here.
    pub stacks: Vec<Stack>,
    /// The code point left cut by the last accepted token.
    pub partial: PartialUtf8,
}

impl MatchState {
    /// The state before any token.
    pub fn new(g: &Grammar) -> Self {
        Self {
            stacks: initial_stacks(g),
            partial: PartialUtf8::default(),
        }
    }

    /// Whether the grammar may end here (some stack is empty).
    pub fn can_end(&self) -> bool {
        self.stacks.iter().any(Vec::is_empty)
    }

    /// Advances the stacks by token `token` with text `piece`, with the
    /// stack expansions remembered in `cache` (which must only ever have
    /// seen grammar `g`). `Ok(false)` when no stack takes it, an error when
    /// it would leave more than [`MAX_STACKS`] stacks; the state is left
    /// as it was in both cases.
    pub fn accept_token(
        &mut self,
        g: &Grammar,
        token: i32,
        piece: &[u8],
        cache: &mut AdvanceCache,
    ) -> Result<bool, TooManyStacks> {
        let (cps, partial) = utf8::decode(piece, self.partial);
        let mut new_stacks = Distinct::default();
        for stack in &self.stacks {
            let Some(&top) = stack.last() else { continue };
            let e = elem(g, top);
            if e.is_token() {
                if match_token(e, token) {
                    for s in cache.advance_pop_push(g, stack, top + 1).iter() {
                        new_stacks.push(s)?;
                    }
                }
                continue;
            }
            let mut current = Distinct::default();
            current.push(stack)?;
            for &c in &cps {
                let mut next = Distinct::default();
                for s in &current.list {
                    accept_chr(g, s, c, &mut next, cache)?;
                }
                current = next;
                if current.list.is_empty() {
                    break;
                }
            }
            for s in &current.list {
                new_stacks.push(s)?;
            }
        }
        if new_stacks.list.is_empty() {
            return Ok(false);
        }
        self.stacks = new_stacks.list;
        self.partial = partial;
        Ok(true)
    }
}
