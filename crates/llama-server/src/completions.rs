//! `/completion` (llama.cpp's), `/v1/completions` and `/v1/chat/completions`:
//! a request becomes a task for the engine; its events are answered as one
//! JSON body or streamed as server-sent events.

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event as Sse, Sse as SseBody};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::stream::{self, Stream, StreamExt};
use llama::chat::tools::{MessageDiff, ParsedMessage, StreamState};
use llama::Token;
use serde_json::{json, Value};
use tokio::sync::mpsc::UnboundedReceiver;

use crate::app::{App, AppState};
use crate::engine::{Done, Event, Finish, GenRequest, Probs, TaskKind, TokenProb};
use crate::error::ApiError;
use crate::request::{self, GenOptions, Prompt};

/// Seconds since the Unix epoch.
pub fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn new_id(prefix: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!(
        "{prefix}-{nanos:08x}{:06x}",
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Which API shape a reply takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    /// llama.cpp's `/completion`.
    Native,
    /// OpenAI's `/v1/completions`.
    Completions,
    /// OpenAI's `/v1/chat/completions`.
    Chat,
}

/// A request body read and checked, ready for the engine.
pub struct Decoded {
    /// Its generation options.
    pub opts: GenOptions,
    /// One engine request per choice (`n`).
    pub requests: Vec<GenRequest>,
    /// Tokens of the prompt.
    pub n_prompt: usize,
    /// The chat reply's parser (chat only).
    pub chat: Option<StreamState>,
}

/// A request turned into a running task.
struct Running {
    api: Api,
    id: String,
    model: String,
    opts: GenOptions,
    n_prompt: usize,
    rx: UnboundedReceiver<Event>,
    cancel: Arc<AtomicBool>,
    timeout: std::time::Duration,
    /// The chat reply as parsed so far (chat only).
    chat: Option<StreamState>,
}

impl Drop for Running {
    fn drop(&mut self) {
        // A reply that is dropped (client gone, timeout) frees its slot.
        self.cancel.store(true, Ordering::Relaxed);
    }
}

/// `POST /completion`.
pub async fn completion(State(app): State<AppState>, body: Bytes) -> Response {
    respond(&app, &body, Api::Native).await
}

/// `POST /v1/completions`.
pub async fn v1_completions(State(app): State<AppState>, body: Bytes) -> Response {
    respond(&app, &body, Api::Completions).await
}

/// `POST /v1/chat/completions`.
pub async fn chat_completions(State(app): State<AppState>, body: Bytes) -> Response {
    respond(&app, &body, Api::Chat).await
}

/// Answers a `/completion`-shaped request for `tokens` (the prompt
/// another endpoint built, e.g. `/infill`) with the options of `body`.
pub(crate) async fn respond_native_tokens(app: &App, body: &[u8], tokens: Vec<Token>) -> Response {
    respond_with(app, body, Api::Native, Some(tokens)).await
}

async fn respond(app: &App, body: &[u8], api: Api) -> Response {
    respond_with(app, body, api, None).await
}

async fn respond_with(app: &App, body: &[u8], api: Api, tokens: Option<Vec<Token>>) -> Response {
    let mut runs = match start(app, body, api, tokens) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    if runs.len() == 1 {
        let run = runs.remove(0);
        if run.opts.stream {
            return SseBody::new(sse_stream(run)).into_response();
        }
        return match collect(run).await {
            Ok(v) => Json(v).into_response(),
            Err(e) => e.into_response(),
        };
    }
    // Several choices: each its own task (run side by side as slots
    // allow), joined into one body or one stream.
    if runs[0].opts.stream {
        return SseBody::new(merged_sse_stream(runs)).into_response();
    }
    let mut bodies = Vec::with_capacity(runs.len());
    for run in runs {
        match collect(run).await {
            Ok(v) => bodies.push(v),
            Err(e) => return e.into_response(),
        }
    }
    Json(join_choices(bodies)).into_response()
}

/// One body of several choices: the first body with every body's choice
/// (indexed in order) and the completion tokens of all.
fn join_choices(bodies: Vec<Value>) -> Value {
    let mut out = bodies[0].clone();
    let mut choices = Vec::new();
    let mut completion = 0u64;
    for (i, b) in bodies.iter().enumerate() {
        let mut c = b["choices"][0].clone();
        c["index"] = i.into();
        choices.push(c);
        completion += b["usage"]["completion_tokens"].as_u64().unwrap_or(0);
    }
    out["choices"] = choices.into();
    let prompt = out["usage"]["prompt_tokens"].as_u64().unwrap_or(0);
    out["usage"]["completion_tokens"] = completion.into();
    out["usage"]["total_tokens"] = (prompt + completion).into();
    out
}

/// Reads and checks a request `body` for `api` (the prompt `given` by
/// another endpoint instead of the body's), without running anything:
/// every field is checked and the prompt tokenized.
pub fn decode(
    app: &App,
    body: &[u8],
    api: Api,
    given: Option<Vec<Token>>,
) -> Result<Decoded, ApiError> {
    let model = app.model()?;
    let vocab = &model.vocab;
    let b = request::parse(body)?;
    let mut opts = request::gen_options(&b, &app.config.sampling, vocab, api == Api::Chat)?;
    let lora = crate::lora::request_scales(&b, &app.engine.shared.loras)?;
    let mut chat = None;
    let (tokens, field) = if let Some(t) = given {
        (t, "prompt")
    } else if api == Api::Chat {
        let setup = crate::chat::prepare(app, &b, !opts.sampling.grammar.is_empty())?;
        if let Some(g) = &setup.grammar {
            opts.sampling.grammar = g.grammar.clone();
            opts.sampling.grammar_lazy = g.lazy;
            opts.sampling.grammar_triggers = g.triggers.clone();
        }
        chat = Some(setup.stream_state());
        (vocab.tokenize(&setup.prompt, true, true), "messages")
    } else {
        match request::prompt(&b, vocab)? {
            Prompt::Text(t) => (vocab.tokenize(&t, true, true), "prompt"),
            Prompt::Tokens(t) => (t, "prompt"),
        }
    };
    let n_ctx_slot = app.engine.shared.n_ctx_slot.load(Ordering::Acquire);
    if tokens.is_empty() {
        return Err(ApiError::field(field, "the prompt is empty"));
    }
    if tokens.len() >= n_ctx_slot {
        return Err(ApiError::field(
            field,
            format!(
                "the request exceeds the available context size: the prompt has {} tokens, the slot's context {}",
                tokens.len(),
                n_ctx_slot
            ),
        ));
    }
    let n_prompt = tokens.len();
    if opts.n > 1 && api == Api::Native {
        return Err(ApiError::field(
            "n",
            "several choices are served on /v1/completions and /v1/chat/completions",
        ));
    }
    let cache_prompt = b.bool("cache_prompt")?.unwrap_or(true);
    let n_keep = b.i64("n_keep")?.unwrap_or(app.config.n_keep);
    if n_keep < -1 {
        return Err(ApiError::field("n_keep", "'n_keep' must be -1 or more"));
    }
    let n_discard = b.i64("n_discard")?.unwrap_or(0);
    let n_discard = usize::try_from(n_discard)
        .map_err(|_| ApiError::field("n_discard", "'n_discard' must be 0 or more"))?;
    let draft = request::draft_params(&b, app.config.draft)?;
    let id_slot = request::id_slot(&b, app.engine.n_parallel)?;
    if id_slot.is_some() && opts.n > 1 {
        return Err(ApiError::field(
            "id_slot",
            "'id_slot' names one slot; several choices ('n') need several",
        ));
    }
    let requests = (0..opts.n)
        .map(|i| {
            let mut sampling = opts.sampling.clone();
            if sampling.seed != llama::sampling::DEFAULT_SEED {
                // Choices of a fixed seed differ, the first as with n = 1.
                sampling.seed = sampling.seed.wrapping_add(i as u32);
            }
            GenRequest {
                prompt: tokens.clone(),
                sampling,
                n_predict: opts.n_predict,
                stop: opts.stop.clone(),
                n_probs: opts.n_probs,
                ignore_eos: opts.ignore_eos,
                lora: lora.clone(),
                cache_prompt,
                n_keep,
                n_discard,
                draft,
                id_slot,
            }
        })
        .collect();
    Ok(Decoded {
        opts,
        requests,
        n_prompt,
        chat,
    })
}

/// The request's tasks: one per choice (`n`).
fn start(
    app: &App,
    body: &[u8],
    api: Api,
    given: Option<Vec<Token>>,
) -> Result<Vec<Running>, ApiError> {
    let d = decode(app, body, api, given)?;
    let id = new_id(if api == Api::Chat { "chatcmpl" } else { "cmpl" });
    let mut runs = Vec::with_capacity(d.requests.len());
    for req in d.requests {
        let (rx, cancel) = app.engine.submit(TaskKind::Generate(Box::new(req)));
        runs.push(Running {
            api,
            id: id.clone(),
            model: app.config.model_alias.clone(),
            opts: d.opts.clone(),
            n_prompt: d.n_prompt,
            rx,
            cancel,
            timeout: app.config.timeout,
            chat: d.chat.clone(),
        });
    }
    Ok(runs)
}

async fn next_event(run: &mut Running) -> Result<Event, ApiError> {
    match tokio::time::timeout(run.timeout, run.rx.recv()).await {
        Err(_) => Err(ApiError::new(
            StatusCode::GATEWAY_TIMEOUT,
            "timed out waiting for the model",
        )),
        Ok(None) => Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the engine dropped the request",
        )),
        Ok(Some(Event::Error(e))) => Err(ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e)),
        Ok(Some(ev)) => Ok(ev),
    }
}

