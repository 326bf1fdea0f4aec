//! Parallel slots over one context with continuous batching: each step
//! decodes one batch holding the next token of every generating slot and
//! prompt chunks of slots that are still reading their prompt.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::time::{Duration, Instant};

use std::sync::Arc;

use llama::adapter::{AdapterSet, LoadedAdapters};
use llama::grammar::TokenPieces;
use llama::sampling::SamplerChain;
use llama::{Batch, Context, ContextParams, Model, Token};

use super::prompt_cache::{self, SlotCache};
use super::speculation::{Speculation, Want};
use super::task::{Done, Event, Finish, GenRequest, Probs, Task, TaskKind, TokenProb};
use super::text::TextState;
use super::{CacheConfig, EngineConfig, Shared, SlotInfo};

/// A task running in a slot.
struct Active {
    task: Task,
    req: GenRequest,
    sampler: SamplerChain,
    /// Prompt tokens already in the cache.
    n_prompt_done: usize,
    /// Prompt tokens reused from the slot's cache.
    n_cache: usize,
    /// The context shifted.
    truncated: bool,
    /// Tokens of this slot in the cache.
    n_past: usize,
    /// A sampled token not yet decoded.
    next: Option<Token>,
    n_gen: usize,
    text: TextState,
    t_start: Instant,
    t_prompt: Option<Instant>,
    /// Scales of the LoRA adapters for this task (by id).
    lora: Vec<f32>,
    /// Tokens proposed to follow `next`, decoded with it.
    draft: Vec<Token>,
    /// Proposed tokens verified so far.
    n_draft: usize,
    /// Proposed tokens accepted so far.
    n_draft_accepted: usize,
}

/// Part of a batch: `n` tokens of one slot, the last one with logits when
/// `logits`.
#[derive(Clone, Copy, Debug)]
struct Entry {
    slot: usize,
    /// Index into the slot's pending tokens (prompt offset or the sampled one).
    first: usize,
    n: usize,
    /// Generation token rather than prompt chunk.
    gen: bool,
    logits: bool,
}

pub(super) struct Engine<'m> {
    pub(super) model: &'m Model,
    pub(super) ctx: Context<'m>,
    embd_ctx: Option<Context<'m>>,
    slots: Vec<Option<Active>>,
    /// What each slot holds in the KV cache, kept between requests.
    pub(super) caches: Vec<SlotCache>,
    cache_cfg: CacheConfig,
    waiting: VecDeque<Task>,
    pub(super) n_ctx_slot: usize,
    shared: &'m Shared,
    /// The vocabulary's token pieces, built for the first request with a
    /// grammar and kept for the next.
    pieces: Option<Arc<TokenPieces>>,
    /// The adapters loaded with the model.
    adapters: &'m LoadedAdapters,
    /// The slots' proposers, with speculative decoding.
    spec: Option<Speculation<'m>>,
    /// The memory cannot drop its last positions (recurrent states, or a
    /// sliding-window cache smaller than the context): slots keep context
    /// checkpoints of their prompts (unless `--ctx-checkpoints 0`).
    checkpointing: bool,
}

