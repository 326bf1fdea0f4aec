//! The samplers: each one reshapes, filters or picks from a [`Candidates`]
//! list the way the llama.cpp sampler of the same name does.

use std::collections::{HashMap, VecDeque};

use super::rng::{resolve_seed, Mt19937};
use super::{exp_rel, logit_key, max_logit, sort_top, Candidates, Sampler, TokenData};

/// Candidate lists larger than this are first sorted only partly by top-p.
const TOP_P_PARTIAL_SORT_MIN: usize = 1024;
/// How many candidates top-p sorts first on a large unsorted list.
const TOP_P_PARTIAL_SORT_K: usize = 256;

/// Keeps only the largest logit when `temp` is not positive (the others become
/// `-inf`, ties keep the first), else divides every logit by `temp`.
fn apply_temp(data: &mut [TokenData], temp: f32) {
    // A NaN temperature takes the arg-max branch too.
    if temp.is_nan() || temp <= 0.0 {
        let Some(first) = data.first() else { return };
        let mut max_i = 0;
        let mut max_l = logit_key(first.logit);
        for i in 1..data.len() {
            let l = logit_key(data[i].logit);
            if l > max_l {
                data[max_i].logit = f32::NEG_INFINITY;
                max_i = i;
                max_l = l;
            } else {
                data[i].logit = f32::NEG_INFINITY;
            }
        }
        return;
    }
    for t in data {
        t.logit /= temp;
    }
}

/// Whether every candidate's id equals its index, as in a list fresh from
/// [`Candidates::from_logits`].
fn is_vocab_order(data: &[TokenData]) -> bool {
    data.iter().zip(0..=i32::MAX).all(|(t, i)| t.id == i) && i32::try_from(data.len()).is_ok()
}

/// Selects the candidate with the largest logit; ties go to the lowest index.
#[derive(Debug, Clone, Default)]
pub struct Greedy;

impl Greedy {
    /// A greedy sampler.
    pub fn new() -> Self {
        Self
    }
}

impl Sampler for Greedy {
    fn name(&self) -> &str {
        "greedy"
    }

    fn apply(&mut self, cands: &mut Candidates) {
        let Some(first) = cands.data.first() else {
            cands.selected = None;
            return;
        };
        let mut best = 0;
        let mut best_l = logit_key(first.logit);
        for (i, t) in cands.data.iter().enumerate().skip(1) {
            if logit_key(t.logit) > best_l {
                best = i;
                best_l = logit_key(t.logit);
            }
        }
        cands.selected = Some(best);
    }
}

/// Draws a candidate at random from the softmax of the logits, with a seeded
/// MT19937; also leaves the normalised probabilities in `p`.
#[derive(Debug, Clone)]
pub struct Dist {
    seed: u32,
    seed_cur: u32,
    rng: Mt19937,
}

impl Dist {
    /// A sampler seeded with `seed`; [`super::DEFAULT_SEED`] picks a random seed,
    /// afresh on every reset.
    pub fn new(seed: u32) -> Self {
        let seed_cur = resolve_seed(seed);
        Self {
            seed,
            seed_cur,
            rng: Mt19937::new(seed_cur),
        }
    }
}

impl Sampler for Dist {
    fn name(&self) -> &str {
        "dist"
    }

    fn apply(&mut self, cands: &mut Candidates) {
        let n = cands.data.len();
        if n == 0 {
            cands.selected = None;
            return;
        }
        cands.selected = Some(0);
        if n == 1 {
            cands.data[0].p = 1.0;
            return;
        }

        let max_l = if cands.sorted {
            logit_key(cands.data[0].logit)
        } else {
            max_logit(&cands.data)
        };
        let mut sum = 0.0f64;
        for t in &mut cands.data {
            t.p = exp_rel(t.logit, max_l);
            sum += f64::from(t.p);
        }
        if sum <= 0.0 {
            // Only NaN logits: nothing to weigh, keep the first, report uniform.
            let uniform = 1.0 / n as f32;
            cands.data.iter_mut().for_each(|t| t.p = uniform);
            return;
        }

        // One uniform draw scaled to the unnormalised total, then a running sum
        // finds the candidate, normalising the probabilities on the way.
        let target = sum * self.rng.next_f64();
        let mut run = 0.0f64;
        let mut found = None;
        for (i, t) in cands.data.iter_mut().enumerate() {
            if found.is_none() {
                run += f64::from(t.p);
                // A zero-weight candidate is never the pick, even for a draw of 0.
                if t.p > 0.0 && run >= target {
                    found = Some(i);
                }
            }
            t.p = (f64::from(t.p) / sum) as f32;
        }
        cands.selected = Some(found.unwrap_or(n - 1));
    }

