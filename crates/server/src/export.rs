//! `/ws/export` (SPEC §8): every result as ndjson, streamed.

use std::io::{self, Write};
use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use discern_engine::{export_line_meta, ItemReader, View};
use discern_index::{evaluate, parse_export, ExportRequest, Filter, Hit, Snapshot, Want};
use discern_model::{write_json_string, write_record_json};
use rayon::prelude::*;

use crate::body::{blocking, blocking_stream, read_json};
use crate::errors::ApiError;
use crate::query::check_queryable;
use crate::AppState;

/// Results formatted per block; blocks are formatted in parallel and sent in order.
const BLOCK: usize = 2048;

pub async fn export_post(
    State(engine): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let req = read_json(body, &headers).await?;
    check_queryable(&engine)?;
    let view = current_view(&engine).await?;
    // parsed against the snapshot it runs on (a dimensions change may swap in another)
    let parsed = parse_export(&req, &view.snap.dims)?;
    Ok(export(view, parsed))
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
    Ok(export(current_view(&engine).await?, req))
}

async fn current_view(engine: &AppState) -> Result<View, ApiError> {
    let engine = engine.clone();
    blocking(move || Ok(engine.view()?)).await
}

/// Streams the results as ndjson: header, then meta/values/source per item, then an
/// empty line (SPEC §8).
fn export(view: View, mut req: ExportRequest) -> Response {
    let body = blocking_stream(move |sink| {
        let View { snap, items } = view;
        let filter = Filter {
            items: None,
            not_items: None,
            exact_only: req.exact_only,
        };
        let mut results = evaluate(&snap, &mut req.criteria, &filter, Want::All);
        let mut format = vec!["meta"];
        if !req.values.is_empty() {
            format.push("values");
        }
        if req.sources {
            format.push("sources");
        }
        writeln!(sink, "{}", serde_json::json!({ "format": format }))?;
        // The order is unspecified (SPEC §8). When the results are a good part of the
        // collection, they are put in id order — the store's key order — and read in
        // ordered passes over the store instead of a descent per item. They come in
        // document (arrival) order, which is nearly id order for a collection loaded in
        // id order: the adaptive stable sort costs little more than checking that.
        let ordered = req.sources && results.hits.len() * 8 >= snap.len();
        if ordered {
            results
                .hits
                .sort_by(|a, b| a.id_key.cmp(&b.id_key).then_with(|| a.id.cmp(&b.id)));
        }
        let hits = &results.hits;
        let lines = Lines {
            snap: &snap,
            items: &items,
            req: &req,
            ordered,
        };
        let in_flight = 2 * rayon::current_num_threads().max(1);
        for group in hits.chunks(BLOCK * in_flight) {
            let blocks: Vec<io::Result<Vec<u8>>> = group
                .par_chunks(BLOCK)
                .map(|block| lines.block(block))
                .collect();
            for block in blocks {
                sink.send_owned(block?)?;
            }
        }
        sink.write_all(b"\n")?;
        // A large export freed ~100 MB at 1M items (a hit per result, the blocks'
        // lines) on this thread and the pool's: returned to the OS now rather than
        // whenever each thread next allocates (resident memory after an export of 1M
        // items with sources: 1,367 → 1,315 MB).
        if hits.len() >= RELEASE_AFTER_HITS {
            drop(results);
            discern_engine::process::release_free_memory();
        }
        Ok(())
    });
    ([(header::CONTENT_TYPE, "application/x-ndjson")], body).into_response()
}

/// An export of at least this many results returns the memory it freed to the OS.
const RELEASE_AFTER_HITS: usize = 100_000;

/// What one export's lines are made of.
struct Lines<'a> {
    snap: &'a Arc<Snapshot>,
    items: &'a ItemReader,
    req: &'a ExportRequest,
    /// The results are in id order: read the store with a cursor.
    ordered: bool,
}

impl Lines<'_> {
    /// The lines of `hits`, written straight from the index and the stored encoding
    /// (byte for byte what serde_json would write).
    fn block(&self, hits: &[Hit]) -> io::Result<Vec<u8>> {
        let req = self.req;
        let mut out = Vec::with_capacity(hits.len() * if req.sources { 1024 } else { 64 });
        let mut cursor = match hits.first() {
            Some(first) if self.ordered => Some(
                self.items
                    .cursor_from(&first.id)
                    .map_err(io::Error::other)?,
            ),
            _ => None,
        };
        for hit in hits {
            out.extend_from_slice(b"{\"id\":");
            write_json_string(&hit.id, &mut out);
            if req.scores {
                out.extend_from_slice(b",\"score\":");
                serde_json::to_writer(&mut out, &((hit.r * 1e6).round() / 1e6))?;
            }
            if !req.exact_only {
                out.extend_from_slice(if hit.exact {
                    b",\"exact\":true"
                } else {
                    b",\"exact\":false"
                });
            }
            out.extend_from_slice(b"}\n");
            if !req.values.is_empty() {
                let values = export_line_meta(self.snap, hit.doc, &req.values);
                serde_json::to_writer(&mut out, &values)?;
                out.push(b'\n');
            }
            if req.sources {
                let write = |raw: &[u8]| write_record_json(raw, &hit.id, &mut out);
                let written = match &mut cursor {
                    Some(c) => c.seek_raw(&hit.id, write),
                    None => self.items.with_raw(&hit.id, write),
                }
                .map_err(io::Error::other)?;
                match written {
                    Some(r) => r.map_err(io::Error::other)?,
                    // not reachable with a consistent view; an empty source as before
                    None => {
                        out.extend_from_slice(b"{\"_id\":");
                        write_json_string(&hit.id, &mut out);
                        out.push(b'}');
                    }
                }
                out.push(b'\n');
            }
        }
        Ok(out)
    }
}
