//! Token sampling: a chain of samplers with llama.cpp's semantics
//! (`llama_sampler_chain_*` and `common_sampler`).
//!
//! A [`Candidates`] list is built from one row of logits; each [`Sampler`] of
//! a [`SamplerChain`] reshapes it (penalties, temperature), filters it (top-k,
//! top-p, min-p, typical) or picks a token from it (greedy, dist).
//! [`SamplerChain::from_params`] builds llama.cpp's default chain from
//! [`SamplingParams`]; [`SamplerChain::from_params_with_vocab`] adds the
//! grammar stage ([`crate::grammar`]) when the parameters hold a grammar.
//!
//! Where llama.cpp leaves a case undefined (NaN logits, empty lists), this
//! module picks a safe answer instead: a NaN logit counts as `-inf`, and an
//! empty list selects nothing.

#[cfg(test)]
mod chain_tests;
mod rng;
mod samplers;
#[cfg(test)]
mod tests;

pub use rng::{resolve_seed, Mt19937, DEFAULT_SEED};

use crate::grammar::{GrammarError, GrammarSampler, GrammarTrigger, TokenPieces};
use crate::vocab::Vocab;
pub use samplers::{Dist, Greedy, LogitBias, MinP, Penalties, Temp, TempExt, TopK, TopP, Typical};

/// The "no token" value (`LLAMA_TOKEN_NULL`), returned when nothing can be
/// sampled.
pub const TOKEN_NULL: i32 = -1;

/// One candidate token: its id, logit and (once computed) probability.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenData {
    /// The token id.
    pub id: i32,
    /// The (possibly reshaped) logit.
    pub logit: f32,
    /// The probability, valid after a softmax.
    pub p: f32,
}

/// The candidate list samplers work on (`llama_token_data_array`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Candidates {
    /// The candidates still in the running.
    pub data: Vec<TokenData>,
    /// The index into `data` of the chosen candidate, once a sampler chose.
    pub selected: Option<usize>,
    /// Whether `data` is sorted by descending logit.
    pub sorted: bool,
}

impl Candidates {
    /// One candidate per logit, token id = index; NaN logits become `-inf`.
    pub fn from_logits(logits: &[f32]) -> Self {
        let mut c = Self::default();
        c.fill_from_logits(logits);
        c
    }

    /// Refills the list from `logits`, reusing its allocation.
    pub fn fill_from_logits(&mut self, logits: &[f32]) {
        self.data.clear();
        // The inclusive range stops at i32::MAX instead of overflowing.
        self.data
            .extend(logits.iter().zip(0..=i32::MAX).map(|(&l, id)| TokenData {
                id,
                logit: logit_key(l),
                p: 0.0,
            }));
        self.selected = None;
        self.sorted = false;
    }

    /// The number of candidates.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// Whether no candidate is left.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The token id of the selected candidate, if any.
    pub fn selected_token(&self) -> Option<i32> {
        self.selected.and_then(|i| self.data.get(i)).map(|t| t.id)
    }

    /// Sorts by descending logit (ties: ascending id).
    pub fn sort(&mut self) {
        if !self.sorted {
            let n = self.data.len();
            sort_top(&mut self.data, n);
            self.sorted = true;
        }
    }

    /// Sorts, then sets `p` to the softmax of the logits.
    pub fn softmax(&mut self) {
        self.sort();
        self.softmax_unsorted();
    }

    /// Sets `p` to the softmax of the logits, leaving the order as it is.
    pub fn softmax_unsorted(&mut self) {
        if self.data.is_empty() {
            return;
        }
        let max_l = if self.sorted {
            logit_key(self.data[0].logit)
        } else {
            max_logit(&self.data)
        };
        let mut sum = 0.0f32;
        for t in &mut self.data {
            t.p = exp_rel(t.logit, max_l);
            sum += t.p;
        }
        if sum > 0.0 {
            self.data.iter_mut().for_each(|t| t.p /= sum);
        } else {
            let uniform = 1.0 / self.data.len() as f32;
            self.data.iter_mut().for_each(|t| t.p = uniform);
        }
    }
}

