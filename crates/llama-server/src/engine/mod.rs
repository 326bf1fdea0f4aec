//! The engine: one thread that owns the model and its context and serves
//! every request through parallel slots with continuous batching.

pub mod prompt_cache;
mod slot_actions;
mod slots;
mod speculation;
pub mod task;
pub mod text;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex, OnceLock};

use llama::{ContextParams, Model, ModelParams, PoolingType};

use crate::metrics::Metrics;
pub use task::{
    Done, Event, Finish, GenRequest, Probs, SlotAction, SlotOutcome, Task, TaskKind, TokenProb,
};

/// What the engine needs to start.
#[derive(Clone)]
pub struct EngineConfig {
    /// The GGUF file.
    pub model_path: String,
    /// How the model is loaded.
    pub model_params: ModelParams,
    /// The shared context (`n_ctx` is split among the slots).
    pub ctx_params: ContextParams,
    /// Number of slots (`-np`).
    pub n_parallel: usize,
    /// Serve embeddings (`--embeddings`), with this pooling.
    pub embeddings: Option<PoolingType>,
    /// LoRA adapters and control vectors to load with the model.
    pub adapters: llama::adapter::AdapterArgs,
    /// How slots keep and reuse their prompts.
    pub cache: CacheConfig,
    /// Speculative decoding (a draft model or prompt lookup).
    pub spec: llama::speculative::SpecArgs,
}

/// Prompt cache and context shift settings.
#[derive(Clone, Debug, PartialEq)]
pub struct CacheConfig {
    /// `--slot-prompt-similarity`: a request goes to the free slot whose
    /// cached tokens share more than this fraction of its prompt (0: off,
    /// least recently used slot).
    pub slot_prompt_similarity: f32,
    /// `--cache-reuse`: least chunk of the cache shifted into place after
    /// the common prefix (0: off).
    pub cache_reuse: usize,
    /// `--context-shift`: a slot whose context fills drops old tokens and
    /// goes on.
    pub context_shift: bool,
    /// `--ctx-checkpoints`: most context checkpoints a slot keeps for a
    /// memory that cannot drop a suffix (0: none).
    pub ctx_checkpoints: usize,
    /// `--checkpoint-min-step`: once the list is full, checkpoints closer
    /// than this to an earlier one (of other requests) go first.
    pub checkpoint_min_step: usize,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            slot_prompt_similarity: 0.1,
            cache_reuse: 0,
            context_shift: false,
            ctx_checkpoints: 32,
            checkpoint_min_step: 8192,
        }
    }
}

/// The state of one slot, as `/slots` shows it.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct SlotInfo {
    /// Slot id (its sequence id in the KV cache).
    pub id: usize,
    /// The slot's context size.
    pub n_ctx: usize,
    /// Whether a task runs in it.
    pub is_processing: bool,
    /// The task's id (or -1).
    pub id_task: i64,
    /// Prompt tokens of the task.
    pub n_prompt_tokens: usize,
    /// Tokens in the KV cache for the slot.
    pub n_past: usize,
    /// Tokens generated so far.
    pub n_decoded: usize,
    /// Tokens the slot holds in the KV cache (kept between requests).
    pub n_cached: usize,
    /// Whether the slot decodes speculatively (a draft model or lookup).
    pub speculative: bool,
}

/// State shared by the engine thread and the HTTP handlers.
#[derive(Default)]
pub struct Shared {
    /// The model, once loaded.
    pub model: OnceLock<Arc<Model>>,
    /// Set once the context exists and requests are served.
    pub ready: AtomicBool,
    /// Why loading failed.
    pub load_error: Mutex<Option<String>>,
    /// Context size of each slot.
    pub n_ctx_slot: AtomicUsize,
    /// Most tokens of one embedding input.
    pub n_ctx_embd: AtomicUsize,
    /// Counters for `/metrics`.
    pub metrics: Metrics,
    /// Slot states for `/slots`.
    pub slots: Mutex<Vec<SlotInfo>>,
    /// Tasks waiting for a slot.
    pub n_deferred: AtomicUsize,
    /// The LoRA adapters and their global scales.
    pub loras: crate::lora::LoraRegistry,
}

/// The handlers' side of the engine.
#[derive(Clone)]
pub struct EngineHandle {
    tx: Sender<Task>,
    next_id: Arc<AtomicU64>,
    /// State shared with the engine thread.
    pub shared: Arc<Shared>,
    /// Whether embeddings are served.
    pub embeddings: bool,
    /// Number of slots.
    pub n_parallel: usize,
}

impl EngineHandle {
    /// Starts the engine thread, which loads the model, then serves.
    pub fn start(config: EngineConfig) -> EngineHandle {
        let (tx, rx) = mpsc::channel();
        let shared = Arc::new(Shared::default());
        let handle = EngineHandle {
            tx,
            next_id: Arc::new(AtomicU64::new(0)),
            shared: shared.clone(),
            embeddings: config.embeddings.is_some(),
            n_parallel: config.n_parallel.max(1),
        };
        std::thread::Builder::new()
            .name("llama-engine".into())
            .spawn(move || run(config, shared, rx))
            .expect("spawning the engine thread");
        handle
    }

    /// The loaded model, if loading is over.
    pub fn model(&self) -> Option<&Arc<Model>> {
        self.shared.model.get()
    }

    /// Why the model could not be loaded, once that has happened.
    pub fn load_error(&self) -> Option<String> {
        self.shared.load_error.lock().ok().and_then(|g| g.clone())
    }

    /// Whether requests can be served.
    pub fn is_ready(&self) -> bool {
        self.shared.ready.load(Ordering::Acquire)
    }

    /// Queues a task; events arrive on the returned receiver. Dropping the
    /// receiver (or setting the flag) cancels the task.
    pub fn submit(
        &self,
        kind: TaskKind,
    ) -> (tokio::sync::mpsc::UnboundedReceiver<Event>, Arc<AtomicBool>) {
        let (out, rx) = tokio::sync::mpsc::unbounded_channel();
        let cancel = Arc::new(AtomicBool::new(false));
        let task = Task {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            kind,
            out,
            cancel: cancel.clone(),
        };
        if let Err(mpsc::SendError(task)) = self.tx.send(task) {
            task.out
                .send(Event::Error("the engine has stopped".into()))
                .ok();
        }
        (rx, cancel)
    }
}

fn run(config: EngineConfig, shared: Arc<Shared>, rx: Receiver<Task>) {
    let fail = |msg: String| {
        llama::warn!("{msg}");
        *shared.load_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(msg);
    };
    let model = match Model::load(&config.model_path, &config.model_params) {
        Ok(m) => Arc::new(m),
        Err(e) => return fail(format!("failed to load model '{}': {e}", config.model_path)),
    };
    let adapters = match config.adapters.load(&model) {
        Ok(a) => a,
        Err(e) => return fail(format!("failed to load the adapters: {e}")),
    };
    shared.loras.set_loaded(
        adapters
            .loras
            .iter()
            .map(|(a, s)| (a.path().to_string(), if adapters.apply { *s } else { 0.0 }))
            .collect(),
    );
    let draft = match config.spec.load_draft(&model, &config.model_params) {
        Ok(d) => d,
        Err(e) => return fail(e.to_string()),
    };
    shared.model.set(model.clone()).ok();
    if let Err(e) = slots::serve(&model, draft.as_deref(), &config, &shared, &adapters, rx) {
        fail(format!("failed to start serving: {e}"));
    }
}
