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
enum Api {
    Native,
    Completions,
    Chat,
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

async fn respond(app: &App, body: &[u8], api: Api) -> Response {
    let run = match start(app, body, api) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    if run.opts.stream {
        SseBody::new(sse_stream(run)).into_response()
    } else {
        match collect(run).await {
            Ok(v) => Json(v).into_response(),
            Err(e) => e.into_response(),
        }
    }
}

fn start(app: &App, body: &[u8], api: Api) -> Result<Running, ApiError> {
    let model = app.model()?;
    let vocab = &model.vocab;
    let b = request::parse(body)?;
    let mut opts = request::gen_options(&b, &app.config.sampling, vocab, api == Api::Chat)?;
    let mut chat = None;
    let (tokens, field) = if api == Api::Chat {
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
    let req = GenRequest {
        prompt: tokens,
        sampling: opts.sampling.clone(),
        n_predict: opts.n_predict,
        stop: opts.stop.clone(),
        n_probs: opts.n_probs,
        ignore_eos: opts.ignore_eos,
    };
    let (rx, cancel) = app.engine.submit(TaskKind::Generate(Box::new(req)));
    Ok(Running {
        api,
        id: new_id(if api == Api::Chat { "chatcmpl" } else { "cmpl" }),
        model: app.config.model_alias.clone(),
        opts,
        n_prompt,
        rx,
        cancel,
        timeout: app.config.timeout,
        chat,
    })
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
            Event::Embeddings(..) | Event::Error(_) => {
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

fn timings(done: &Done) -> Value {
    json!({
        "prompt_n": done.n_prompt,
        "prompt_ms": done.t_prompt_ms,
        "prompt_per_second": done.n_prompt as f64 / (done.t_prompt_ms / 1e3).max(1e-9),
        "predicted_n": done.n_gen,
        "predicted_ms": done.t_gen_ms,
        "predicted_per_second": done.n_gen as f64 / (done.t_gen_ms / 1e3).max(1e-9),
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
                "truncated": false,
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
    let data = |v: &Value| Sse::default().data(v.to_string());
    stream::unfold((run, Phase::Start), move |(mut run, phase)| async move {
        let mut out = Vec::new();
        let next = match phase {
            Phase::End => return None,
            Phase::Start if run.api == Api::Chat => {
                out.push(data(&json!({
                    "id": run.id, "object": "chat.completion.chunk", "created": now(), "model": run.model,
                    "choices": [{"index": 0, "delta": {"role": "assistant", "content": null}, "logprobs": null, "finish_reason": null}],
                })));
                Phase::Body
            }
            Phase::Start | Phase::Body => match next_event(&mut run).await {
                Ok(Event::Text { text, tokens, probs }) => {
                    if run.api == Api::Chat {
                        out.extend(chat_chunks(&mut run, &text, &probs, false).iter().map(data));
                    } else if !text.is_empty() || !tokens.is_empty() {
                        out.push(data(&chunk(&run, &text, &tokens, &probs)));
                    }
                    Phase::Body
                }
                Ok(Event::Done(done)) => {
                    if run.api == Api::Chat {
                        out.extend(chat_chunks(&mut run, "", &[], true).iter().map(data));
                    }
                    out.extend(closing(&run, &done).iter().map(data));
                    if run.api != Api::Native {
                        out.push(Sse::default().data("[DONE]"));
                    }
                    Phase::End
                }
                Ok(_) => Phase::End,
                Err(e) => {
                    out.push(data(&e.body()));
                    Phase::End
                }
            },
        };
        Some((stream::iter(out.into_iter().map(Ok)), (run, next)))
    })
    .flatten()
}
