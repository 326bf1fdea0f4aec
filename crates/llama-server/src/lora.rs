//! LoRA adapters of the server: loaded with the model (`--lora`,
//! `--lora-scaled`; `--lora-init-without-apply` starts them at scale 0),
//! listed by `GET /lora-adapters`, their global scales set by
//! `POST /lora-adapters` (adapters left out go to 0), and chosen per
//! request by its `lora` field (`[{"id": 0, "scale": 0.5}]`, unlisted
//! adapters at 0), which applies to that request alone. The engine decodes
//! slots with different scales in separate batches, each with its own
//! adapter set.

use std::sync::Mutex;

use axum::body::Bytes;
use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

use crate::app::AppState;
use crate::error::ApiError;
use crate::request::Body;

/// The adapters the server loaded, by id (their order on the command line).
#[derive(Debug, Default)]
pub struct LoraRegistry {
    inner: Mutex<Vec<(String, f32)>>,
}

impl LoraRegistry {
    /// Records the loaded adapters with their starting scales.
    pub fn set_loaded(&self, adapters: Vec<(String, f32)>) {
        *self.inner.lock().unwrap_or_else(|e| e.into_inner()) = adapters;
    }

    /// `(path, global scale)` of every adapter, by id.
    pub fn list(&self) -> Vec<(String, f32)> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Number of adapters.
    pub fn len(&self) -> usize {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// True when the server has no adapters.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The global scales, by id.
    pub fn scales(&self) -> Vec<f32> {
        self.list().into_iter().map(|(_, s)| s).collect()
    }

    /// Sets the global scales.
    pub fn set_scales(&self, scales: &[f32]) {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        for (a, &s) in g.iter_mut().zip(scales) {
            a.1 = s;
        }
    }
}

/// Reads `[{"id": N, "scale": S}, ...]` for `n` adapters into one scale
/// per adapter (unlisted ones 0). `field` names the value in errors.
pub fn parse_scales(v: &Value, n: usize, field: &str) -> Result<Vec<f32>, ApiError> {
    let bad = |msg: String| ApiError::field(field, msg);
    let items = v.as_array().ok_or_else(|| {
        bad(format!(
            "'{field}' must be an array of {{\"id\": N, \"scale\": S}} objects"
        ))
    })?;
    let mut scales = vec![0.0f32; n];
    for (i, item) in items.iter().enumerate() {
        let o = item.as_object().ok_or_else(|| {
            bad(format!(
                "'{field}[{i}]' must be an object with 'id' and 'scale'"
            ))
        })?;
        let id = o
            .get("id")
            .and_then(Value::as_u64)
            .ok_or_else(|| bad(format!("'{field}[{i}].id' must be a non-negative integer")))?;
        let id = usize::try_from(id)
            .ok()
            .filter(|&id| id < n)
            .ok_or_else(|| {
                bad(format!(
                    "'{field}[{i}].id' is {id}: the server has {n} LoRA adapter(s)"
                ))
            })?;
        let scale = o
            .get("scale")
            .and_then(Value::as_f64)
            .filter(|s| s.is_finite() && s.abs() <= f64::from(f32::MAX))
            .ok_or_else(|| bad(format!("'{field}[{i}].scale' must be a finite number")))?;
        scales[id] = scale as f32;
    }
    Ok(scales)
}

/// The `lora` field of a generation request: its scales, or None to use
/// the global ones.
pub fn request_scales(b: &Body, loras: &LoraRegistry) -> Result<Option<Vec<f32>>, ApiError> {
    match b.get("lora") {
        None => Ok(None),
        Some(v) => parse_scales(v, loras.len(), "lora").map(Some),
    }
}

fn listing(loras: &LoraRegistry) -> Value {
    let list: Vec<Value> = loras
        .list()
        .into_iter()
        .enumerate()
        .map(|(id, (path, scale))| json!({"id": id, "path": path, "scale": scale}))
        .collect();
    Value::Array(list)
}

/// `GET /lora-adapters`: `[{"id", "path", "scale"}]`.
pub async fn get_adapters(State(app): State<AppState>) -> Result<Json<Value>, ApiError> {
    app.model()?;
    Ok(Json(listing(&app.engine.shared.loras)))
}

/// `POST /lora-adapters`: sets the global scales from
/// `[{"id": N, "scale": S}]` (adapters left out go to 0); answers the new
/// listing.
pub async fn post_adapters(
    State(app): State<AppState>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    app.model()?;
    let v: Value = serde_json::from_slice(&body)
        .map_err(|e| ApiError::field("body", format!("malformed JSON: {e}")))?;
    let loras = &app.engine.shared.loras;
    let scales = parse_scales(&v, loras.len(), "body")?;
    loras.set_scales(&scales);
    Ok(Json(listing(loras)))
}

#[cfg(test)]
mod tests {
    use super::parse_scales;
    use serde_json::json;

    #[test]
    fn scales_of_a_request() {
        assert_eq!(
            parse_scales(&json!([{"id": 1, "scale": 0.5}]), 2, "lora").unwrap(),
            vec![0.0, 0.5]
        );
        assert_eq!(parse_scales(&json!([]), 2, "lora").unwrap(), vec![0.0, 0.0]);
        for bad in [
            json!({"id": 0}),
            json!([{"id": 2, "scale": 1}]),
            json!([{"id": -1, "scale": 1}]),
            json!([{"id": "0", "scale": 1}]),
            json!([{"id": 0, "scale": "x"}]),
            json!([{"id": 0}]),
            json!([{"id": 0, "scale": 1e300}]),
            json!([3]),
        ] {
            let e = parse_scales(&bad, 2, "lora").unwrap_err();
            assert!(
                e.body().to_string().contains("lora"),
                "{bad}: {:?}",
                e.body()
            );
        }
    }
}