/// Serves tasks until every sender is gone.
pub(super) fn serve(
    model: &Model,
    draft_model: Option<&Model>,
    config: &EngineConfig,
    shared: &Shared,
    adapters: &LoadedAdapters,
    rx: Receiver<Task>,
) -> llama::Result<()> {
    let np = config.n_parallel.max(1);
    let mut params = config.ctx_params.clone();
    params.n_seq_max = np;
    params.embeddings = false;
    let ctx = Context::new(model, params)?;
    let embd_ctx = match config.embeddings {
        Some(pooling) => Some(Context::new(
            model,
            ContextParams {
                n_ctx: ctx.params.n_batch,
                n_seq_max: 1,
                embeddings: true,
                pooling,
                ..config.ctx_params.clone()
            },
        )?),
        None => None,
    };
    if let Some(e) = &embd_ctx {
        shared
            .n_ctx_embd
            .store(e.n_ctx().min(e.params.n_ubatch), Ordering::Release);
    }
    let n_ctx_slot = ctx.n_ctx() / np;
    shared.n_ctx_slot.store(n_ctx_slot, Ordering::Release);
    let spec = Speculation::new(&config.spec, draft_model, &ctx, &config.ctx_params, np)?;
    let mut eng = Engine {
        model,
        ctx,
        embd_ctx,
        slots: (0..np).map(|_| None).collect(),
        caches: vec![SlotCache::default(); np],
        cache_cfg: config.cache.clone(),
        waiting: VecDeque::new(),
        n_ctx_slot,
        shared,
        pieces: None,
        adapters,
        spec,
        checkpointing: false,
    };
    let mem = &eng.ctx.mem;
    let swa_limited = mem
        .kv()
        .is_some_and(|kv| kv.swa.is_some() && !kv.can_shift());
    eng.checkpointing = eng.cache_cfg.ctx_checkpoints > 0 && (mem.rs().is_some() || swa_limited);
    eng.publish();
    shared.ready.store(true, Ordering::Release);
    llama::info!(
        "server: {np} slots of {n_ctx_slot} tokens, context {}",
        eng.ctx.n_ctx()
    );
    loop {
        if !eng.intake(&rx) {
            return Ok(());
        }
        eng.step();
        eng.publish();
    }
}

impl<'m> Engine<'m> {
    fn busy(&self) -> bool {
        self.slots.iter().any(Option::is_some)
    }

    /// Takes new tasks; blocks while there is nothing to do. False when the
    /// channel is closed and no work is left.
    fn intake(&mut self, rx: &Receiver<Task>) -> bool {
        // Slots the last step freed take the tasks queued behind them
        // first: those must not wait for the next request to arrive.
        self.assign();
        loop {
            let msg = if self.busy() {
                match rx.try_recv() {
                    Ok(t) => Ok(t),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => Err(()),
                }
            } else {
                match rx.recv_timeout(Duration::from_millis(250)) {
                    Ok(t) => Ok(t),
                    Err(RecvTimeoutError::Timeout) => {
                        self.drop_cancelled_waiting();
                        continue;
                    }
                    Err(RecvTimeoutError::Disconnected) => Err(()),
                }
            };
            match msg {
                Ok(task) => {
                    match task.kind {
                        TaskKind::Embed(_) => self.embed(task),
                        TaskKind::Slot(_) => self.slot_action(task),
                        TaskKind::Generate(_) => self.waiting.push_back(task),
                    }
                    self.assign();
                    if self.busy() {
                        // Take whatever else already arrived, then run.
                        continue;
                    }
                }
                Err(()) => return self.busy(),
            }
        }
        self.assign();
        true
    }

    fn drop_cancelled_waiting(&mut self) {
        self.waiting
            .retain(|t| !(t.cancel.load(Ordering::Relaxed) || t.out.is_closed()));
    }

