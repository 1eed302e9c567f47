use std::collections::HashMap;

use axum::extract::{Query, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::errors::ApiError;
use crate::AppState;

fn status_param(
    params: &HashMap<String, String>,
    name: &str,
    default: u16,
) -> Result<StatusCode, ApiError> {
    match params.get(name) {
        None => Ok(StatusCode::from_u16(default).unwrap_or(StatusCode::OK)),
        Some(v) => v
            .trim()
            .parse::<u16>()
            .ok()
            .filter(|c| (200..=599).contains(c))
            .and_then(|c| StatusCode::from_u16(c).ok())
            .ok_or_else(|| {
                ApiError::bad(format!(
                    "{name}={v:?}: expected an HTTP status code from 200 to 599"
                ))
            }),
    }
}

/// `GET|HEAD /ws/queryable` (SPEC §13).
pub async fn queryable(
    State(engine): State<AppState>,
    Query(params): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let success = status_param(&params, "success", 204)?;
    let error = status_param(&params, "error", 503)?;
    let retry_after = match params.get("retryAfter") {
        None => 30,
        Some(v) => v
            .trim()
            .parse::<u64>()
            .map_err(|_| ApiError::bad(format!("retryAfter={v:?}: expected seconds")))?,
    };
    let while_populating = match params.get("whilePopulating").map(String::as_str) {
        None | Some("false") => false,
        Some("true") => true,
        Some(v) => {
            return Err(ApiError::bad(format!(
                "whilePopulating={v:?}: expected true or false"
            )))
        }
    };
    let ok = engine.is_queryable() || while_populating;
    if ok {
        return Ok(success.into_response());
    }
    let mut resp = error.into_response();
    if let Ok(v) = HeaderValue::from_str(&retry_after.to_string()) {
        resp.headers_mut().insert(header::RETRY_AFTER, v);
    }
    Ok(resp)
}

fn xml(body: String) -> Response {
    ([(header::CONTENT_TYPE, "text/xml; charset=utf-8")], body).into_response()
}

fn flag(b: bool) -> &'static str {
    if b {
        "<true/>"
    } else {
        "<false/>"
    }
}

pub async fn system_state(State(engine): State<AppState>) -> Response {
    xml(format!(
        "<system-state><running>{}</running><queryable>{}</queryable></system-state>",
        flag(true),
        flag(engine.is_queryable())
    ))
}

pub async fn runtime() -> Response {
    let total = discern_engine::process::resident_bytes();
    let heap = discern_engine::alloc::allocated_bytes().min(total);
    let max = discern_engine::process::available_memory_bytes().max(total);
    xml(format!(
        "<runtime><freeMemory>{}</freeMemory><totalMemory>{total}</totalMemory><maxMemory>{max}</maxMemory></runtime>",
        total - heap
    ))
}
