//! The HTTP application: shared state, routes, and the layers that check
//! the API key and read bodies under a size limit and a timeout.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::body::{Body as HttpBody, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use llama::chat::ChatTemplate;
use llama::sampling::SamplingParams;
use serde_json::{json, Value};

use crate::engine::EngineHandle;
use crate::error::ApiError;
use crate::request;

/// Largest request body accepted.
pub const BODY_LIMIT: usize = 8 << 20;

/// Settings of the HTTP side.
#[derive(Clone, Debug)]
pub struct HttpConfig {
    /// Required key (`--api-key`), if any.
    pub api_key: Option<String>,
    /// Serve `/metrics`.
    pub metrics: bool,
    /// Read timeout and longest wait for the next token (`-to`).
    pub timeout: Duration,
    /// `--chat-template` (a name, a file, or Jinja text).
    pub chat_template: Option<String>,
    /// Render the model's template with Jinja (`--jinja`, the default).
    pub jinja: bool,
    /// The model's name in responses (`--alias`, default the file name).
    pub model_alias: String,
    /// Default sampling settings.
    pub sampling: SamplingParams,
    /// `--reasoning-format`.
    pub reasoning_format: llama::chat::tools::ReasoningFormat,
    /// `--slot-save-path`.
    pub slot_save_path: Option<std::path::PathBuf>,
    /// `--keep`: the default `n_keep` of requests.
    pub n_keep: i64,
    /// The context's batch size (the `/infill` layout).
    pub n_batch: usize,
    /// `-n`: the server's default `n_predict` (the `/infill` layout).
    pub n_predict: i64,
    /// `--spm-infill`: suffix before prefix in `/infill` prompts.
    pub spm_infill: bool,
    /// The server's draft settings, the defaults of a request's
    /// `speculative.n_max`, `.n_min` and `.p_min`.
    pub draft: llama::speculative::DraftParams,
}

/// State of the handlers.
pub struct App {
    /// The engine.
    pub engine: EngineHandle,
    /// HTTP settings.
    pub config: HttpConfig,
    chat: OnceLock<Result<ChatTemplate, String>>,
}

/// The shared application state.
pub type AppState = Arc<App>;

impl App {
    /// State over a started engine.
    pub fn new(engine: EngineHandle, config: HttpConfig) -> AppState {
        Arc::new(App {
            engine,
            config,
            chat: OnceLock::new(),
        })
    }

    /// The model, or 503 while it loads.
    pub fn model(&self) -> Result<&llama::Model, ApiError> {
        if !self.engine.is_ready() {
            return Err(ApiError::loading());
        }
        self.engine
            .model()
            .map(|m| &**m)
            .ok_or_else(ApiError::loading)
    }

    /// The chat template, built once the model is loaded.
    pub fn chat_template(&self) -> Result<&ChatTemplate, ApiError> {
        let model = self.model()?;
        let t = self.chat.get_or_init(|| {
            let own = model.metadata.get_str(llama::chat::METADATA_KEY).ok();
            ChatTemplate::new(
                own,
                self.config.chat_template.as_deref(),
                self.config.jinja,
                &model.vocab,
            )
            .map_err(|e| e.to_string())
        });
        t.as_ref()
            .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.clone()))
    }
}

/// The router with every endpoint.
pub fn router(app: AppState) -> Router {
    Router::new()
        .route("/", get(page))
        .route("/index.html", get(page))
        .route("/health", get(health))
        .route("/v1/health", get(health))
        .route("/v1/models", get(models))
        .route("/models", get(models))
        .route("/props", get(props))
        .route("/tokenize", post(tokenize))
        .route("/detokenize", post(detokenize))
        .route("/apply-template", post(apply_template))
        .route("/metrics", get(metrics))
        .route("/slots", get(slots))
        .route(
            "/lora-adapters",
            get(crate::lora::get_adapters).post(crate::lora::post_adapters),
        )
        .route("/slots/{id}", post(crate::slots_api::slot_action))
        .route("/infill", post(crate::infill::infill))
        .route("/completion", post(crate::completions::completion))
        .route("/completions", post(crate::completions::completion))
        .route("/v1/completions", post(crate::completions::v1_completions))
        .route(
            "/v1/chat/completions",
            post(crate::completions::chat_completions),
        )
        .route(
            "/chat/completions",
            post(crate::completions::chat_completions),
        )
        .route("/v1/embeddings", post(crate::embeddings::embeddings))
        .route("/embeddings", post(crate::embeddings::embeddings))
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(app.clone(), read_body))
        .layer(middleware::from_fn_with_state(app.clone(), auth))
        .with_state(app)
}