    /// Moves waiting tasks into free slots.
    fn assign(&mut self) {
        self.drop_cancelled_waiting();
        let mut for_busy = VecDeque::new();
        while self.slots.iter().any(Option::is_none) {
            let Some(task) = self.waiting.pop_front() else {
                break;
            };
            let TaskKind::Generate(req) = &task.kind else {
                continue;
            };
            let req = GenRequest::clone(req);
            let free = match req.id_slot {
                Some(s) if s >= self.slots.len() => {
                    task.out
                        .send(Event::Error(format!(
                            "id_slot {s} is out of range: the server has {} slots",
                            self.slots.len()
                        )))
                        .ok();
                    continue;
                }
                // The slot asked for is busy: the task waits for it (as
                // llama.cpp defers it) while others take free slots.
                Some(s) if self.slots[s].is_some() => {
                    for_busy.push_back(task);
                    continue;
                }
                Some(s) => s,
                None => {
                    let free: Vec<(usize, &SlotCache)> = (0..self.slots.len())
                        .filter(|&i| self.slots[i].is_none())
                        .map(|i| (i, &self.caches[i]))
                        .collect();
                    let Some(free) = prompt_cache::pick_slot(
                        &free,
                        &req.prompt,
                        self.cache_cfg.slot_prompt_similarity,
                    ) else {
                        self.waiting.push_front(task);
                        break;
                    };
                    free
                }
            };
            if req.prompt.is_empty() || req.prompt.len() >= self.n_ctx_slot {
                task.out
                    .send(Event::Error(format!(
                        "the prompt has {} tokens; the slot's context holds {}",
                        req.prompt.len(),
                        self.n_ctx_slot
                    )))
                    .ok();
                continue;
            }
            let params = req.sampling.clone().with_n_ctx(self.n_ctx_slot as u32);
            let vocab = &self.model.vocab;
            let built = if params.grammar.is_empty() {
                SamplerChain::from_params_with_vocab(&params, vocab)
            } else {
                let pieces = self
                    .pieces
                    .get_or_insert_with(|| Arc::new(TokenPieces::from_vocab(vocab)));
                SamplerChain::from_params_with_tokens(&params, vocab, pieces)
            };
            let mut sampler = match built {
                Ok(s) => s,
                Err(e) => {
                    task.out.send(Event::Error(e.to_string())).ok();
                    continue;
                }
            };
            for &t in &req.prompt {
                sampler.accept_prompt(t);
            }
            let lora = req
                .lora
                .clone()
                .unwrap_or_else(|| self.shared.loras.scales());
            // Cells computed under other adapter scales are not this
            // request's prefix.
            let same_adapters = self.caches[free].lora == lora;
            self.caches[free].lora = lora.clone();
            let held = &mut self.caches[free];
            let reuse = prompt_cache::prepare(
                &mut self.ctx,
                free,
                &mut held.tokens,
                &mut held.checkpoints,
                &req.prompt,
                req.cache_prompt && same_adapters,
                self.cache_cfg.cache_reuse,
            );
            let m = &self.shared.metrics;
            m.requests.fetch_add(1, Ordering::Relaxed);
            m.prompt_tokens_cached
                .fetch_add(reuse.n_past as u64, Ordering::Relaxed);
            let text = TextState::new(req.stop.clone());
            self.slots[free] = Some(Active {
                task,
                req,
                sampler,
                n_prompt_done: reuse.n_past,
                n_cache: reuse.n_past,
                truncated: false,
                n_past: reuse.n_past,
                next: None,
                n_gen: 0,
                text,
                t_start: Instant::now(),
                t_prompt: None,
                lora,
                draft: Vec::new(),
                n_draft: 0,
                n_draft_accepted: 0,
            });
        }
        // Tasks waiting for a busy slot keep their place in the queue.
        while let Some(t) = for_busy.pop_back() {
            self.waiting.push_front(t);
        }
        self.shared
            .n_deferred
            .store(self.waiting.len(), Ordering::Relaxed);
    }

    /// Frees a slot; its cache cells stay for the next request.
    fn free(&mut self, slot: usize) {
        self.slots[slot] = None;
        self.caches[slot].last_used = Instant::now();
        self.publish();
    }

    /// Forgets what a slot holds in the KV cache.
    pub(super) fn forget(&mut self, slot: usize) {
        // Removing a whole sequence always succeeds.
        let _ = self.ctx.seq_rm(slot as i32, -1, -1);
        self.caches[slot].tokens.clear();
        self.caches[slot].checkpoints.clear();
    }

    /// Whether a slot runs a task.
    pub(super) fn is_busy(&self, slot: usize) -> bool {
        self.slots.get(slot).is_some_and(Option::is_some)
    }

