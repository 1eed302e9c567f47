//! The tests of `facets/count.rs`.

use super::*;
use crate::eval::{evaluate, Filter};
use crate::hits::{Matched, Want};
use crate::test_support::put_strings;
use crate::{parse_query, IndexWriter};
use discern_dimensions::Dimensions;
use discern_model::{Record, Value};
use proptest::prelude::*;
use std::sync::Arc;

const DIMS: &[u8] = b"<dimensions>
      <dimension id='m' type='mutex'><element id='x'/><element id='y'/></dimension>
      <dimension id='t' type='tree'>
        <element id='A'><element id='A1'/><element id='A2'/></element>
        <element id='B'><element id='B1'/></element>
      </dimension>
      <dimension id='k' type='keyword'/>
      <dimension id='w' type='keyword'/>
      <dimension id='n' type='integer'>
        <element id='neg' value='[,0)'/><element id='small' value='[0,10)'/><element id='big' value='[10,]'/>
        <element id='huge' value='[10000,]'/>
      </dimension>
    </dimensions>";

/// (mutex element, tree elements, few-valued keywords, many-valued keywords, numbers)
type DocSpec = (Option<usize>, Vec<usize>, Vec<usize>, Vec<usize>, Vec<i64>);

fn doc_spec() -> impl Strategy<Value = DocSpec> {
    (
        prop::option::of(0usize..2),
        prop::collection::vec(0usize..5, 0..3),
        prop::collection::vec(0usize..3, 0..3),
        prop::collection::vec(0usize..60, 0..3),
        // (around 10000 a bucket holds 32 values: the bound cuts one)
        prop::collection::vec(prop_oneof![-20i64..30, 9_980i64..10_020], 0..3),
    )
}

fn snapshot(docs: &[DocSpec]) -> Snapshot {
    snapshot_after(0, docs)
}

/// The documents, after `pad` without values (so that they can straddle chunks).
fn snapshot_after(pad: usize, docs: &[DocSpec]) -> Snapshot {
    snapshot_deleting(pad, docs, &[])
}

/// `snapshot_after`, then the documents `gone` names deleted by a second apply
/// (their numbers leave the live ones).
fn snapshot_deleting(pad: usize, docs: &[DocSpec], gone: &[bool]) -> Snapshot {
    let dims = Arc::new(Dimensions::parse(DIMS).unwrap());
    let mut w = IndexWriter::new();
    let mut b = w.begin(&Snapshot::empty(dims));
    for i in 0..pad {
        b.upsert(&format!("a{i:04}"), &Record::default());
    }
    for (i, (m, t, k, wv, n)) in docs.iter().enumerate() {
        let mut r = Vec::new();
        let mut put = |name: &str, v: String| r.push((name.to_string(), Value::Str(v)));
        if let Some(m) = m {
            put("m", ["x", "y"][*m].into());
        }
        let mut rec = Record(r);
        let ts = t
            .iter()
            .map(|e| ["A", "A1", "A2", "B", "B1"][*e].to_string());
        put_strings(&mut rec, "t", ts.collect());
        put_strings(&mut rec, "k", k.iter().map(|x| format!("k{x}")).collect());
        put_strings(&mut rec, "w", wv.iter().map(|x| format!("w{x}")).collect());
        put_strings(&mut rec, "n", n.iter().map(|x| x.to_string()).collect());
        b.upsert(&format!("d{i:03}"), &rec);
    }
    let snap = b.commit();
    let mut b = w.begin(&snap);
    for (i, _) in gone.iter().enumerate().filter(|(_, g)| **g) {
        b.delete(&format!("d{i:03}"));
    }
    b.commit()
}