/// Waits for the whole reply.
async fn collect(mut run: Running) -> Result<Value, ApiError> {
    let mut text = String::new();
    let mut tokens = Vec::new();
    let mut probs = Vec::new();
    loop {
        match next_event(&mut run).await? {
            Event::Text {
                text: t,
                tokens: k,
                probs: p,
            } => {
                text.push_str(&t);
                tokens.extend(k);
                probs.extend(p);
            }
            Event::Done(done) => {
                if let Some(state) = run.chat.as_mut() {
                    state.push(&text, true);
                }
                return Ok(final_body(&run, &text, &tokens, &probs, &done));
            }
            Event::Embeddings(..) | Event::Slot(_) | Event::Error(_) => {
                return Err(ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "unexpected event",
                ))
            }
        }
    }
}

fn usage(n_prompt: usize, done: &Done) -> Value {
    json!({
        "prompt_tokens": n_prompt,
        "completion_tokens": done.n_gen,
        "total_tokens": n_prompt + done.n_gen,
    })
}

/// llama.cpp's `timings`: `cache_n` prompt tokens reused, `prompt_n`
/// decoded; the first generated token comes from the prompt's logits, so
/// the per-token generation figures count the others. With speculation,
/// `draft_n` tokens were proposed and `draft_n_accepted` kept.
fn timings(done: &Done) -> Value {
    let mut v = base_timings(done);
    if done.n_draft > 0 {
        v["draft_n"] = done.n_draft.into();
        v["draft_n_accepted"] = done.n_draft_accepted.into();
    }
    v
}