    /// Drops the oldest tokens after `n_keep` of a slot whose context is
    /// full (llama.cpp's context shift). False when nothing can be dropped
    /// or the memory cannot shift (a sliding-window cache smaller than the
    /// context, recurrent layers): the reply then ends there.
    fn shift_context(&mut self, slot: usize) -> bool {
        let add_bos = self.model.vocab.add_bos();
        let n_ctx = self.n_ctx_slot;
        let Some(a) = self.slots[slot].as_mut() else {
            return false;
        };
        let n_past = a.n_past;
        let mut n_keep = if a.req.n_keep < 0 {
            a.req.prompt.len()
        } else {
            a.req.n_keep as usize
        };
        if add_bos {
            n_keep += 1;
        }
        let n_keep = n_keep.min(n_ctx.saturating_sub(4));
        let n_left = n_past.saturating_sub(n_keep);
        let n_discard = if a.req.n_discard > 0 {
            a.req.n_discard
        } else {
            n_left / 2
        };
        let n_discard = n_discard.min(n_left.saturating_sub(1));
        if n_discard == 0 || !self.ctx.can_shift() || self.ctx.mem.rs().is_some() {
            llama::warn!("slot {slot}: context full and it cannot be shifted => stopping");
            return false;
        }
        llama::info!(
            "slot {slot}: context shift, n_keep = {n_keep}, n_left = {n_left}, n_discard = {n_discard}"
        );
        let s = slot as i32;
        let (k, d) = (n_keep as i32, n_discard as i32);
        if !self.ctx.seq_rm(s, k, k + d) {
            llama::warn!("slot {slot}: the memory refused the context shift => stopping");
            return false;
        }
        self.ctx.seq_add(s, k + d, n_past as i32, -d);
        let toks = &mut self.caches[slot].tokens;
        toks.drain(n_keep..(n_keep + n_discard).min(toks.len()));
        if let Some(a) = self.slots[slot].as_mut() {
            a.n_past -= n_discard;
            a.truncated = true;
        }
        true
    }

    /// One step: drops cancelled tasks, decodes one batch, samples.
    fn step(&mut self) {
        for s in 0..self.slots.len() {
            if let Some(a) = &self.slots[s] {
                if a.task.cancel.load(Ordering::Relaxed) || a.task.out.is_closed() {
                    self.free(s);
                }
            }
        }
        for s in 0..self.slots.len() {
            if let Some(a) = &self.slots[s] {
                if a.req.n_predict == 0 && a.n_prompt_done == a.req.prompt.len() {
                    self.finish(s, Finish::Length, None);
                }
            }
        }
        if self.cache_cfg.context_shift {
            for s in 0..self.slots.len() {
                let full = self.slots[s]
                    .as_ref()
                    .is_some_and(|a| a.next.is_some() && a.n_past + 1 >= self.n_ctx_slot);
                if full && !self.shift_context(s) {
                    self.finish(s, Finish::Length, None);
                }
            }
        }
        // One batch of at most n_batch tokens: every generating slot's
        // sampled token (with its proposal, where one fits), then chunks of
        // the prompts being read.
        let mut entries = Vec::new();
        let mut budget = self.ctx.params.n_batch.max(1);
        let generating: Vec<usize> = (0..self.slots.len())
            .filter(|&s| self.slots[s].as_ref().is_some_and(|a| a.next.is_some()))
            .collect();
        budget = budget.saturating_sub(generating.len());
        self.propose(&generating, &mut budget);
        for &s in &generating {
            let n_draft = self.slots[s].as_ref().map_or(0, |a| a.draft.len());
            entries.push(Entry {
                slot: s,
                first: 0,
                n: 1 + n_draft,
                gen: true,
                logits: true,
            });
        }
        for (s, a) in self.slots.iter().enumerate() {
            let Some(a) = a else { continue };
            let left = a.req.prompt.len() - a.n_prompt_done;
            if a.next.is_some() || left == 0 || budget == 0 {
                continue;
            }
            let mut n = left.min(budget);
            // A prompt chunk ends where the slot takes a checkpoint.
            if self.checkpointing {
                let (nb, nub) = (self.ctx.params.n_batch, self.ctx.params.n_ubatch);
                for at in prompt_cache::checkpoint_points(a.req.prompt.len(), nb, nub) {
                    if a.n_prompt_done < at && a.n_prompt_done + n > at {
                        n = at - a.n_prompt_done;
                    }
                }
            }
            budget -= n;
            entries.push(Entry {
                slot: s,
                first: a.n_prompt_done,
                n,
                gen: false,
                logits: n == left && a.req.n_predict != 0,
            });
        }
        // Slots with other adapter scales never share a graph: each group
        // of equal scales is decoded on its own, under its own adapters.
        let mut groups: Vec<(Vec<f32>, Vec<Entry>)> = Vec::new();
        for e in entries {
            let Some(a) = &self.slots[e.slot] else {
                continue;
            };
            let same = |k: &Vec<f32>| {
                k.len() == a.lora.len()
                    && k.iter()
                        .zip(&a.lora)
                        .all(|(x, y)| x.to_bits() == y.to_bits())
            };
            match groups.iter_mut().find(|(k, _)| same(k)) {
                Some((_, g)) => g.push(e),
                None => groups.push((a.lora.clone(), vec![e])),
            }
        }
        for (scales, group) in groups {
            if let Err(err) = self.use_adapters(&scales) {
                for e in &group {
                    self.fail(e.slot, format!("adapters: {err}"));
                }
                continue;
            }
            self.run(&group);
        }
    }