    fn reset(&mut self) {
        self.seed_cur = resolve_seed(self.seed);
        self.rng.seed(self.seed_cur);
    }

    fn seed(&self) -> Option<u32> {
        Some(self.seed_cur)
    }
}

/// Divides the logits by a temperature; a temperature `<= 0` keeps only the
/// largest logit.
#[derive(Debug, Clone)]
pub struct Temp {
    temp: f32,
}

impl Temp {
    /// A temperature sampler.
    pub fn new(temp: f32) -> Self {
        Self { temp }
    }
}

impl Sampler for Temp {
    fn name(&self) -> &str {
        "temp"
    }

    fn apply(&mut self, cands: &mut Candidates) {
        apply_temp(&mut cands.data, self.temp);
    }
}

/// Dynamic temperature: with `delta > 0` the temperature moves in
/// `[max(0, temp - delta), temp + delta]` with the normalised entropy of the
/// candidates raised to `exponent`; otherwise a plain [`Temp`].
#[derive(Debug, Clone)]
pub struct TempExt {
    temp: f32,
    delta: f32,
    exponent: f32,
}

impl TempExt {
    /// A dynamic temperature sampler (`dynatemp_range` is `delta`).
    pub fn new(temp: f32, delta: f32, exponent: f32) -> Self {
        Self {
            temp,
            delta,
            exponent,
        }
    }
}

impl Sampler for TempExt {
    fn name(&self) -> &str {
        "temp-ext"
    }

    fn apply(&mut self, cands: &mut Candidates) {
        if self.delta.is_nan() || self.delta <= 0.0 {
            apply_temp(&mut cands.data, self.temp);
            return;
        }
        let min_temp = (self.temp - self.delta).max(0.0);
        let max_temp = self.temp + self.delta;
        let n = cands.data.len();
        if n <= 1 {
            return;
        }

        let max_entropy = -(1.0 / n as f32).ln();
        cands.softmax();
        let entropy: f32 = cands
            .data
            .iter()
            .filter(|t| t.p > 0.0)
            .map(|t| -t.p * t.p.ln())
            .sum();
        let normalized = entropy / max_entropy;
        let dyn_temp = min_temp + (max_temp - min_temp) * normalized.powf(self.exponent);
        apply_temp(&mut cands.data, dyn_temp);

        // Probabilities of the rescaled logits, in double precision; the list
        // is sorted, so the first logit is the largest.
        let max_l = f64::from(logit_key(cands.data[0].logit));
        let mut sum = 0.0f64;
        for t in &mut cands.data {
            let l = f64::from(t.logit);
            let e = if l == max_l { 1.0 } else { (l - max_l).exp() };
            let e = if e.is_nan() { 0.0 } else { e };
            t.p = e as f32;
            sum += e;
        }
        if sum > 0.0 {
            for t in &mut cands.data {
                t.p = (f64::from(t.p) / sum) as f32;
            }
        }
    }
}

/// Keeps the `k` candidates with the largest logits; `k <= 0` keeps all.
#[derive(Debug, Clone)]
pub struct TopK {
    k: i32,
}

impl TopK {
    /// A top-k sampler.
    pub fn new(k: i32) -> Self {
        Self { k }
    }
}

impl Sampler for TopK {
    fn name(&self) -> &str {
        "top-k"
    }

    fn apply(&mut self, cands: &mut Candidates) {
        if self.k <= 0 || cands.data.is_empty() {
            return;
        }
        let k = usize::try_from(self.k)
            .unwrap_or(usize::MAX)
            .min(cands.data.len());
        if !cands.sorted {
            sort_top(&mut cands.data, k);
        }
        cands.data.truncate(k);
        cands.sorted = true;
    }
}

/// Nucleus sampling: keeps the most probable candidates until their
/// probabilities add up to at least `p` (and at least `min_keep` of them).
#[derive(Debug, Clone)]
pub struct TopP {
    p: f32,
    min_keep: usize,
}

impl TopP {
    /// A top-p sampler; `p >= 1` keeps all.
    pub fn new(p: f32, min_keep: usize) -> Self {
        Self { p, min_keep }
    }
}

impl Sampler for TopP {
    fn name(&self) -> &str {
        "top-p"
    }

