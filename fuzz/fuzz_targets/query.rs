//! Any bytes as a `/ws/query` body, against a small index with every dimension type:
//! parsing returns a query or a 400, and a parsed query evaluates, sorts, pages and
//! counts facets without panicking.
#![no_main]

use std::sync::{Arc, OnceLock};

use discern_dimensions::Dimensions;
use discern_index::{
    compute_drill_down, compute_facets, evaluate, parse_query, sort_hits, Filter, IndexWriter,
    Matched, Snapshot, Want,
};
use discern_model::{Record, Value};
use libfuzzer_sys::fuzz_target;

const DIMENSIONS: &str = r#"<dimensions>
  <dimension id="type" type="mutex"><element id="sales"/><element id="rentals"/></dimension>
  <dimension id="style" type="tree">
    <element id="res" value="residential"><element id="condo" value="condo"/><element id="house" value="house"/></element>
    <element id="com" value="commercial"/>
  </dimension>
  <dimension id="condition" type="ordered"><element id="1"/><element id="2"/><element id="3"/></dimension>
  <dimension id="bedroom" type="integer" min="0" max="20">
    <element id="small" value="[0,2)"/><element id="big" value="[2,]"/>
  </dimension>
  <dimension id="price" type="long"/>
  <dimension id="bath" type="double"/>
  <dimension id="listed" type="time" key="listed_at"/>
  <dimension id="location" type="geoloc"/>
  <dimension id="city" type="keyword" ignoreCase="true"/>
  <dimension id="agency" type="groupBy"/>
  <dimension id="description" type="text"/>
</dimensions>"#;

fn rec(pairs: &[(&str, Value)]) -> Record {
    Record(pairs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect())
}

fn snapshot() -> &'static Snapshot {
    static SNAP: OnceLock<Snapshot> = OnceLock::new();
    SNAP.get_or_init(|| {
        let dims = Arc::new(Dimensions::parse(DIMENSIONS.as_bytes()).expect("valid dimensions"));
        let mut w = IndexWriter::new();
        let mut b = w.begin(&Snapshot::empty(dims));
        let s = |x: &str| Value::Str(x.into());
        let cities = ["Boston", "Austin", "boston", "Denver"];
        for i in 0..24i64 {
            b.upsert(
                &format!("L{i}"),
                &rec(&[
                    ("type", s(if i % 2 == 0 { "sales" } else { "rentals" })),
                    ("style", s(["condo", "house", "commercial", "residential"][i as usize % 4])),
                    ("condition", s(&(i % 3 + 1).to_string())),
                    ("bedroom", Value::Int(i % 5)),
                    ("price", Value::Int(100_000 + i * 25_000)),
                    ("bath", Value::Real(1.0 + (i % 3) as f64 * 0.5)),
                    ("listed_at", s(&format!("2026-0{}-1{}T10:00:00Z", i % 9 + 1, i % 9))),
                    ("latitude", Value::Real(40.0 + i as f64 * 0.1)),
                    ("longitude", Value::Real(-74.0 + i as f64 * 0.05)),
                    ("city", s(cities[i as usize % 4])),
                    ("agency", s(&format!("agency{}", i % 3))),
                    ("description", s(["sunny condo near the park", "quiet house with garden", "office space downtown"][i as usize % 3])),
                ]),
            );
        }
        b.upsert("empty", &Record::new());
        b.commit()
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(body) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let snap = snapshot();
    let Ok(mut q) = parse_query(&body, &snap.dims, 1000) else {
        return;
    };
    let filter = Filter {
        items: q.items.as_ref(),
        not_items: Some(&q.not_items),
        exact_only: q.exact_only,
    };
    let top = evaluate(snap, &mut q.criteria, &filter, Want::TopAndMatched(q.start.saturating_add(q.page_size)));
    let mut all = evaluate(snap, &mut q.criteria, &filter, Want::Sorted);
    assert_eq!(top.total, all.total);
    assert!(all.hits.iter().all(|h| (0.0..=1.0).contains(&h.r)));
    let matched = Matched::of_hits(&all.hits);
    // the page a response without groups keeps is the full order's first hits
    let page_end = q.start.saturating_add(q.page_size);
    let mut page = all.hits.clone();
    sort_hits(snap, &mut page, &q.sort, Some(page_end));
    sort_hits(snap, &mut all.hits, &q.sort, None);
    let ids = |hits: &[discern_index::Hit]| hits.iter().map(|h| h.doc).collect::<Vec<u32>>();
    assert_eq!(ids(&page), ids(&all.hits[..page_end.min(all.hits.len())]));
    // and the page evaluated alone in that order (a response with sortBy, no groups)
    if !q.sort.is_empty() {
        let want = Want::TopBy { k: page_end, keys: &q.sort, matched: false };
        let by = evaluate(snap, &mut q.criteria, &filter, want);
        assert_eq!((by.total, by.exact_count), (all.total, all.exact_count));
        assert_eq!(ids(&by.hits), ids(&page));
    }
    let _ = compute_facets(snap, &matched, &q.facets);
    if let Some(dd) = &q.drill_down {
        let _ = compute_drill_down(snap, &matched, dd);
    }
});