    /// Asks the proposers of the `generating` slots for the tokens after
    /// their sampled ones, within each slot's context and `n_predict` and
    /// the batch's `budget`.
    fn propose(&mut self, generating: &[usize], budget: &mut usize) {
        let Some(spec) = self.spec.as_mut() else {
            return;
        };
        let mut asked = Vec::new();
        for &s in generating {
            let Some(a) = self.slots[s].as_ref() else {
                continue;
            };
            // llama.cpp's room: the proposal leaves a cell free.
            let mut limit = self.n_ctx_slot.saturating_sub(a.n_past + 2);
            if a.req.n_predict >= 0 {
                let left = (a.req.n_predict as usize).saturating_sub(a.n_gen);
                limit = limit.min(left.saturating_sub(1));
            }
            limit = limit.min(spec.cap(&a.req.draft));
            if limit > 0 {
                // The history is the slot's cached tokens and the sampled one.
                self.caches[s].tokens.extend(a.next);
                asked.push((s, limit, a.req.draft));
            }
        }
        if asked.is_empty() {
            return;
        }
        let wants: Vec<Want<'_>> = asked
            .iter()
            .map(|&(slot, limit, params)| Want {
                slot,
                history: &self.caches[slot].tokens,
                limit,
                params,
            })
            .collect();
        let proposals = spec.propose(&wants, self.n_ctx_slot);
        drop(wants);
        for (&(s, _, _), mut d) in asked.iter().zip(proposals) {
            self.caches[s].tokens.pop();
            d.truncate(*budget);
            *budget -= d.len();
            if let Some(a) = self.slots[s].as_mut() {
                a.draft = d;
            }
        }
    }

    /// Applies the loaded adapters at `scales` (by id) and the control
    /// vector to the context.
    fn use_adapters(&mut self, scales: &[f32]) -> llama::Result<()> {
        let loras: Vec<_> = self
            .adapters
            .loras
            .iter()
            .zip(scales)
            .map(|((a, _), &s)| (a.clone(), s))
            .collect();
        let set = AdapterSet::new()
            .with_loras(&loras)?
            .with_cvec(self.adapters.cvec.clone());
        self.ctx.set_adapters(set)
    }

