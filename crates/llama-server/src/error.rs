//! Errors answered to clients, as OpenAI-style JSON:
//! `{"error": {"code", "message", "type", "param"}}`.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

/// An error answered to a client.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// What went wrong.
    pub message: String,
    /// The request field at fault.
    pub param: Option<String>,
}

impl ApiError {
    /// 400 for a field.
    pub fn field(param: &str, message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            param: Some(param.to_string()),
        }
    }

    /// An error with a status and no field.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            param: None,
        }
    }

    /// 503 while the model loads.
    pub fn loading() -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "Loading model")
    }

    fn kind(&self) -> &'static str {
        match self.status.as_u16() {
            401 => "authentication_error",
            404 => "not_found_error",
            501 => "not_supported_error",
            503 => "unavailable_error",
            400..=499 => "invalid_request_error",
            _ => "server_error",
        }
    }

    /// The JSON body.
    pub fn body(&self) -> serde_json::Value {
        serde_json::json!({
            "error": {
                "code": self.status.as_u16(),
                "message": self.message,
                "type": self.kind(),
                "param": self.param,
            }
        })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(self.body())).into_response()
    }
}
