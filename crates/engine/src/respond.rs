//! Building query responses (SPEC §7.4–§7.9) from evaluated results.

use std::collections::HashMap;

use discern_dimensions::{to_json, IndexedValue};
use discern_index::{
    compute_drill_down, compute_facets, criteria_dims, evaluate, parse_query, sort_hits,
    text_terms, Explain, Filter, Hit, Matched, Snapshot, Want,
};
use discern_model::{Error, Record, RecordWithId, Result};
use serde_json::{json, Map, Value as J};

use crate::highlight::highlight;
use crate::Engine;

fn round6(r: f64) -> f64 {
    (r * 1e6).round() / 1e6
}

/// A record as `properties[i]` shows it: without `_id`, optionally restricted.
fn props_json(id: &str, rec: &Record, names: &[String]) -> Result<J> {
    let only = if names.is_empty() { None } else { Some(names) };
    let mut v = serde_json::to_value(RecordWithId {
        id,
        record: rec,
        only,
    })
    .map_err(Error::internal)?;
    if let J::Object(m) = &mut v {
        // (`remove` would move the last property into `_id`'s place)
        m.shift_remove("_id");
    }
    Ok(v)
}

/// A `/ws/query` response: its members in order, the page's `properties` (when shown
/// as stored) kept as JSON text written straight from the stored records — decoding
/// each record into values only to write them out again was a fifth of a simple
/// request's time.
pub struct QueryResponse {
    members: Map<String, J>,
    /// The `properties` member's text (its place in `members` holds a placeholder).
    properties: Option<Vec<u8>>,
}

impl QueryResponse {
    pub fn total_size(&self) -> Option<u64> {
        self.members.get("totalSize").and_then(J::as_u64)
    }

    /// The response as JSON text (members in order, as serde_json writes them).
    pub fn to_text(&self) -> String {
        let mut out = Vec::with_capacity(256 + self.properties.as_ref().map_or(0, Vec::len));
        out.push(b'{');
        for (i, (k, v)) in self.members.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            discern_model::write_json_string(k, &mut out);
            out.push(b':');
            match (&self.properties, k.as_str()) {
                (Some(text), "properties") => out.extend_from_slice(text),
                // (writing a `Value` into a Vec cannot fail)
                _ => {
                    let _ = serde_json::to_writer(&mut out, v);
                }
            }
        }
        out.push(b'}');
        // every piece is UTF-8: serde_json's, and records' checked as they are written
        String::from_utf8(out)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
    }

    /// The response as a JSON value.
    pub fn into_value(mut self) -> Result<J> {
        if let Some(text) = self.properties.take() {
            let props: J = serde_json::from_slice(&text).map_err(Error::internal)?;
            if let Some(slot) = self.members.get_mut("properties") {
                *slot = props;
            }
        }
        Ok(J::Object(self.members))
    }
}

/// The group key of a result: its first value in the dimension, or its own id.
fn group_key(snap: &Snapshot, dim: usize, h: &Hit) -> (bool, String) {
    match snap.shown_value(h.doc, dim).as_deref() {
        Some(IndexedValue::Strings(s)) if !s.is_empty() => {
            (true, s.get(0).unwrap_or_default().to_string())
        }
        Some(other) => (true, to_json(&snap.dims.dims[dim], other).to_string()),
        None => (false, format!("\u{0}{}", h.id)),
    }
}

