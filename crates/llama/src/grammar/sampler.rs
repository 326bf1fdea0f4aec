//! The grammar stage of sampling (llama.cpp's grammar sampler): candidates
//! the grammar cannot take get `-inf`, accepted tokens advance the stacks,
//! and a lazy grammar waits for its trigger.

use std::sync::{Arc, Mutex, PoisonError};

use super::error::GrammarError;
use super::matcher::{self, AdvanceCache, Candidate, MatchState};
use super::rules::Grammar;
use super::trigger::{self, GrammarTrigger, TriggerPattern};
use super::utf8::{self, PartialUtf8};
use crate::sampling::{Candidates, Sampler};
use crate::vocab::Vocab;

/// Every token's piece of text (as `token_to_piece(id, special = true)`),
/// its code points decoded from a clean start, and whether it ends
/// generation: what the grammar stage reads of a vocabulary.
#[derive(Debug, Clone, Default)]
pub struct TokenPieces {
    pieces: Vec<Box<[u8]>>,
    /// Code points of each piece decoded from a clean start, cut at the
    /// first NUL byte or code point.
    cps: Vec<Box<[u32]>>,
    tails: Vec<PartialUtf8>,
    eog: Vec<bool>,
}

impl TokenPieces {
    /// The pieces of `vocab`'s tokens.
    pub fn from_vocab(vocab: &Vocab) -> Self {
        let n = vocab.n_tokens();
        let pieces = (0..n)
            .map(|id| vocab.token_to_piece(id as i32, true))
            .collect();
        let eog = (0..n).map(|id| vocab.is_eog(id as i32)).collect();
        Self::build(pieces, eog)
    }

    /// Pieces given by hand (token id = index); `eog` lists the
    /// end-of-generation tokens.
    pub fn new(pieces: Vec<Vec<u8>>, eog: &[i32]) -> Self {
        let mut flags = vec![false; pieces.len()];
        for &t in eog {
            if let Some(f) = usize::try_from(t).ok().and_then(|i| flags.get_mut(i)) {
                *f = true;
            }
        }
        Self::build(pieces, flags)
    }

    fn build(pieces: Vec<Vec<u8>>, eog: Vec<bool>) -> Self {
        let mut cps = Vec::with_capacity(pieces.len());
        let mut tails = Vec::with_capacity(pieces.len());
        for p in &pieces {
            let (mut c, tail) = utf8::decode(p, PartialUtf8::default());
            if let Some(z) = c.iter().position(|&x| x == 0) {
                c.truncate(z);
            }
            cps.push(c.into_boxed_slice());
            tails.push(tail);
        }
        Self {
            pieces: pieces.into_iter().map(Vec::into_boxed_slice).collect(),
            cps,
            tails,
            eog,
        }
    }

    /// The number of tokens.
    pub fn len(&self) -> usize {
        self.pieces.len()
    }

    /// Whether there is no token.
    pub fn is_empty(&self) -> bool {
        self.pieces.is_empty()
    }

    /// Token `id`'s piece (empty for an id outside the vocabulary).
    pub fn piece(&self, id: i32) -> &[u8] {
        usize::try_from(id)
            .ok()
            .and_then(|i| self.pieces.get(i))
            .map_or(&[], |p| p)
    }

    /// Whether token `id` ends generation.
    pub fn is_eog(&self, id: i32) -> bool {
        usize::try_from(id)
            .ok()
            .and_then(|i| self.eog.get(i))
            .copied()
            .unwrap_or(false)
    }

    /// The ids of tokens whose piece is exactly `text`.
    fn find(&self, text: &str) -> Vec<i32> {
        self.pieces
            .iter()
            .position(|p| **p == *text.as_bytes())
            .map(|i| vec![i as i32])
            .unwrap_or_default()
    }
}

/// The state of a lazy grammar before its trigger.
#[derive(Debug, Clone, Default)]
struct Lazy {
    awaiting: bool,
    /// The output so far, while awaiting.
    buffer: Vec<u8>,
    /// Each buffered token with its byte range in `buffer`.
    positions: Vec<(i32, usize, usize)>,
}

/// The grammar sampler stage: sets the logit of every candidate the
/// grammar cannot take to `-inf` (end-of-generation tokens only where the
/// grammar may end; tokens with empty pieces always), and advances the
/// grammar by each accepted token. A lazy grammar constrains nothing until
/// a trigger word, token or pattern appears; the text from the trigger on
/// is then fed to the grammar.
#[derive(Debug, Clone)]
pub struct GrammarSampler {
    grammar: Arc<Grammar>,
    tokens: Arc<TokenPieces>,
    state: MatchState,
    start: MatchState,
    lazy: bool,
    waiting: Lazy,
    trigger_tokens: Vec<i32>,
    trigger_patterns: Vec<TriggerPattern>,
    /// Set when an accepted token did not fit; the stage then rejects
    /// every candidate.
    failed: Option<GrammarError>,
    /// Stack expansions of this grammar, shared by the stage's clones.
    advance: Arc<Mutex<AdvanceCache>>,
}