/// Bucket counts read from every counted document's row: the plain definition the
/// postings and columns must agree with.
fn counted_from_rows(snap: &Snapshot, di: usize, docs: &[u32]) -> (Counts, Option<(f64, f64)>) {
    let dim = &snap.dims.dims[di];
    let mut counts = Counts::new();
    let mut bounds: Option<(f64, f64)> = None;
    for &d in docs {
        let Some(v) = snap.doc(d).and_then(|d| d.value(di)) else {
            continue;
        };
        let v = &*v;
        let mut ids: Vec<String> = Vec::new();
        match (&dim.kind, v) {
            (DimensionKind::Tree(set), IndexedValue::Elements(es)) => {
                for &e in es.iter() {
                    let mut cur = Some(e);
                    while let Some(c) = cur {
                        ids.push(set.elements[c as usize].id.clone());
                        cur = set.elements[c as usize].parent;
                    }
                }
            }
            (kind, IndexedValue::Elements(es)) => {
                let set = kind.elements().unwrap();
                ids.extend(es.iter().map(|&e| set.elements[e as usize].id.clone()));
            }
            (_, IndexedValue::Strings(s)) => ids.extend(s.iter().map(str::to_string)),
            (DimensionKind::Numeric(spec), v) if v.ints().is_some() => {
                let xs = v.ints().unwrap_or_default();
                for &x in xs {
                    let x = x as f64;
                    bounds = Some(bounds.map_or((x, x), |(a, b)| (a.min(x), b.max(x))));
                }
                for r in &spec.ranges {
                    if xs.iter().any(|&x| r.interval.contains(x as f64)) {
                        ids.push(r.id.clone());
                    }
                }
            }
            _ => {}
        }
        ids.sort();
        ids.dedup();
        for id in ids {
            *counts.entry(id).or_default() += 1;
        }
    }
    (counts, bounds)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Facet counts from postings and from the counted documents' columns equal
    /// counts read from the rows, for every dimension type.
    #[test]
    fn counts_equal_rows(
        mut docs in prop::collection::vec(doc_spec(), 1..80),
        pick in prop::collection::vec(any::<bool>(), 80),
        one_tree_element in any::<bool>(),
        pad in prop_oneof![Just(0usize), 960usize..1030],
        keep in 1usize..4,
        every in 0u8..3,
        gone in prop::option::of(prop::collection::vec(any::<bool>(), 80)),
        depth in 1u32..3,
    ) {
        if one_tree_element {
            // every document at its only element, none read from a row
            docs.iter_mut().for_each(|d| d.1.truncate(1));
        }
        let gone = gone.map(|g| g[..docs.len()].to_vec()).unwrap_or_default();
        let snap = snapshot_deleting(pad, &docs, &gone);
        let live = snap.live_docs().clone();
        let deleted = gone.iter().filter(|g| **g).count();
        prop_assert_eq!(live.len() as usize, pad + docs.len() - deleted);
        // (every document: whole chunks are counted by their histograms)
        let chosen: Vec<u32> = match every {
            0 => live.iter().collect(),
            // (every live document but one: not every document)
            1 => live.iter().skip(1).collect(),
            _ => (0..docs.len() as u32)
                .filter(|&d| pick[d as usize])
                .map(|d| d + pad as u32)
                .filter(|&d| live.contains(d))
                .collect(),
        };
        let counted = Counted::of(chosen.iter().copied().collect());
        // (sizes count only every live document)
        let ways: &[Way] = match counted.set == live {
            true => &[Way::Postings, Way::Documents, Way::Sizes],
            false => &[Way::Postings, Way::Documents],
        };
        for di in 0..snap.dims.len() {
            let want = counted_from_rows(&snap, di, &chosen);
            // (the way chosen for the set)
            let shown = Shown { largest: None, bounds: true, deepest: None };
            let got = bucket_counts(&snap, &snap.dims.dims[di], di, &counted, shown);
            prop_assert_eq!(&got, &want, "dimension {} chosen way", di);
            for &way in ways {
                let all = Shown { largest: None, bounds: true, deepest: None };
                let got = counts_by(&snap, &snap.dims.dims[di], di, &counted, way, all);
                prop_assert_eq!(&got, &want, "dimension {} {:?}", di, way);
                let unbounded = Shown { largest: None, bounds: false, deepest: None };
                let got = counts_by(&snap, &snap.dims.dims[di], di, &counted, way, unbounded);
                prop_assert_eq!(&got, &(want.0.clone(), None), "dimension {} {:?}", di, way);
            }
            // keeping the `keep` largest: every bucket counting at least the
            // keep-th largest count, none below it
            let mut largest: Vec<usize> = want.0.values().copied().collect();
            largest.sort_unstable_by(|a, b| b.cmp(a));
            for &way in ways {
            let top = Shown { largest: Some(keep), bounds: true, deepest: Some(depth) };
            let got = counts_by(&snap, &snap.dims.dims[di], di, &counted, way, top);
            for (id, n) in &want.0 {
                // (a tree's elements below `depth` may be left out)
                let deeper = match &snap.dims.dims[di].kind {
                    DimensionKind::Tree(set) => set.elements[set.by_id[id] as usize].depth > depth,
                    _ => false,
                };
                let shown = !deeper && largest.get(keep - 1).is_none_or(|nth| n >= nth);
                prop_assert!(!shown || got.0.get(id) == Some(n), "dimension {} {} kept", di, id);
                let keyword = matches!(snap.dims.dims[di].kind, DimensionKind::Keyword);
                prop_assert!(shown || !keyword || !got.0.contains_key(id), "dimension {} {} left out", di, id);
            }
            }
        }
    }

    /// A tree facet over every document, at each depth and root: every element it
    /// shows has the count read from the rows (sizes count only the levels shown).
    #[test]
    fn tree_facets_of_every_document_equal_rows(
        docs in prop::collection::vec(doc_spec(), 1..80),
        gone in prop::collection::vec(any::<bool>(), 80),
        depth in 0usize..3,
        root in prop::option::of(prop_oneof![Just("A"), Just("B")]),
    ) {
        let gone = &gone[..docs.len()];
        let snap = snapshot_deleting(0, &docs, gone);
        let live = snap.live_docs().clone();
        prop_assert_eq!(live.len() as usize, gone.iter().filter(|g| !**g).count());
        let di = snap.dims.dims.iter().position(|d| d.id == "t").unwrap();
        let want = counted_from_rows(&snap, di, &live.iter().collect::<Vec<_>>()).0;
        let mut facet = serde_json::json!({"depth": depth});
        if let Some(root) = root {
            facet["rootId"] = root.into();
        }
        let reqs = crate::facets::parse_facets(&serde_json::json!({"t": facet}), &snap.dims).unwrap();
        let matched = Matched { exact: live, other: RoaringBitmap::new() };
        let out = crate::facets::compute_facets(&snap, &matched, &reqs);
        let data = out["t"]["data"].as_object().unwrap();
        for (id, entry) in data {
            let n = want.get(id).copied().unwrap_or(0);
            prop_assert_eq!(entry["count"].as_u64(), Some(n as u64), "element {}", id);
        }
        // (every element of the first level shown is there, with its count)
        let first: Vec<&str> = match root {
            Some("A") => vec!["A1", "A2"],
            Some(_) => vec!["B1"],
            None => vec!["A", "B"],
        };
        for id in first.into_iter().filter(|id| want.contains_key(*id)) {
            prop_assert!(data.contains_key(id), "{} shown", id);
        }
        // `dataIds` names elements at any depth
        let named = serde_json::json!({"t": {"depth": 0, "dataIds": ["A1", "B1"]}});
        let reqs = crate::facets::parse_facets(&named, &snap.dims).unwrap();
        let out = crate::facets::compute_facets(&snap, &matched, &reqs);
        for id in ["A1", "B1"] {
            let n = want.get(id).copied().unwrap_or(0) as u64;
            prop_assert_eq!(out["t"]["data"][id]["count"].as_u64(), Some(n), "named {}", id);
        }
    }

    /// The doc numbers a top-k evaluation collects are those of every result.
    #[test]
    fn top_k_matched_is_every_result(
        docs in prop::collection::vec(doc_spec(), 1..80),
        k in 0usize..5,
        tree in 0usize..5,
    ) {
        let snap = snapshot(&docs);
        let body = serde_json::json!({"criteria": [
            {"dimension": "t", "id": (["A", "A1", "A2", "B", "B1"][tree])},
            {"dimension": "k", "value": "k1"}
        ]});
        let filter = Filter { items: None, not_items: None, exact_only: false };
        let mut q = parse_query(&body, &snap.dims, 100).unwrap();
        let all = evaluate(&snap, &mut q.criteria, &filter, Want::Sorted);
        let top = evaluate(&snap, &mut q.criteria, &filter, Want::TopAndMatched(k));
        let m = top.matched.unwrap();
        let want = Matched::of_hits(&all.hits);
        prop_assert_eq!(m, want);
        prop_assert_eq!(top.hits.len(), k.min(all.hits.len()));
    }
}
