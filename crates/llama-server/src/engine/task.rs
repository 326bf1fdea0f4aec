//! What the HTTP side hands the engine, and what comes back.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use llama::sampling::SamplingParams;
use llama::Token;
use tokio::sync::mpsc::UnboundedSender;

/// A generation request, checked and tokenized.
#[derive(Clone, Debug)]
pub struct GenRequest {
    /// The prompt's tokens (not empty).
    pub prompt: Vec<Token>,
    /// Sampling settings.
    pub sampling: SamplingParams,
    /// Most tokens to generate; -1 = until the end of generation or the
    /// slot's context is full.
    pub n_predict: i64,
    /// Strings that end generation (not included in the output).
    pub stop: Vec<String>,
    /// How many most probable tokens to report per generated token (0: none).
    pub n_probs: usize,
    /// Keep generating past end-of-generation tokens.
    pub ignore_eos: bool,
    /// Scales of the server's LoRA adapters for this request alone (by
    /// id); None: the global scales.
    pub lora: Option<Vec<f32>>,
    /// Reuse the part of the prompt the slot still holds (`cache_prompt`).
    pub cache_prompt: bool,
    /// Prompt tokens kept when the context shifts (-1: the whole prompt).
    pub n_keep: i64,
    /// Tokens dropped per context shift (0: half of those after `n_keep`).
    pub n_discard: usize,
    /// The draft settings of this request (`speculative.n_max`, ...).
    pub draft: llama::speculative::DraftParams,
    /// The slot asked for (`id_slot`); None: any free one.
    pub id_slot: Option<usize>,
}

/// Work for the engine.
#[derive(Debug)]
pub enum TaskKind {
    /// Text generation in a slot.
    Generate(Box<GenRequest>),
    /// Pooled embeddings of each input.
    Embed(Vec<Vec<Token>>),
    /// Saves, restores or erases a slot's state.
    Slot(SlotAction),
}

/// What `/slots/{id}?action=...` asks of a slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SlotAction {
    /// Writes the slot's tokens and state to a file.
    Save {
        /// The slot.
        slot: usize,
        /// The file (already checked to lie in the save directory).
        path: std::path::PathBuf,
    },
    /// Reads a slot's tokens and state from a file.
    Restore {
        /// The slot.
        slot: usize,
        /// The file.
        path: std::path::PathBuf,
    },
    /// Forgets what the slot holds.
    Erase {
        /// The slot.
        slot: usize,
    },
}

/// The result of a slot action.
#[derive(Clone, Debug, PartialEq)]
pub struct SlotOutcome {
    /// Tokens saved, restored or erased.
    pub n_tokens: usize,
    /// Bytes written or read.
    pub n_bytes: usize,
    /// Milliseconds it took.
    pub ms: f64,
}

/// A task with its reply channel and cancel flag.
#[derive(Debug)]
pub struct Task {
    /// Unique id.
    pub id: u64,
    /// The work.
    pub kind: TaskKind,
    /// Where events go; a dropped receiver cancels the task.
    pub out: UnboundedSender<Event>,
    /// Set to cancel the task.
    pub cancel: Arc<AtomicBool>,
}

/// A candidate token with its log-probability.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenProb {
    /// Token id.
    pub id: Token,
    /// Its text (bytes, possibly part of a character).
    pub piece: Vec<u8>,
    /// Natural log of its probability.
    pub logprob: f32,
}

/// Probabilities reported for one generated token.
#[derive(Clone, Debug, PartialEq)]
pub struct Probs {
    /// The token kept.
    pub chosen: TokenProb,
    /// The most probable tokens, best first.
    pub top: Vec<TokenProb>,
}

/// Why generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finish {
    /// An end-of-generation token.
    Eos,
    /// A stop string.
    Word,
    /// `n_predict` tokens, or the slot's context is full.
    Length,
}

impl Finish {
    /// OpenAI's `finish_reason`.
    pub fn reason(self) -> &'static str {
        match self {
            Finish::Eos | Finish::Word => "stop",
            Finish::Length => "length",
        }
    }
}

/// The end of a generation.
#[derive(Clone, Debug, PartialEq)]
pub struct Done {
    /// Slot that ran it.
    pub slot: usize,
    /// Prompt tokens.
    pub n_prompt: usize,
    /// Generated tokens.
    pub n_gen: usize,
    /// Prompt tokens reused from the slot's cache.
    pub n_cache: usize,
    /// Whether the context shifted (tokens were dropped).
    pub truncated: bool,
    /// Why it ended.
    pub finish: Finish,
    /// The stop string that ended it.
    pub stop_word: Option<String>,
    /// Milliseconds from the start to the end of prompt processing.
    pub t_prompt_ms: f64,
    /// Milliseconds generating.
    pub t_gen_ms: f64,
    /// Tokens proposed by speculation and verified by the model.
    pub n_draft: usize,
    /// Proposed tokens the model agreed with.
    pub n_draft_accepted: usize,
}

/// Events of a task, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// New text (possibly empty while a stop string may be starting).
    Text {
        /// Text not sent before.
        text: String,
        /// Token ids generated since the last event.
        tokens: Vec<Token>,
        /// Probabilities, when asked for.
        probs: Vec<Probs>,
    },
    /// Generation ended.
    Done(Done),
    /// Embeddings, one per input, with the number of tokens read.
    Embeddings(Vec<Vec<f32>>, usize),
    /// A slot action is done.
    Slot(SlotOutcome),
    /// The task failed.
    Error(String),
}
