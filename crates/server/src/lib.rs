//! The HTTP interface (SPEC §5–§15): axum routes for `/ws/*` and the legacy aliases,
//! JSON error bodies, CORS on read endpoints, path normalisation, the admin token.

mod body;
mod didyoumean;
mod errors;
mod export;
mod health;
mod items;
mod log_routes;
mod metrics;
mod query;
mod statistics;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::Request;
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use discern_engine::Engine;
use tower::Layer;

pub use errors::ApiError;

pub type AppState = Arc<Engine>;

/// Read endpoints that answer CORS preflights and carry `Access-Control-Allow-Origin: *`.
const READ_PREFIXES: &[&str] = &[
    "/ws/query",
    "/json/query",
    "/ws/export",
    "/ws/items",
    "/ws/item/",
    "/ws/values/",
    "/ws/didyoumean",
];

fn is_read_endpoint(path: &str) -> bool {
    READ_PREFIXES
        .iter()
        .any(|p| path == p.trim_end_matches('/') || path.starts_with(p))
}

pub fn router(engine: Arc<Engine>) -> Router {
    Router::new()
        .route("/ws/queryable", get(health::queryable))
        .route("/queryable", get(health::queryable))
        .route("/ws/info/system-state", get(health::system_state))
        .route("/ws/info/runtime", get(health::runtime))
        .route(
            "/ws/changeset",
            get(log_routes::listing).post(log_routes::post_changeset),
        )
        .route("/ws/changeset/{id}", get(log_routes::export_changeset))
        .route(
            "/ws/changeset/{id}/image/{part}",
            get(log_routes::changeset_image),
        )
        .route(
            "/ws/checkpoint",
            get(log_routes::checkpoint).post(log_routes::checkpoint),
        )
        .route(
            "/ws/dimensions",
            get(log_routes::get_dimensions).post(log_routes::post_dimensions),
        )
        .route("/ws/query", post(query::query))
        .route("/json/query", post(query::query).get(query::query_get))
        .route(
            "/ws/export",
            post(export::export_post).get(export::export_get),
        )
        .route("/ws/item/{id}", get(items::item))
        .route("/ws/items", get(items::items_get).post(items::items_post))
        .route("/json/getProperties", post(items::get_properties))
        .route("/ws/values/{id}", get(items::values))
        .route(
            "/ws/didyoumean/{dim}",
            get(didyoumean::get).post(didyoumean::post),
        )
        .route("/ws/metrics", get(metrics::metrics))
        .route("/ws/statistics", get(statistics::groups))
        .route("/ws/statistics/fetch", get(statistics::fetch_all))
        .route("/ws/statistics/fetch/{groups}", get(statistics::fetch))
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "no such endpoint") })
        .layer(axum::middleware::map_response(
            errors::json_error_for_bare_status,
        ))
        .layer(axum::middleware::from_fn_with_state(
            engine.clone(),
            statistics::time_requests,
        ))
        .with_state(engine)
}

/// `//ws/query` → `/ws/query` (SPEC §15.2).
fn normalize_path(mut req: Request) -> Request {
    let path = req.uri().path();
    if path.contains("//") {
        let mut fixed = String::with_capacity(path.len());
        let mut prev_slash = false;
        for c in path.chars() {
            if c == '/' && prev_slash {
                continue;
            }
            prev_slash = c == '/';
            fixed.push(c);
        }
        if let Some(q) = req.uri().query() {
            fixed.push('?');
            fixed.push_str(q);
        }
        if let Ok(uri) = fixed.parse() {
            *req.uri_mut() = uri;
        }
    }
    req
}

/// Preflights and CORS headers, decided on the path before routing.
async fn cors(req: Request, next: axum::middleware::Next) -> Response {
    let read = is_read_endpoint(req.uri().path());
    if req.method() == Method::OPTIONS {
        let mut resp = StatusCode::NO_CONTENT.into_response();
        let h = resp.headers_mut();
        h.insert(
            header::ALLOW,
            HeaderValue::from_static("GET, HEAD, POST, OPTIONS"),
        );
        if read {
            h.insert(
                header::ACCESS_CONTROL_ALLOW_ORIGIN,
                HeaderValue::from_static("*"),
            );
            h.insert(
                header::ACCESS_CONTROL_ALLOW_METHODS,
                HeaderValue::from_static("GET, HEAD, POST, OPTIONS"),
            );
            h.insert(
                header::ACCESS_CONTROL_ALLOW_HEADERS,
                HeaderValue::from_static(
                    "content-type, x-profile, accept, accept-encoding, authorization",
                ),
            );
            h.insert(
                header::ACCESS_CONTROL_MAX_AGE,
                HeaderValue::from_static("86400"),
            );
        }
        return resp;
    }
    let mut resp = next.run(req).await;
    if read {
        resp.headers_mut().insert(
            header::ACCESS_CONTROL_ALLOW_ORIGIN,
            HeaderValue::from_static("*"),
        );
    }
    resp
}

/// Serves until `shutdown` resolves. The index is populated in the background; the
/// port answers at once (SPEC §13).
pub async fn serve(
    engine: Arc<Engine>,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let populate_engine = engine.clone();
    let mut guard = engine.lock_writer().await;
    tokio::task::spawn_blocking(move || {
        if let Err(e) = populate_engine.populate(&mut guard) {
            tracing::error!(error = %e, "building the index failed");
        }
    });
    metrics::spawn_gauge_refresh(engine.clone());
    discern_engine::feed::start(engine.clone());
    let app = router(engine.clone())
        .layer(axum::middleware::from_fn(cors))
        .layer(axum::middleware::from_fn_with_state(engine, metrics::track));
    let app = tower::util::MapRequestLayer::new(normalize_path).layer(app);
    let addr: Option<SocketAddr> = listener.local_addr().ok();
    tracing::info!(?addr, "listening");
    axum::serve(
        listener,
        axum::ServiceExt::<Request>::into_make_service(app),
    )
    .with_graceful_shutdown(shutdown)
    .await?;
    Ok(())
}
