//! The tests of `candidates.rs`.

use crate::eval::{evaluate, reference_hits, Filter};
use crate::hits::{default_order, Want};
use crate::test_support::put_strings;
use crate::{parse_query, IndexWriter, Snapshot};
use discern_dimensions::Dimensions;
use discern_model::{Record, Value};
use proptest::prelude::*;
use serde_json::{json, Value as J};
use std::collections::HashSet;
use std::sync::Arc;

const DIMS: &[u8] = b"<dimensions>
      <dimension id='k' type='keyword'/>
      <dimension id='t' type='tree'>
        <element id='A'><element id='A1'/><element id='A2'/></element>
        <element id='B'><element id='B1'/></element>
      </dimension>
      <dimension id='g' type='geoloc' latitude='lat' longitude='lon'/>
      <dimension id='x' type='text' stopWords=''/>
      <dimension id='n' type='integer'/>
    </dimensions>";

type DocSpec = (
    Vec<usize>,
    Vec<usize>,
    Option<(f64, f64)>,
    Vec<usize>,
    Vec<(i64, i64)>,
);

fn doc_spec() -> impl Strategy<Value = DocSpec> {
    (
        prop::collection::vec(0usize..4, 0..3),
        prop::collection::vec(0usize..5, 0..3),
        prop::option::of((39.0f64..41.0, -76.0f64..-74.0)),
        prop::collection::vec(0usize..5, 0..4),
        prop::collection::vec((-8i64..8, -3i64..4), 0..3),
    )
}

fn criterion() -> impl Strategy<Value = J> {
    let body = prop_oneof![
            prop::collection::vec(0usize..5, 1..3).prop_map(|v| {
                let vs: Vec<&str> = v.iter().map(|i| ["a", "b", "c", "d", "e"][*i]).collect();
                json!({"dimension": "k", "value": vs})
            }),
            Just(json!({"dimension": "k"})),
            // "Z" names no element: it matches nothing
            (0usize..6).prop_map(|i| {
                let id = ["A", "A1", "A2", "B", "B1", "Z"][i];
                json!({"dimension": "t", "id": id})
            }),
            (0usize..6).prop_map(|i| {
                let id = ["A", "A1", "A2", "B", "B1", "Z"][i];
                json!({"dimension": "t", "notId": id})
            }),
            (0.0f64..80.0, prop::option::of(0.0f64..100.0), prop::option::of(1.0f64..20.0)).prop_map(|(e, c, iso)| {
                let mut o = json!({"dimension": "g", "latitude": 40.0, "longitude": -75.0, "exactDistance": e});
                if let Some(c) = c { o["cullDistance"] = json!(c); }
                if let Some(s) = iso { o["isoRelevanceDistance"] = json!(s); }
                o
            }),
            // a polygon or a line near the documents, as GeoJSON placemarks
            (prop::collection::vec((39.5f64..40.5, -75.5f64..-74.5), 3..5), any::<bool>(), 0.0f64..60.0, prop::option::of(0.0f64..80.0)).prop_map(|(pts, polygon, e, c)| {
                let mut ring: Vec<J> = pts.iter().map(|(la, lo)| json!([lo, la])).collect();
                let geometry = if polygon {
                    ring.push(ring[0].clone());
                    json!({"type": "Polygon", "coordinates": [ring]})
                } else {
                    json!({"type": "LineString", "coordinates": ring})
                };
                let mut o = json!({"dimension": "g", "placemarks": geometry, "exactDistance": e});
                if let Some(c) = c { o["cullDistance"] = json!(c); }
                o
            }),
            // values near multiples of 997 (documents' too), so that bounds fall inside
            // the numeric postings' buckets, next to values; open and exclusive sides
            (-8i64..8, 0i64..4, -3i64..4, prop::option::of(1.0f64..20.0), 0usize..5).prop_map(|(x, width, off, nd, form)| {
                let (a, b) = (x * 997 + off, (x + width) * 997 - off);
                let mut o = match form {
                    0 => json!({"dimension": "n", "value": format!("[{a},{b}]")}),
                    1 => json!({"dimension": "n", "value": format!("({a},{b})")}),
                    2 => json!({"dimension": "n", "value": format!("[{a},]")}),
                    3 => json!({"dimension": "n", "value": format!("[,{b})")}),
                    _ => json!({"dimension": "n", "value": a}),
                };
                if let Some(nd) = nd { o["normalDistance"] = json!(nd); }
                o
            }),
            (prop::collection::vec(0usize..5, 1..3), any::<bool>()).prop_map(|(w, sw)| {
                let words: Vec<&str> = w.iter().map(|i| ["red","green","blue","car","ca"][*i]).collect();
                let mut o = json!({"dimension": "x", "value": words.join(" ")});
                if sw { o["searchStyle"] = json!("startsWith"); }
                o
            }),
        ];
    with_flags(body.boxed())
}