async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "File Not Found")
}

/// Compares in time that depends on the lengths only.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = u64::from(a.len() != b.len());
    for i in 0..a.len().max(b.len()) {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0xff);
        diff |= u64::from(x ^ y);
    }
    std::hint::black_box(diff) == 0
}

fn given_key(headers: &HeaderMap) -> Option<&[u8]> {
    if let Some(v) = headers.get(header::AUTHORIZATION) {
        let v = v.as_bytes();
        return Some(v.strip_prefix(b"Bearer ").unwrap_or(v));
    }
    headers.get("x-api-key").map(|v| v.as_bytes())
}

/// Every endpoint but `/health` and the static page needs the key.
async fn auth(State(app): State<AppState>, req: Request, next: Next) -> Response {
    if let Some(key) = &app.config.api_key {
        let path = req.uri().path();
        let public = matches!(path, "/health" | "/v1/health" | "/" | "/index.html");
        let ok = given_key(req.headers()).is_some_and(|k| constant_time_eq(k, key.as_bytes()));
        if !public && !ok {
            return ApiError::new(StatusCode::UNAUTHORIZED, "Invalid API Key").into_response();
        }
    }
    next.run(req).await
}

/// 413, naming the body.
fn too_large() -> Response {
    ApiError {
        status: StatusCode::PAYLOAD_TOO_LARGE,
        message: format!("the request body is larger than {BODY_LIMIT} bytes"),
        param: Some("body".into()),
    }
    .into_response()
}

/// Reads the whole body under [`BODY_LIMIT`] and the read timeout.
async fn read_body(State(app): State<AppState>, req: Request, next: Next) -> Response {
    let (parts, body) = req.into_parts();
    // A declared length over the limit is refused at once, rather than
    // after reading up to the limit (or waiting for bytes that may never
    // come).
    let declared = parts
        .headers
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > BODY_LIMIT as u64) {
        return too_large();
    }
    let read = axum::body::to_bytes(body, BODY_LIMIT);
    let bytes = match tokio::time::timeout(app.config.timeout, read).await {
        Err(_) => {
            return ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "timed out reading the request body",
            )
            .into_response()
        }
        Ok(Err(e)) => {
            let too_big = std::error::Error::source(&e)
                .is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
            return if too_big {
                too_large()
            } else {
                ApiError::field("body", format!("cannot read the request body: {e}"))
                    .into_response()
            };
        }
        Ok(Ok(b)) => b,
    };
    next.run(Request::from_parts(parts, HttpBody::from(bytes)))
        .await
}

async fn page() -> Html<&'static str> {
    Html(include_str!("../static/index.html"))
}

async fn health(State(app): State<AppState>) -> Response {
    if let Some(e) = app.engine.load_error() {
        return ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e).into_response();
    }
    if app.engine.is_ready() {
        Json(json!({"status": "ok"})).into_response()
    } else {
        ApiError::loading().into_response()
    }
}

async fn models(State(app): State<AppState>) -> Result<Json<Value>, ApiError> {
    let model = app.model()?;
    Ok(Json(json!({
        "object": "list",
        "data": [{
            "id": app.config.model_alias,
            "object": "model",
            "created": crate::completions::now(),
            "owned_by": "llamacpp",
            "meta": {
                "vocab_type": format!("{:?}", model.vocab.vocab_type()),
                "n_vocab": model.hparams.n_vocab,
                "n_ctx_train": model.hparams.n_ctx_train,
                "n_embd": model.hparams.n_embd,
                "n_params": model.n_elements,
                "size": model.size_bytes,
            }
        }]
    })))
}