impl Grammar {
    /// Parses GBNF `text` (start rule `root`) without a vocabulary: token
    /// references must be written `<[id]>`.
    pub fn parse(text: &str) -> Result<Self, GrammarError> {
        super::parse::parse(text, "root", None)
    }

    /// Parses GBNF `text`, resolving `<text>` token references with
    /// `vocab` (each must be exactly one token).
    pub fn parse_with_vocab(text: &str, vocab: &Vocab) -> Result<Self, GrammarError> {
        let tokenize = |s: &str| vocab.tokenize(s, false, true);
        super::parse::parse(text, "root", Some(&tokenize))
    }

    /// Parses GBNF `text`, resolving `<text>` token references to the
    /// token whose piece is exactly that text.
    pub fn parse_with_pieces(text: &str, tokens: &TokenPieces) -> Result<Self, GrammarError> {
        let tokenize = |s: &str| tokens.find(s);
        super::parse::parse(text, "root", Some(&tokenize))
    }
}

impl GrammarSampler {
    /// The stage for GBNF `text` over `vocab`, constraining from the first
    /// token.
    pub fn new(text: &str, vocab: &Vocab) -> Result<Self, GrammarError> {
        Self::from_vocab(text, vocab, false, &[])
    }

    /// The stage for GBNF `text` over `vocab`; when `lazy`, it waits for
    /// one of `triggers` (at least one is needed).
    pub fn from_vocab(
        text: &str,
        vocab: &Vocab,
        lazy: bool,
        triggers: &[GrammarTrigger],
    ) -> Result<Self, GrammarError> {
        let grammar = Grammar::parse_with_vocab(text, vocab)?;
        Self::with_tokens(
            Arc::new(grammar),
            Arc::new(TokenPieces::from_vocab(vocab)),
            lazy,
            triggers,
        )
    }

    /// The stage for a parsed grammar over the given token pieces.
    pub fn with_tokens(
        grammar: Arc<Grammar>,
        tokens: Arc<TokenPieces>,
        lazy: bool,
        triggers: &[GrammarTrigger],
    ) -> Result<Self, GrammarError> {
        let (trigger_tokens, trigger_patterns) = trigger::compile(triggers)?;
        if lazy && triggers.is_empty() {
            return Err(GrammarError::NoTriggers);
        }
        let start = MatchState::new(&grammar);
        Ok(Self {
            grammar,
            tokens,
            state: start.clone(),
            start,
            lazy,
            waiting: Lazy {
                awaiting: lazy,
                ..Lazy::default()
            },
            trigger_tokens,
            trigger_patterns,
            failed: None,
            advance: Arc::default(),
        })
    }

    /// The token pieces the stage reads.
    pub fn tokens(&self) -> &TokenPieces {
        &self.tokens
    }

    /// The grammar.
    pub fn grammar(&self) -> &Grammar {
        &self.grammar
    }

    /// Whether a lazy grammar still waits for its trigger.
    pub fn awaiting_trigger(&self) -> bool {
        self.waiting.awaiting
    }

    /// The trigger patterns as regular expressions (words escaped, full
    /// patterns anchored), as llama.cpp holds them.
    pub fn trigger_patterns(&self) -> Vec<&str> {
        self.trigger_patterns.iter().map(|p| p.pattern()).collect()
    }

    /// Whether the grammar may end here.
    pub fn can_end(&self) -> bool {
        self.state.can_end()
    }

    /// The error of the last accepted token that did not fit, if any.
    pub fn error(&self) -> Option<&GrammarError> {
        self.failed.as_ref()
    }