/// Leaves whose exact documents the postings name exactly (has-a-value, keyword,
/// tree, numeric): mostly culled, so that whole requests are often answered from
/// sets (`exact.rs`).
fn set_criterion() -> impl Strategy<Value = J> {
    let body = prop_oneof![
        2 => prop::collection::vec(0usize..5, 1..3).prop_map(|v| {
            let vs: Vec<&str> = v.iter().map(|i| ["a", "b", "c", "d", "e"][*i]).collect();
            json!({"dimension": "k", "value": vs})
        }),
        1 => (0usize..5).prop_map(|i| {
            let v = ["a", "b", "c", "d", "e"][i];
            json!({"dimension": "k", "notValue": v})
        }),
        1 => Just(json!({"dimension": "k"})),
        1 => Just(json!({"dimension": "n"})),
        1 => Just(json!({"dimension": ""})),
        2 => (
            prop::collection::vec(0usize..6, 1..3),
            prop::option::of(0usize..6)
        )
            .prop_map(|(ids, not)| {
                let name = |i: &usize| ["A", "A1", "A2", "B", "B1", "Z"][*i];
                let mut o =
                    json!({"dimension": "t", "id": ids.iter().map(name).collect::<Vec<_>>()});
                if let Some(n) = not {
                    o["notId"] = json!(name(&n));
                }
                o
            }),
        // near a point, with a cullDistance beyond, at or within exactDistance
        4 => (0.0f64..80.0, 0usize..3, prop::option::of(1.0f64..20.0)).prop_map(|(e, c, iso)| {
            let mut o = json!({"dimension": "g", "latitude": 40.0, "longitude": -75.0, "exactDistance": e});
            o["cullDistance"] = json!([e * 1.5, e, e * 0.5][c]);
            if let Some(s) = iso { o["isoRelevanceDistance"] = json!(s); }
            o
        }),
        // bounds inside the buckets the documents' values fall in
        3 => (-8i64..8, 0i64..4, -4i64..5, 0usize..5).prop_map(|(x, width, off, form)| {
            let (a, b) = (x * 997 + off, (x + width) * 997 - off);
            match form {
                0 => json!({"dimension": "n", "value": format!("[{a},{b}]")}),
                1 => json!({"dimension": "n", "value": format!("({a},{b})")}),
                2 => json!({"dimension": "n", "value": format!("[{a},]")}),
                3 => json!({"dimension": "n", "value": format!("[,{b})")}),
                _ => json!({"dimension": "n", "value": a}),
            }
        }),
    ];
    with_flags(body.boxed()).prop_map(|mut o| {
        if o["fuzzyRelevance"] != json!(0.0) && o["nullRelevance"].is_null() {
            o["cull"] = json!(true);
        }
        o
    })
}

/// A criterion body with random leaf members: cull, exactMatch, nullExactMatch,
/// fuzzyRelevance, nullRelevance, exactRelevance, weight.
fn with_flags(body: BoxedStrategy<J>) -> impl Strategy<Value = J> {
    let flags = (
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        0usize..3,
        any::<bool>(),
        0usize..4,
        0usize..4,
    );
    (body, flags).prop_map(
        |(mut o, (cull, exact_match, null_exact, fuzzy, null_rel, exact_rel, weight))| {
            o["cull"] = json!(cull);
            o["exactMatch"] = json!(exact_match && !cull);
            o["nullExactMatch"] = json!(null_exact);
            let fuzzy = [0.0, 0.5, 1.0][fuzzy];
            o["fuzzyRelevance"] = json!(fuzzy);
            if null_rel {
                o["nullRelevance"] = json!(0.25);
            }
            // mostly the defaults
            o["exactRelevance"] = json!([1.0, 1.0, 0.7, 0.0][exact_rel]);
            o["weight"] = json!([1.0, 1.0, 2.5, 0.0][weight]);
            o
        },
    )
}

