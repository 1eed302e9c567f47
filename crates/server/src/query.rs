//! `/ws/query`, `/json/query` (+ JSONP) and `/ws/export` (SPEC §7, §8).

use std::collections::HashMap;
use std::io::Write;

use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use discern_engine::{export_line_meta, query_response};
use discern_index::{evaluate, parse_export, ExportRequest, Filter, Want};
use discern_model::{Error, RecordWithId};
use serde_json::Value as J;

use crate::body::{blocking_stream, parse_json, read_json};
use crate::errors::ApiError;
use crate::AppState;

fn check_queryable(engine: &AppState) -> Result<(), ApiError> {
    if engine.queries_allowed() {
        Ok(())
    } else {
        Err(Error::Unavailable("the index is still being built; retry shortly".into()).into())
    }
}

async fn run_query(engine: AppState, body: J) -> Result<J, ApiError> {
    check_queryable(&engine)?;
    let started = std::time::Instant::now();
    let out = tokio::task::spawn_blocking(move || query_response(&engine, &body))
        .await
        .map_err(|e| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("query task failed: {e}"),
            )
        })??;
    let ms = started.elapsed().as_millis();
    if ms > 100 {
        tracing::info!(ms = ms as u64, "slow query");
    }
    Ok(out)
}

/// Counts the outcome of a JSON API call (SPEC §11 `json.*`, `query.regular|empty.*`).
fn record(engine: &AppState, started: std::time::Instant, outcome: &Result<(J, String), ApiError>) {
    let ms = (started.elapsed().as_secs_f64() * 1e3).round();
    match outcome {
        Ok((v, text)) => {
            engine.stats.record("json.success", &[("", ms)]);
            let empty = v.get("totalSize").and_then(J::as_u64) == Some(0);
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
) -> Result<(J, String), ApiError> {
    let started = std::time::Instant::now();
    let out = async {
        let body = req.await?;
        let v = run_query(engine.clone(), body).await?;
        let text = v.to_string();
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

pub async fn export_post(
    State(engine): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let req = read_json(body, &headers).await?;
    check_queryable(&engine)?;
    let snap = engine.snapshot();
    let parsed = parse_export(&req, &snap.dims)?;
    Ok(export(engine, parsed))
}

pub async fn export_get(State(engine): State<AppState>) -> Result<Response, ApiError> {
    check_queryable(&engine)?;
    let req = ExportRequest {
        criteria: Vec::new(),
        scores: false,
        sources: true,
        exact_only: false,
        values: Vec::new(),
    };
    Ok(export(engine, req))
}

/// Streams the results as ndjson: header, then meta/values/source per item, then an
/// empty line (SPEC §8).
fn export(engine: AppState, mut req: ExportRequest) -> Response {
    let body = blocking_stream(move |sink| {
        let snap = engine.snapshot();
        let filter = Filter {
            items: None,
            not_items: None,
            exact_only: req.exact_only,
        };
        let results = evaluate(&snap, &mut req.criteria, &filter, Want::All);
        let mut format = vec!["meta"];
        if !req.values.is_empty() {
            format.push("values");
        }
        if req.sources {
            format.push("sources");
        }
        writeln!(sink, "{}", serde_json::json!({ "format": format }))?;
        let mut line = Vec::with_capacity(1024);
        for hit in &results.hits {
            line.clear();
            let mut meta = serde_json::Map::new();
            meta.insert("id".into(), J::String(hit.id.to_string()));
            if req.scores {
                meta.insert(
                    "score".into(),
                    serde_json::json!((hit.r * 1e6).round() / 1e6),
                );
            }
            if !req.exact_only {
                meta.insert("exact".into(), J::Bool(hit.exact));
            }
            serde_json::to_writer(&mut line, &meta)?;
            line.push(b'\n');
            if !req.values.is_empty() {
                serde_json::to_writer(&mut line, &export_line_meta(&snap, hit.doc, &req.values))?;
                line.push(b'\n');
            }
            if req.sources {
                let rec = engine
                    .item(&hit.id)
                    .map_err(std::io::Error::other)?
                    .unwrap_or_default();
                serde_json::to_writer(
                    &mut line,
                    &RecordWithId {
                        id: &hit.id,
                        record: &rec,
                        only: None,
                    },
                )?;
                line.push(b'\n');
            }
            sink.write_all(&line)?;
        }
        sink.write_all(b"\n")?;
        Ok(())
    });
    ([(header::CONTENT_TYPE, "application/x-ndjson")], body).into_response()
}
