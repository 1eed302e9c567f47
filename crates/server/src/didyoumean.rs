//! `GET|POST /ws/didyoumean/<dimension>` (SPEC §9.1).

use std::collections::HashMap;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use discern_engine::didyoumean::{dimension, parse_options, suggest};
use discern_model::Error;
use serde_json::{Map, Value as J};

use crate::body::{in_place, read_json};
use crate::errors::ApiError;
use crate::AppState;

async fn answer(
    engine: AppState,
    dim: String,
    params: Map<String, J>,
) -> Result<Response, ApiError> {
    if !engine.queries_allowed() {
        return Err(
            Error::Unavailable("the index is still being built; retry shortly".into()).into(),
        );
    }
    let out = in_place(move || {
        let snap = engine.snapshot();
        let (di, _) = dimension(&snap, &dim)?;
        let (query, opts) = parse_options(&params)?;
        let query = query.ok_or_else(|| Error::bad("query: the text to check is required"))?;
        Ok::<_, Error>(suggest(&snap, di, &query, &opts))
    })
    .await??;
    Ok(Json(out).into_response())
}

fn from_query_string(q: HashMap<String, String>) -> Map<String, J> {
    q.into_iter().map(|(k, v)| (k, J::String(v))).collect()
}

pub async fn get(
    State(engine): State<AppState>,
    Path(dim): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    answer(engine, dim, from_query_string(q)).await
}

/// Parameters from the query string, then from a JSON body object (which wins).
pub async fn post(
    State(engine): State<AppState>,
    Path(dim): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let mut params = from_query_string(q);
    match read_json(body, &headers).await? {
        J::Object(m) => params.extend(m),
        other => {
            return Err(ApiError::bad(format!(
                "the request body must be a JSON object of parameters, got {other}"
            )))
        }
    }
    answer(engine, dim, params).await
}
