//! The error reply of every refused request: `{"error": "...", "field": "/json/pointer"}`.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

/// A refused request: status, message, and the JSON pointer of the offending value in
/// the request body (`None` when no single field is at fault).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub error: String,
    pub field: Option<String>,
}

impl ApiError {
    /// 400 naming `field`.
    pub fn bad(field: impl Into<String>, error: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            error: error.into(),
            field: Some(field.into()),
        }
    }
    /// 400 that no single field is at fault for.
    pub fn bad_request(error: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            error: error.into(),
            field: None,
        }
    }
    pub fn not_found(error: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::NOT_FOUND,
            error: error.into(),
            field: None,
        }
    }
    pub fn conflict(field: Option<&str>, error: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::CONFLICT,
            error: error.into(),
            field: field.map(str::to_string),
        }
    }
    /// 500: the server's own failure (e.g. the SQLite file); logged.
    pub fn internal(e: impl std::fmt::Display) -> Self {
        tracing::error!("request failed: {e}");
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            error: format!("internal error: {e}"),
            field: None,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "error": self.error, "field": self.field });
        (self.status, Json(body)).into_response()
    }
}