/// The documents, after `pad` others (the same specs again) so that they can lie in
/// a second chunk.
fn snapshot(docs: &[DocSpec], pad: usize) -> Snapshot {
    snapshot_padded(docs, pad, docs)
}

/// `snapshot`, the `pad` documents before made from `pad_docs` (in turn).
fn snapshot_padded(pad_docs: &[DocSpec], pad: usize, docs: &[DocSpec]) -> Snapshot {
    // ids out of doc-number order, so that ties between equally relevant items are
    // decided by id, not by the order items are scanned in
    let id = |i: usize| format!("i{:04}", (i * 37) % 10_000);
    let dims = Arc::new(Dimensions::parse(DIMS).unwrap());
    let mut w = IndexWriter::new();
    let mut b = w.begin(&Snapshot::empty(dims));
    let specs = (0..pad).map(|i| &pad_docs[i % pad_docs.len()]).chain(docs);
    for (i, (kw, el, pt, words, nums)) in specs.enumerate() {
        // documents with several values are read from their rows, or from a
        // column's side list
        let mut rec = Record::default();
        let nums = nums.iter().map(|(x, off)| (x * 997 + off).to_string());
        put_strings(&mut rec, "n", nums.collect());
        let kws = kw.iter().map(|k| ["a", "b", "c", "d"][*k].to_string());
        put_strings(&mut rec, "k", kws.collect());
        let els = el
            .iter()
            .map(|e| ["A", "A1", "A2", "B", "B1"][*e].to_string());
        put_strings(&mut rec, "t", els.collect());
        let r = &mut rec.0;
        if let Some((la, lo)) = pt {
            r.push(("lat".to_string(), Value::Str(la.to_string())));
            r.push(("lon".to_string(), Value::Str(lo.to_string())));
        }
        if !words.is_empty() {
            let text: Vec<&str> = words
                .iter()
                .map(|w| ["red", "green", "blue", "car", "cart"][*w])
                .collect();
            r.push(("x".to_string(), Value::Str(text.join(" "))));
        }
        b.upsert(&id(i), &rec);
    }
    // a later apply removes some and changes others: postings must follow
    let mut snap = b.commit();
    let mut b = w.begin(&snap);
    for i in (0..pad + docs.len()).step_by(7) {
        b.delete(&id(i));
    }
    snap = b.commit();
    snap
}

/// Results of one query over the documents, as (id, exact).
fn results(snap: &Snapshot, body: J) -> Vec<(String, bool)> {
    let filter = Filter {
        items: None,
        not_items: None,
        exact_only: false,
    };
    let mut q = parse_query(&body, &snap.dims, 1000).unwrap();
    let mut hits = evaluate(snap, &mut q.criteria, &filter, Want::Sorted).hits;
    hits.sort_by_key(|h| h.doc);
    hits.iter()
        .map(|h| (snap.doc(h.doc).unwrap().id.to_string(), h.exact))
        .collect()
}