/// A logit as a sort key: NaN counts as `-inf`.
fn logit_key(l: f32) -> f32 {
    if l.is_nan() {
        f32::NEG_INFINITY
    } else {
        l
    }
}

/// The largest logit (NaN counting as `-inf`); `-inf` for an empty list.
fn max_logit(data: &[TokenData]) -> f32 {
    data.iter()
        .fold(f32::NEG_INFINITY, |m, t| m.max(logit_key(t.logit)))
}

/// `exp(l - max)`, with `l == max` giving 1 even when both are infinite, and
/// NaN giving 0; equal to the plain formula for finite logits.
fn exp_rel(l: f32, max: f32) -> f32 {
    if l == max {
        return 1.0;
    }
    let e = (l - max).exp();
    if e.is_nan() {
        0.0
    } else {
        e
    }
}

/// The candidates' order as one integer: ascending key = descending logit
/// (NaN as `-inf`, `-0` as `0`), then ascending id. A total order, so a
/// partial sort followed by a full one agrees with a full sort; integer keys
/// also sort several times faster than float comparisons.
fn order_key(t: &TokenData) -> u64 {
    const SIGN: u32 = 0x8000_0000;
    let l = logit_key(t.logit);
    let l = if l == 0.0 { 0.0 } else { l };
    let bits = l.to_bits();
    // Monotone map of the float onto u32, inverted for descending order.
    let ord = if bits & SIGN != 0 { !bits } else { bits | SIGN };
    // Flipping the sign bit maps i32 onto u32 monotonically.
    let id = (t.id as u32) ^ SIGN;
    (u64::from(!ord) << 32) | u64::from(id)
}

/// Moves the `k` first candidates in [`order_key`] order to the front,
/// sorted; the rest follow in no particular order.
fn sort_top(data: &mut [TokenData], k: usize) {
    let k = k.min(data.len());
    if k == 0 {
        return;
    }
    if k < data.len() {
        data.select_nth_unstable_by_key(k - 1, order_key);
    }
    data[..k].sort_unstable_by_key(order_key);
}

/// One step of a sampling chain (`llama_sampler_i`).
pub trait Sampler: Send {
    /// The sampler's name, as llama.cpp prints it.
    fn name(&self) -> &str;

    /// Reshapes, filters or picks from the candidates.
    fn apply(&mut self, cands: &mut Candidates);

    /// Records a token that was accepted into the sequence.
    fn accept(&mut self, _token: i32) {}

    /// Forgets the accepted tokens and restarts random streams.
    fn reset(&mut self) {}

    /// The seed in use, for samplers that draw random numbers.
    fn seed(&self) -> Option<u32> {
        None
    }
}

/// Samplers applied in order (`llama_sampler_chain`), ending in one that
/// selects a token, with an optional grammar stage beside them placed as
/// llama.cpp's `common_sampler` places it (see [`sample`](Self::sample)).
#[derive(Default)]
pub struct SamplerChain {
    samplers: Vec<Box<dyn Sampler>>,
    cur: Candidates,
    grammar: Option<GrammarSampler>,
    /// Built by [`from_params`](Self::from_params) for settings whose chain
    /// always selects the arg-max: `sample` then scans the logits instead
    /// of building and filtering the candidate list (same token).
    argmax: bool,
}

impl std::fmt::Debug for SamplerChain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SamplerChain")
            .field("samplers", &self.names())
            .field("grammar", &self.grammar.is_some())
            .finish_non_exhaustive()
    }
}

impl SamplerChain {
    /// An empty chain.
    pub fn new() -> Self {
        Self::default()
    }

