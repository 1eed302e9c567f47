//! Items (SPEC §10) and indexed values (§6.4).

use std::collections::HashMap;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use discern_dimensions::{extract, to_json};
use discern_model::RecordWithId;
use serde_json::{Map, Value as J};

use crate::body::{blocking, read_json};
use crate::errors::ApiError;
use crate::AppState;

fn json(v: J) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], v.to_string()).into_response()
}

fn to_value(id: &str, rec: &discern_model::Record, only: Option<&[String]>) -> Result<J, ApiError> {
    serde_json::to_value(RecordWithId {
        id,
        record: rec,
        only,
    })
    .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
}

pub async fn item(
    State(engine): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    blocking(move || match engine.item(&id)? {
        Some(rec) => Ok(json(to_value(&id, &rec, None)?)),
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no item {id:?}"),
        )),
    })
    .await
}

fn records(
    engine: &AppState,
    ids: &[String],
    props: Option<&[String]>,
) -> Result<Vec<J>, ApiError> {
    ids.iter()
        .zip(engine.items(ids)?)
        .map(|(id, rec)| match rec {
            Some(rec) => to_value(id, &rec, props),
            None => Ok(serde_json::json!({"_id": id, "_exists": false})),
        })
        .collect()
}

pub async fn items_get(
    State(engine): State<AppState>,
    Query(params): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let delim = params
        .get("delimiter")
        .map(String::as_str)
        .filter(|d| !d.is_empty())
        .unwrap_or(",")
        .to_string();
    let ids: Vec<String> = match params.get("items") {
        Some(s) if !s.is_empty() => s.split(delim.as_str()).map(str::to_string).collect(),
        _ => Vec::new(),
    };
    let props: Option<Vec<String>> = params
        .get("properties")
        .filter(|s| !s.is_empty())
        .map(|s| s.split(delim.as_str()).map(str::to_string).collect());
    blocking(move || Ok(json(J::Array(records(&engine, &ids, props.as_deref())?)))).await
}

fn string_array(v: Option<&J>, name: &str) -> Result<Option<Vec<String>>, ApiError> {
    match v {
        None | Some(J::Null) => Ok(None),
        Some(J::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(i, x)| {
                x.as_str().map(str::to_string).ok_or_else(|| {
                    ApiError::bad(format!("{name}[{i}]: expected a string, got {x}"))
                })
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        Some(other) => Err(ApiError::bad(format!(
            "{name}: expected an array of strings, got {other}"
        ))),
    }
}

/// The `ids` member every item-listing request needs.
fn required_ids(req: &J) -> Result<Vec<String>, ApiError> {
    string_array(req.get("ids"), "ids")?
        .ok_or_else(|| ApiError::bad("ids: an array of item ids is required"))
}

pub async fn items_post(
    State(engine): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let req = read_json(body, &headers).await?;
    let ids = required_ids(&req)?;
    let props = string_array(req.get("properties"), "properties")?;
    blocking(move || Ok(json(J::Array(records(&engine, &ids, props.as_deref())?)))).await
}

pub async fn get_properties(
    State(engine): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let req = read_json(body, &headers).await?;
    let ids = required_ids(&req)?;
    blocking(move || {
        let mut out = Vec::with_capacity(ids.len());
        for (id, rec) in ids.iter().zip(engine.items(&ids)?) {
            out.push(match rec {
                Some(rec) => to_value(id, &rec, None)?,
                None => J::Null,
            });
        }
        Ok(json(serde_json::json!({ "properties": out })))
    })
    .await
}

pub async fn values(
    State(engine): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    blocking(move || {
        let Some(rec) = engine.item(&id)? else {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                format!("no item {id:?}"),
            ));
        };
        let snap = engine.snapshot();
        let mut m = Map::new();
        m.insert("id".into(), J::String(id.clone()));
        for dim in &snap.dims.dims {
            if let Some(v) = extract(dim, &rec).value {
                m.insert(dim.id.clone(), to_json(dim, &v));
            }
        }
        Ok(json(J::Object(m)))
    })
    .await
}