#[test]
fn element_ids_that_name_nothing_match_nothing() {
    // i0000 is deleted by `snapshot`; i0037: A1; i0074: B; i0111: no tree value
    let none = (vec![], vec![], None, vec![], vec![]);
    let docs = [
        none.clone(),
        (vec![], vec![1], None, vec![], vec![]),
        (vec![], vec![3], None, vec![], vec![]),
        none,
    ];
    let snap = snapshot(&docs, 0);
    for body in [
        json!({"criteria": [{"dimension": "t", "id": "Z", "cull": true}]}),
        json!({"criteria": [{"dimension": "t", "id": ["Z"], "notId": "B", "cull": true}]}),
        json!({"criteria": [{"dimension": "t", "value": "nothing", "cull": true}]}),
        json!({"criteria": [{"dimension": "t", "isolatedId": "Z", "cull": true}]}),
    ] {
        assert_eq!(results(&snap, body.clone()), vec![], "{body}");
    }
    // only an excluded id: every item with a value not excluded is exact
    let body = json!({"criteria": [{"dimension": "t", "notId": "B", "cull": true}]});
    assert_eq!(results(&snap, body), vec![("i0037".to_string(), true)]);
    // a known id beside an unknown one still matches (its descendants too)
    let body = json!({"criteria": [{"dimension": "t", "id": ["Z", "A"], "cull": true}]});
    assert_eq!(results(&snap, body), vec![("i0037".to_string(), true)]);
}

/// Where a request runs: the documents (after `pad` others), `exactMatchesOnly`, the
/// page end, and `items`/`notItems` as document numbers.
#[derive(Debug)]
struct Scene {
    docs: Vec<DocSpec>,
    /// What the `pad` documents are made from (`None`: `docs`).
    pad_docs: Option<Vec<DocSpec>>,
    exact_only: bool,
    k: usize,
    pad: usize,
    only: Option<HashSet<usize>>,
    not: Option<HashSet<usize>>,
}

fn scene() -> impl Strategy<Value = Scene> {
    (
        prop::collection::vec(doc_spec(), 1..60),
        any::<bool>(),
        0usize..12,
        prop_oneof![Just(0usize), 1000usize..1100],
        prop::option::of(prop::collection::hash_set(0usize..1200, 0..400)),
        prop::option::of(prop::collection::hash_set(0usize..1200, 0..40)),
    )
        .prop_map(|(docs, exact_only, k, pad, only, not)| Scene {
            docs,
            pad_docs: None,
            exact_only,
            k,
            pad,
            only,
            not,
        })
}

