//! Any bytes as a dimensions document (`PUT /ws/dimensions`): parsing returns the
//! dimensions or an error, never panics; a document that parses indexes items whose
//! properties take every shape under each of its keys, and answers, per dimension, a
//! "has a value" query and a facet over its results, without panicking.
#![no_main]

use std::sync::Arc;

use discern_dimensions::{extract, to_json, Dimension, DimensionKind, Dimensions};
use discern_index::{
    compute_facets, evaluate, parse_query, Filter, IndexWriter, Matched, Snapshot, Want,
};
use discern_model::{Record, Value};
use libfuzzer_sys::fuzz_target;

/// Values of every shape a changeset can carry, as the raw values of a dimension's
/// properties: numbers, times, intervals' edges, coordinates, ZIP codes, words.
fn shapes() -> Vec<Value> {
    let s = |x: &str| Value::Str(x.into());
    vec![
        s("sunny Condo near the PARK, 3-bed"),
        s("2026-03-01T10:00:00Z"),
        s("1999"),
        s("02134"),
        s("42.35,-71.06"),
        s(""),
        s("[1,2]"),
        Value::Int(0),
        Value::Int(-7),
        Value::Int(i64::MAX),
        Value::Real(2.5),
        Value::Real(-1e300),
        Value::Bool(true),
        Value::Array(vec![s("a"), Value::Int(3), Value::Real(40.7)]),
        Value::Struct(vec![
            ("latitude".into(), Value::Real(40.7)),
            ("longitude".into(), Value::Real(-74.0)),
        ]),
    ]
}

/// Every property name `d` reads its values from.
fn keys(d: &Dimension) -> Vec<String> {
    let mut keys = d.keys.clone();
    match &d.kind {
        DimensionKind::Text(t) => keys.extend(t.fields.iter().flat_map(|f| f.keys.clone())),
        DimensionKind::Geo(g) => {
            keys.extend([g.latitude.clone(), g.longitude.clone(), g.zipcode.clone()])
        }
        _ => {}
    }
    keys
}

fuzz_target!(|data: &[u8]| {
    let Ok(dims) = Dimensions::parse(data) else {
        return;
    };
    let dims = Arc::new(dims);
    let shapes = shapes();
    let mut w = IndexWriter::new();
    let mut b = w.begin(&Snapshot::empty(dims.clone()));
    // half the documents through the path a first bulk load takes (postings and
    // dictionaries counted at the end), half through the recording one
    if data.len() % 2 == 1 {
        b.count_at_end();
    }
    for i in 0..shapes.len() {
        let mut rec = Record::new();
        for d in &dims.dims {
            for (j, key) in keys(d).into_iter().enumerate() {
                let v = shapes[(i + j) % shapes.len()].clone();
                rec.0.push((key, v));
            }
            // the elements' own values, so that element dimensions tag some items
            if let Some(set) = d.kind.elements() {
                if let (Some(key), Some(e)) = (d.keys.first(), set.elements.get(i)) {
                    rec.0.push((key.clone(), Value::Str(e.value.clone())));
                }
            }
        }
        // (each value also rendered as `/ws/values` and `indexValues` render it, which
        // indexing does not do)
        for d in &dims.dims {
            let ex = extract(d, &rec);
            if let Some(v) = &ex.value {
                let _ = to_json(d, v);
            }
        }
        b.upsert(&format!("i{i}"), &rec);
    }
    let snap = b.commit();
    for d in &dims.dims {
        // "has a value", and a facet over its results where the type has facets
        let has = serde_json::json!({"criteria": [{"dimension": d.id}]});
        let Ok(mut q) = parse_query(&has, &snap.dims, 1000) else {
            panic!("a query on dimension {:?} was refused", d.id);
        };
        let filter = Filter {
            items: q.items.as_ref(),
            not_items: Some(&q.not_items),
            exact_only: q.exact_only,
        };
        let all = evaluate(&snap, &mut q.criteria, &filter, Want::Sorted);
        assert!(all.hits.iter().all(|h| (0.0..=1.0).contains(&h.r)));
        let facet = serde_json::json!({"facets": {d.id.clone(): {}}});
        if let Ok(f) = parse_query(&facet, &snap.dims, 1000) {
            let _ = compute_facets(&snap, &Matched::of_hits(&all.hits), &f.facets);
        }
    }
});
