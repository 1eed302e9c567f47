//! The tests of `exact.rs`.

use super::*;
use crate::postings::numeric_key;
use crate::test_support::{keyword_dims, put_strings};
use crate::{parse_query, IndexWriter};
use discern_dimensions::Dimensions;
use discern_model::Record;
use proptest::prelude::*;
use serde_json::json;
use std::sync::Arc;

proptest! {
    /// Every place of a cell `cell_within` finds wholly within a distance is within
    /// it, by both distances the rules compute (from a column, from a row); the
    /// corners' neighbourhood and the middle are looked at. A wide circle holds whole
    /// cells (the test is not vacuous).
    #[test]
    fn cells_found_within_hold_only_places_within(
        lat in -75.0f64..75.0,
        lon in -170.0f64..170.0,
        limit in 1.0f64..40.0,
        km in any::<bool>(),
    ) {
        use crate::geo::GeoPoint;
        use crate::postings::{cell, cell_key};
        let unit = if km { Unit::Km } else { Unit::Miles };
        let r = GeoRef::of_point(lat, lon);
        let pre = r.geo_points();
        let (r0, c0) = cell(lat, lon);
        let mut inside = 0;
        for row in r0.saturating_sub(8)..=r0 + 8 {
            for col in c0.saturating_sub(8)..=c0 + 8 {
                if !cell_within(&cell_key(row, col), (lat, lon), limit, &r, unit) {
                    continue;
                }
                inside += 1;
                for i in 0..=20 {
                    for j in 0..=20 {
                        let la = row as f64 * CELL_DEG - 90.0 + i as f64 * CELL_DEG / 20.0;
                        let lo = col as f64 * CELL_DEG - 180.0 + j as f64 * CELL_DEG / 20.0;
                        prop_assert!(r.distance(la, lo, unit) <= limit);
                        let d = r.distance_pre(&GeoPoint::new(la, lo), la, &pre, unit);
                        prop_assert!(d <= limit);
                    }
                }
            }
        }
        if limit > 25.0 {
            prop_assert!(inside > 0);
        }
    }
}

/// Whole numbers near the edges of buckets (where a bound cuts one), or anywhere.
fn near_edge() -> impl Strategy<Value = i64> {
    prop_oneof![
        -3000i64..3000,
        (0u32..24, 0i64..256, -2i64..3, any::<bool>()).prop_map(|(e, m, off, neg)| {
            let x = ((256 + m) << e >> 8) + off;
            if neg {
                -x
            } else {
                x
            }
        }),
    ]
}

/// A value of the integer dimension `n` (`x`) and of the double dimension `d` (`x`,
/// or just beside it).
fn value() -> impl Strategy<Value = (i64, f64)> {
    (near_edge(), 0usize..3).prop_map(|(x, beside)| {
        let y = x as f64;
        (x, [y, y.next_up(), y - 0.5][beside])
    })
}

/// The first page of a request answered from a set is the smallest ids, also when
/// every id starts with the same 8 bytes (chunks cannot be skipped by them) and ids
/// do not follow document order.
#[test]
fn first_ids_of_a_set_across_chunks() {
    let mut w = IndexWriter::new();
    let mut b = w.begin(&crate::Snapshot::empty(keyword_dims()));
    let n = 3 * crate::CHUNK + 100;
    for i in 0..n {
        let mut rec = Record::default();
        put_strings(&mut rec, "k", vec!["a".to_string()]);
        // a permutation of 0..n: 7919 is prime and does not divide n
        b.upsert(&format!("listing-{:05}", i * 7919 % n), &rec);
    }
    let snap = b.commit();
    for k in [1, 5, 50, 2 * crate::CHUNK + 7] {
        let body = json!({"criteria": [{"dimension": "k", "cull": true}]});
        let mut q = parse_query(&body, &snap.dims, 10_000).unwrap();
        let filter = crate::eval::Filter {
            items: None,
            not_items: None,
            exact_only: false,
        };
        let got = crate::eval::evaluate(&snap, &mut q.criteria, &filter, crate::hits::Want::Top(k));
        let ids: Vec<String> = got.hits.iter().map(|h| h.id.to_string()).collect();
        let want: Vec<String> = (0..k).map(|i| format!("listing-{i:05}")).collect();
        assert_eq!(ids, want, "k = {k}");
        assert_eq!(got.total, n);
    }
}

