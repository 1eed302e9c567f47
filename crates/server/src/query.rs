//! `/ws/query`, `/json/query` (+ JSONP) (SPEC §7).

use std::collections::HashMap;

use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use discern_engine::{query_response, QueryResponse};
use discern_model::Error;
use serde_json::Value as J;

use crate::body::{in_place, parse_json, read_json};
use crate::errors::ApiError;
use crate::AppState;

pub(crate) fn check_queryable(engine: &AppState) -> Result<(), ApiError> {
    if engine.queries_allowed() {
        Ok(())
    } else {
        Err(Error::Unavailable("the index is still being built; retry shortly".into()).into())
    }
}

async fn run_query(engine: AppState, body: J) -> Result<QueryResponse, ApiError> {
    check_queryable(&engine)?;
    let started = std::time::Instant::now();
    let out = in_place(move || query_response(&engine, &body)).await??;
    let ms = started.elapsed().as_millis();
    if ms > 100 {
        tracing::info!(ms = ms as u64, "slow query");
    }
    Ok(out)
}

/// Counts the outcome of a JSON API call (SPEC §11 `json.*`, `query.regular|empty.*`).
fn record(
    engine: &AppState,
    started: std::time::Instant,
    outcome: &Result<(QueryResponse, String), ApiError>,
) {
    let ms = (started.elapsed().as_secs_f64() * 1e3).round();
    match outcome {
        Ok((v, text)) => {
            engine.stats.record("json.success", &[("", ms)]);
            let empty = v.total_size() == Some(0);
            let family = if empty {
                "query.empty"
            } else {
                "query.regular"
            };
            engine
                .stats
                .record(family, &[("size", text.len() as f64), ("time", ms)]);
        }
        Err(e) if e.status.is_server_error() => engine.stats.record("json.failed", &[("", ms)]),
        Err(_) => engine.stats.record("json.invalid", &[("", ms)]),
    }
}

/// Runs a query whose request body `req` yields, counting the outcome.
async fn counted(
    engine: AppState,
    req: impl std::future::Future<Output = Result<J, ApiError>>,
) -> Result<(QueryResponse, String), ApiError> {
    let started = std::time::Instant::now();
    let out = async {
        let body = req.await?;
        let v = run_query(engine.clone(), body).await?;
        let text = v.to_text();
        Ok((v, text))
    }
    .await;
    record(&engine, started, &out);
    out
}

pub async fn query(
    State(engine): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let (_, text) = counted(engine, read_json(body, &headers)).await?;
    Ok(([(header::CONTENT_TYPE, "application/json")], text).into_response())
}

fn valid_callback(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || c == '$')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$' || c == '.')
}

/// `GET /json/query?q=<json>[&callback=<name>]`.
pub async fn query_get(
    State(engine): State<AppState>,
    Query(params): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let q = params
        .get("q")
        .map(String::as_str)
        .unwrap_or("{}")
        .to_string();
    let callback = params.get("callback").cloned();
    if let Some(cb) = &callback {
        if !valid_callback(cb) {
            return Err(ApiError::bad(format!(
                "callback {cb:?} is not a valid JavaScript name"
            )));
        }
    }
    let (_, text) = counted(engine, async move { parse_json(q.as_bytes()) }).await?;
    Ok(match callback {
        Some(cb) => (
            [(header::CONTENT_TYPE, "application/javascript")],
            format!("{cb}({text});"),
        )
            .into_response(),
        None => ([(header::CONTENT_TYPE, "application/json")], text).into_response(),
    })
}