    /// The chain of `common_sampler`: logit bias (when any), then the samplers
    /// of `params.samplers` in order (by default penalties, top-k, typical,
    /// top-p, min-p, temperature), then dist. With `temp <= 0` the temperature
    /// step keeps only the largest logit, so dist returns the arg-max.
    ///
    /// The grammar fields of `params` need the vocabulary and are not read
    /// here: use [`from_params_with_vocab`](Self::from_params_with_vocab).
    pub fn from_params(params: &SamplingParams, n_vocab: usize) -> Self {
        let mut chain = Self::new();
        if !params.logit_bias.is_empty() {
            chain.add(LogitBias::new(n_vocab, params.logit_bias.clone()));
        }
        for kind in &params.samplers {
            match kind {
                SamplerKind::Penalties => chain.add(Penalties::new(
                    params.penalty_last_n,
                    params.penalty_repeat,
                    params.penalty_freq,
                    params.penalty_present,
                )),
                SamplerKind::TopK => chain.add(TopK::new(params.top_k)),
                SamplerKind::Typical => chain.add(Typical::new(params.typ_p, params.min_keep)),
                SamplerKind::TopP => chain.add(TopP::new(params.top_p, params.min_keep)),
                SamplerKind::MinP => chain.add(MinP::new(params.min_p, params.min_keep)),
                SamplerKind::Temperature => chain.add(TempExt::new(
                    params.temp,
                    params.dynatemp_range,
                    params.dynatemp_exponent,
                )),
            };
        }
        chain.add(Dist::new(params.seed));
        chain.argmax = always_argmax(params);
        chain
    }

    /// The chain of [`from_params`](Self::from_params) for a model's
    /// vocabulary, with the grammar stage when `params.grammar` is not
    /// empty (lazy, waiting for `params.grammar_triggers`, when
    /// `params.grammar_lazy`). A grammar that does not parse is an error.
    pub fn from_params_with_vocab(
        params: &SamplingParams,
        vocab: &Vocab,
    ) -> Result<Self, GrammarError> {
        let mut chain = Self::from_params(params, vocab.n_tokens());
        if !params.grammar.is_empty() {
            chain.grammar = Some(GrammarSampler::from_vocab(
                &params.grammar,
                vocab,
                params.grammar_lazy,
                &params.grammar_triggers,
            )?);
        }
        Ok(chain)
    }

    /// [`from_params_with_vocab`](Self::from_params_with_vocab) with the
    /// vocabulary's token pieces already built (`tokens` is
    /// `TokenPieces::from_vocab(vocab)`, kept by a caller that builds many
    /// chains, such as a server).
    pub fn from_params_with_tokens(
        params: &SamplingParams,
        vocab: &Vocab,
        tokens: &std::sync::Arc<TokenPieces>,
    ) -> Result<Self, GrammarError> {
        let mut chain = Self::from_params(params, vocab.n_tokens());
        if !params.grammar.is_empty() {
            let grammar = crate::grammar::Grammar::parse_with_vocab(&params.grammar, vocab)?;
            chain.grammar = Some(GrammarSampler::with_tokens(
                std::sync::Arc::new(grammar),
                std::sync::Arc::clone(tokens),
                params.grammar_lazy,
                &params.grammar_triggers,
            )?);
        }
        Ok(chain)
    }

    /// Sets (or removes) the grammar stage.
    pub fn set_grammar(&mut self, grammar: Option<GrammarSampler>) -> &mut Self {
        self.grammar = grammar;
        self
    }

    /// Takes the grammar stage (if any) back to its start, leaving the
    /// other samplers as they are.
    pub fn restart_grammar(&mut self) {
        if let Some(g) = &mut self.grammar {
            g.restart();
        }
    }

    /// The grammar stage, if any.
    pub fn grammar(&self) -> Option<&GrammarSampler> {
        self.grammar.as_ref()
    }

    /// Appends a sampler.
    pub fn add(&mut self, sampler: impl Sampler + 'static) -> &mut Self {
        self.samplers.push(Box::new(sampler));
        self.argmax = false;
        self
    }