async fn props(State(app): State<AppState>) -> Result<Json<Value>, ApiError> {
    let tmpl = app.chat_template()?;
    Ok(Json(json!({
        "total_slots": app.engine.n_parallel,
        "model_path": app.config.model_alias,
        "chat_template": tmpl.source,
        "n_ctx_slot": app.engine.shared.n_ctx_slot.load(std::sync::atomic::Ordering::Acquire),
    })))
}

/// `POST /tokenize`.
pub async fn tokenize(State(app): State<AppState>, body: Bytes) -> Result<Json<Value>, ApiError> {
    let vocab = &app.model()?.vocab;
    let b = request::parse(&body)?;
    let content = b
        .str("content")?
        .ok_or_else(|| ApiError::field("content", "'content' is required"))?;
    let add_special = b.bool("add_special")?.unwrap_or(false);
    let parse_special = b.bool("parse_special")?.unwrap_or(true);
    let with_pieces = b.bool("with_pieces")?.unwrap_or(false);
    let toks = vocab.tokenize(content, add_special, parse_special);
    let tokens: Vec<Value> = if with_pieces {
        toks.iter()
            .map(|&t| {
                let piece = vocab.token_to_piece(t, true);
                let piece = match String::from_utf8(piece) {
                    Ok(s) => json!(s),
                    Err(e) => json!(e.into_bytes()),
                };
                json!({"id": t, "piece": piece})
            })
            .collect()
    } else {
        toks.iter().map(|&t| json!(t)).collect()
    };
    Ok(Json(json!({ "tokens": tokens })))
}

/// `POST /detokenize`.
pub async fn detokenize(State(app): State<AppState>, body: Bytes) -> Result<Json<Value>, ApiError> {
    let vocab = &app.model()?.vocab;
    let b = request::parse(&body)?;
    let n = vocab.n_tokens() as i64;
    let toks = match b.get("tokens") {
        None => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| match v.as_i64() {
                Some(t) if (0..n).contains(&t) => Ok(t as i32),
                _ => Err(ApiError::field(
                    "tokens",
                    format!("'tokens' must hold token ids in [0, {n})"),
                )),
            })
            .collect::<Result<Vec<_>, _>>()?,
        Some(_) => {
            return Err(ApiError::field(
                "tokens",
                "'tokens' must be an array of token ids",
            ))
        }
    };
    // The pieces joined, control tokens as text (llama.cpp's tokens_to_str).
    let bytes: Vec<u8> = toks
        .iter()
        .flat_map(|&t| vocab.token_to_piece(t, true))
        .collect();
    Ok(Json(json!({ "content": String::from_utf8_lossy(&bytes) })))
}

/// `POST /apply-template`.
pub async fn apply_template(
    State(app): State<AppState>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let b = request::parse(&body)?;
    let setup = crate::chat::prepare(&app, &b, false)?;
    Ok(Json(json!({ "prompt": setup.prompt })))
}

async fn metrics(State(app): State<AppState>) -> Response {
    if !app.config.metrics {
        return ApiError::new(
            StatusCode::NOT_IMPLEMENTED,
            "This server does not support metrics endpoint. Start it with `--metrics`",
        )
        .into_response();
    }
    let deferred = app
        .engine
        .shared
        .n_deferred
        .load(std::sync::atomic::Ordering::Relaxed);
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        app.engine.shared.metrics.render(deferred),
    )
        .into_response()
}

async fn slots(State(app): State<AppState>) -> Result<Json<Value>, ApiError> {
    app.model()?;
    let infos = app
        .engine
        .shared
        .slots
        .lock()
        .map(|g| g.clone())
        .unwrap_or_default();
    Ok(Json(serde_json::to_value(infos).unwrap_or_default()))
}

#[cfg(test)]
mod tests {
    use super::constant_time_eq;

    #[test]
    fn keys_compare_exactly() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret1"));
        assert!(!constant_time_eq(b"", b"x"));
    }
}