fn base_timings(done: &Done) -> Value {
    let prompt_n = done.n_prompt - done.n_cache;
    let gen_steps = done.n_gen.saturating_sub(1);
    let per = |n: usize, ms: f64| if ms > 0.0 { n as f64 * 1e3 / ms } else { 0.0 };
    let per_token = |n: usize, ms: f64| if n > 0 { ms / n as f64 } else { 0.0 };
    json!({
        "cache_n": done.n_cache,
        "prompt_n": prompt_n,
        "prompt_ms": done.t_prompt_ms,
        "prompt_per_token_ms": per_token(prompt_n, done.t_prompt_ms),
        "prompt_per_second": per(prompt_n, done.t_prompt_ms),
        "predicted_n": done.n_gen,
        "predicted_ms": done.t_gen_ms,
        "predicted_per_token_ms": per_token(gen_steps, done.t_gen_ms),
        "predicted_per_second": per(gen_steps, done.t_gen_ms),
    })
}

fn piece_json(p: &TokenProb, native: bool) -> Value {
    let text = String::from_utf8_lossy(&p.piece);
    if native {
        json!({"id": p.id, "token": text, "logprob": p.logprob, "bytes": p.piece})
    } else {
        json!({"token": text, "logprob": p.logprob, "bytes": p.piece})
    }
}