    /// The number of samplers.
    pub fn len(&self) -> usize {
        self.samplers.len()
    }

    /// Whether the chain has no sampler.
    pub fn is_empty(&self) -> bool {
        self.samplers.is_empty()
    }

    /// The `i`-th sampler.
    pub fn get(&self, i: usize) -> Option<&dyn Sampler> {
        self.samplers.get(i).map(|s| s.as_ref())
    }

    /// Takes the `i`-th sampler out of the chain.
    pub fn remove(&mut self, i: usize) -> Option<Box<dyn Sampler>> {
        self.argmax = false;
        (i < self.samplers.len()).then(|| self.samplers.remove(i))
    }

    /// The samplers' names, in order.
    pub fn names(&self) -> Vec<&str> {
        self.samplers.iter().map(|s| s.name()).collect()
    }

    /// Applies every sampler in order.
    pub fn apply(&mut self, cands: &mut Candidates) {
        for s in &mut self.samplers {
            s.apply(cands);
        }
    }

    /// Passes a generated token to the grammar stage and every sampler.
    /// A token the grammar cannot take is kept as the grammar's error (see
    /// [`try_accept`](Self::try_accept), which returns it).
    pub fn accept(&mut self, token: i32) {
        if let Some(g) = &mut self.grammar {
            Sampler::accept(g, token);
        }
        self.accept_prompt(token);
    }

    /// Passes a generated token to the grammar stage and every sampler
    /// (`common_sampler_accept(.., true)`); a token the grammar cannot take
    /// is an error, and the grammar stays as it was.
    pub fn try_accept(&mut self, token: i32) -> Result<(), GrammarError> {
        if let Some(g) = &mut self.grammar {
            g.try_accept(token)?;
        }
        self.accept_prompt(token);
        Ok(())
    }

    /// Passes a token of the prompt to the samplers only: the grammar
    /// constrains what is generated, not the prompt
    /// (`common_sampler_accept(.., false)`).
    pub fn accept_prompt(&mut self, token: i32) {
        for s in &mut self.samplers {
            s.accept(token);
        }
    }

    /// Resets every sampler and the grammar stage.
    pub fn reset(&mut self) {
        for s in &mut self.samplers {
            s.reset();
        }
        if let Some(g) = &mut self.grammar {
            g.restart();
        }
    }

    /// The seed of the last sampler that has one (`llama_sampler_get_seed`),
    /// or [`DEFAULT_SEED`].
    pub fn seed(&self) -> u32 {
        self.samplers
            .iter()
            .rev()
            .filter_map(|s| s.seed())
            .find(|&s| s != DEFAULT_SEED)
            .unwrap_or(DEFAULT_SEED)
    }

    /// Samples a token from one row of logits (`common_sampler_sample`):
    /// builds the candidates, applies the chain and returns the selected id,
    /// or [`TOKEN_NULL`] when nothing was selected (no logits, or no selecting
    /// sampler in the chain). The token is not accepted: call
    /// [`accept`](Self::accept) with the token kept.
    ///
    /// With a grammar stage, as llama.cpp: the chain samples first; when the
    /// grammar takes that token it is the answer, else the candidates are
    /// rebuilt, the grammar sets those it cannot take to `-inf`, and the
    /// chain samples again.
    pub fn sample(&mut self, logits: &[f32]) -> i32 {
        if self.argmax && self.grammar.is_none() {
            if let Some(id) = argmax(logits) {
                return id;
            }
        }
        self.cur.fill_from_logits(logits);
        for s in &mut self.samplers {
            s.apply(&mut self.cur);
        }
        let id = self.cur.selected_token().unwrap_or(TOKEN_NULL);
        let Some(grammar) = &self.grammar else {
            return id;
        };
        if id != TOKEN_NULL {
            let mut one = Candidates {
                data: vec![TokenData {
                    id,
                    logit: 1.0,
                    p: 0.0,
                }],
                selected: None,
                sorted: false,
            };
            grammar.constrain(&mut one);
            if one.data[0].logit != f32::NEG_INFINITY {
                return id;
            }
        }
        self.cur.fill_from_logits(logits);
        grammar.constrain(&mut self.cur);
        for s in &mut self.samplers {
            s.apply(&mut self.cur);
        }
        self.cur.selected_token().unwrap_or(TOKEN_NULL)
    }