    /// Decodes `entries` as one batch; when the cache has no contiguous
    /// room for it, decodes it in two halves.
    fn run(&mut self, entries: &[Entry]) {
        let mut batch = Batch::new();
        let mut rows = Vec::new();
        for e in entries {
            let Some(a) = &self.slots[e.slot] else {
                continue;
            };
            let seq = [e.slot as i32];
            if e.gen {
                let tok = a.next.unwrap_or_default();
                batch.add(tok, a.n_past as i32, &seq, true);
                for (i, &t) in a.draft.iter().enumerate() {
                    batch.add(t, (a.n_past + 1 + i) as i32, &seq, true);
                }
            } else {
                for i in 0..e.n {
                    let last = i + 1 == e.n;
                    batch.add(
                        a.req.prompt[e.first + i],
                        (a.n_past + i) as i32,
                        &seq,
                        last && e.logits,
                    );
                }
            }
            if e.logits {
                // A slot's first row with logits.
                let n_rows = if e.gen { e.n } else { 1 };
                rows.push((e.slot, batch.tokens.len() - n_rows));
            }
        }
        if batch.tokens.is_empty() {
            return;
        }
        let t0 = Instant::now();
        if let Err(err) = self.ctx.decode(&batch) {
            if entries.iter().any(|e| e.gen && e.n > 1) {
                // Try again without the proposals first.
                let plain: Vec<Entry> = entries
                    .iter()
                    .map(|&e| if e.gen { Entry { n: 1, ..e } } else { e })
                    .collect();
                for e in &plain {
                    if let Some(a) = self.slots[e.slot].as_mut() {
                        a.draft.clear();
                    }
                }
                return self.run(&plain);
            }
            let total: usize = entries.iter().map(|e| e.n).sum();
            if total > 1 {
                let (a, b) = split(entries);
                self.run(&a);
                self.run(&b);
            } else {
                for e in entries {
                    self.fail(e.slot, format!("decode failed: {err}"));
                }
            }
            return;
        }
        let dt = t0.elapsed().as_secs_f64();
        let m = &self.shared.metrics;
        m.n_decode.fetch_add(1, Ordering::Relaxed);
        m.n_busy_slots_sum
            .fetch_add(entries.len() as u64, Ordering::Relaxed);
        let n_prompt: usize = entries.iter().filter(|e| !e.gen).map(|e| e.n).sum();
        let n_gen = entries.len() - entries.iter().filter(|e| !e.gen).count();
        m.add_time(n_prompt, n_gen, dt);
        for e in entries {
            if let Some(a) = self.slots[e.slot].as_mut() {
                a.n_past += e.n;
                let cached = &mut self.caches[e.slot].tokens;
                if e.gen {
                    cached.extend(a.next);
                    cached.extend_from_slice(&a.draft);
                    a.next = None;
                } else {
                    cached.extend_from_slice(&a.req.prompt[e.first..e.first + e.n]);
                    a.n_prompt_done += e.n;
                    if a.n_prompt_done == a.req.prompt.len() {
                        a.t_prompt = Some(Instant::now());
                    }
                }
            }
        }
        if self.checkpointing {
            for e in entries.iter().filter(|e| !e.gen) {
                self.checkpoint(e.slot);
            }
        }
        for (slot, row) in rows {
            self.sample(slot, row);
        }
    }

    /// Takes a context checkpoint of the slot when its prompt is read up
    /// to a checkpoint's place: the parts of its memory that cannot be
    /// rolled back.
    fn checkpoint(&mut self, slot: usize) {
        let Some(a) = self.slots[slot].as_ref() else {
            return;
        };
        let (nb, nub) = (self.ctx.params.n_batch, self.ctx.params.n_ubatch);
        if !prompt_cache::checkpoint_points(a.req.prompt.len(), nb, nub).contains(&a.n_prompt_done)
        {
            return;
        }
        let id_task = a.task.id;
        let c = &mut self.caches[slot];
        let parts = llama::memory::StateParts::RollbackOnly;
        match self
            .ctx
            .state_seq_get_data_parts(slot as i32, &c.tokens, parts)
        {
            Ok(data) => {
                llama::debug!(
                    "slot {slot}: context checkpoint at {} tokens ({} bytes)",
                    c.tokens.len(),
                    data.len()
                );
                let ck = prompt_cache::Checkpoint {
                    n_tokens: c.tokens.len(),
                    id_task,
                    data,
                };
                let cfg = &self.cache_cfg;
                prompt_cache::add_checkpoint(
                    &mut c.checkpoints,
                    ck,
                    cfg.ctx_checkpoints,
                    cfg.checkpoint_min_step,
                );
            }
            Err(e) => llama::warn!("slot {slot}: no context checkpoint: {e}"),
        }
    }

