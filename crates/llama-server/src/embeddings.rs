//! `POST /v1/embeddings`: pooled, normalised embeddings of each input.

use std::sync::atomic::Ordering;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use llama::Token;
use serde_json::{json, Value};

use crate::app::AppState;
use crate::engine::{Event, TaskKind};
use crate::error::ApiError;
use crate::request;

/// `POST /v1/embeddings` (`input`: a string, strings, token ids, or arrays
/// of token ids; `encoding_format`: `float` or `base64`).
pub async fn embeddings(State(app): State<AppState>, body: Bytes) -> Result<Json<Value>, ApiError> {
    let model = app.model()?;
    if !app.engine.embeddings {
        return Err(ApiError::new(
            StatusCode::NOT_IMPLEMENTED,
            "This server does not support embeddings. Start it with `--embeddings`",
        ));
    }
    let b = request::parse(&body)?;
    let field = if b.get("input").is_some() {
        "input"
    } else {
        "content"
    };
    let vocab = &model.vocab;
    let n_vocab = vocab.n_tokens() as i64;
    let ids = |a: &[Value]| -> Option<Vec<Token>> {
        a.iter()
            .map(|v| {
                v.as_i64()
                    .filter(|t| (0..n_vocab).contains(t))
                    .map(|t| t as Token)
            })
            .collect()
    };
    let bad = || {
        ApiError::field(
            field,
            format!("'{field}' must be a string, an array of strings, or (arrays of) token ids in the vocabulary"),
        )
    };
    let inputs: Vec<Vec<Token>> = match b.get(field) {
        None => return Err(ApiError::field("input", "'input' is required")),
        Some(Value::String(s)) => vec![vocab.tokenize(s, true, true)],
        Some(Value::Array(a)) if a.iter().all(Value::is_string) => a
            .iter()
            .map(|s| vocab.tokenize(s.as_str().unwrap_or_default(), true, true))
            .collect(),
        Some(Value::Array(a)) if a.iter().all(Value::is_number) => vec![ids(a).ok_or_else(bad)?],
        Some(Value::Array(a)) if a.iter().all(Value::is_array) => a
            .iter()
            .map(|x| x.as_array().and_then(|x| ids(x)))
            .collect::<Option<_>>()
            .ok_or_else(bad)?,
        Some(_) => return Err(bad()),
    };
    let base64 = match b.str("encoding_format")? {
        None | Some("float") => false,
        Some("base64") => true,
        Some(o) => {
            return Err(ApiError::field(
                "encoding_format",
                format!("unknown encoding_format '{o}': use float or base64"),
            ))
        }
    };
    let limit = app.engine.shared.n_ctx_embd.load(Ordering::Acquire);
    if inputs.is_empty() || inputs.iter().any(Vec::is_empty) {
        return Err(ApiError::field(
            field,
            format!("'{field}' must not be empty"),
        ));
    }
    if let Some(long) = inputs.iter().find(|t| t.len() > limit) {
        return Err(ApiError::field(
            field,
            format!(
                "an input has {} tokens; at most {limit} fit one embedding batch",
                long.len()
            ),
        ));
    }
    let (mut rx, _cancel) = app.engine.submit(TaskKind::Embed(inputs));
    let ev = tokio::time::timeout(app.config.timeout, rx.recv())
        .await
        .map_err(|_| {
            ApiError::new(
                StatusCode::GATEWAY_TIMEOUT,
                "timed out waiting for the model",
            )
        })?;
    let (vecs, n_tokens) = match ev {
        Some(Event::Embeddings(v, n)) => (v, n),
        Some(Event::Error(e)) => return Err(ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e)),
        _ => {
            return Err(ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the engine dropped the request",
            ))
        }
    };
    let data: Vec<Value> = vecs
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let embedding = if base64 {
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                json!(base64_encode(&bytes))
            } else {
                json!(v)
            };
            json!({"object": "embedding", "index": i, "embedding": embedding})
        })
        .collect();
    Ok(Json(json!({
        "object": "list",
        "data": data,
        "model": app.config.model_alias,
        "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens},
    })))
}

/// Standard base64 with padding.
fn base64_encode(b: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(b.len().div_ceil(3) * 4);
    for c in b.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn base64_matches_the_rfc_vectors() {
        for (i, o) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(super::base64_encode(i.as_bytes()), o);
        }
    }
}
