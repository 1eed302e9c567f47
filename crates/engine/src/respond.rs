//! Building query responses (SPEC §7.4) from evaluated results.

use discern_dimensions::to_json;
use discern_index::{
    compute_drill_down, compute_facets, evaluate, parse_query, sort_hits, Filter, Snapshot,
};
use discern_model::{RecordWithId, Result};
use serde_json::{json, Map, Value as J};

use crate::Engine;

fn round6(r: f64) -> f64 {
    (r * 1e6).round() / 1e6
}

/// Evaluates a `/ws/query` request against the current snapshot.
pub fn query_response(engine: &Engine, body: &J) -> Result<J> {
    let snap = engine.snapshot();
    let mut q = parse_query(body, &snap.dims, engine.config.max_paged_docs)?;
    let filter = Filter {
        items: q.items.as_ref(),
        not_items: Some(&q.not_items),
        exact_only: q.exact_only,
    };
    let mut results = evaluate(&snap, &mut q.criteria, &filter, true);
    sort_hits(&snap, &mut results.hits, &q.sort);
    let total = results.hits.len();
    let page: Vec<_> = results
        .hits
        .iter()
        .skip(q.start)
        .take(q.page_size)
        .collect();
    let mut out = Map::new();
    out.insert("datasetSize".into(), json!(snap.len()));
    out.insert("totalSize".into(), json!(total));
    out.insert("exactSize".into(), json!(results.exact_count));
    out.insert(
        "availableSize".into(),
        json!(total.min(engine.config.max_paged_docs)),
    );
    out.insert("startIndex".into(), json!(q.start));
    out.insert("pageSize".into(), json!(q.page_size));
    out.insert("currentPageSize".into(), json!(page.len()));
    out.insert(
        "itemIds".into(),
        J::Array(page.iter().map(|h| J::String(h.id.to_string())).collect()),
    );
    out.insert(
        "exactMatches".into(),
        J::Array(page.iter().map(|h| J::Bool(h.exact)).collect()),
    );
    out.insert(
        "relevanceValues".into(),
        J::Array(page.iter().map(|h| json!(round6(h.r))).collect()),
    );
    if let Some(props) = &q.properties {
        let mut list = Vec::with_capacity(page.len());
        for h in &page {
            let rec = engine.item(&h.id)?.unwrap_or_default();
            let only = if props.is_empty() {
                None
            } else {
                Some(props.as_slice())
            };
            let mut v = serde_json::to_value(RecordWithId {
                id: &h.id,
                record: &rec,
                only,
            })
            .map_err(discern_model::Error::internal)?;
            if let J::Object(m) = &mut v {
                m.remove("_id");
            }
            list.push(v);
        }
        out.insert("properties".into(), J::Array(list));
    }
    if !q.values.is_empty() {
        out.insert(
            "values".into(),
            values_member(&snap, &q.values, page.iter().map(|h| h.doc)),
        );
    }
    if q.render_parameters {
        let ids: Vec<&str> = page.iter().map(|h| &*h.id).collect();
        let exact: String = page
            .iter()
            .map(|h| if h.exact { '1' } else { '0' })
            .collect();
        let qs = format!(
            "itemIds={}&exactMatches={}&totalSize={}&exactSize={}&startIndex={}&pageSize={}",
            urlencode(&ids.join(" ")),
            exact,
            total,
            results.exact_count,
            q.start,
            q.page_size
        );
        out.insert("renderParameters".into(), J::String(qs));
    }
    if !q.facets.is_empty() {
        out.insert(
            "facets".into(),
            compute_facets(&snap, &results.hits, &q.facets),
        );
    }
    if let Some(dd) = &q.drill_down {
        out.insert(
            "drillDown".into(),
            compute_drill_down(&snap, &results.hits, dd),
        );
    }
    out.insert("isGrouped".into(), J::Bool(false));
    Ok(J::Object(out))
}

fn values_member(snap: &Snapshot, dims: &[String], docs: impl Iterator<Item = u32> + Clone) -> J {
    let mut m = Map::new();
    for d in dims {
        let Some(di) = snap.dims.index_of(d) else {
            continue;
        };
        let dim = &snap.dims.dims[di];
        let col: Vec<J> = docs
            .clone()
            .map(|n| {
                snap.doc(n)
                    .and_then(|doc| doc.values.get(di).and_then(|v| v.as_ref()))
                    .map(|v| to_json(dim, v))
                    .unwrap_or(J::Null)
            })
            .collect();
        m.insert(d.clone(), J::Array(col));
    }
    J::Object(m)
}

/// The values object of one export line (SPEC §8): `{d: value}` for the requested
/// dimensions that have a value.
pub fn export_line_meta(snap: &Snapshot, doc: u32, dims: &[String]) -> J {
    let mut m = Map::new();
    if let Some(d) = snap.doc(doc) {
        for id in dims {
            if let Some(di) = snap.dims.index_of(id) {
                if let Some(v) = d.values.get(di).and_then(|v| v.as_ref()) {
                    m.insert(id.clone(), to_json(&snap.dims.dims[di], v));
                }
            }
        }
    }
    J::Object(m)
}

fn urlencode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}