    /// Samples a slot's tokens from batch rows `row..`: with a proposal,
    /// those the slot's sampler agrees with and one more (the rejected
    /// ones leave the cache); reports them in order.
    fn sample(&mut self, slot: usize, row: usize) {
        let Some(a) = self.slots[slot].as_mut() else {
            return;
        };
        let draft = std::mem::take(&mut a.draft);
        let ctx = &self.ctx;
        let read = move |i: usize| ctx.logits_ith((row + i) as i32);
        let ids = match llama::speculative::sample_and_accept(&mut a.sampler, &draft, read) {
            Ok(ids) => ids,
            Err(e) => return self.fail(slot, e.to_string()),
        };
        if !draft.is_empty() {
            let n_accepted = ids.len() - 1;
            a.n_draft += draft.len();
            a.n_draft_accepted += n_accepted;
            let m = &self.shared.metrics;
            m.spec_draft_tokens
                .fetch_add(draft.len() as u64, Ordering::Relaxed);
            m.spec_accepted_tokens
                .fetch_add(n_accepted as u64, Ordering::Relaxed);
            m.spec_drafts.fetch_add(1, Ordering::Relaxed);
            let keep = a.n_past - (draft.len() - n_accepted);
            a.n_past = keep;
            self.caches[slot].tokens.truncate(keep);
            if !self.ctx.seq_rm(slot as i32, keep as i32, -1) {
                return self.fail(slot, "the memory cannot drop rejected drafts".into());
            }
        }
        let n = ids.len();
        for (i, tok) in ids.into_iter().enumerate() {
            if !self.emit(slot, tok, row + i, i + 1 == n) {
                return;
            }
        }
    }

    /// Reports a slot's sampled token `tok` (of batch row `row`); the
    /// `last` one becomes the slot's next token to decode, the others are
    /// in the cache already. False when the slot's task ended.
    fn emit(&mut self, slot: usize, tok: Token, row: usize, last: bool) -> bool {
        let Some(a) = self.slots[slot].as_mut() else {
            return false;
        };
        let probs = if a.req.n_probs > 0 {
            match self.ctx.logits_ith(row as i32) {
                Ok(l) => Some(top_probs(self.model, l, tok, a.req.n_probs)),
                Err(e) => {
                    self.fail(slot, e.to_string());
                    return false;
                }
            }
        } else {
            None
        };
        let vocab = &self.model.vocab;
        if tok < 0 || (vocab.is_eog(tok) && !a.req.ignore_eos) {
            self.finish(slot, Finish::Eos, None);
            return false;
        }
        a.n_gen += 1;
        let stop = a.text.push(&vocab.token_to_piece(tok, false));
        let text = a.text.take(false);
        let event = Event::Text {
            text,
            tokens: vec![tok],
            probs: probs.into_iter().collect(),
        };
        if a.task.out.send(event).is_err() {
            self.free(slot);
            return false;
        }
        if let Some(word) = stop {
            self.finish(slot, Finish::Word, Some(word));
            return false;
        }
        let limit = a.req.n_predict >= 0 && a.n_gen as i64 >= a.req.n_predict;
        let full = last && !self.cache_cfg.context_shift && a.n_past + 1 >= self.n_ctx_slot;
        if limit || full {
            self.finish(slot, Finish::Length, None);
            return false;
        }
        if last {
            a.next = Some(tok);
        }
        true
    }

    fn finish(&mut self, slot: usize, finish: Finish, stop_word: Option<String>) {
        let Some(mut a) = self.slots[slot].take() else {
            return;
        };
        let rest = a.text.take(true);
        if !rest.is_empty() {
            a.task
                .out
                .send(Event::Text {
                    text: rest,
                    tokens: Vec::new(),
                    probs: Vec::new(),
                })
                .ok();
        }
        let now = Instant::now();
        let t_prompt = a.t_prompt.unwrap_or(now);
        let done = Done {
            slot,
            n_prompt: a.req.prompt.len(),
            n_gen: a.n_gen,
            n_cache: a.n_cache,
            truncated: a.truncated,
            finish,
            stop_word,
            t_prompt_ms: (t_prompt - a.t_start).as_secs_f64() * 1e3,
            t_gen_ms: (now - t_prompt).as_secs_f64() * 1e3,
            n_draft: a.n_draft,
            n_draft_accepted: a.n_draft_accepted,
        };
        let m = &self.shared.metrics;
        m.prompt_tokens
            .fetch_add((done.n_prompt - done.n_cache) as u64, Ordering::Relaxed);
        m.n_tokens_max
            .fetch_max(self.caches[slot].tokens.len() as u64, Ordering::Relaxed);
        m.predicted_tokens
            .fetch_add(done.n_gen as u64, Ordering::Relaxed);
        self.free(slot);
        a.task.out.send(Event::Done(done)).ok();
    }

    fn fail(&mut self, slot: usize, msg: String) {
        if let Some(a) = &self.slots[slot] {
            a.task.out.send(Event::Error(msg)).ok();
        }
        // What the cache holds for the slot may not match its tokens.
        self.forget(slot);
        self.free(slot);
    }

