//! Qdrant's response envelopes: `{"result": …, "status": "ok", "time": seconds}` and, for
//! errors, `{"status": {"error": "…"}, "time": seconds}` with the matching HTTP status.

use std::time::Instant;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use diskvec_db::DbError;
use serde::Serialize;
use serde_json::json;

#[derive(Serialize)]
struct Envelope<T> {
    result: T,
    status: &'static str,
    time: f64,
}

/// A successful answer, timed from `started`.
pub fn ok(result: impl Serialize, started: Instant) -> Response {
    Json(Envelope {
        result,
        status: "ok",
        time: started.elapsed().as_secs_f64(),
    })
    .into_response()
}

/// An error answer: an HTTP status and a message for people.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// Seconds for a `Retry-After` header (a spent rate).
    pub retry_after: Option<u64>,
}

impl ApiError {
    /// 503 with `Retry-After: 1`: the answer depends on a part of the system that may be
    /// back in a moment (a replica, the log, the control plane).
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: message.into(),
            retry_after: Some(1),
        }
    }

    /// 413: a body, upload or download over its limit.
    pub fn too_large(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            message: format!("Payload too large: {}", message.into()),
            retry_after: None,
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            retry_after: None,
        }
    }

    /// A body that parses but breaks a rule of the schema: Qdrant's 422 and wording.
    pub fn validation(message: impl Into<String>) -> Self {
        Self::validation_in("JSON body", message)
    }

    /// A request part (`JSON body`, `query parameters`, `path parameters`) that breaks a
    /// rule of the schema.
    pub fn validation_in(part: &str, message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::UNPROCESSABLE_ENTITY,
            message: format!("Validation error in {part}: [{}]", message.into()),
            retry_after: None,
        }
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::NOT_FOUND,
            message: message.into(),
            retry_after: None,
        }
    }
}

impl From<DbError> for ApiError {
    fn from(e: DbError) -> Self {
        if let DbError::Validation(m) = e {
            return Self::validation(m);
        }
        let status = match &e {
            DbError::InvalidInput(_) | DbError::BadRequest(_) | DbError::BadFilter(_) => {
                StatusCode::BAD_REQUEST
            }
            DbError::UnknownCollection(_) | DbError::PointNotFound(_) | DbError::NotFound(_) => {
                StatusCode::NOT_FOUND
            }
            DbError::CollectionExists(_) => StatusCode::CONFLICT,
            DbError::Unavailable(_) | DbError::Busy(_) => StatusCode::SERVICE_UNAVAILABLE,
            DbError::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let message = match &e {
            // Qdrant's wording and prefixes, which clients and people recognise.
            DbError::UnknownCollection(name) => {
                format!("Not found: Collection `{name}` doesn't exist!")
            }
            DbError::CollectionExists(name) => {
                format!("Wrong input: Collection `{name}` already exists!")
            }
            DbError::PointNotFound(id) => format!("Not found: No point with id {id} found"),
            DbError::NotFound(m) => format!("Not found: {m}"),
            DbError::InvalidInput(m) => format!("Wrong input: {m}"),
            DbError::BadRequest(m) => format!("Bad request: {m}"),
            other => other.to_string(),
        };
        let retry_after = match &e {
            DbError::RateLimited { retry_after, .. } => retry_after.map(|d| d.as_secs()),
            _ => None,
        };
        Self {
            status,
            message,
            retry_after,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        // The time of an error is not measured: 0, as a client only shows it.
        let body = json!({"status": {"error": self.message}, "time": 0.0});
        let mut response = (self.status, Json(body)).into_response();
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, seconds.into());
        }
        response
    }
}

pub type ApiResult = Result<Response, ApiError>;