fn probs_json(probs: &[Probs], native: bool) -> Value {
    Value::Array(
        probs
            .iter()
            .map(|p| {
                let mut v = piece_json(&p.chosen, native);
                v["top_logprobs"] =
                    Value::Array(p.top.iter().map(|t| piece_json(t, native)).collect());
                v
            })
            .collect(),
    )
}

fn stop_type(done: &Done) -> &'static str {
    match done.finish {
        Finish::Eos => "eos",
        Finish::Word => "word",
        Finish::Length => "limit",
    }
}

/// The OpenAI `logprobs` member: the chosen tokens' log-probabilities
/// when the request asked for them, else null.
fn logprobs_json(run: &Running, probs: &[Probs]) -> Value {
    if run.opts.logprobs {
        json!({ "content": probs_json(probs, false) })
    } else {
        Value::Null
    }
}

fn final_body(run: &Running, text: &str, tokens: &[Token], probs: &[Probs], done: &Done) -> Value {
    let logprobs = logprobs_json(run, probs);
    match run.api {
        Api::Native => {
            let mut v = json!({
                "index": 0,
                "content": text,
                "tokens": tokens,
                "id_slot": done.slot,
                "stop": true,
                "model": run.model,
                "tokens_predicted": done.n_gen,
                "tokens_evaluated": run.n_prompt,
                "truncated": done.truncated,
                "stop_type": stop_type(done),
                "stopping_word": done.stop_word.clone().unwrap_or_default(),
                "timings": timings(done),
            });
            if run.opts.n_probs > 0 {
                v["completion_probabilities"] = probs_json(probs, true);
            }
            v
        }
        Api::Completions => json!({
            "id": run.id,
            "object": "text_completion",
            "created": now(),
            "model": run.model,
            "choices": [{
                "text": text,
                "index": 0,
                "logprobs": logprobs,
                "finish_reason": done.finish.reason(),
            }],
            "usage": usage(run.n_prompt, done),
            "timings": timings(done),
        }),
        Api::Chat => {
            let parsed = run.chat.as_ref().map(StreamState::message);
            json!({
                "id": run.id,
                "object": "chat.completion",
                "created": now(),
                "model": run.model,
                "choices": [{
                    "index": 0,
                    "message": message_json(parsed, text),
                    "logprobs": logprobs,
                    "finish_reason": finish_reason(run, done),
                }],
                "usage": usage(run.n_prompt, done),
                "timings": timings(done),
            })
        }
    }
}

/// `stop`, `length`, or `tool_calls` when a reply that ended by itself
/// holds calls.
fn finish_reason(run: &Running, done: &Done) -> &'static str {
    let reason = done.finish.reason();
    let calls = run
        .chat
        .as_ref()
        .is_some_and(|s| !s.message().tool_calls.is_empty());
    if calls && reason == "stop" {
        "tool_calls"
    } else {
        reason
    }
}

/// The assistant message of a chat reply: content (null when there is
/// none beside calls, as OpenAI sends it), `reasoning_content` when there
/// is some, `tool_calls` when there are some.
fn message_json(parsed: Option<&ParsedMessage>, text: &str) -> Value {
    let Some(p) = parsed else {
        return json!({"role": "assistant", "content": text});
    };
    let mut m = json!({"role": "assistant", "content": p.content});
    if p.content.is_empty() && !p.tool_calls.is_empty() {
        m["content"] = Value::Null;
    }
    if !p.reasoning_content.is_empty() {
        m["reasoning_content"] = p.reasoning_content.clone().into();
    }
    if !p.tool_calls.is_empty() {
        m["tool_calls"] = p
            .tool_calls
            .iter()
            .map(|c| {
                json!({
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                })
            })
            .collect();
    }
    m
}

/// The `delta` of a streamed chat chunk, as llama.cpp's server writes it.
fn delta_json(d: &MessageDiff) -> Value {
    let mut v = json!({});
    if !d.reasoning_content.is_empty() {
        v["reasoning_content"] = d.reasoning_content.clone().into();
    }
    if !d.content.is_empty() {
        v["content"] = d.content.clone().into();
    }
    if let Some(t) = &d.tool_call {
        let mut call = json!({"index": t.index});
        let mut function = json!({});
        if !t.id.is_empty() {
            call["id"] = t.id.clone().into();
            call["type"] = "function".into();
        }
        if !t.name.is_empty() {
            function["name"] = t.name.clone().into();
            function["arguments"] = t.arguments.clone().into();
        } else if !t.arguments.is_empty() {
            function["arguments"] = t.arguments.clone().into();
        }
        call["function"] = function;
        v["tool_calls"] = json!([call]);
    }
    v
}