    /// The candidates as the last [`sample`](Self::sample) left them, with
    /// their probabilities (for printing the top choices).
    pub fn candidates(&self) -> &Candidates {
        &self.cur
    }
}

impl Sampler for SamplerChain {
    fn name(&self) -> &str {
        "chain"
    }

    fn apply(&mut self, cands: &mut Candidates) {
        SamplerChain::apply(self, cands);
    }

    fn accept(&mut self, token: i32) {
        SamplerChain::accept(self, token);
    }

    fn reset(&mut self) {
        SamplerChain::reset(self);
    }

    fn seed(&self) -> Option<u32> {
        Some(SamplerChain::seed(self))
    }
}

/// The configurable samplers of the default chain, in the order given by
/// `--samplers` / `--sampling-seq`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SamplerKind {
    /// Repeat, frequency and presence penalties.
    Penalties,
    /// Top-k.
    TopK,
    /// Locally typical.
    Typical,
    /// Top-p (nucleus).
    TopP,
    /// Min-p.
    MinP,
    /// Temperature, with dynamic temperature.
    Temperature,
}

impl SamplerKind {
    /// llama.cpp's default order (DRY, top-n-sigma and XTC are not built here).
    pub const DEFAULT_ORDER: [SamplerKind; 6] = [
        SamplerKind::Penalties,
        SamplerKind::TopK,
        SamplerKind::Typical,
        SamplerKind::TopP,
        SamplerKind::MinP,
        SamplerKind::Temperature,
    ];

    /// The canonical name, as llama.cpp prints it.
    pub fn name(self) -> &'static str {
        match self {
            SamplerKind::Penalties => "penalties",
            SamplerKind::TopK => "top_k",
            SamplerKind::Typical => "typ_p",
            SamplerKind::TopP => "top_p",
            SamplerKind::MinP => "min_p",
            SamplerKind::Temperature => "temperature",
        }
    }

    /// Parses a name as `--samplers` takes it (canonical names and the usual
    /// aliases).
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "penalties" => SamplerKind::Penalties,
            "top_k" | "top-k" => SamplerKind::TopK,
            "typ_p" | "typ-p" | "typ" | "typical_p" | "typical-p" | "typical" => {
                SamplerKind::Typical
            }
            "top_p" | "top-p" | "nucleus" => SamplerKind::TopP,
            "min_p" | "min-p" => SamplerKind::MinP,
            "temperature" | "temp" => SamplerKind::Temperature,
            _ => return None,
        })
    }

    /// Parses one letter of `--sampling-seq` (`e k y p m t`).
    pub fn from_char(c: char) -> Option<Self> {
        Some(match c {
            'e' => SamplerKind::Penalties,
            'k' => SamplerKind::TopK,
            'y' => SamplerKind::Typical,
            'p' => SamplerKind::TopP,
            'm' => SamplerKind::MinP,
            't' => SamplerKind::Temperature,
            _ => return None,
        })
    }
}