    fn apply(&mut self, cands: &mut Candidates) {
        if self.p >= 1.0 || cands.data.is_empty() {
            return;
        }
        cands.softmax_unsorted();

        let n = cands.data.len();
        // On a large unsorted list, sort the head first and the rest only if
        // the head does not reach `p`; the sort order is total, so the result
        // is the same as sorting everything.
        let mut n_sorted = n;
        if !cands.sorted {
            n_sorted = if n > TOP_P_PARTIAL_SORT_MIN {
                TOP_P_PARTIAL_SORT_K
            } else {
                n
            };
            sort_top(&mut cands.data, n_sorted);
        }

        let mut cum_sum = 0.0f32;
        let mut last = n;
        for i in 0..n {
            cum_sum += cands.data[i].p;
            if cum_sum >= self.p && i + 1 >= self.min_keep {
                last = i + 1;
                break;
            }
            if i + 1 == n_sorted && n_sorted < n {
                sort_top(&mut cands.data[n_sorted..], n - n_sorted);
                n_sorted = n;
            }
        }
        cands.data.truncate(last);
        cands.sorted = true;
    }
}

/// Keeps the candidates whose probability is at least `p` times the largest
/// one (and at least `min_keep` of them).
#[derive(Debug, Clone)]
pub struct MinP {
    p: f32,
    min_keep: usize,
}

impl MinP {
    /// A min-p sampler; `p <= 0` keeps all.
    pub fn new(p: f32, min_keep: usize) -> Self {
        Self { p, min_keep }
    }
}

impl Sampler for MinP {
    fn name(&self) -> &str {
        "min-p"
    }

    fn apply(&mut self, cands: &mut Candidates) {
        if self.p <= 0.0 || cands.data.is_empty() {
            return;
        }
        // p_i >= p * p_max  <=>  logit_i >= logit_max + ln(p)
        let ln_p = self.p.ln();

        if !cands.sorted {
            // Filter in place without sorting when enough candidates pass.
            let max_l = cands.data.iter().fold(-f32::MAX, |m, t| m.max(t.logit));
            let min_logit = max_l + ln_p;
            let n_pass = cands.data.iter().filter(|t| t.logit >= min_logit).count();
            if n_pass > 0 && n_pass >= self.min_keep {
                cands.data.retain(|t| t.logit >= min_logit);
                return;
            }
            cands.sort();
        }

        let min_logit = cands.data[0].logit + ln_p;
        // The first candidate always passes.
        let mut i = 1;
        while i < cands.data.len() {
            if cands.data[i].logit < min_logit && i >= self.min_keep {
                break;
            }
            i += 1;
        }
        cands.data.truncate(i);
    }
}

/// Locally typical sampling: keeps the candidates whose surprise is closest
/// to the entropy until their probabilities add up to more than `p`.
#[derive(Debug, Clone)]
pub struct Typical {
    p: f32,
    min_keep: usize,
}

impl Typical {
    /// A typical sampler; `p >= 1` keeps all.
    pub fn new(p: f32, min_keep: usize) -> Self {
        Self { p, min_keep }
    }
}

impl Sampler for Typical {
    fn name(&self) -> &str {
        "typical"
    }

    fn apply(&mut self, cands: &mut Candidates) {
        if self.p >= 1.0 || cands.data.is_empty() {
            return;
        }
        cands.softmax();

        // A candidate of probability 0 adds nothing to the entropy (rather than
        // 0 * ln 0 = NaN) and has an infinite distance, so it comes last.
        let entropy: f32 = cands
            .data
            .iter()
            .filter(|t| t.p > 0.0)
            .map(|t| -t.p * t.p.ln())
            .sum();
        let shifted: Vec<f32> = cands
            .data
            .iter()
            .map(|t| (-t.p.ln() - entropy).abs())
            .collect();
        let mut order: Vec<usize> = (0..cands.data.len()).collect();
        order.sort_by(|&a, &b| shifted[a].total_cmp(&shifted[b]));

        let mut cum_sum = 0.0f32;
        let mut last = order.len();
        for (i, &idx) in order.iter().enumerate() {
            cum_sum += cands.data[idx].p;
            if cum_sum > self.p && (self.min_keep == 0 || i + 1 >= self.min_keep) {
                last = i + 1;
                break;
            }
        }
        let kept: Vec<TokenData> = order[..last].iter().map(|&i| cands.data[i]).collect();
        cands.data = kept;
        cands.sorted = false;
    }
}