proptest! {
    /// Numeric criteria's exact sets hold exactly the documents with a value in the
    /// interval, in integer and double dimensions, whatever buckets the bounds cut.
    #[test]
    fn numeric_sets_hold_the_values_in_the_interval(
        docs in prop::collection::vec(prop::collection::vec(value(), 0..3), 1..40),
        lo in prop::option::of(value()),
        hi in prop::option::of(value()),
        (lo_incl, hi_incl) in (any::<bool>(), any::<bool>()),
    ) {
        let dims = Arc::new(Dimensions::parse(b"<dimensions>
              <dimension id='n' type='integer'/><dimension id='d' type='double'/>
            </dimensions>").unwrap());
        let mut w = IndexWriter::new();
        let mut b = w.begin(&crate::Snapshot::empty(dims));
        for (i, vals) in docs.iter().enumerate() {
            let mut rec = Record::default();
            put_strings(&mut rec, "n", vals.iter().map(|v| v.0.to_string()).collect());
            put_strings(&mut rec, "d", vals.iter().map(|v| format!("{:?}", v.1)).collect());
            b.upsert(&format!("i{i:03}"), &rec);
        }
        let snap = b.commit();
        for (dim, pick) in [("n", 0), ("d", 1)] {
            let bound = |v: Option<(i64, f64)>| match v {
                None => String::new(),
                Some((x, _)) if pick == 0 => x.to_string(),
                Some((_, y)) => format!("{y:?}"),
            };
            let (open, close) = (if lo_incl { "[" } else { "(" }, if hi_incl { "]" } else { ")" });
            let iv = format!("{open}{},{}{close}", bound(lo), bound(hi));
            let body = json!({"criteria": [{"dimension": dim, "value": iv, "cull": true, "fuzzyRelevance": 0}]});
            let q = parse_query(&body, &snap.dims, 1000).unwrap();
            let Node::Leaf(Leaf { matcher: Matcher::Numeric { set, .. }, .. }) = &q.criteria[0].node else {
                panic!("not a numeric criterion: {iv}");
            };
            let want: Vec<u32> = docs
                .iter()
                .enumerate()
                .filter(|(_, vals)| vals.iter().any(|v| set.contains(if pick == 0 { v.0 as f64 } else { v.1 })))
                .map(|(i, _)| i as u32)
                .collect();
            let ctx = EvalCtx { scales: vec![0.0; snap.dims.len()] };
            let (got, r) = exact_results(&snap, &q.criteria, &ctx, false).unwrap();
            prop_assert_eq!(got.iter().collect::<Vec<_>>(), want, "{} {}", dim, iv);
            prop_assert_eq!(r, 1.0);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]
    /// A geo criterion's exact set holds exactly the documents within its
    /// `exactDistance`: the grid's near cells leave many documents to check by rule,
    /// split across cores.
    #[test]
    fn geo_sets_hold_the_documents_within_the_distance(
        points in prop::collection::vec((-1.0f64..1.0, -1.0f64..1.0), 20..300),
        miles in 1.0f64..80.0,
    ) {
        let dims = Arc::new(Dimensions::parse(b"<dimensions>
              <dimension id='g' type='geoloc' latitude='lat' longitude='lon'/>
            </dimensions>").unwrap());
        let mut w = IndexWriter::new();
        let mut b = w.begin(&crate::Snapshot::empty(dims));
        let (lat0, lon0) = (40.0, -75.0);
        for (i, (dlat, dlon)) in points.iter().enumerate() {
            let mut rec = Record::default();
            put_strings(&mut rec, "lat", vec![(lat0 + dlat).to_string()]);
            put_strings(&mut rec, "lon", vec![(lon0 + dlon).to_string()]);
            b.upsert(&format!("i{i:03}"), &rec);
        }
        let snap = b.commit();
        let body = json!({"criteria": [{"dimension": "g", "latitude": lat0, "longitude": lon0,
            "exactDistance": miles, "cullDistance": miles, "cull": true}]});
        let q = parse_query(&body, &snap.dims, 1000).unwrap();
        let want: Vec<u32> = points
            .iter()
            .enumerate()
            .filter(|(_, (dlat, dlon))| {
                crate::geo::haversine(lat0 + dlat, lon0 + dlon, lat0, lon0, crate::geo::Unit::Miles) <= miles
            })
            .map(|(i, _)| i as u32)
            .collect();
        let ctx = EvalCtx { scales: vec![0.0; snap.dims.len()] };
        let (got, _) = exact_results(&snap, &q.criteria, &ctx, false).unwrap();
        prop_assert_eq!(got.iter().collect::<Vec<_>>(), want);
    }
}

proptest! {
    /// A bucket's extremes are in the bucket, and the doubles just beyond them not.
    #[test]
    fn bucket_extremes_bound_the_bucket(x in any::<f64>().prop_filter("a number", |x| !x.is_nan())) {
        let k = numeric_key(x);
        let (a, b) = bucket_extremes(&k).unwrap();
        prop_assert!(a <= x && x <= b);
        prop_assert_eq!(numeric_key(a), k);
        prop_assert_eq!(numeric_key(b), k);
        if a.next_down().is_finite() {
            prop_assert!(numeric_key(a.next_down()) < k);
        }
        if b.next_up().is_finite() {
            prop_assert!(numeric_key(b.next_up()) > k);
        }
    }
}