/// Whether the chain of `params` always selects the arg-max of the logits
/// (the first on ties, NaN below everything): a temperature step at or
/// below 0 without dynamic range keeps only the largest logit, and every
/// step before it keeps the largest (top-k, top-p, min-p) or is off
/// (typical at 1, neutral penalties, no logit bias).
fn always_argmax(params: &SamplingParams) -> bool {
    let greedy_temp = params.temp.is_nan() || params.temp <= 0.0;
    let no_dynatemp = params.dynatemp_range.is_nan() || params.dynatemp_range <= 0.0;
    let neutral_penalties = params.penalty_last_n == 0
        || (params.penalty_repeat == 1.0
            && params.penalty_freq == 0.0
            && params.penalty_present == 0.0);
    let keeps_max = |k: &SamplerKind| match k {
        SamplerKind::Typical => params.typ_p >= 1.0,
        SamplerKind::Penalties => neutral_penalties,
        _ => true,
    };
    greedy_temp
        && no_dynatemp
        && params.logit_bias.is_empty()
        && params.samplers.contains(&SamplerKind::Temperature)
        && params.samplers.iter().all(keeps_max)
}

/// Index of the largest logit, the first of equal ones, NaN counting as
/// `-inf`; None when no logit is above `-inf` (the chain then draws among
/// equals).
fn argmax(logits: &[f32]) -> Option<i32> {
    let mut best = 0;
    let mut max = f32::NEG_INFINITY;
    for (i, &l) in logits.iter().enumerate() {
        if logit_key(l) > max {
            max = l;
            best = i;
        }
    }
    (max > f32::NEG_INFINITY).then_some(best as i32)
}

/// Sampling settings, named and defaulted as llama.cpp's
/// `common_params_sampling`.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    /// RNG seed; [`DEFAULT_SEED`] picks a random one.
    pub seed: u32,
    /// Temperature; `<= 0` samples the arg-max.
    pub temp: f32,
    /// Top-k; `<= 0` keeps all.
    pub top_k: i32,
    /// Top-p; `1.0` disables.
    pub top_p: f32,
    /// Min-p; `0.0` disables.
    pub min_p: f32,
    /// Locally typical p; `1.0` disables.
    pub typ_p: f32,
    /// How many last tokens the penalties look at; 0 disables, -1 means the
    /// context size (see [`with_n_ctx`](Self::with_n_ctx)).
    pub penalty_last_n: i32,
    /// Repeat penalty; `1.0` disables.
    pub penalty_repeat: f32,
    /// Frequency penalty; `0.0` disables.
    pub penalty_freq: f32,
    /// Presence penalty; `0.0` disables.
    pub penalty_present: f32,
    /// Dynamic temperature range; `0.0` disables.
    pub dynatemp_range: f32,
    /// Dynamic temperature exponent.
    pub dynatemp_exponent: f32,
    /// The fewest candidates top-p, min-p and typical keep (0: no minimum).
    pub min_keep: usize,
    /// Biases added to token logits, as (token, bias).
    pub logit_bias: Vec<(i32, f32)>,
    /// The order of the configurable samplers.
    pub samplers: Vec<SamplerKind>,
    /// A GBNF grammar the output must follow; empty for none.
    pub grammar: String,
    /// Whether the grammar waits for one of `grammar_triggers` before
    /// constraining anything.
    pub grammar_lazy: bool,
    /// What starts a lazy grammar.
    pub grammar_triggers: Vec<GrammarTrigger>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            seed: DEFAULT_SEED,
            temp: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            typ_p: 1.0,
            penalty_last_n: 64,
            penalty_repeat: 1.0,
            penalty_freq: 0.0,
            penalty_present: 0.0,
            dynatemp_range: 0.0,
            dynatemp_exponent: 1.0,
            min_keep: 0,
            logit_bias: Vec::new(),
            samplers: SamplerKind::DEFAULT_ORDER.to_vec(),
            grammar: String::new(),
            grammar_lazy: false,
            grammar_triggers: Vec::new(),
        }
    }
}

impl SamplingParams {
    /// Resolves `penalty_last_n == -1` to the context size, as llama.cpp's
    /// common setup does once the context exists.
    pub fn with_n_ctx(mut self, n_ctx: u32) -> Self {
        if self.penalty_last_n == -1 {
            self.penalty_last_n = i32::try_from(n_ctx).unwrap_or(i32::MAX);
        }
        self
    }
}