    /// Pooled, normalised embeddings of each input, on the embedding context.
    fn embed(&mut self, task: Task) {
        let TaskKind::Embed(inputs) = &task.kind else {
            return;
        };
        let Some(ctx) = self.embd_ctx.as_mut() else {
            task.out
                .send(Event::Error(
                    "embeddings are not enabled: start the server with --embeddings".into(),
                ))
                .ok();
            return;
        };
        let mut out = Vec::with_capacity(inputs.len());
        let mut n_tokens = 0;
        for toks in inputs {
            ctx.kv_clear();
            let mut b = Batch::new();
            for (i, &t) in toks.iter().enumerate() {
                b.add(t, i as i32, &[0], true);
            }
            let res = ctx.decode(&b).and_then(|()| ctx.embeddings_pooled());
            match res {
                Ok(mut v) => {
                    let norm = v
                        .iter()
                        .map(|x| f64::from(*x) * f64::from(*x))
                        .sum::<f64>()
                        .sqrt();
                    if norm > 0.0 {
                        v.iter_mut()
                            .for_each(|x| *x = (f64::from(*x) / norm) as f32);
                    }
                    out.push(v);
                    n_tokens += toks.len();
                }
                Err(e) => {
                    task.out
                        .send(Event::Error(format!("embedding failed: {e}")))
                        .ok();
                    return;
                }
            }
        }
        ctx.kv_clear();
        task.out.send(Event::Embeddings(out, n_tokens)).ok();
    }

    /// Publishes the slots' states for `/slots`.
    pub(super) fn publish(&self) {
        let infos = self
            .slots
            .iter()
            .enumerate()
            .map(|(id, a)| SlotInfo {
                id,
                n_ctx: self.n_ctx_slot,
                is_processing: a.is_some(),
                id_task: a.as_ref().map_or(-1, |a| a.task.id as i64),
                n_prompt_tokens: a.as_ref().map_or(0, |a| a.req.prompt.len()),
                n_past: a.as_ref().map_or(0, |a| a.n_past),
                n_decoded: a.as_ref().map_or(0, |a| a.n_gen),
                n_cached: self.caches[id].tokens.len(),
                speculative: self.spec.is_some(),
            })
            .collect();
        *self.shared.slots.lock().unwrap_or_else(|e| e.into_inner()) = infos;
        self.shared.metrics.processing.store(
            self.slots.iter().filter(|s| s.is_some()).count() as u64,
            Ordering::Relaxed,
        );
    }
}

/// Splits entries into two batches of about half the tokens each; a prompt
/// chunk is cut in two (its first part without logits).
fn split(entries: &[Entry]) -> (Vec<Entry>, Vec<Entry>) {
    if entries.len() > 1 {
        let mid = entries.len() / 2;
        return (entries[..mid].to_vec(), entries[mid..].to_vec());
    }
    let e = entries[0];
    let h = e.n / 2;
    (
        vec![Entry {
            n: h,
            logits: false,
            ..e
        }],
        vec![Entry {
            first: e.first + h,
            n: e.n - h,
            ..e
        }],
    )
}

/// The `n` most probable tokens under the raw logits, and the chosen one.
fn top_probs(model: &Model, logits: &[f32], chosen: Token, n: usize) -> Probs {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let lse = max + logits.iter().map(|&l| (l - max).exp()).sum::<f32>().ln();
    let mk = |id: Token| TokenProb {
        id,
        piece: model.vocab.token_to_piece(id, false),
        logprob: logits
            .get(id as usize)
            .map_or(f32::NEG_INFINITY, |&l| l - lse),
    };
    let mut idx: Vec<usize> = (0..logits.len()).collect();
    let n = n.min(idx.len());
    if n > 0 && n < idx.len() {
        idx.select_nth_unstable_by(n - 1, |&a, &b| logits[b].total_cmp(&logits[a]));
    }
    idx.truncate(n);
    idx.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
    Probs {
        chosen: mk(chosen),
        top: idx.into_iter().map(|i| mk(i as Token)).collect(),
    }
}
