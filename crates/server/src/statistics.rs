//! `/ws/statistics` (SPEC §11) and the `http.time` recording of every request.

use axum::extract::{Path, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use discern_dimensions::TYPE_NAMES;
use discern_engine::stats::{group_of, GROUPS};

use crate::errors::ApiError;
use crate::AppState;

fn all_groups() -> Vec<String> {
    GROUPS
        .iter()
        .map(|g| g.to_string())
        .chain(TYPE_NAMES.iter().map(|t| format!("index.query.{t}")))
        .collect()
}

fn text(body: String) -> Response {
    ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body).into_response()
}

pub async fn groups() -> Response {
    let mut out = String::new();
    for g in all_groups() {
        out.push_str(&g);
        out.push('\n');
    }
    text(out)
}

fn render(engine: &AppState, wanted: Option<&[String]>) -> Response {
    let groups = all_groups();
    let mut out = String::new();
    for (name, value) in engine.statistics_lines() {
        let keep = match (wanted, group_of(&name, &groups)) {
            (None, _) => true,
            (Some(w), Some(g)) => w.iter().any(|x| x == g),
            (Some(_), None) => false,
        };
        if keep {
            out.push_str(&format!("{name}: {value}\n"));
        }
    }
    text(out)
}

pub async fn fetch_all(State(engine): State<AppState>) -> Response {
    render(&engine, None)
}

/// Groups joined by `+`, a space or `%20` (already decoded to a space).
pub async fn fetch(
    State(engine): State<AppState>,
    Path(spec): Path<String>,
) -> Result<Response, ApiError> {
    let known = all_groups();
    let wanted: Vec<String> = spec
        .split(['+', ' '])
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    for w in &wanted {
        if !known.contains(w) {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                format!("no statistics group {w:?}"),
            ));
        }
    }
    Ok(render(&engine, Some(&wanted)))
}

/// Records every request's time in `http.time`.
pub async fn time_requests(State(engine): State<AppState>, req: Request, next: Next) -> Response {
    let started = std::time::Instant::now();
    let resp = next.run(req).await;
    engine.stats.record(
        "http",
        &[("time", (started.elapsed().as_secs_f64() * 1e3).round())],
    );
    resp
}
