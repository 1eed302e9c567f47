//! The changeset log (SPEC §5), changeset POST (§3, §4), checkpoint, dimensions (§6.1).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use discern_changeset::escape_xml;
use discern_engine::discern_store::{ApplyOutcome, ChangesetMeta, ChangesetType};

use crate::body::{blocking, blocking_stream, decoder, read_bounded, ChannelReader, LimitReader};
use crate::errors::ApiError;
use crate::AppState;

/// `Authorization: Bearer <token>` when an admin token is configured (SPEC §15.4).
pub fn require_admin(engine: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(token) = &engine.config.admin_token else {
        return Ok(());
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    use subtle::ConstantTimeEq;
    if given.as_bytes().ct_eq(token.as_bytes()).into() {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "this endpoint needs Authorization: Bearer <admin-token>",
        ))
    }
}

fn base_url(headers: &HeaderMap) -> String {
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("127.0.0.1:8090");
    format!("http://{host}")
}

fn created(base: &str, meta: &ChangesetMeta) -> Response {
    let loc = format!("{base}/ws/changeset/{}", meta.id);
    let mut resp = (
        StatusCode::CREATED,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        meta.id.clone(),
    )
        .into_response();
    if let Ok(v) = HeaderValue::from_str(&loc) {
        resp.headers_mut().insert(header::LOCATION, v);
    }
    resp
}

pub async fn post_changeset(
    State(engine): State<AppState>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    require_admin(&engine, &headers)?;
    let ty = match params.get("type") {
        None => ChangesetType::Delta,
        Some(t) => ChangesetType::parse_posted(t)?,
    };
    let encoding = headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let limit = engine.config.max_changeset_bytes;
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("changeset larger than max-changeset-bytes ({limit} bytes)"),
        )
    };
    if encoding.is_none() {
        if let Some(len) = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
        {
            if len > limit {
                return Err(too_large());
            }
        }
    }
    // fail fast on an unknown encoding, before taking the writer
    decoder(encoding.as_deref(), std::io::empty())?;
    let channel = ChannelReader::spawn(body);
    let exceeded = Arc::new(AtomicBool::new(false));
    let flag = exceeded.clone();
    let mut guard = engine.lock_writer().await;
    let eng = engine.clone();
    // Decoders read eagerly (gzip parses its header on creation): build the whole
    // reader chain on the blocking thread, never on an async worker.
    let outcome = tokio::task::spawn_blocking(move || {
        let reader = decoder(encoding.as_deref(), channel)
            .map_err(|e| discern_model::Error::BadRequest(e.message))?;
        let limited = LimitReader {
            inner: reader,
            left: limit,
            exceeded: flag,
        };
        eng.apply(&mut guard, ty, limited)
    })
    .await
    .map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("apply task failed: {e}"),
        )
    })?;
    match outcome {
        Ok(ApplyOutcome::Applied { meta, .. }) => Ok(created(&base_url(&headers), &meta)),
        Ok(ApplyOutcome::Empty) => Ok(StatusCode::NO_CONTENT.into_response()),
        Err(_) if exceeded.load(Ordering::Acquire) => Err(too_large()),
        Err(e) => Err(e.into()),
    }
}

pub async fn listing(
    State(engine): State<AppState>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let full = params.contains_key("full");
    let eng = engine.clone();
    let entries = blocking(move || Ok(eng.store().list(full)?)).await?;
    let base = base_url(&headers);
    let mut out = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<changesets total=\"{}\">\n",
        entries.len()
    );
    for m in &entries {
        let mut href = String::new();
        escape_xml(&format!("{base}/ws/changeset/{}", m.id), &mut href);
        let _ = writeln!(
            out,
            "<changeset id=\"{}\" type=\"{}\" snapshot=\"{}\" date=\"{}\" md5=\"{}\" href=\"{}\" length=\"{}\" rawLength=\"{}\"/>",
            m.id,
            m.ty.as_str(),
            m.ty.is_complete_state(),
            m.http_date(),
            m.md5,
            href,
            m.length,
            m.raw_length
        );
    }
    out.push_str("</changesets>\n");
    Ok(([(header::CONTENT_TYPE, "text/xml; charset=utf-8")], out).into_response())
}

pub async fn export_changeset(
    State(engine): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let eng = engine.clone();
    let id2 = id.clone();
    let opened = blocking(move || Ok(eng.store().open_changeset(&id2)?)).await?;
    let Some((meta, mut reader)) = opened else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no changeset {id:?}"),
        ));
    };
    let body = blocking_stream(move |sink| {
        std::io::copy(&mut reader, sink)?;
        Ok(())
    });
    let mut resp = ([(header::CONTENT_TYPE, "text/xml; charset=utf-8")], body).into_response();
    if let Ok(v) = HeaderValue::from_str(&meta.length.to_string()) {
        resp.headers_mut().insert(header::CONTENT_LENGTH, v);
    }
    Ok(resp)
}

/// A part of a checkpoint's bootstrap image (docs/replication.md,
/// `discern_engine::image`): `store` or `index`.
pub async fn changeset_image(
    State(engine): State<AppState>,
    Path((id, part)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let eng = engine.clone();
    let (id2, part2) = (id.clone(), part.clone());
    let found = blocking(move || Ok(eng.image_part(&id2, &part2)?)).await?;
    let Some(found) = found else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no image part {part:?} of changeset {id:?} (images are written after checkpoints when bootstrap-images is on; parts: store, index)"),
        ));
    };
    let total = found.bytes();
    let body = blocking_stream(move |sink| found.send(|block| sink.send_owned(block)));
    let mut resp = ([(header::CONTENT_TYPE, "application/octet-stream")], body).into_response();
    resp.headers_mut()
        .insert(header::CONTENT_LENGTH, HeaderValue::from(total));
    Ok(resp)
}

pub async fn checkpoint(
    State(engine): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    require_admin(&engine, &headers)?;
    let mut guard = engine.lock_writer().await;
    let eng = engine.clone();
    let meta = blocking(move || Ok(eng.checkpoint(&mut guard)?)).await?;
    Ok(created(&base_url(&headers), &meta))
}

pub async fn get_dimensions(State(engine): State<AppState>) -> Response {
    let doc = engine.dimensions_doc();
    (
        [(header::CONTENT_TYPE, "text/xml; charset=utf-8")],
        doc.as_ref().clone(),
    )
        .into_response()
}

pub async fn post_dimensions(
    State(engine): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    require_admin(&engine, &headers)?;
    let mut bytes = read_bounded(body, &headers, 64 << 20).await?.to_vec();
    if let Some(enc) = headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
    {
        let mut out = Vec::new();
        decoder(Some(enc), std::io::Cursor::new(bytes))?
            .read_to_end(&mut out)
            .map_err(|e| ApiError::bad(format!("could not decode the body: {e}")))?;
        bytes = out;
    }
    let mut guard = engine.lock_writer().await;
    let dims = engine.set_dimensions(&mut guard, &bytes)?;
    let eng = engine.clone();
    tokio::task::spawn_blocking(move || {
        if let Err(e) = eng.reindex(&mut guard, dims) {
            tracing::error!(error = %e, "re-indexing with the new dimensions failed");
        }
    });
    Ok(StatusCode::NO_CONTENT.into_response())
}
