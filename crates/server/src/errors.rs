use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use discern_model::Error;

/// An error answer: `{"status", "error", "message"}` as JSON (SPEC §15.1).
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            retry_after: None,
        }
    }
    pub fn bad(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        if status.is_server_error() {
            tracing::error!(error = %e, "request failed inside the engine");
        }
        let mut a = ApiError::new(status, e.to_string());
        if matches!(e, Error::Unavailable(_)) {
            a.retry_after = Some(30);
        }
        a
    }
}

pub fn error_body(status: StatusCode, message: &str) -> String {
    serde_json::json!({
        "status": status.as_u16(),
        "error": status.canonical_reason().unwrap_or("Error"),
        "message": message,
    })
    .to_string()
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut resp = (self.status, error_body(self.status, &self.message)).into_response();
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Some(s) = self.retry_after {
            if let Ok(v) = HeaderValue::from_str(&s.to_string()) {
                resp.headers_mut().insert(header::RETRY_AFTER, v);
            }
        }
        resp
    }
}

/// Gives the JSON error body to answers axum produces itself (405 with `Allow`,
/// 4xx from extractors) while keeping their headers.
pub async fn json_error_for_bare_status(resp: Response) -> Response {
    let status = resp.status();
    let is_json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    let text = axum::body::to_bytes(body, 64 * 1024)
        .await
        .unwrap_or_default();
    let msg = if text.is_empty() {
        status.canonical_reason().unwrap_or("error").to_string()
    } else {
        String::from_utf8_lossy(&text).into_owned()
    };
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, axum::body::Body::from(error_body(status, &msg)))
}