/// Evaluates a `/ws/query` request against the current snapshot.
pub fn query_response(engine: &Engine, body: &J) -> Result<QueryResponse> {
    let crate::View { snap, items } = engine.view()?;
    let mut q = parse_query(body, &snap.dims, engine.config.max_paged_docs)?;
    let did_you_mean = did_you_mean_requests(body, &snap)?;
    let filter = Filter {
        items: q.items.as_ref(),
        not_items: Some(&q.not_items),
        exact_only: q.exact_only,
    };
    let started = std::time::Instant::now();
    // Only the page is needed unless groups or a sortBy order every result; facets and
    // drillDown need every result's doc number, not its place.
    let counts = !q.facets.is_empty() || q.drill_down.is_some();
    let page_end = q.start.saturating_add(q.page_size);
    let want = match (q.sort.is_empty(), q.group_by.is_none(), counts) {
        (true, true, false) => Want::Top(page_end),
        (true, true, true) => Want::TopAndMatched(page_end),
        // only the page's hits, in the sortBy order
        (false, true, _) => Want::TopBy {
            k: page_end,
            keys: &q.sort,
            matched: counts,
        },
        // groups: every result, which sort_hits orders (the default order breaking ties)
        (false, false, _) => Want::All,
        (true, false, _) => Want::Sorted,
    };
    let mut results = evaluate(&snap, &mut q.criteria, &filter, want);
    let matched = match results.matched.take() {
        Some(m) => m,
        None if counts => Matched::of_hits(&results.hits),
        None => Matched::default(),
    };
    if q.group_by.is_some() {
        sort_hits(&snap, &mut results.hits, &q.sort, None);
    }
    let ms = started.elapsed().as_secs_f64() * 1e3;
    let mut dims = Vec::new();
    criteria_dims(&q.criteria, &mut dims);
    let mut types: Vec<&str> = dims
        .iter()
        .map(|d| snap.dims.dims[*d].kind.type_name())
        .collect();
    types.sort_unstable();
    types.dedup();
    for ty in types {
        engine
            .stats
            .record(&format!("index.query.{ty}"), &[("time", ms.round())]);
    }
    let hits = &results.hits;

    // Groups in result order (without groupBy, every result is its own group: the page
    // is taken from the hits directly).
    let groups: Vec<Vec<&Hit>> = match &q.group_by {
        None => hits
            .iter()
            .skip(q.start)
            .take(q.page_size)
            .map(|h| vec![h])
            .collect(),
        Some(g) => {
            let mut index: HashMap<String, usize> = HashMap::new();
            let mut out: Vec<Vec<&Hit>> = Vec::new();
            for h in hits {
                let (has, key) = group_key(&snap, g.dim, h);
                if has
                    && (g.not_groups.contains(&key)
                        || g.groups.as_ref().is_some_and(|w| !w.contains(&key)))
                {
                    continue;
                }
                match index.get(&key) {
                    Some(&i) => out[i].push(h),
                    None => {
                        index.insert(key, out.len());
                        out.push(vec![h]);
                    }
                }
            }
            out
        }
    };
    let (total, exact_total, page_groups): (usize, usize, Vec<&Vec<&Hit>>) = match &q.group_by {
        None => (results.total, results.exact_count, groups.iter().collect()),
        Some(_) => (
            groups.len(),
            groups.iter().filter(|g| g[0].exact).count(),
            groups.iter().skip(q.start).take(q.page_size).collect(),
        ),
    };
    let page: Vec<&Hit> = page_groups.iter().map(|g| g[0]).collect();

    let mut out = Map::new();
    out.insert("datasetSize".into(), json!(snap.len()));
    out.insert("totalSize".into(), json!(total));
    out.insert("exactSize".into(), json!(exact_total));
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

    // Records are read once per page item (and group member); the page's properties
    // are written from the stored records unless highlights are merged into them.
    let merge_highlights = q.highlighting.as_ref().is_some_and(|h| h.merge_properties);
    let props_as_stored = q.properties.is_some() && !merge_highlights;
    let needs_records = q.properties.is_some() && merge_highlights
        || q.highlighting.is_some()
        || q.group_by.as_ref().is_some_and(|g| g.properties.is_some());
    let mut records: HashMap<&str, Record> = HashMap::new();
    if needs_records {
        let top_n = q.group_by.as_ref().map(|g| g.top_n).unwrap_or(1);
        let mut reads = items.reads(
            page_groups
                .iter()
                .flat_map(|g| g.iter().take(top_n).map(|h| &*h.id)),
        );
        for g in &page_groups {
            for h in g.iter().take(top_n) {
                if !records.contains_key(&*h.id) {
                    records.insert(&h.id, reads.get(&h.id)?.unwrap_or_default());
                }
            }
        }
    }
    let terms = text_terms(&q.criteria);
    let highlights: Option<Vec<Map<String, J>>> = q.highlighting.as_ref().map(|hl| {
        page.iter()
            .map(|h| highlight(&snap.dims, &terms, hl, &records[&*h.id]))
            .collect()
    });

    let mut properties_text = None;
    if let (Some(props), true) = (&q.properties, props_as_stored) {
        let only = if props.is_empty() {
            None
        } else {
            Some(&props[..])
        };
        let mut reads = items.reads(page.iter().map(|h| &*h.id));
        let mut text = Vec::with_capacity(page.len() * 256 + 2);
        text.push(b'[');
        for (i, h) in page.iter().enumerate() {
            if i > 0 {
                text.push(b',');
            }
            let written = reads.with_raw(&h.id, |raw| {
                discern_model::write_props_json(raw, only, &mut text)
            })?;
            match written {
                Some(r) => r.map_err(Error::internal)?,
                None => text.extend_from_slice(b"{}"),
            }
        }
        text.push(b']');
        properties_text = Some(text);
        out.insert("properties".into(), J::Null);
    } else if let Some(props) = &q.properties {
        let mut list = Vec::with_capacity(page.len());
        for (i, h) in page.iter().enumerate() {
            let mut v = props_json(&h.id, &records[&*h.id], props)?;
            if let (Some(hl), Some(marks), J::Object(m)) = (&q.highlighting, &highlights, &mut v) {
                if hl.merge_properties {
                    for (k, marked) in &marks[i] {
                        if m.contains_key(k) {
                            m.insert(k.clone(), marked.clone());
                        }
                    }
                }
            }
            list.push(v);
        }
        out.insert("properties".into(), J::Array(list));
    }
    if let Some(h) = highlights {
        out.insert(
            "highlighting".into(),
            J::Array(h.into_iter().map(J::Object).collect()),
        );
    }
    if !q.values.is_empty() {
        out.insert(
            "values".into(),
            values_member(&snap, &q.values, page.iter().map(|h| h.doc)),
        );
    }
    if !q.index_values.is_empty() {
        let mut iv = Map::new();
        for &di in &q.index_values {
            let dim = &snap.dims.dims[di];
            let mut m = Map::new();
            if let Some(set) = dim.kind.elements() {
                for h in &page {
                    let value = snap.doc(h.doc).and_then(|d| d.value(di));
                    if let Some(IndexedValue::Elements(es)) = value.as_deref() {
                        for &e in es.iter() {
                            let el = &set.elements[e as usize];
                            m.insert(
                                el.id.clone(),
                                J::String(el.name.clone().unwrap_or_else(|| el.value.clone())),
                            );
                        }
                    }
                }
            }
            iv.insert(dim.id.clone(), J::Object(m));
        }
        out.insert("indexValues".into(), J::Object(iv));
    }
    match q.explain {
        Some(Explain::CriterionValue) => {
            let ex: Vec<J> = page
                .iter()
                .map(|h| {
                    J::Array(
                        results
                            .explain(&snap, &q.criteria, h.doc)
                            .into_iter()
                            .map(|(exact, r)| json!({"exact": exact, "relevance": round6(r)}))
                            .collect(),
                    )
                })
                .collect();
            out.insert("explanation".into(), J::Array(ex));
        }
        Some(Explain::TextTokens) => {
            let ex: Vec<J> = page
                .iter()
                .map(|h| {
                    let mut toks: Vec<String> = Vec::new();
                    for (di, fi, qterms) in &terms {
                        if let Some(IndexedValue::Text(fields)) =
                            snap.shown_value(h.doc, *di).as_deref()
                        {
                            toks.extend(
                                qterms
                                    .iter()
                                    .filter(|t| fields.group(*fi).any(|x| x == t.as_str()))
                                    .cloned(),
                            );
                        }
                    }
                    toks.sort();
                    toks.dedup();
                    json!({ "textTokens": toks })
                })
                .collect();
            out.insert("explanation".into(), J::Array(ex));
        }
        None => {}
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
            exact_total,
            q.start,
            q.page_size
        );
        out.insert("renderParameters".into(), J::String(qs));
    }
    if !q.facets.is_empty() {
        out.insert("facets".into(), compute_facets(&snap, &matched, &q.facets));
    }
    if let Some(dd) = &q.drill_down {
        out.insert("drillDown".into(), compute_drill_down(&snap, &matched, dd));
    }
    out.insert("isGrouped".into(), J::Bool(q.group_by.is_some()));
    if let Some(g) = &q.group_by {
        let members: Vec<Vec<&Hit>> = page_groups
            .iter()
            .map(|grp| grp.iter().take(g.top_n).copied().collect())
            .collect();
        let mut gm = Map::new();
        gm.insert(
            "itemIds".into(),
            json!(members
                .iter()
                .map(|m| m.iter().map(|h| h.id.to_string()).collect::<Vec<_>>())
                .collect::<Vec<_>>()),
        );
        gm.insert(
            "exactMatches".into(),
            json!(members
                .iter()
                .map(|m| m.iter().map(|h| h.exact).collect::<Vec<_>>())
                .collect::<Vec<_>>()),
        );
        gm.insert(
            "relevanceValues".into(),
            json!(members
                .iter()
                .map(|m| m.iter().map(|h| round6(h.r)).collect::<Vec<_>>())
                .collect::<Vec<_>>()),
        );
        if let Some(names) = g.properties.as_ref().or(q.properties.as_ref()) {
            let mut all = Vec::new();
            for m in &members {
                let mut one = Vec::new();
                for h in m {
                    one.push(props_json(&h.id, &records[&*h.id], names)?);
                }
                all.push(J::Array(one));
            }
            gm.insert("properties".into(), J::Array(all));
        }
        out.insert("groups".into(), J::Object(gm));
    }
    if !did_you_mean.is_empty() {
        let list = did_you_mean
            .into_iter()
            .map(|r| {
                let mut entry = Map::new();
                entry.insert("dimension".into(), J::String(r.dimension));
                entry.insert("criterion".into(), json!(r.criterion));
                if let J::Object(m) = crate::didyoumean::suggest(&snap, r.dim, &r.text, &r.options)
                {
                    entry.extend(m);
                }
                J::Object(entry)
            })
            .collect();
        out.insert("didYouMean".into(), J::Array(list));
    }
    Ok(QueryResponse {
        members: out,
        properties: properties_text,
    })
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
                snap.shown_value(n, di)
                    .map(|v| to_json(dim, &v))
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
    for id in dims {
        if let Some(di) = snap.dims.index_of(id) {
            if let Some(v) = snap.shown_value(doc, di) {
                m.insert(id.clone(), to_json(&snap.dims.dims[di], &v));
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

/// A top-level criterion that asked for did-you-mean (SPEC §9.3).
struct DidYouMeanRequest {
    criterion: usize,
    dim: usize,
    dimension: String,
    text: String,
    options: crate::didyoumean::Options,
}

fn did_you_mean_requests(body: &J, snap: &Snapshot) -> Result<Vec<DidYouMeanRequest>> {
    let criteria = match body.get("criteria") {
        Some(J::Array(a)) => a.as_slice(),
        Some(c @ J::Object(_)) => std::slice::from_ref(c),
        _ => return Ok(Vec::new()),
    };
    let mut out = Vec::new();
    for (i, c) in criteria.iter().enumerate() {
        let Some(member) = c.get("didYouMean") else {
            continue;
        };
        let path = format!("criteria[{i}].didYouMean");
        let Some(options) = crate::didyoumean::options_from_member(member, &path)? else {
            continue;
        };
        let Some(dimension) = c.get("dimension").and_then(J::as_str) else {
            return Err(Error::bad(format!(
                "{path}: the criterion has no dimension"
            )));
        };
        let (dim, _) = crate::didyoumean::dimension(snap, dimension)
            .map_err(|e| Error::bad(format!("{path}: {e}")))?;
        let text = match c.get("value") {
            Some(J::String(s)) => s.clone(),
            Some(J::Array(a)) => a
                .iter()
                .filter_map(|v| match v {
                    J::String(s) => Some(s.clone()),
                    J::Number(n) => Some(n.to_string()),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .join(" "),
            Some(J::Number(n)) => n.to_string(),
            _ => String::new(),
        };
        out.push(DidYouMeanRequest {
            criterion: i,
            dim,
            dimension: dimension.to_string(),
            text,
            options,
        });
    }
    Ok(out)
}