/// Repetition penalties over the last `last_n` accepted tokens: the repeat
/// penalty divides a positive logit and multiplies a non-positive one, then
/// `count * freq + present` is subtracted.
#[derive(Debug, Clone)]
pub struct Penalties {
    last_n: usize,
    repeat: f32,
    freq: f32,
    present: f32,
    prev: VecDeque<i32>,
    counts: HashMap<i32, u32>,
}

impl Penalties {
    /// A penalties sampler; a negative `last_n` is taken as 0 (disabled), as
    /// llama.cpp does: resolve -1 to the context size before
    /// (see [`super::SamplingParams::with_n_ctx`]).
    pub fn new(last_n: i32, repeat: f32, freq: f32, present: f32) -> Self {
        let last_n = usize::try_from(last_n).unwrap_or(0);
        Self {
            last_n,
            repeat,
            freq,
            present,
            prev: VecDeque::with_capacity(last_n.min(1 << 16)),
            counts: HashMap::new(),
        }
    }

    fn penalise(&self, t: &mut TokenData, count: u32) {
        if t.logit <= 0.0 {
            t.logit *= self.repeat;
        } else {
            t.logit /= self.repeat;
        }
        // Counts are bounded by the window, far below f32's exact range.
        t.logit -= count as f32 * self.freq + self.present;
    }

    /// How often `token` occurs in the penalty window.
    pub fn count(&self, token: i32) -> u32 {
        self.counts.get(&token).copied().unwrap_or(0)
    }
}

impl Sampler for Penalties {
    fn name(&self) -> &str {
        "penalties"
    }

    fn apply(&mut self, cands: &mut Candidates) {
        if self.last_n == 0 || (self.repeat == 1.0 && self.freq == 0.0 && self.present == 0.0) {
            return;
        }
        if is_vocab_order(&cands.data) {
            // Token `id` sits at index `id`: visit only the counted tokens
            // instead of hashing every candidate of a large vocabulary.
            for (&id, &count) in &self.counts {
                if let Some(t) = usize::try_from(id).ok().and_then(|i| cands.data.get_mut(i)) {
                    self.penalise(t, count);
                }
            }
        } else {
            for t in &mut cands.data {
                if let Some(&count) = self.counts.get(&t.id) {
                    self.penalise(t, count);
                }
            }
        }
        cands.sorted = false;
    }

    fn accept(&mut self, token: i32) {
        if self.last_n == 0 {
            return;
        }
        *self.counts.entry(token).or_insert(0) += 1;
        if self.prev.len() >= self.last_n {
            if let Some(old) = self.prev.pop_front() {
                if let Some(c) = self.counts.get_mut(&old) {
                    *c -= 1;
                    if *c == 0 {
                        self.counts.remove(&old);
                    }
                }
            }
        }
        self.prev.push_back(token);
    }

    fn reset(&mut self) {
        self.prev.clear();
        self.counts.clear();
    }
}

/// Adds a bias to the logits of chosen tokens (a bias of `-inf` bans one).
#[derive(Debug, Clone)]
pub struct LogitBias {
    n_vocab: usize,
    biases: Vec<(i32, f32)>,
    to_search: Vec<(i32, f32)>,
}

impl LogitBias {
    /// A logit-bias sampler over a vocabulary of `n_vocab` tokens. A token
    /// listed twice gets both biases while the list is in vocabulary order
    /// (as built from logits), only the first once it has been reordered.
    pub fn new(n_vocab: usize, biases: Vec<(i32, f32)>) -> Self {
        Self {
            n_vocab,
            biases,
            to_search: Vec::new(),
        }
    }

    /// The vocabulary size given at construction.
    pub fn n_vocab(&self) -> usize {
        self.n_vocab
    }
}

impl Sampler for LogitBias {
    fn name(&self) -> &str {
        "logit-bias"
    }

    fn apply(&mut self, cands: &mut Candidates) {
        if self.biases.is_empty() {
            return;
        }
        self.to_search.clear();
        for &(token, bias) in &self.biases {
            // Fast path: the list still holds token `i` at index `i`.
            match usize::try_from(token)
                .ok()
                .and_then(|i| cands.data.get_mut(i))
            {
                Some(t) if t.id == token => t.logit += bias,
                _ => self.to_search.push((token, bias)),
            }
        }
        if self.to_search.is_empty() {
            return;
        }
        // The rest: each candidate takes the first bias listed for its id.
        for t in &mut cands.data {
            if let Some(&(_, bias)) = self.to_search.iter().find(|(token, _)| *token == t.id) {
                t.logit += bias;
            }
        }
    }
}