/// The chat chunks of what `piece` adds to the reply (`last` when the
/// reply is complete); the first carries the piece's log-probabilities.
fn chat_chunks(run: &mut Running, piece: &str, probs: &[Probs], last: bool) -> Vec<Value> {
    let diffs = match run.chat.as_mut() {
        Some(state) => state.push(piece, last),
        None => Vec::new(),
    };
    let logprobs = logprobs_json(run, probs);
    let mut out = Vec::new();
    for (k, d) in diffs.iter().enumerate() {
        out.push(json!({
            "id": run.id, "object": "chat.completion.chunk", "created": now(), "model": run.model,
            "choices": [{"index": 0, "delta": delta_json(d), "logprobs": if k == 0 { logprobs.clone() } else { Value::Null }, "finish_reason": null}],
        }));
    }
    if out.is_empty() && !probs.is_empty() && run.opts.logprobs {
        out.push(json!({
            "id": run.id, "object": "chat.completion.chunk", "created": now(), "model": run.model,
            "choices": [{"index": 0, "delta": {}, "logprobs": logprobs, "finish_reason": null}],
        }));
    }
    out
}

/// One streamed chunk of new text.
fn chunk(run: &Running, text: &str, tokens: &[Token], probs: &[Probs]) -> Value {
    let logprobs = logprobs_json(run, probs);
    match run.api {
        Api::Native => {
            let mut v = json!({"index": 0, "content": text, "tokens": tokens, "stop": false});
            if run.opts.n_probs > 0 {
                v["completion_probabilities"] = probs_json(probs, true);
            }
            v
        }
        Api::Completions => json!({
            "id": run.id, "object": "text_completion", "created": now(), "model": run.model,
            "choices": [{"text": text, "index": 0, "logprobs": logprobs, "finish_reason": null}],
        }),
        Api::Chat => json!({
            "id": run.id, "object": "chat.completion.chunk", "created": now(), "model": run.model,
            "choices": [{"index": 0, "delta": {"content": text}, "logprobs": logprobs, "finish_reason": null}],
        }),
    }
}

/// The chunks that close a stream.
fn closing(run: &Running, done: &Done) -> Vec<Value> {
    match run.api {
        Api::Native => {
            let mut v = final_body(run, "", &[], &[], done);
            v["tokens"] = json!([]);
            vec![v]
        }
        Api::Completions | Api::Chat => {
            let (object, choice) = if run.api == Api::Chat {
                (
                    "chat.completion.chunk",
                    json!({"index": 0, "delta": {}, "logprobs": null, "finish_reason": finish_reason(run, done)}),
                )
            } else {
                (
                    "text_completion",
                    json!({"text": "", "index": 0, "logprobs": null, "finish_reason": done.finish.reason()}),
                )
            };
            let mut last = json!({
                "id": run.id, "object": object, "created": now(), "model": run.model,
                "choices": [choice], "timings": timings(done),
            });
            let mut out = Vec::new();
            if run.opts.include_usage {
                out.push(last.take());
                out.push(json!({
                    "id": run.id, "object": object, "created": now(), "model": run.model,
                    "choices": [], "usage": usage(run.n_prompt, done),
                }));
            } else {
                last["usage"] = usage(run.n_prompt, done);
                out.push(last);
            }
            out
        }
    }
}

enum Phase {
    Start,
    Body,
    End,
}

/// The events of a task as server-sent events; OpenAI endpoints end with
/// `data: [DONE]`, errors are sent as an `error` object.
fn sse_stream(run: Running) -> impl Stream<Item = Result<Sse, Infallible>> {
    chunk_stream(run).map(|c| Ok(c.sse()))
}

/// One piece of a stream: a JSON chunk, or the closing `[DONE]`.
enum Chunk {
    Json(Value),
    Done,
}

