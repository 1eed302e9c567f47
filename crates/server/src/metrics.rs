//! `/ws/metrics` (SPEC §12) and the middleware that records every request into the
//! engine's HTTP metrics: bytes in, bytes out, and time until the last body byte.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use discern_engine::metrics::{PathMetrics, PoolFigures, RequestRecord};
use http_body::{Frame, SizeHint};

use crate::AppState;

pub async fn metrics(State(engine): State<AppState>) -> Response {
    let rt = tokio::runtime::Handle::current().metrics();
    let pool = PoolFigures {
        threads: rt.num_workers() as u64,
        queued_jobs: rt.global_queue_depth() as u64,
    };
    let text = tokio::task::spawn_blocking(move || engine.metrics_text(&pool))
        .await
        .unwrap_or_default();
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

/// Refreshes the slow engine gauges every 30 s for as long as the server runs.
pub fn spawn_gauge_refresh(engine: AppState) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(std::time::Duration::from_secs(30));
        loop {
            tick.tick().await;
            let e = engine.clone();
            let _ = tokio::task::spawn_blocking(move || e.refresh_gauges()).await;
        }
    });
}

pub async fn track(State(engine): State<AppState>, req: Request, next: Next) -> Response {
    let mut record = engine.http.begin(req.method().as_str(), req.uri().path());
    let path = record.path.clone();
    let req = req.map(|b| {
        Body::new(CountingRequest {
            inner: b,
            path: path.clone(),
        })
    });
    let resp = next.run(req).await;
    let streaming = http_body::Body::size_hint(resp.body()).exact().is_none();
    record.dispatched(resp.status().as_u16(), streaming);
    resp.map(|b| Body::new(CountingResponse { inner: b, record }))
}

struct CountingRequest {
    inner: Body,
    path: Arc<PathMetrics>,
}

impl http_body::Body for CountingRequest {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled {
            if let Some(data) = frame.data_ref() {
                self.path.add_request_bytes(data.len() as u64);
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Counts the bytes of a response body; the request ends (and is timed) when the body
/// does, or when the connection drops it.
struct CountingResponse {
    inner: Body,
    record: RequestRecord,
}

impl http_body::Body for CountingResponse {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    self.record.add_response_bytes(data.len() as u64);
                }
            }
            Poll::Ready(None) | Poll::Ready(Some(Err(_))) => self.record.finish(),
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