    /// Advances the grammar by an accepted token (`llama_grammar_accept_impl`).
    /// A token the grammar cannot take is an error and leaves the grammar
    /// as it was.
    pub fn try_accept(&mut self, token: i32) -> Result<(), GrammarError> {
        let tokens = Arc::clone(&self.tokens);
        if usize::try_from(token).map_or(true, |t| t >= tokens.len()) {
            return Err(GrammarError::Rejected {
                token,
                piece: String::new(),
            });
        }
        let piece = tokens.piece(token);
        if self.waiting.awaiting {
            if self.trigger_tokens.contains(&token) {
                self.waiting.awaiting = false;
                self.waiting.buffer.clear();
                return self.accept_piece(token, piece);
            }
            let w = &mut self.waiting;
            let start = w.buffer.len();
            w.positions.push((token, start, start + piece.len()));
            w.buffer.extend_from_slice(piece);
            let found = self
                .trigger_patterns
                .iter()
                .find_map(|p| p.find(&self.waiting.buffer));
            if let Some(at) = found {
                let buffer = std::mem::take(&mut self.waiting.buffer);
                let positions = std::mem::take(&mut self.waiting.positions);
                self.waiting.awaiting = false;
                // Replay the tokens that overlap the text from the trigger
                // on, the first one cut where the trigger starts.
                for (tok, s, e) in positions {
                    if e <= at {
                        continue;
                    }
                    self.accept_piece(tok, &buffer[s.max(at)..e])?;
                }
            }
            return Ok(());
        }
        if tokens.is_eog(token) {
            return if self.state.can_end() {
                Ok(())
            } else {
                Err(GrammarError::EarlyEnd(token))
            };
        }
        self.accept_piece(token, piece)
    }

    fn accept_piece(&mut self, token: i32, piece: &[u8]) -> Result<(), GrammarError> {
        let mut cache = self.advance.lock().unwrap_or_else(PoisonError::into_inner);
        match self
            .state
            .accept_token(&self.grammar, token, piece, &mut cache)
        {
            Ok(true) => Ok(()),
            Ok(false) => Err(GrammarError::Rejected {
                token,
                piece: String::from_utf8_lossy(piece).into_owned(),
            }),
            Err(matcher::TooManyStacks) => Err(GrammarError::TooAmbiguous {
                token,
                limit: matcher::MAX_STACKS,
            }),
        }
    }

    /// Sets the logit of each candidate the grammar cannot take to `-inf`
    /// (`llama_grammar_apply_impl`); candidates already at `-inf` are left
    /// as they are.
    pub fn constrain(&self, cands: &mut Candidates) {
        if self.waiting.awaiting {
            return;
        }
        if self.failed.is_some() {
            cands
                .data
                .iter_mut()
                .for_each(|t| t.logit = f32::NEG_INFINITY);
            return;
        }
        let g = &*self.grammar;
        let allow_eog = self.state.can_end();
        let partial = self.state.partial;
        let clean = partial.n_remain == 0;
        // Pieces decoded from a cut code point (only when the last token
        // left one); from a clean start the pieces decoded once are read.
        let mut decoded: Vec<(usize, Vec<u32>, PartialUtf8)> = Vec::new();
        let mut list: Vec<Candidate<'_>> = Vec::with_capacity(cands.data.len());
        for (i, t) in cands.data.iter_mut().enumerate() {
            if t.logit == f32::NEG_INFINITY {
                continue;
            }
            if self.tokens.is_eog(t.id) {
                if !allow_eog {
                    t.logit = f32::NEG_INFINITY;
                }
                continue;
            }
            let piece = self.tokens.piece(t.id);
            if piece.first().is_none_or(|&b| b == 0) {
                t.logit = f32::NEG_INFINITY;
                continue;
            }
            if clean {
                // In range: the piece is not empty.
                let k = t.id as usize;
                list.push(Candidate {
                    index: i,
                    id: t.id,
                    cps: &self.tokens.cps[k],
                    pos: 0,
                    partial: self.tokens.tails[k],
                });
            } else {
                let (mut cps, tail) = utf8::decode(piece, partial);
                if let Some(z) = cps.iter().position(|&x| x == 0) {
                    cps.truncate(z);
                }
                decoded.push((i, cps, tail));
            }
        }
        for (i, cps, tail) in &decoded {
            list.push(Candidate {
                index: *i,
                id: cands.data[*i].id,
                cps,
                pos: 0,
                partial: *tail,
            });
        }
        let mut cache = self.advance.lock().unwrap_or_else(PoisonError::into_inner);
        for r in matcher::reject_candidates(g, &self.state.stacks, list, &mut cache) {
            cands.data[r.index].logit = f32::NEG_INFINITY;
        }
    }

    /// Back to the state before any token.
    pub fn restart(&mut self) {
        self.state = self.start.clone();
        self.waiting = Lazy {
            awaiting: self.lazy,
            ..Lazy::default()
        };
        self.failed = None;
    }
}

impl Sampler for GrammarSampler {
    fn name(&self) -> &str {
        "grammar"
    }

    fn apply(&mut self, cands: &mut Candidates) {
        self.constrain(cands);
    }

    fn accept(&mut self, token: i32) {
        if self.failed.is_none() {
            if let Err(e) = self.try_accept(token) {
                self.failed = Some(e);
            }
        }
    }

    fn reset(&mut self) {
        self.restart();
    }
}