/// An exact point relevant below a farther one (`exactRelevance` < `fuzzyRelevance`)
/// cannot be scored from a distance bound: counted like a scan.
#[test]
fn geo_exact_below_fuzzy_counts_like_a_scan() {
    let none: DocSpec = (vec![], vec![], None, vec![], vec![]);
    let near: DocSpec = (vec![], vec![], Some((40.35, -74.54)), vec![], vec![]);
    let criteria = vec![
        json!({"dimension": "g", "latitude": 40.0, "longitude": -75.0,
                   "exactDistance": 77.3, "fuzzyRelevance": 0.5, "exactRelevance": 0.0}),
        json!({"dimension": "g", "latitude": 40.0, "longitude": -75.0,
                   "exactDistance": 0.0, "fuzzyRelevance": 0.0}),
    ];
    for k in [0, 1] {
        let scene = Scene {
            docs: vec![none.clone(), near.clone()],
            pad_docs: None,
            exact_only: false,
            k,
            pad: 0,
            only: None,
            not: None,
        };
        equals_full_scan(criteria.clone(), scene).unwrap();
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    /// Any request (`equals_full_scan`).
    #[test]
    fn pruned_equals_full_scan(
        criteria in prop::collection::vec(criterion(), 1..4),
        scene in scene(),
    ) {
        equals_full_scan(criteria, scene)?;
    }
}

proptest! {
    // answered from sets only when every criterion allows it: more cases
    #![proptest_config(ProptestConfig::with_cases(1000))]
    /// The same for requests mostly answered from sets of documents (`exact.rs`).
    #[test]
    fn set_answers_equal_full_scan(
        criteria in prop::collection::vec(set_criterion(), 0..3),
        scene in scene(),
    ) {
        equals_full_scan(criteria, scene)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]
    /// Scoring a chunk against a bar leaves out only documents that are results, not
    /// exact, and below the bar (or any, when the bar is exact); every other
    /// document's outcome is, to the bit, the one scoring without a bar gives.
    #[test]
    fn a_bar_leaves_out_only_what_cannot_beat_it(
        criteria in prop::collection::vec(criterion(), 2..5),
        docs in prop::collection::vec(doc_spec(), 1..80),
        bar_exact in any::<bool>(),
        bar_r in prop_oneof![0.0f64..1.0, Just(1.0)],
    ) {
        use crate::kernels::{ChunkScores, ChunkView};
        let snap = snapshot(&docs, 0);
        let body = json!({"criteria": criteria});
        let mut q = parse_query(&body, &snap.dims, 1000).unwrap();
        let ctx = crate::eval::prepared(&snap, &mut q.criteria);
        let bar = (bar_exact, bar_r);
        for (c, chunk) in snap.chunks().iter().enumerate() {
            let idx: Vec<u16> = (0..chunk.docs.len())
                .filter(|&i| chunk.docs[i].is_some())
                .map(|i| i as u16)
                .collect();
            let view = ChunkView {
                docs: &chunk.docs,
                cols: snap.chunk_cols(c),
                base: (c * crate::CHUNK) as u32,
                idx: &idx,
            };
            let (mut full, mut barred) = (ChunkScores::new(&q.criteria), ChunkScores::new(&q.criteria));
            full.compute(&q.criteria, &ctx, &view, None);
            barred.compute(&q.criteria, &ctx, &view, Some(bar));
            for j in 0..idx.len() {
                let want = full.outcome(&q.criteria, j);
                if barred.skipped(j) {
                    let Some((exact, r)) = want else {
                        return Err(TestCaseError::fail(format!("{j}: left out, culled")));
                    };
                    prop_assert!(!exact && r > 0.0, "{j}: left out, {exact} {r}");
                    prop_assert!(bar.0 || r < bar.1, "{j}: left out, {r} vs {bar:?}");
                } else {
                    let got = barred.outcome(&q.criteria, j);
                    let bits = |o: Option<(bool, f64)>| o.map(|(e, r)| (e, r.to_bits()));
                    prop_assert_eq!(bits(got), bits(want), "{}", j);
                }
            }
        }
    }
}

/// Criteria ranking every document, none culling (what `reach.rs` answers).
fn ranking_criteria() -> impl Strategy<Value = Vec<J>> {
    prop::collection::vec(criterion(), 1..5).prop_map(|cs| {
        cs.into_iter()
            .filter(|c| c["dimension"] != "x")
            .map(|mut c| {
                c["cull"] = json!(false);
                if let Some(o) = c.as_object_mut() {
                    o.remove("cullDistance");
                }
                c
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]
    /// Requests ranking every document, over two chunks (`equals_full_scan`).
    #[test]
    fn reached_equals_full_scan(
        criteria in ranking_criteria(),
        docs in prop::collection::vec(doc_spec(), 1..60),
        pad_docs in prop::collection::vec(doc_spec(), 1..30),
        k in 1usize..12,
        pad in prop_oneof![Just(0usize), 1000usize..1100],
    ) {
        // (the sample, the first chunk, is mostly other documents)
        let pad_docs = Some(pad_docs);
        let scene = Scene { docs, pad_docs, exact_only: false, k, pad, only: None, not: None };
        equals_full_scan(criteria, scene)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]
    /// The documents `reach.rs` names for a bar — by each criterion, by pairs, by
    /// the split, as few as `few` lets it stop at — hold every document whose
    /// relevance reaches the bar (bars taken from the documents' own relevance).
    #[test]
    fn reach_names_every_document_reaching_the_bar(
        criteria in ranking_criteria(),
        docs in prop::collection::vec(doc_spec(), 1..60),
        at in 0.0f64..1.0,
        few in prop_oneof![Just(0u64), Just(2), Just(20), Just(10_000)],
    ) {
        let snap = snapshot(&docs, 0);
        let body = json!({"criteria": criteria});
        let mut q = parse_query(&body, &snap.dims, 1000).unwrap();
        let filter = Filter { items: None, not_items: None, exact_only: false };
        let mut hits = reference_hits(&snap, &mut q.criteria, &filter);
        prop_assume!(!hits.is_empty());
        hits.sort_by(|a, b| b.r.total_cmp(&a.r));
        let bar = hits[(at * hits.len() as f64) as usize].r;
        prop_assume!(bar > 0.0);
        let mut q = parse_query(&body, &snap.dims, 1000).unwrap();
        let ctx = crate::eval::prepared(&snap, &mut q.criteria);
        let Some(named) = crate::reach::reaching_for_test(&snap, &q.criteria, &ctx, bar, few)
        else {
            return Ok(()); // (nothing narrows: every document is scored)
        };
        for h in hits.iter().filter(|h| h.r >= bar) {
            prop_assert!(named.contains(h.doc), "doc {} at {} of bar {}", h.doc, h.r, bar);
        }
    }
}

/// The requests `reached_equals_full_scan` makes are mostly answered from reach.
#[test]
fn most_ranking_requests_are_reached() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = (
        ranking_criteria(),
        prop::collection::vec(doc_spec(), 20..60),
        1usize..12,
    );
    let before = crate::reach::ANSWERED.with(|n| n.get());
    let cases = 100;
    for _ in 0..cases {
        let (criteria, docs, k) = strategy.new_tree(&mut runner).unwrap().current();
        let scene = Scene {
            docs,
            pad_docs: None,
            exact_only: false,
            k,
            pad: 1000,
            only: None,
            not: None,
        };
        equals_full_scan(criteria, scene).unwrap();
    }
    // (three evaluations per case: `Want::Top` and `TopAndMatched` can be reached)
    let answered = crate::reach::ANSWERED.with(|n| n.get()) - before;
    eprintln!("{answered} of {} reached", 2 * cases);
    assert!(answered > cases, "only {answered} of {} reached", 2 * cases);
}

/// Narrowing by postings, answering from sets, scoring a chunk at a time from its
/// columns and keeping only the top never changes a result: the hits equal an
/// item-by-item scan of the rows, in the same order, with bit-identical relevance and
/// the same counts.
fn equals_full_scan(criteria: Vec<J>, scene: Scene) -> Result<(), TestCaseError> {
    let Scene {
        docs,
        pad_docs,
        exact_only,
        k,
        pad,
        only,
        not,
    } = scene;
    let snap = snapshot_padded(pad_docs.as_deref().unwrap_or(&docs), pad, &docs);
    let ids = |set: &Option<HashSet<usize>>| {
        set.as_ref().map(|s| {
            s.iter()
                .map(|i| format!("i{:04}", (i * 37) % 10_000))
                .collect::<HashSet<String>>()
        })
    };
    let (only, not) = (ids(&only), ids(&not));
    let body = json!({"criteria": criteria, "exactMatchesOnly": exact_only});
    let filter = Filter {
        items: only.as_ref(),
        not_items: not.as_ref(),
        exact_only,
    };
    let mut q = parse_query(&body, &snap.dims, 1000).unwrap();
    let mut want = reference_hits(&snap, &mut q.criteria, &filter);
    want.sort_by(default_order);
    let key = |h: &crate::Hit| (h.doc, h.exact, h.r.to_bits());
    let mut q = parse_query(&body, &snap.dims, 1000).unwrap();
    let got = evaluate(&snap, &mut q.criteria, &filter, Want::Sorted);
    prop_assert_eq!(
        got.hits.iter().map(key).collect::<Vec<_>>(),
        want.iter().map(key).collect::<Vec<_>>()
    );
    let mut q = parse_query(&body, &snap.dims, 1000).unwrap();
    let top = evaluate(&snap, &mut q.criteria, &filter, Want::Top(k));
    prop_assert_eq!(top.total, want.len());
    prop_assert_eq!(top.exact_count, want.iter().filter(|h| h.exact).count());
    prop_assert_eq!(
        top.hits.iter().map(key).collect::<Vec<_>>(),
        want.iter().take(k).map(key).collect::<Vec<_>>()
    );
    // the doc numbers facets count: every result's, those left out by a bound too
    let mut q = parse_query(&body, &snap.dims, 1000).unwrap();
    let top = evaluate(&snap, &mut q.criteria, &filter, Want::TopAndMatched(k));
    let (m, all) = (
        top.matched.unwrap_or_default(),
        crate::Matched::of_hits(&want),
    );
    prop_assert_eq!((m.exact, m.other), (all.exact, all.other));
    Ok(())
}
