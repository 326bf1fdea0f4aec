//! `POST /slots/{id}?action=save|restore|erase`: a slot's prompt cache
//! written to a file of `--slot-save-path`, read back from one, or
//! forgotten. File names are plain names inside that directory: a name
//! with a path separator, `..`, or a leading dot is refused.

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Value};

use crate::app::AppState;
use crate::engine::{Event, SlotAction, TaskKind};
use crate::error::ApiError;
use crate::request;

/// Whether `name` is a plain file name (llama.cpp's `fs_validate_filename`
/// in spirit: nothing that could leave the directory or hide a file).
pub fn valid_filename(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 255
        && !name.starts_with('.')
        && !name.contains("..")
        && !name
            .chars()
            .any(|c| matches!(c, '/' | '\\' | ':' | '\0') || c.is_control())
}

/// The handler.
pub async fn slot_action(
    State(app): State<AppState>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    app.model()?;
    let slot: usize = id
        .parse()
        .ok()
        .filter(|&s| s < app.engine.n_parallel)
        .ok_or_else(|| {
            ApiError::field(
                "id_slot",
                format!(
                    "invalid slot id '{id}': the server has {} slots",
                    app.engine.n_parallel
                ),
            )
        })?;
    let action = query.get("action").map(String::as_str).unwrap_or("");
    let filename = || -> Result<(String, std::path::PathBuf), ApiError> {
        let Some(dir) = &app.config.slot_save_path else {
            return Err(ApiError::new(
                StatusCode::NOT_IMPLEMENTED,
                "This server does not support slots action. Start it with `--slot-save-path`",
            ));
        };
        let b = request::parse(&body)?;
        let name = b
            .str("filename")?
            .ok_or_else(|| ApiError::field("filename", "'filename' is required"))?;
        if !valid_filename(name) {
            return Err(ApiError::field(
                "filename",
                format!("invalid filename '{name}': a plain file name inside the slot save directory is expected"),
            ));
        }
        Ok((name.to_string(), dir.join(name)))
    };
    let (kind, name) = match action {
        "save" => {
            let (name, path) = filename()?;
            (SlotAction::Save { slot, path }, Some(name))
        }
        "restore" => {
            let (name, path) = filename()?;
            if !path.is_file() {
                return Err(ApiError::field(
                    "filename",
                    format!("no saved slot file '{name}'"),
                ));
            }
            (SlotAction::Restore { slot, path }, Some(name))
        }
        "erase" => (SlotAction::Erase { slot }, None),
        other => {
            return Err(ApiError::field(
                "action",
                format!("invalid action '{other}': expected save, restore or erase"),
            ))
        }
    };
    let (mut rx, _cancel) = app.engine.submit(TaskKind::Slot(kind.clone()));
    let out = match tokio::time::timeout(app.config.timeout, rx.recv()).await {
        Err(_) => {
            return Err(ApiError::new(
                StatusCode::GATEWAY_TIMEOUT,
                "timed out waiting for the engine",
            ))
        }
        Ok(Some(Event::Slot(o))) => o,
        Ok(Some(Event::Error(e))) => return Err(ApiError::field("filename", e)),
        Ok(_) => {
            return Err(ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the engine dropped the request",
            ))
        }
    };
    Ok(Json(match kind {
        SlotAction::Save { .. } => json!({
            "id_slot": slot,
            "filename": name,
            "n_saved": out.n_tokens,
            "n_written": out.n_bytes,
            "timings": {"save_ms": out.ms},
        }),
        SlotAction::Restore { .. } => json!({
            "id_slot": slot,
            "filename": name,
            "n_restored": out.n_tokens,
            "n_read": out.n_bytes,
            "timings": {"restore_ms": out.ms},
        }),
        SlotAction::Erase { .. } => json!({"id_slot": slot, "n_erased": out.n_tokens}),
    }))
}

#[cfg(test)]
mod tests {
    use super::valid_filename;

    #[test]
    fn only_plain_names_are_valid() {
        for ok in ["slot0.bin", "a b.bin", "x"] {
            assert!(valid_filename(ok), "{ok}");
        }
        for bad in [
            "",
            "../x",
            "a/b",
            "/etc/passwd",
            "..",
            ".hidden",
            "a\\b",
            "c:x",
            "a\0b",
            "a\nb",
        ] {
            assert!(!valid_filename(bad), "{bad:?}");
        }
        assert!(!valid_filename(&"a".repeat(256)));
    }
}