impl Chunk {
    fn sse(&self) -> Sse {
        match self {
            Chunk::Json(v) => Sse::default().data(v.to_string()),
            Chunk::Done => Sse::default().data("[DONE]"),
        }
    }
}

/// The chunks of one task's reply.
fn chunk_stream(run: Running) -> impl Stream<Item = Chunk> {
    stream::unfold((run, Phase::Start), move |(mut run, phase)| async move {
        let mut out = Vec::new();
        let next = match phase {
            Phase::End => return None,
            Phase::Start if run.api == Api::Chat => {
                out.push(Chunk::Json(json!({
                    "id": run.id, "object": "chat.completion.chunk", "created": now(), "model": run.model,
                    "choices": [{"index": 0, "delta": {"role": "assistant", "content": null}, "logprobs": null, "finish_reason": null}],
                })));
                Phase::Body
            }
            Phase::Start | Phase::Body => match next_event(&mut run).await {
                Ok(Event::Text { text, tokens, probs }) => {
                    if run.api == Api::Chat {
                        out.extend(chat_chunks(&mut run, &text, &probs, false).into_iter().map(Chunk::Json));
                    } else if !text.is_empty() || !tokens.is_empty() {
                        out.push(Chunk::Json(chunk(&run, &text, &tokens, &probs)));
                    }
                    Phase::Body
                }
                Ok(Event::Done(done)) => {
                    if run.api == Api::Chat {
                        out.extend(chat_chunks(&mut run, "", &[], true).into_iter().map(Chunk::Json));
                    }
                    out.extend(closing(&run, &done).into_iter().map(Chunk::Json));
                    if run.api != Api::Native {
                        out.push(Chunk::Done);
                    }
                    Phase::End
                }
                Ok(_) => Phase::End,
                Err(e) => {
                    out.push(Chunk::Json(e.body()));
                    Phase::End
                }
            },
        };
        Some((stream::iter(out), (run, next)))
    })
    .flatten()
}

/// The streams of several choices as one: chunks as they come, each with
/// its choice's index; the usage of all (summed) and `[DONE]` at the end.
fn merged_sse_stream(runs: Vec<Running>) -> impl Stream<Item = Result<Sse, Infallible>> {
    let include_usage = runs[0].opts.include_usage;
    let head = json!({"id": runs[0].id, "model": runs[0].model});
    let object = if runs[0].api == Api::Chat {
        "chat.completion.chunk"
    } else {
        "text_completion"
    };
    let tagged = runs
        .into_iter()
        .enumerate()
        .map(|(i, run)| chunk_stream(run).map(move |c| (i, c)).boxed());
    let usage = Arc::new(std::sync::Mutex::new(
        json!({"prompt_tokens": 0, "completion_tokens": 0}),
    ));
    let sum = usage.clone();
    let body = stream::select_all(tagged).filter_map(move |(i, c)| {
        let sum = sum.clone();
        async move {
            let Chunk::Json(mut v) = c else { return None };
            if let Some(u) = v.as_object_mut().and_then(|o| o.remove("usage")) {
                if let Ok(mut s) = sum.lock() {
                    s["prompt_tokens"] = u["prompt_tokens"].clone();
                    let c = s["completion_tokens"].as_u64().unwrap_or(0)
                        + u["completion_tokens"].as_u64().unwrap_or(0);
                    s["completion_tokens"] = c.into();
                }
            }
            let choices = v["choices"].as_array_mut()?;
            if choices.is_empty() {
                return None;
            }
            for c in choices {
                c["index"] = i.into();
            }
            Some(Ok(Sse::default().data(v.to_string())))
        }
    });
    let tail = stream::once(async move {
        let mut out = Vec::new();
        if include_usage {
            let mut u = usage.lock().map(|u| u.clone()).unwrap_or_default();
            let total = u["prompt_tokens"].as_u64().unwrap_or(0) + u["completion_tokens"].as_u64().unwrap_or(0);
            u["total_tokens"] = total.into();
            out.push(Ok(Sse::default().data(
                json!({"id": head["id"], "object": object, "created": now(), "model": head["model"], "choices": [], "usage": u})
                    .to_string(),
            )));
        }
        out.push(Ok(Sse::default().data("[DONE]")));
        stream::iter(out)
    })
    .flatten();
    body.chain(tail)
}
